// The worker's front: the actor the pool, the coordinator and the entities talk to. It never
// computes and never blocks, so a worker busy with a long graph still answers status at once,
// is listed as busy rather than absent, takes reservations and loads, and can be told to stop
// the graph in flight. See worker_actor.hpp for the three actors and their threads.

#include "actors/worker/worker_actor.hpp"

#include <algorithm>
#include <chrono>
#include <set>

#include "actors/errors.hpp"
#include "actors/loader/host_fetch.hpp"
#include "actors/off_thread.hpp"
#include "actors/worker/compute_actor.hpp"
#include "actors/worker/load_receiver.hpp"
#include "actors/worker/worker_shared.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/isa.hpp"
#include "runtime/log.hpp"

namespace mpakt {

namespace {

std::string mb(std::uint64_t bytes) { return std::to_string((bytes + 999999) / 1000000) + " MB"; }

struct front_state {
  std::shared_ptr<worker_shared> shared;
  compute_actor compute;
  load_receiver_actor receiver;
  describe_tally tally;
  std::set<caf::actor_id> forged_to;  ///< (--fault forge-messages)
  std::vector<caf::response_promise> unanswered;  ///< (--fault unanswered-calls: kept, never delivered)
  std::set<std::string> generated;  ///< (--fault refused-dumps-after-generations: sessions a generation began on)
};

using front_pointer = worker_actor::stateful_pointer<front_state>;

/// --fault forge-messages: the request's sender, if another process's and new, gets the pool's
/// `add` with this worker's own handle (both forms), whatever actor it is.
void forge(front_pointer self) {
  if (!self->state.shared->cfg.forge_messages) return;
  const auto& from = self->current_sender();
  if (!from || from->node() == self->node() || !self->state.forged_to.insert(from->id()).second) return;
  auto to = caf::actor_cast<caf::actor>(from);
  const auto me = caf::actor_cast<worker_actor>(self);
  caf::anon_send(to, add_atom::value, me);
  caf::anon_send(to, add_atom::value, me, std::uint64_t(1) << 30);
  log::line("info", "worker", "forge-messages: sent the pool's add to actor " + std::to_string(from->id()));
}

/// The status the front reports: the ledger and what the compute side is doing, as they are.
worker_status snapshot(worker_shared& w) {
  worker_status s;
  s.worker_id = w.cfg.worker_id;
  s.backend = w.backend_name;
  s.backend_note = w.cfg.backend_note;
  s.host_ops = w.host_ops;
  s.total_bytes = w.cfg.memory_bytes;
  s.features = w.features;
  s.lacks = w.cfg.lacks;
  s.packed_weights = !w.cfg.legacy;
  s.can_quantize = !w.cfg.legacy;
  std::lock_guard<std::mutex> lock(w.m);
  s.free_bytes = w.free_locked();
  s.max_tensor_bytes = s.free_bytes;
  s.generations = w.generations;
  s.kernels = cpu_isa::describe();
  s.cpu = cpu_isa::detected().model;
  s.threads = std::uint32_t(cpu_fast::kernel_threads());
  if (w.busy.on) {
    s.busy_since_ms = w.busy.since_unix_ms;
    s.busy_ms = std::uint64_t(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - w.busy.since).count());
    s.busy_graph = w.busy.graph;
    s.busy_session = w.busy.session;
    s.busy_steps = w.busy.steps;
    s.busy_steps_done = std::min(w.progress.load(std::memory_order_relaxed), w.busy.steps);
  }
  // Graph calls handed on and not answered, less the one in progress (unless it compiles).
  const std::size_t running = w.busy.on && w.busy.graph.rfind("compile ", 0) != 0 ? 1 : 0;
  s.queued = std::uint32_t(w.runs.size() - std::min(w.runs.size(), running));
  return s;
}

/// The front's snapshot for the console: its status (what the compute side is doing, read
/// from the shared ledger, so a busy worker answers at once) and its memory ledger.
actor_snapshot describe_front(front_pointer self) {
  auto& w = *self->state.shared;
  const worker_status st = snapshot(w);
  actor_snapshot s;
  s.kind = "worker";
  s.id = st.worker_id;
  s.text("backend", st.backend);
  if (!st.backend_note.empty()) s.text("backendNote", st.backend_note);
  s.text("kernels", st.kernels);
  s.text("cpu", st.cpu);
  s.number("threads", st.threads);
  s.number("totalBytes", double(st.total_bytes));
  s.number("freeBytes", double(st.free_bytes));
  {
    std::lock_guard<std::mutex> lock(w.m);
    s.number("residentBytes", double(w.held));
    s.number("loadingBytes", double(w.loading + w.arrived));
    std::uint64_t reserved = 0;
    for (const auto& [_, r] : w.reserved) reserved += r;
    s.number("reservedBytes", double(reserved));
    s.number("callsInFlight", double(w.runs.size()));
  }
  s.number("generations", st.generations);
  s.number("queued", st.queued);
  s.number("busy", st.busy_since_ms != 0 ? 1 : 0);
  if (st.busy_since_ms != 0) {
    s.number("busyMs", double(st.busy_ms));
    s.number("busySinceMs", double(st.busy_since_ms));
    s.text("busyGraph", st.busy_graph);
    if (!st.busy_session.empty()) s.text("busySession", st.busy_session);
    s.number("busyStepsDone", st.busy_steps_done);
    s.number("busySteps", st.busy_steps);
  }
  self->state.tally.fill(s, self->mailbox().size());
  return s;
}

/// Parses the graph of a big call (a run_request or compile_request) on a helper thread,
/// leaves it for the compute side under the call's number, and hands the call on with its
/// text dropped; the compute side's answer goes to `rp`.
template <class Reply, class Atom, class Request>
void parse_then_send(front_pointer self, Atom atom, std::shared_ptr<Request> req, std::uint64_t number, bool allow_bind,
                     caf::typed_response_promise<Reply> rp) {
  maybe_off_thread<result<graph_decl>>(self, true, [req, allow_bind] { return parse_graph_text(req->graph_json, allow_bind); },
                                       [self, atom, req, number, rp](result<graph_decl>& decl) mutable {
    auto& w = *self->state.shared;
    {
      std::lock_guard<std::mutex> lock(w.m);
      w.parsed[number] = std::make_shared<result<graph_decl>>(std::move(decl));
    }
    req->graph_json = std::string();
    self->request(self->state.compute, caf::infinite, atom, std::move(*req), number)
        .then([rp](Reply& reply) mutable { rp.deliver(std::move(reply)); },
              [self, number, rp](caf::error& e) mutable {
                self->state.shared->take_parsed(number);  // (never reached the compute side)
                self->state.tally.failed(from_caf(e).message);
                rp.deliver(std::move(e));
              });
  });
}

/// Hands a graph call to the compute side and passes its answer back, keeping an error it
/// answers for describe (a delegated call's answer would go straight to the caller, unseen).
template <class Reply, class... Ts>
caf::result<Reply> via_compute(front_pointer self, Ts&&... xs) {
  auto rp = self->make_response_promise<Reply>();
  self->request(self->state.compute, caf::infinite, std::forward<Ts>(xs)...)
      .then([rp](Reply& reply) mutable { rp.deliver(std::move(reply)); },
            [self, rp](caf::error& e) mutable {
              self->state.tally.failed(from_caf(e).message);
              rp.deliver(std::move(e));
            });
  return rp;
}

worker_actor::behavior_type front_behavior(front_pointer self, std::shared_ptr<worker_shared> shared, compute_actor compute,
                                           load_receiver_actor receiver) {
  self->state.shared = shared;
  self->state.compute = compute;
  self->state.receiver = receiver;
  // The three live and die together; a front that goes stops the graph in flight first, so
  // the compute side is free to quit.
  self->link_to(compute);
  self->link_to(receiver);
  self->attach_functor([shared] {
    std::lock_guard<std::mutex> lock(shared->m);
    for (auto& [_, e] : shared->runs) e.control->cancel();
  });
  return {
      [=](status_atom) {
        self->state.tally.count();
        forge(self);
        auto s = snapshot(*self->state.shared);
        if (self->state.shared->cfg.bloated_status)  // (--fault bloated-status)
          for (int i = 0; i < 20000; ++i) s.features.push_back("feature-" + std::to_string(i));
        return s;
      },
      [=](describe_atom) { self->state.tally.count(); return describe_front(self); },
      [=](reserve_atom, const std::string& model, std::uint64_t bytes) -> caf::result<bool> {
        self->state.tally.count();
        auto& w = *self->state.shared;
        std::lock_guard<std::mutex> lock(w.m);
        auto it = w.reserved.find(model);
        const std::uint64_t mine = it == w.reserved.end() ? 0 : it->second;
        if (bytes == 0) {
          // (the load ended: what its own reads kept for the next ranges goes)
          w.reserved.erase(model);
          if (w.cfg.fetcher) w.cfg.fetcher->drop_spares();
          return true;
        }
        const std::uint64_t avail = w.free_locked() + mine;
        if (bytes > avail) {
          const std::string why = "model " + model + " needs " + mb(bytes) + " but worker " + w.cfg.worker_id + " has " +
                                  mb(avail) + " free";
          self->state.tally.failed(why);
          return to_caf(errc::unavailable, why);
        }
        w.reserved[model] = bytes;
        return true;
      },
      [=](runcancel_atom, const std::string& run_id) {
        self->state.tally.count();
        auto& w = *self->state.shared;
        std::lock_guard<std::mutex> lock(w.m);
        for (auto& [_, e] : w.runs)
          if (e.run_id == run_id) e.control->cancel();
        w.cancelled_ids.push_back(run_id);
        if (w.cancelled_ids.size() > 64) w.cancelled_ids.pop_front();
      },
      // ---- loading: on the receiver's thread, so a load goes on while a graph runs
      [=](tbegin_atom, tensor_begin_request& r) {
        self->state.tally.count();
        return self->delegate(self->state.receiver, tbegin_atom::value, std::move(r));
      },
      [=](tpiece_atom, tensor_piece& p) {
        self->state.tally.count();
        return self->delegate(self->state.receiver, tpiece_atom::value, std::move(p));
      },
      [=](tpieceref_atom, tensor_piece_ref& r) {
        self->state.tally.count();
        return self->delegate(self->state.receiver, tpieceref_atom::value, std::move(r));
      },
      [=](dlink_atom, std::uint16_t port, const std::string& ticket) {
        self->state.tally.count();
        return self->delegate(self->state.receiver, dlink_atom::value, port, ticket);
      },
      [=](tprobe_atom, const std::string& location, std::uint64_t header_bytes, const std::string& sha) {
        self->state.tally.count();
        return self->delegate(self->state.receiver, tprobe_atom::value, location, header_bytes, sha);
      },
      [=](tfetch_atom, tensor_fetch& f) -> caf::result<tensor_fetch_reply> {
        self->state.tally.count();
        // The read starts here, at once, so that the next ranges are on their way while the
        // receiver adds earlier ones; the receiver takes it in order with tbegin and tend.
        const auto& w = *self->state.shared;
        if (!w.cfg.fetcher) return to_caf(errc::invalid, "worker " + w.cfg.worker_id + " fetches no weights itself");
        auto number = w.cfg.fetcher->start(f);
        if (!number) {
          self->state.tally.failed(number.err().message);
          return to_caf(number.err().code, "worker " + w.cfg.worker_id + ": " + number.err().message);
        }
        return self->delegate(self->state.receiver, tfetch_atom::value, std::move(f), *number);
      },
      [=](tend_atom, const std::string& model, const std::string& name) {
        self->state.tally.count();
        return self->delegate(self->state.receiver, tend_atom::value, model, name);
      },
      [=](tabort_atom, const std::string& model) {
        self->state.tally.count();
        return self->delegate(self->state.receiver, tabort_atom::value, model);
      },
      [=](dropmodel_atom, const std::string& model) {
        self->state.tally.count();
        self->send(self->state.receiver, dropmodel_atom::value, model);
        return self->delegate(self->state.compute, dropmodel_atom::value, model);
      },
      // ---- everything else, in the order received, to the compute side
      [=](sopen_atom, const std::string& sid) {
        self->state.tally.count();
        return self->delegate(self->state.compute, sopen_atom::value, sid);
      },
      [=](sclose_atom, const std::string& sid) {
        self->state.tally.count();
        return self->delegate(self->state.compute, sclose_atom::value, sid);
      },
      [=](sinfo_atom, const std::string& sid) {
        self->state.tally.count();
        return self->delegate(self->state.compute, sinfo_atom::value, sid);
      },
      [=](sdump_atom, const std::string& sid) -> caf::result<session_dump> {
        self->state.tally.count();
        if (self->state.shared->cfg.unanswered_dumps) {  // (--fault unanswered-dumps: taken, never answered)
          self->state.unanswered.push_back(self->make_response_promise());
          log::line("info", "worker", "unanswered-dumps: left the copy of session " + sid + " unanswered");
          return caf::result<session_dump>(caf::delegated<session_dump>());
        }
        // (--fault refused-dumps, or -after-generations after a generation: the session denied)
        if (self->state.shared->cfg.refused_dumps || self->state.generated.erase(sid) > 0)
          return to_caf(errc::not_found, "session " + sid + " is not on worker " + self->state.shared->cfg.worker_id);
        if (self->state.shared->cfg.malformed_dumps) {  // (--fault malformed-dumps: a byte short)
          auto rp = self->make_response_promise<session_dump>();
          self->request(self->state.compute, caf::infinite, sdump_atom::value, sid)
              .then(
                  [rp](session_dump& d) mutable {
                    if (!d.tensors.empty() && !d.tensors.front().bytes.empty()) d.tensors.front().bytes.pop_back();
                    rp.deliver(std::move(d));
                  },
                  [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
          return caf::result<session_dump>(rp);
        }
        return self->delegate(self->state.compute, sdump_atom::value, sid);
      },
      [=](sload_atom, const std::string& sid, session_dump& d) {
        self->state.tally.count();
        return self->delegate(self->state.compute, sload_atom::value, sid, std::move(d));
      },
      [=](run_atom, run_request& r) -> caf::result<run_reply> {
        self->state.tally.count();
        forge(self);
        if (self->state.shared->cfg.unanswered_calls && r.run_id != probe_run_id) {
          // (--fault unanswered-calls: the call is taken and never answered; the pool's probes are)
          auto rp = self->make_response_promise();
          self->state.unanswered.push_back(rp);
          log::line("info", "worker", "unanswered-calls: left graph call " + std::to_string(self->state.unanswered.size()) +
                                          " unanswered");
          return caf::result<run_reply>(caf::delegated<run_reply>());
        }
        // The call's limit counts from now; its control is registered before it is handed on,
        // so a cancel can reach it while it waits and while it runs.
        auto& w = *self->state.shared;
        auto control = std::make_shared<run_control>();
        const auto now = std::chrono::steady_clock::now();
        if (r.timeout_ms > 0) control->deadline = now + std::chrono::milliseconds(r.timeout_ms);
        std::uint64_t number = 0;
        {
          std::lock_guard<std::mutex> lock(w.m);
          number = ++w.next_run;
          if (!r.run_id.empty() && std::find(w.cancelled_ids.begin(), w.cancelled_ids.end(), r.run_id) != w.cancelled_ids.end())
            control->cancel();
          w.runs[number] = worker_shared::run_entry{r.run_id, control, r.timeout_ms, now};
        }
        if (!r.graph_id.empty() || r.graph_json.size() < off_thread_bytes)
          return via_compute<run_reply>(self, run_atom::value, std::move(r), number);
        // A big inline graph is parsed here on a helper thread, so the compute side goes on
        // with other calls meanwhile; a cancel or the limit still reach it (registered above).
        auto rp = self->make_response_promise<run_reply>();
        parse_then_send(self, run_atom::value, std::make_shared<run_request>(std::move(r)), number, false, rp);
        return caf::result<run_reply>(rp);
      },
      [=](compile_atom, compile_request& r) -> caf::result<compile_reply> {
        self->state.tally.count();
        if (self->state.shared->cfg.unanswered_calls) {  // (--fault unanswered-calls: taken, never answered)
          self->state.unanswered.push_back(self->make_response_promise());
          log::line("info", "worker", "unanswered-calls: left compile of " + r.graph_id + " unanswered");
          return caf::result<compile_reply>(caf::delegated<compile_reply>());
        }
        std::uint64_t number = 0;
        {
          std::lock_guard<std::mutex> lock(self->state.shared->m);
          number = ++self->state.shared->next_run;
        }
        if (r.graph_json.size() < off_thread_bytes)
          return via_compute<compile_reply>(self, compile_atom::value, std::move(r), number);
        auto rp = self->make_response_promise<compile_reply>();
        parse_then_send(self, compile_atom::value, std::make_shared<compile_request>(std::move(r)), number, true, rp);
        return caf::result<compile_reply>(rp);
      },
      [=](dropgraph_atom, const std::string& id) {
        self->state.tally.count();
        return self->delegate(self->state.compute, dropgraph_atom::value, id);
      },
      [=](gencheck_atom, const std::string& id, bool sampling, bool verify) {
        self->state.tally.count();
        return self->delegate(self->state.compute, gencheck_atom::value, id, sampling, verify);
      },
      [=](genstart_atom, gen_request& r) -> caf::result<bool> {
        self->state.tally.count();
        if (self->state.shared->cfg.silent_generations) {  // (--fault silent-generations: taken, never run)
          log::line("info", "worker", "silent-generations: took generation " + r.gen_id + " and will send it nothing");
          return true;
        }
        if (self->state.shared->cfg.refused_dumps_after_generations) self->state.generated.insert(r.session);
        return self->delegate(self->state.compute, genstart_atom::value, std::move(r));
      },
      [=](genstep_atom) { self->state.tally.count(); self->send(self->state.compute, genstep_atom::value); },
      [=](gencancel_atom, const std::string& id) {
        self->state.tally.count();
        self->send(self->state.compute, gencancel_atom::value, id);
      },
      [=](tput_atom, tensor_upload& u) {
        self->state.tally.count();
        return self->delegate(self->state.compute, tput_atom::value, std::move(u));
      },
      [=](tdrop_atom, const std::string& id) {
        self->state.tally.count();
        return self->delegate(self->state.compute, tdrop_atom::value, id);
      },
      [=](tdigest_atom a, const std::string& model, const std::string& name, const std::string& nonce) {
        self->state.tally.count();
        return self->delegate(self->state.receiver, a, model, name, nonce);  // (behind the tensor's end)
      },
      [=](recheck_atom) -> caf::result<recheck_reply> {
        self->state.tally.count();
        return to_caf(errc::invalid, "worker " + self->state.shared->cfg.worker_id +
                                         " is not a volunteer behind spot-checks: nothing to re-check");
      },
  };
}

}  // namespace

worker_actor spawn_worker(caf::actor_system& sys, worker_config cfg) {
  std::shared_ptr<backend> be = cfg.device;
  if (!be) be = std::make_shared<cpu_backend>(cpu_backend::config{cfg.reference_only});
  auto shared = std::make_shared<worker_shared>(cfg);
  shared->backend_name = std::string(be->name());
  shared->lanes = be->holds_in_lanes();
  shared->host_ops = be->host_ops();
  for (auto& f : be->features())
    if (std::find(cfg.lacks.begin(), cfg.lacks.end(), f) == cfg.lacks.end()) shared->features.push_back(f);
  auto compute = spawn_compute(sys, shared, std::move(be));
  auto receiver = spawn_load_receiver(sys, shared, compute);
  return sys.spawn(front_behavior, shared, compute, receiver);
}

}  // namespace mpakt
