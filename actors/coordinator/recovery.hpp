#pragma once
/// What the coordinator does when a worker leaves the grid (docs/decisions.md, "Lost workers"
/// and "A lost part"): calls in flight there are sent again after the recovery, its models (or
/// its share of a spread model) are fetched again from the model host onto the workers left,
/// checkpointed sessions are restored and their journals replayed, and requests that waited run.
/// All of it runs in the coordinator actor, on its state (coordinator_state.hpp).

#include <functional>
#include <string>

#include "actors/coordinator/coordinator_state.hpp"
#include "actors/coordinator/load_job.hpp"

namespace mpakt {

/// Sends a request to this coordinator again (after a recovery) and answers `rp` with its reply.
/// The request's values move into the message (a caller that passes one by rvalue is not copied).
template <class Reply, class... Ts>
void resend(coordinator_pointer self, caf::typed_response_promise<Reply> rp, Ts... xs) {
  self->request(caf::actor_cast<coordinator_actor>(self), caf::infinite, std::move(xs)...)
      .then([rp](Reply& r) mutable { rp.deliver(std::move(r)); }, [rp](caf::error& e) mutable { rp.deliver(caf::error(e)); });
}

/// Registers a call in flight on the worker at `where`: if that worker is lost first,
/// `on_lost` runs (once) instead of an answer. Returns settle(): true the first time, when the
/// caller may answer; false once the call is settled (lost, or answered before).
std::function<bool()> track_call(coordinator_pointer self, caf::actor_addr where, std::function<void()> on_lost);

/// Loads a session's checkpoint onto `target` and points the session there (the one way a
/// checkpoint goes back, asked for or automatic). `done` gets no error on success, else the
/// worker's refusal or errc::not_found when the session went away meanwhile.
void put_checkpoint_back(coordinator_pointer self, const std::string& sid, const worker_actor& target,
                         std::function<void(caf::error)> done);

/// Points model `id` at where a load put it: one worker, or (spread) a new pipeline over
/// every part, each part's worker watched. Used by a first load and by the re-placement of a
/// lost model, which may have to spread what one worker held before.
void place_model(coordinator_pointer self, const std::string& id, model_entry& m, const load_outcome& out);

/// A worker left the grid (its monitor fired, or a call found it gone): starts its recovery.
void on_worker_lost(coordinator_pointer self, const caf::actor_addr& addr);

}  // namespace mpakt
