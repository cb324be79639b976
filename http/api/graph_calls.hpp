#pragma once
/// The edge's side of the calls whose bodies can be large (graph calls, templates, v2
/// uploads): decode the body into its typed request (http/api/requests.hpp) — on a helper
/// thread of its own when the body is large, so neither the Beast I/O thread nor the
/// scheduler thread the coordinator shares ever parses megabytes — resolve tensorIds that
/// name loaded weights, send the typed request, and render a graph's reply the same way.
///
/// Used by the routes (http/api/routes.cpp) and the chat actor (http/api/chat.cpp).

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/protocol.hpp"
#include "runtime/status.hpp"

namespace mpakt::http {

using work_atom = caf::atom_constant<caf::atom("work")>;

/// Bodies (and replies) from this size on are decoded (rendered) on a helper thread; smaller
/// ones at once, where a helper's start would cost more than the work.
inline constexpr std::size_t off_thread_bytes = 256 * 1024;

/// Runs `work()` (returning T, a result<…>) on a helper thread of its own when `heavy`, else at once; then
/// `then(T&)` in `self`. The value travels in a holder both sides share; the helper's reply
/// orders its write before the actor's read. `work` must be callable as const.
template <class T, class Work, class Then>
void maybe_off_thread(caf::event_based_actor* self, bool heavy, Work work, Then then) {
  if (!heavy) {
    T v = work();
    then(v);
    return;
  }
  auto out = std::make_shared<std::optional<T>>();
  auto helper = self->system().spawn<caf::detached>([work = std::move(work), out](caf::event_based_actor* h) -> caf::behavior {
    return {[=](work_atom) {
      h->quit();
      out->emplace(work());
      return true;
    }};
  });
  self->request(helper, caf::infinite, work_atom::value)
      .then([out, then](bool) mutable { then(**out); },
            [then](caf::error& e) mutable {
              T failed = error{errc::internal, "a helper thread failed: " + caf::to_string(e)};
              then(failed);
            });
}

/// {"outputs": …, "steps": n}, the answer of a graph call.
std::string graph_reply_json(const run_reply& r);

/// POST /api/v3/graph or /api/v2/graph on behalf of `self`: decodes `body`, sends it, and
/// calls `done` with the reply or the error. A call whose worker left the grid mid-run is
/// sent again (decoded again from `body`), up to three times.
void send_graph_call(caf::event_based_actor* self, coordinator_actor coord, caller who,
                     std::shared_ptr<const std::string> body, std::int32_t version, std::chrono::milliseconds timeout,
                     std::function<void(result<run_reply>)> done);

/// POST /api/v3/graphs on behalf of `self`: the coordinator's JSON answer or the error.
void send_compile_call(caf::event_based_actor* self, coordinator_actor coord, caller who,
                       std::shared_ptr<const std::string> body, std::chrono::milliseconds timeout,
                       std::function<void(result<std::string>)> done);

/// POST /api/v2/tensors on behalf of `self`: the coordinator's JSON answer or the error.
void send_tensor_upload(caf::event_based_actor* self, coordinator_actor coord, caller who,
                        std::shared_ptr<const std::string> body, std::chrono::milliseconds timeout,
                        std::function<void(result<std::string>)> done);

}  // namespace mpakt::http
