#include "actors/coordinator/data_relay.hpp"

#include <atomic>

#include "actors/errors.hpp"
#include "runtime/log.hpp"
#include "runtime/metrics.hpp"

namespace mpakt {

namespace {

using steady = std::chrono::steady_clock;
using tick_atom = caf::atom_constant<caf::atom("wtick")>;

/// The volunteer stopped answering, or answered what no worker does (`why`): ends its worker
/// (the relay, its checked worker and the pool then see it go) — once, however many of its
/// calls notice.
/// `removed` is shared by the relay and its generations' watches, which run on any thread.
using removed_flag = std::shared_ptr<std::atomic<bool>>;

void remove_volunteer(caf::local_actor* by, const worker_actor& volunteer, const removed_flag& removed, const answer_watch& w,
                      const std::string& why) {
  if (removed->exchange(true)) return;
  log::line("warn", "gate", "removed volunteer " + w.name + " from the grid: " + why + "; its work goes elsewhere",
            {{"volunteer", w.name}});
  metrics::m().errors.with({"removed"}).inc();
  if (w.removals) w.removals->removed(w.digest, why);
  by->send_exit(volunteer, caf::exit_reason::kill);
}

/// What is wrong with a volunteer's status, which no worker of this program sends (empty: nothing).
/// It is kept by the pool and shown by every status and placement answer, so its text is
/// bounded: names 128 bytes, notes 1,024, lists 512 names.
std::string misshapen(const worker_status& s) {
  const std::pair<const char*, const std::string*> names[] = {{"workerId", &s.worker_id},   {"backend", &s.backend},
                                                              {"busyGraph", &s.busy_graph}, {"busySession", &s.busy_session},
                                                              {"cpu", &s.cpu}};
  for (const auto& [field, v] : names)
    if (v->size() > 128) return std::string(field) + " is " + std::to_string(v->size()) + " bytes long (128 at most)";
  const std::pair<const char*, const std::string*> notes[] = {{"backendNote", &s.backend_note}, {"kernels", &s.kernels}};
  for (const auto& [field, v] : notes)
    if (v->size() > 1024) return std::string(field) + " is " + std::to_string(v->size()) + " bytes long (1024 at most)";
  const std::pair<const char*, const std::vector<std::string>*> lists[] = {
      {"hostOps", &s.host_ops}, {"features", &s.features}, {"lacks", &s.lacks}};
  for (const auto& [field, v] : lists) {
    if (v->size() > 512) return std::string(field) + " lists " + std::to_string(v->size()) + " names (512 at most)";
    for (const auto& x : *v)
      if (x.size() > 128) return std::string(field) + " holds a name " + std::to_string(x.size()) + " bytes long (128 at most)";
  }
  if (s.worker_id.empty()) return "workerId is empty";
  return {};
}

std::string seconds(std::chrono::milliseconds ms) {
  return ms.count() % 1000 == 0 ? std::to_string(ms.count() / 1000) + " s" : std::to_string(ms.count()) + " ms";
}

/// Between a volunteer's generation and its listener: passes the tokens and the end on, and
/// removes the volunteer when neither comes for `w.step_limit` and the grace, or when its
/// tokens are not the generation's next ones — a token out of order (each is numbered from 0,
/// one after the other) or more than the `max_new` asked for: a flood the listener would
/// queue, or a token the client would see twice. Ends with the generation's end, the listener,
/// or the volunteer.
gen_listener spawn_watch(caf::actor_system& sys, gen_listener to, worker_actor volunteer, removed_flag removed,
                         answer_watch w, std::string gen_id, std::uint32_t max_new) {
  auto watch = sys.spawn([to, volunteer, removed, w, gen_id, max_new](caf::event_based_actor* self) -> caf::behavior {
    self->monitor(to);
    self->monitor(volunteer);
    self->set_down_handler([self](caf::down_msg&) { self->quit(); });
    const auto within = w.step_limit + overdue_grace;
    auto last = std::make_shared<steady::time_point>(steady::now());
    auto tokens = std::make_shared<std::uint64_t>(0);
    const auto every = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(1000), within / 4);
    self->delayed_send(self, every, tick_atom::value);
    return {
        [self, to, last, tokens, volunteer, removed, w, gen_id, max_new](gentoken_atom a, const std::string& id, gen_token& t) {
          const std::uint64_t n = (*tokens)++;
          if (t.index != n || n >= max_new) {
            remove_volunteer(self, volunteer, removed, w,
                             "it sent generation " + gen_id + " token number " + std::to_string(t.index) + " where number " +
                                 std::to_string(n) + (n >= max_new ? ", past the " + std::to_string(max_new) + " asked for," : "") +
                                 " was due");
            return self->quit();
          }
          *last = steady::now();
          self->send(to, a, id, std::move(t));
        },
        [self, to](gendone_atom a, const std::string& id, gen_done& d) {
          self->send(to, a, id, std::move(d));
          self->quit();
        },
        [self, volunteer, removed, w, gen_id, last, within, every](tick_atom) {
          if (steady::now() - *last < within) return void(self->delayed_send(self, every, tick_atom::value));
          remove_volunteer(self, volunteer, removed, w,
                           "it left generation " + gen_id + " without a token for " + seconds(w.step_limit) + " (the step limit) and " +
                               seconds(overdue_grace) + " more");
          self->quit();
        },
    };
  });
  return caf::actor_cast<gen_listener>(watch);
}

/// Asks the volunteer `xs` on behalf of the current request, answering it with the volunteer's
/// answer, or — none within `within` (`limit` and the grace) — removing the volunteer for
/// leaving `what` unanswered and answering with an error saying so (`again`: what the caller
/// may do).
template <class Reply, class... Ts>
caf::result<Reply> watched(caf::event_based_actor* self, const worker_actor& volunteer, const removed_flag& removed,
                           const answer_watch& w, const std::string& what, const std::string& limit, const std::string& again,
                           std::chrono::milliseconds within, Ts&&... xs) {
  auto rp = self->make_response_promise<Reply>();
  self->request(volunteer, within, std::forward<Ts>(xs)...)
      .then([rp](Reply& x) mutable { rp.deliver(std::move(x)); },
            [self, rp, volunteer, removed, w, what, limit, again](caf::error& e) mutable {
              if (e != caf::sec::request_timeout) {
                rp.deliver(std::move(e));
                return;
              }
              const std::string past = seconds(overdue_grace) + " past " + limit;
              remove_volunteer(self, volunteer, removed, w, "it left a " + what + " unanswered " + past);
              rp.deliver(to_caf(errc::unavailable, "volunteer " + w.name + " left this " + what + " unanswered " + past +
                                                       " and was removed from the grid; " + again));
            });
  return rp;
}

}  // namespace

void removal_registry::removed(const std::string& digest, const std::string& why) {
  const auto now = steady::now();
  std::lock_guard<std::mutex> lock(m_);
  for (auto it = entries_.begin(); it != entries_.end();)  // (a day without a removal forgets a token)
    it = now - it->second.last > memory ? entries_.erase(it) : std::next(it);
  entry& e = entries_[digest];
  e.count = std::min(e.count + 1, 16);
  e.last = now;
  e.why = why;
  const auto wait = std::min<std::chrono::seconds>(longest_wait, first_wait * (1 << (e.count - 1)));
  e.until = now + wait;
}

std::optional<std::pair<std::chrono::seconds, std::string>> removal_registry::waiting(const std::string& digest) const {
  std::lock_guard<std::mutex> lock(m_);
  auto it = entries_.find(digest);
  if (it == entries_.end()) return std::nullopt;
  const auto left = std::chrono::ceil<std::chrono::seconds>(it->second.until - steady::now());
  if (left.count() <= 0) return std::nullopt;
  return std::make_pair(left, it->second.why);
}

worker_actor spawn_data_relay(caf::actor_system& sys, worker_actor volunteer, std::shared_ptr<datalink::data_sender> link,
                              listener_grant grant, answer_watch watch) {
  auto relay = sys.spawn([volunteer, link, grant, watch](caf::event_based_actor* self) -> caf::behavior {
    self->monitor(volunteer);
    self->set_down_handler([self, volunteer](caf::down_msg& m) {
      if (m.source == volunteer.address()) self->quit(m.reason);
    });
    if (link) self->attach_functor([link] { link->close("the volunteer left the grid"); });
    auto removed = std::make_shared<std::atomic<bool>>(false);
    // Everything but the messages below goes to the volunteer as it is.
    self->set_default_handler([volunteer](caf::scheduled_actor* s, caf::message_view& x) -> caf::result<caf::message> {
      auto rp = s->make_response_promise();
      rp.delegate(caf::actor_cast<caf::actor>(volunteer), x.move_content_to_message());
      return rp;
    });
    return {
        [self, volunteer, grant, watch, removed](genstart_atom a, gen_request& r) -> caf::result<bool> {
          if (watch.step_limit.count() > 0 && r.listener)
            r.listener = spawn_watch(self->home_system(), std::move(r.listener), volunteer, removed, watch, r.gen_id, r.max_new);
          if (grant.allow && r.listener) {
            const std::uint64_t id = r.listener.id();
            grant.allow(id);
            if (grant.forget)
              caf::actor_cast<caf::abstract_actor*>(r.listener)->attach_functor([forget = grant.forget, id] { forget(id); });
          }
          return self->delegate(volunteer, a, std::move(r));
        },
        [self, volunteer, watch, removed](run_atom a, run_request& r) -> caf::result<run_reply> {
          // (the pool's probes have a short limit of their own and may wait behind a long call:
          // the pool's own wait is their bound)
          if (r.timeout_ms == 0 || r.run_id == probe_run_id) return self->delegate(volunteer, a, std::move(r));
          const auto limit = std::chrono::milliseconds(r.timeout_ms);
          return watched<run_reply>(self, volunteer, removed, watch, "graph call", "its limit (" + seconds(limit) + ")",
                                    "send the call again", limit + overdue_grace, a, std::move(r));
        },
        [self, volunteer, watch, removed](compile_atom a, compile_request& r) -> caf::result<compile_reply> {
          // (a compile waits at most behind calls that stop at the limit)
          if (watch.step_limit.count() == 0) return self->delegate(volunteer, a, std::move(r));
          return watched<compile_reply>(self, volunteer, removed, watch, "compile", "the limit (" + seconds(watch.step_limit) + ")",
                                        "compile again", watch.step_limit + overdue_grace, a, std::move(r));
        },
        [self, volunteer, watch, removed](sdump_atom a, const std::string& sid) -> caf::result<session_dump> {
          // (a copy of a session waits at most behind calls that stop at the limit; the
          // spot-checks' windows and the checkpoints ask for them)
          if (watch.step_limit.count() == 0) return self->delegate(volunteer, a, sid);
          return watched<session_dump>(self, volunteer, removed, watch, "copy of a session",
                                       "the limit (" + seconds(watch.step_limit) + ")", "ask again",
                                       watch.step_limit + overdue_grace, a, sid);
        },
        [self, volunteer, link](tpiece_atom a, tensor_piece& p) -> caf::result<std::uint64_t> {
          const std::uint64_t length = p.bytes.size();
          if (!link) return self->delegate(volunteer, a, std::move(p));
          if (auto seq = link->send(p.bytes))
            return self->delegate(volunteer, tpieceref_atom::value, tensor_piece_ref{p.model_id, p.name, p.offset, length, *seq});
          return self->delegate(volunteer, a, std::move(p));
        },
        [self, volunteer, link, watch, removed](status_atom a) -> caf::result<worker_status> {
          auto rp = self->make_response_promise<worker_status>();
          self->request(volunteer, std::chrono::seconds(30), a)
              .then(
                  [self, rp, link, volunteer, watch, removed](worker_status& s) mutable {
                    if (const std::string why = misshapen(s); !why.empty()) {
                      remove_volunteer(self, volunteer, removed, watch, "it answered a status no worker sends: its " + why);
                      rp.deliver(to_caf(errc::unavailable, "volunteer " + watch.name + " answered a status no worker sends (its " +
                                                               why + ") and was removed from the grid"));
                      return;
                    }
                    s.data_link = link ? link->describe() : std::string();
                    s.data_link_bytes = link ? link->bytes_sent() : 0;
                    rp.deliver(std::move(s));
                  },
                  [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
          return rp;
        },
    };
  });
  return caf::actor_cast<worker_actor>(relay);
}

}  // namespace mpakt
