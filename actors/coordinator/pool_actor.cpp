#include "actors/coordinator/pool_actor.hpp"

#include <algorithm>
#include <memory>

#include "actors/errors.hpp"

namespace mpakt {

namespace {

struct pool_state {
  std::vector<worker_actor> workers;
};

constexpr auto worker_timeout = std::chrono::seconds(10);

/// Gathers every worker's status; replies once all answered (a worker that fails to answer
/// in time is left out).
void gather(pool_actor::stateful_pointer<pool_state> self,
            std::function<void(std::vector<std::pair<worker_actor, worker_status>>)> done) {
  auto workers = self->state.workers;
  if (workers.empty()) return done({});
  auto acc = std::make_shared<std::vector<std::pair<worker_actor, worker_status>>>();
  auto pending = std::make_shared<std::size_t>(workers.size());
  for (auto& w : workers) {
    self->request(w, worker_timeout, status_atom::value)
        .then(
            [=](worker_status& s) {
              acc->emplace_back(w, std::move(s));
              if (--*pending == 0) done(std::move(*acc));
            },
            [=](caf::error&) {
              if (--*pending == 0) done(std::move(*acc));
            });
  }
}

/// The worker with the most free memory among those offering every op and feature in `needs`;
/// errc::unavailable naming what is missing or how much memory when none qualifies.
caf::typed_response_promise<worker_actor, worker_status> pick(pool_actor::stateful_pointer<pool_state> self,
                                                               std::uint64_t bytes, std::vector<std::string> needs) {
  auto rp = self->make_response_promise<worker_actor, worker_status>();
  gather(self, [rp, bytes, needs](std::vector<std::pair<worker_actor, worker_status>> all) mutable {
    if (all.empty()) {
      rp.deliver(to_caf(errc::unavailable, "no worker is connected"));
      return;
    }
    std::string missing;
    std::vector<std::pair<worker_actor, worker_status>> able;
    for (auto& w : all) {
      std::string lacked;
      for (const auto& n : needs)
        if (std::find(w.second.lacks.begin(), w.second.lacks.end(), n) != w.second.lacks.end()) lacked = n;
      if (lacked.empty()) able.push_back(std::move(w));
      else missing = lacked;
    }
    if (able.empty()) {
      rp.deliver(to_caf(errc::unavailable, "no connected worker offers " + missing + ", which the graph uses"));
      return;
    }
    auto best = std::max_element(able.begin(), able.end(),
                                 [](const auto& a, const auto& b) { return a.second.free_bytes < b.second.free_bytes; });
    if (best->second.free_bytes < bytes) {
      rp.deliver(to_caf(errc::unavailable, "no worker has " + std::to_string((bytes + 999999) / 1000000) +
                                               " MB free (the largest has " + std::to_string(best->second.free_bytes / 1000000) +
                                               " MB)"));
      return;
    }
    rp.deliver(best->first, best->second);
  });
  return rp;
}

}  // namespace

pool_actor spawn_pool(caf::actor_system& sys) {
  return sys.spawn([](pool_actor::stateful_pointer<pool_state> self) -> pool_actor::behavior_type {
    self->set_down_handler([=](caf::down_msg& dm) {
      auto& ws = self->state.workers;
      ws.erase(std::remove_if(ws.begin(), ws.end(), [&](const worker_actor& w) { return w.address() == dm.source; }), ws.end());
    });
    return {
        [=](add_atom, worker_actor w) {
          self->monitor(w);
          self->state.workers.push_back(std::move(w));
        },
        [=](workers_atom) -> caf::result<std::vector<worker_status>> {
          auto rp = self->make_response_promise<std::vector<worker_status>>();
          gather(self, [rp](std::vector<std::pair<worker_actor, worker_status>> all) mutable {
            std::vector<worker_status> out;
            for (auto& [_, s] : all) out.push_back(std::move(s));
            std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.worker_id < b.worker_id; });
            rp.deliver(std::move(out));
          });
          return rp;
        },
        [=](members_atom) -> caf::result<std::vector<worker_actor>, std::vector<worker_status>> {
          auto rp = self->make_response_promise<std::vector<worker_actor>, std::vector<worker_status>>();
          gather(self, [rp](std::vector<std::pair<worker_actor, worker_status>> all) mutable {
            std::stable_sort(all.begin(), all.end(),
                             [](const auto& a, const auto& b) { return a.second.free_bytes > b.second.free_bytes; });
            std::vector<worker_actor> ws;
            std::vector<worker_status> ss;
            for (auto& [w, s] : all) {
              ws.push_back(w);
              ss.push_back(std::move(s));
            }
            rp.deliver(std::move(ws), std::move(ss));
          });
          return rp;
        },
        [=](pick_atom, std::uint64_t bytes) -> caf::result<worker_actor, worker_status> {
          return pick(self, bytes, {});
        },
        [=](pick_atom, std::uint64_t bytes, std::vector<std::string>& needs) -> caf::result<worker_actor, worker_status> {
          return pick(self, bytes, std::move(needs));
        },
    };
  });
}

}  // namespace mpakt
