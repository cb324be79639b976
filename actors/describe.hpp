#pragma once
/// What an operator sees inside the grid: every long-lived actor answers `describe` with a
/// typed `actor_snapshot` of itself, and the coordinator gathers them into one picture
/// (`actors`) and relays `grid_event`s (a worker joined or was lost, a model loaded, …) to
/// whoever subscribed. docs/protocol.md, "Describing the grid"; the HTTP edge renders both
/// (http/api/console.hpp).
///
/// Included by actors/protocol.hpp, whose interfaces carry the messages.

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace mpakt {

using describe_atom = caf::atom_constant<caf::atom("describe")>;
using actors_atom = caf::atom_constant<caf::atom("actors")>;
using gridevent_atom = caf::atom_constant<caf::atom("gridevent")>;
using subscribe_atom = caf::atom_constant<caf::atom("subscribe")>;

/// One actor as it describes itself. `state` holds what its kind has to say: numbers
/// (bytes, counts, milliseconds, rates) and texts (ids, backends, kernel paths); the HTTP
/// edge renders them as one JSON object, numbers as numbers.
struct actor_snapshot {
  std::string kind;  ///< coordinator, pool, worker, model, session, graph, pipeline, generation, accounts
  std::string id;    ///< the entity's id (a worker's id, "coordinator", …)
  /// The actors it talks to, as "kind:id" (a session's worker, a pipeline's parts, …).
  std::vector<std::string> links;
  std::vector<std::pair<std::string, double>> numbers;
  std::vector<std::pair<std::string, std::string>> texts;
  std::uint64_t mailbox = 0;   ///< messages waiting in its mailbox when it answered
  std::uint64_t messages = 0;  ///< messages it handled since it started
  std::vector<std::string> errors;  ///< the last errors it answered, oldest first
  /// False when it did not answer in time (or is gone): the coordinator lists it from what
  /// it knows, with this false, rather than wait.
  bool answered = true;

  void number(std::string name, double v) { numbers.emplace_back(std::move(name), v); }
  void text(std::string name, std::string v) { texts.emplace_back(std::move(name), std::move(v)); }
  void link(const std::string& kind, const std::string& id) { links.push_back(kind + ":" + id); }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, actor_snapshot& x) {
  return f(caf::meta::type_name("actor_snapshot"), x.kind, x.id, x.links, x.numbers, x.texts, x.mailbox, x.messages, x.errors,
           x.answered);
}

/// Something that happened in the grid, as the console's stream shows it.
struct grid_event {
  std::uint64_t seq = 0;    ///< numbered by the coordinator, from 1
  std::uint64_t at_ms = 0;  ///< milliseconds since the Unix epoch
  std::string what;         ///< joined, lost, recovered, loaded, deleted, opened, closed, started, ended
  std::string kind;         ///< worker, model, session, generation
  std::string id;
  std::string detail;       ///< a sentence or a related id (a session's worker, why it ended, …)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, grid_event& x) {
  return f(caf::meta::type_name("grid_event"), x.seq, x.at_ms, x.what, x.kind, x.id, x.detail);
}

/// Milliseconds since the Unix epoch, now.
inline std::uint64_t unix_ms_now() {
  return std::uint64_t(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

/// Any actor that answers `describe` (every interface below has this message, so any of
/// their handles can be cast to it).
using describable = caf::typed_actor<caf::replies_to<describe_atom>::with<actor_snapshot>>;

/// Receives grid events (the HTTP side's console stream; the coordinator, from the pool).
using grid_listener = caf::typed_actor<caf::reacts_to<gridevent_atom, grid_event, describable>>;

/// The message count and the last errors an actor answered, kept in its state for
/// `describe`. Touched only by its actor's thread.
struct describe_tally {
  static constexpr std::size_t kept_errors = 8;
  std::uint64_t messages = 0;
  std::deque<std::string> errors;

  void count() { ++messages; }
  void failed(std::string what) {
    errors.push_back(std::move(what));
    if (errors.size() > kept_errors) errors.pop_front();
  }
  /// Fills in a snapshot's counters; `mailbox` is the actor's queue length now.
  void fill(actor_snapshot& s, std::uint64_t mailbox) const {
    s.mailbox = mailbox;
    s.messages = messages;
    s.errors.assign(errors.begin(), errors.end());
  }
};

/// The last `capacity` grid events, numbered in order (the coordinator's; pure, so tested
/// alone). Thread-safety: none; its owner's thread only.
class event_ring {
 public:
  explicit event_ring(std::size_t capacity = 256) : capacity_(capacity) {}
  /// Numbers the event (and stamps it now if it has no time) and keeps it; returns it.
  const grid_event& push(grid_event e) {
    e.seq = ++last_;
    if (e.at_ms == 0) e.at_ms = unix_ms_now();
    events_.push_back(std::move(e));
    if (events_.size() > capacity_) events_.pop_front();
    return events_.back();
  }
  /// The events after `seq` still kept, oldest first.
  std::vector<grid_event> since(std::uint64_t seq) const {
    std::vector<grid_event> out;
    for (const auto& e : events_)
      if (e.seq > seq) out.push_back(e);
    return out;
  }
  std::uint64_t last_seq() const { return last_; }
  std::size_t size() const { return events_.size(); }

 private:
  std::size_t capacity_;
  std::uint64_t last_ = 0;
  std::deque<grid_event> events_;
};

}  // namespace mpakt
