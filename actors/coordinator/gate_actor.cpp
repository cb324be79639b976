#include "actors/coordinator/gate_actor.hpp"

#include <caf/io/all.hpp>

#include <cstdio>
#include <deque>
#include <map>
#include <set>

#include "actors/coordinator/data_relay.hpp"
#include "actors/errors.hpp"
#include "runtime/log.hpp"
#include "runtime/metrics.hpp"

namespace mpakt {

namespace {

using steady = std::chrono::steady_clock;

/// A volunteer the gate admitted, re-checked until it leaves.
struct admitted {
  worker_actor worker;
  worker_actor member;  ///< what the pool holds: the checked worker standing in for it, or `worker`
  std::string name;
  std::string digest;  ///< its token's SHA-256
  std::string address;
};

struct gate_state {
  gate_state() = default;  // (not an aggregate: CAF would try to build it from the actor pointer)
  pool_actor pool;
  std::unique_ptr<accounts::accounts_store> store;
  gate_config cfg;
  std::map<std::string, std::deque<steady::time_point>> failures;  ///< per client address
  std::map<caf::actor_addr, admitted> members;
  steady::time_point last_check{};
  std::set<std::string> quarantines_kept;  ///< token digests marked quarantined in the store
};

using gate_pointer = gate_actor::stateful_pointer<gate_state>;

void log_line(const std::string& text, std::initializer_list<log::field> fields = {}) {
  log::line("info", "gate", text, fields);
}

/// Counts a refused join: `reason` is rate_limited (too many failed joins from the address),
/// bad_token (invalid, revoked or expired), no_worker, or error (the check itself failed).
void count_refusal(const char* reason) { metrics::m().joins_refused.with({reason}).inc(); }

/// Addresses kept with failed joins before the expired ones are swept out, so joins from many
/// addresses cannot grow the table without bound.
constexpr std::size_t failure_table_sweep = 1024;

/// Failed joins of `address` still inside the window.
std::deque<steady::time_point>& recent_failures(gate_pointer self, const std::string& address) {
  auto& table = self->state.failures;
  const auto horizon = steady::now() - self->state.cfg.failure_window;
  auto prune = [&](std::deque<steady::time_point>& q) {
    while (!q.empty() && q.front() < horizon) q.pop_front();
  };
  if (table.size() >= failure_table_sweep)
    for (auto it = table.begin(); it != table.end();) {
      prune(it->second);
      it = it->second.empty() ? table.erase(it) : std::next(it);
    }
  auto& q = table[address];
  prune(q);
  return q;
}

/// Refuses a join from `address`: logged (`logged`: why, for the log) and counted under
/// `reason`; the volunteer is told `why` (`code`: the refusal's error code).
void refuse(caf::typed_response_promise<std::string> rp, const std::string& address, const char* reason,
            const std::string& logged, const std::string& why, errc code) {
  log_line("refused a volunteer from " + address + ": " + logged, {{"reason", reason}});
  count_refusal(reason);
  rp.deliver(to_caf(code, "join refused: " + why));
}

/// Refuses a join, counted as a failed join of `address` (`code`: the refusal's error code).
void refuse_join(gate_pointer self, caf::typed_response_promise<std::string> rp, const std::string& address,
                 const char* reason, const std::string& why, errc code = errc::invalid) {
  recent_failures(self, address).push_back(steady::now());
  refuse(rp, address, reason, why, why, code);
}

/// Decides a join once the client's address is known.
void decide(gate_pointer self, caf::typed_response_promise<std::string> rp, const std::string& address,
            const std::string& token, worker_actor worker, std::uint16_t link_port = 0) {
  auto& st = self->state;
  auto& fails = recent_failures(self, address);
  if (int(fails.size()) >= st.cfg.max_failures) {
    const auto wait = std::chrono::duration_cast<std::chrono::seconds>(fails.front() + st.cfg.failure_window - steady::now());
    log_line("refused a volunteer from " + address + ": too many failed joins", {{"reason", "rate_limited"}});
    count_refusal("rate_limited");
    rp.deliver(to_caf(errc::limit, "too many failed joins from " + address + "; try again in " +
                                       std::to_string(std::max<long long>(1, wait.count())) + " s"));
    return;
  }
  auto grant = worker ? st.store->check_volunteer_token(token)
                      : result<accounts::volunteer_grant>(make_error(errc::invalid, "no worker actor in the join"));
  if (!grant) {
    const char* reason = grant.err().code == errc::unauthorized ? "bad_token"
                         : grant.err().code == errc::invalid    ? "no_worker"
                                                                : "error";
    refuse_join(self, rp, address, reason, grant.err().message, grant.err().code);
    return;
  }
  if (st.cfg.quarantine && st.cfg.quarantine->has_digest(grant->digest)) {
    const std::string who = "volunteer " + grant->name + " was quarantined";
    refuse(rp, address, "quarantined", who,
           who + " (its results differed from the verifier's); ask the operator for a new token", errc::unauthorized);
    return;
  }
  if (st.cfg.removals)
    if (auto w = st.cfg.removals->waiting(grant->digest)) {
      const std::string who = "volunteer " + grant->name + " was removed from the grid", wait = std::to_string(w->first.count());
      refuse(rp, address, "removed", who + "; its joins wait " + wait + " s more",
             who + " (" + w->second + "); it may join again in " + wait + " s", errc::unavailable);
      return;
    }
  st.failures.erase(address);  // (a success clears the address's count; `fails` is gone now)
  // The front hears of the admission (no joiner's limits from now on) and, through the stand-in
  // below, of each generation's listener: the one actor the volunteer may send messages to that
  // are not replies (actors/cluster_guard.hpp, volunteer_rules).
  listener_grant listeners;
  if (st.cfg.guard && link_port != 0)
    if (const std::uint64_t number = st.cfg.guard->admit(link_port)) {
      std::weak_ptr<cluster_guard> front = st.cfg.guard;
      listeners.allow = [front, number](std::uint64_t id) {
        if (auto g = front.lock()) g->allow(number, id);
      };
      listeners.forget = [front, number](std::uint64_t id) {
        if (auto g = front.lock()) g->forget(number, id);
      };
    }
  self->monitor(worker);
  // A volunteer behind the front, or with a data port, is reached through a stand-in that
  // grants its generations' listeners and sends weights' bytes on its data connection; the pool
  // gets that behind its checked worker (spot-checks), or as it is.
  std::shared_ptr<datalink::data_sender> link = st.cfg.data ? st.cfg.data->expect() : nullptr;
  worker_actor reached = link || listeners.allow ? spawn_data_relay(self->home_system(), worker, link, listeners,
                                                                              {grant->name, st.cfg.step_limit, grant->digest, st.cfg.removals}) : worker;
  worker_actor member = reached;
  if (st.cfg.verify)
    member = spawn_checked_worker(self->home_system(), {reached, grant->name, grant->digest, worker}, st.cfg.checks,
                                  st.cfg.quarantine);
  st.members[worker.address()] = admitted{worker, member, grant->name, grant->digest, address};
  auto admit = [self, rp, member, name = grant->name, cap = grant->memory_cap, address]() mutable {
    self->send(self->state.pool, add_atom::value, member, cap);
    log_line("volunteer " + name + " joined from " + address);
    metrics::m().joins.with().inc();
    rp.deliver(name);
  };
  if (!link) return admit();
  // The offer comes first, so the volunteer's first load already finds its connection up;
  // one that cannot connect (a firewall, an older volunteer) is admitted all the same.
  self->request(worker, std::chrono::seconds(30), dlink_atom::value, st.cfg.data->port(), link->ticket())
      .then([admit, name = grant->name](bool) mutable {
                log_line("volunteer " + name + ": data connection up");
                admit();
              },
            [admit, link, name = grant->name](caf::error& e) mutable {
              const std::string why = from_caf(e).message;
              link->close("not opened: " + why);
              log_line("volunteer " + name + " has no data connection (" + why + "); its weights travel over the cluster link");
              admit();
            });
}

/// Disconnects the admitted volunteers whose token no longer holds, and writes the checked
/// workers' quarantines to the token store (refused across restarts).
void recheck(gate_pointer self) {
  auto& st = self->state;
  const auto now = steady::now();
  if (now - st.last_check < std::chrono::seconds(1)) return;
  st.last_check = now;
  if (st.cfg.quarantine)
    for (const auto& q : st.cfg.quarantine->list()) {
      if (q.token_digest.empty() || st.quarantines_kept.count(q.token_digest)) continue;
      if (auto kept = st.store->quarantine_volunteer(q.token_digest); !kept) {
        log::line("error", "gate", "could not record the quarantine of volunteer " + q.volunteer + ": " + kept.err().message);
        continue;  // (tried again at the next check)
      }
      st.quarantines_kept.insert(q.token_digest);
      log_line("recorded the quarantine of volunteer " + q.volunteer + " in the token store");
    }
  for (auto it = st.members.begin(); it != st.members.end();) {
    auto g = st.store->check_volunteer_digest(it->second.digest);
    if (g || g.err().code == errc::internal) {  // (a database hiccup is not a revocation)
      ++it;
      continue;
    }
    log_line("disconnecting volunteer " + it->second.name + " (" + it->second.address + "): " + g.err().message);
    // The volunteer is told to end, and the pool's handle for it ends here at once, so the
    // pool and the coordinator see it go as any lost worker even if the volunteer does not.
    self->send_exit(it->second.worker, caf::exit_reason::kill);
    if (it->second.member != it->second.worker) self->send_exit(it->second.member, caf::exit_reason::kill);
    it = st.members.erase(it);
  }
}

}  // namespace

gate_actor spawn_gate(caf::actor_system& sys, pool_actor pool, std::unique_ptr<accounts::accounts_store> store,
                      gate_config cfg) {
  auto shared = std::make_shared<std::unique_ptr<accounts::accounts_store>>(std::move(store));
  return sys.spawn<caf::detached>([pool, shared, cfg](gate_pointer self) -> gate_actor::behavior_type {
    self->state.pool = pool;
    self->state.store = std::move(*shared);
    self->state.cfg = cfg;
    self->set_down_handler([self](caf::down_msg& dm) { self->state.members.erase(dm.source); });
    self->delayed_send(self, cfg.recheck_every, probe_atom::value);
    return {
        [self](join_atom, const std::string& token, worker_actor worker) -> caf::result<std::string> {
          auto rp = self->make_response_promise<std::string>();
          // (a request over the middleman arrives without a sender here: the worker's handle,
          // a proxy of the volunteer's node, says where it came from)
          if (!worker || worker.node() == self->node()) {
            // Behind the cluster port's front no join comes from this process: a handle of one
            // of its own actors (the pool, an embedded worker) is a volunteer's forgery, whose
            // revocation or quarantine would end that actor.
            if (worker && self->state.cfg.guard) {
              refuse_join(self, rp, "an unknown address", "no_worker", "the worker presented is an actor of the coordinator's own process");
              return rp;
            }
            decide(self, rp, "this process", token, std::move(worker));
            return rp;
          }
          // The client's address, from the middleman's record of the connection.
          self->request(self->home_system().middleman().actor_handle(), std::chrono::seconds(5), caf::get_atom::value,
                        worker.node())
              .then(
                  [self, rp, token, worker](const caf::node_id&, const std::string& host, std::uint16_t port) mutable {
                    // behind the cluster port's front the middleman sees the front's loopback
                    // connection: the front knows the volunteer's own address
                    std::string from = host.empty() ? std::string("an unknown address") : host;
                    std::uint16_t link_port = 0;
                    if (const auto& guard = self->state.cfg.guard)
                      if (auto peer = guard->peer_of(port)) {
                        from = *peer;
                        link_port = port;
                        // The worker's node must be the one whose connection asked: a handle
                        // naming another volunteer's node would make that volunteer's worker
                        // this token's (its revocation would end the other's worker).
                        if (!guard->asking_gate(port)) {
                          refuse_join(self, rp, "an unknown address", "no_worker",
                                      "the worker presented is not on the connection that asked to join");
                          return;
                        }
                      }
                    decide(self, rp, from, token, std::move(worker), link_port);
                  },
                  [self, rp, token, worker](caf::error&) mutable {
                    decide(self, rp, "an unknown address", token, std::move(worker));
                  });
          return rp;
        },
        [self](probe_atom) {
          recheck(self);  // (at most one check a second, whoever asks)
          if (caf::actor_cast<caf::actor_addr>(self->current_sender()) == self->address())
            self->delayed_send(self, self->state.cfg.recheck_every, probe_atom::value);
        },
    };
  });
}

}  // namespace mpakt
