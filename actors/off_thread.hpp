#pragma once
/// Work too big for an actor's turn (parsing, decoding or rendering megabytes) done on a
/// helper thread of its own, its result handed back to the actor as a message. Used by the
/// HTTP edge (bodies and replies) and by a worker's front (big inline graphs parsed before
/// they reach the compute thread).

#include <caf/all.hpp>

#include <memory>
#include <optional>
#include <string>

#include "runtime/status.hpp"

namespace mpakt {

using work_atom = caf::atom_constant<caf::atom("work")>;

/// Bodies (and replies) from this size on are handled on a helper thread; smaller ones at
/// once, where a helper's start would cost more than the work.
inline constexpr std::size_t off_thread_bytes = 256 * 1024;

/// Runs `work()` (returning T, a result<…>) on a helper thread of its own when `heavy`, else at
/// once; then `then(T&)` in `self` (any event-based actor, typed or not). The value travels in
/// a holder both sides share; the helper's reply orders its write before the actor's read.
/// `work` must be callable as const.
template <class T, class Self, class Work, class Then>
void maybe_off_thread(Self* self, bool heavy, Work work, Then then) {
  if (!heavy) {
    T v = work();
    then(v);
    return;
  }
  auto out = std::make_shared<std::optional<T>>();
  auto helper = self->system().template spawn<caf::detached>(
      [work = std::move(work), out](caf::event_based_actor* h) -> caf::behavior {
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

}  // namespace mpakt
