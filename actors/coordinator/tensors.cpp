/// v2 tensor handlers of the coordinator: uploads (counted against the key's quota while in
/// flight) and deletes.

#include "actors/coordinator/handlers.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <cstdio>
#include <set>

#include "actors/coordinator/coordinator_state.hpp"
#include "actors/coordinator/pipeline_actor.hpp"
#include "actors/coordinator/recovery.hpp"
#include "actors/errors.hpp"
#include "actors/loader/source.hpp"
#include "actors/sequence.hpp"
#include "actors/generate/gen_values.hpp"
#include "actors/ids.hpp"
#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/json.hpp"
#include "runtime/log.hpp"
#include "runtime/metrics.hpp"
#include "runtime/schema.hpp"

namespace mpakt::coord {

using namespace std::chrono_literals;

caf::result<upload_tensor_reply> upload_tensor(coordinator_pointer self, const caller& who, tensor_call& t) {
  const auto control = self->state.cfg.timeouts.control;
  auto& S = self->state;
  const std::uint64_t bytes = t.data.size() * 4;
  std::uint64_t used = S.v2_pending[who.key_id];
  for (const auto& [_, e] : S.tensors)
    if (e.key_id == who.key_id) used += e.bytes;
  if (used + bytes > S.cfg.v2_quota_bytes)
    return to_caf(errc::too_large, "tensor of " + std::to_string(bytes) + " bytes would exceed this key's v2 upload quota (" +
                                       std::to_string(S.cfg.v2_quota_bytes - std::min(used, S.cfg.v2_quota_bytes)) +
                                       " of " + std::to_string(S.cfg.v2_quota_bytes) + " bytes left)");
  auto rp = self->make_response_promise<upload_tensor_reply>();
  const std::string tid = new_id("t_");
  // (held once: the handlers below share it, and the values move on to the worker)
  auto up = std::make_shared<tensor_upload>(tensor_upload{tid, t.shape, std::move(t.data)});
  const shape_t shape = t.shape;
  S.v2_pending[who.key_id] += bytes;
  auto settle = [self, key = who.key_id, bytes] {
    auto& pending = self->state.v2_pending;
    if (auto it = pending.find(key); it != pending.end() && (it->second -= std::min(it->second, bytes)) == 0)
      pending.erase(it);
  };
  self->request(S.pool, control, pick_atom::value, bytes)
      .then(
          [=](worker_actor& w, worker_status&) mutable {
            self->request(w, control, tput_atom::value, std::move(*up))
                .then(
                    [=](bool) mutable {
                      settle();
                      v2_entry e;
                      e.account = who.account;
                      e.key_id = who.key_id;
                      e.created_at = now_iso();
                      e.worker = w;
                      self->state.watch(self, w);
                      e.bytes = bytes;
                      self->state.tensors[tid] = e;
                      rp.deliver(upload_tensor_reply{tid, shape, bytes});
                    },
                    [=](caf::error& e) mutable {
                      settle();
                      fail(self, rp, e);
                    });
          },
          [=](caf::error& e) mutable {
            settle();
            fail(self, rp, e);
          });
  return rp;
}

caf::result<deleted_reply> delete_tensor(coordinator_pointer self, const caller& who, const std::string& id) {
  auto& S = self->state;
  auto* t = S.find(S.tensors, id, who);
  if (!t) return to_caf(errc::not_found, "tensor " + id + " does not exist");
  caf::anon_send(t->worker, tdrop_atom::value, id);
  S.tensors.erase(id);
  return deleted_reply{"tensor", id};
}

}  // namespace mpakt::coord
