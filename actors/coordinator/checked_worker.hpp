#pragma once
/// Spot-checks of volunteers: the coordinator's stand-in for each admitted volunteer, which
/// re-runs some of its passes on a verifier and compares (docs/decisions.md, "Spot-checks").
///
/// The gate hands the pool a checked worker instead of the volunteer's own handle. It speaks
/// the whole worker protocol and passes everything on to the volunteer, and besides:
/// - keeps a *verifier*: a worker in the coordinator's process holding copies of the weights
///   the volunteer is sent (as far as the verifiers' shared budget, `verify_config::memory`,
///   allows: a model that does not fit is not copied) and the templates it compiles; a
///   volunteer that reads its weights from the model host (`tprobe`, `tfetch`) does so beside
///   the verifier, which reads the same ranges there (`verify_config::fetch`), and each weight
///   is challenged on arrival against the verifier's copy;
/// - checks the first `first_passes` passes of the volunteer (graph calls and generations):
///   the sessions the pass reads are copied from the volunteer (sdump, ahead of the pass in its
///   mailbox) into the verifier, the pass runs on both, and the answers are compared — exactly
///   when both run the same kernel path, within a tolerance otherwise. Such a graph call is
///   answered from the verifier's result; such a generation streams the verifier's tokens and
///   compares the volunteer's with them;
/// - after them, checks the windows its passes fall into (check_windows.hpp) with probability
///   `fraction`, so that the volunteer cannot tell which: its sessions are copied at every
///   window's turn, its answers go to the callers at once, and in a checked window the
///   verifier does the same passes again once answered, from the window's first copies, and
///   compares the answers and, at the window's end, the sessions;
/// - quarantines the volunteer on a mismatch: the detecting call keeps its verified answer, the
///   volunteer's worker is ended (it exits like a revoked one), the quarantine is recorded
///   (shown in /api/v3/status, and the same token may not join again), and the checked worker
///   ends — which the coordinator handles as any lost worker: its models placed again, its
///   checkpointed sessions restored, generations on them going on from their last token.
///
/// A pass the verifier cannot run (weights it does not hold, a session it cannot take) is
/// counted as unchecked, never as a mismatch.

#include <caf/all.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/loader/host_fetch.hpp"
#include "actors/protocol.hpp"

namespace mpakt {

/// Room in the coordinator's memory shared by every volunteer's verifier: for their weight
/// copies (--verify-memory), or for what their checked windows hold (--verify-queue-total).
class verify_budget {
 public:
  explicit verify_budget(std::uint64_t total) : total_(total) {}
  /// Takes `n` bytes if they fit.
  bool take(std::uint64_t n) { return take(n, false); }
  /// Takes a session copy's `n` bytes: if they fit, or if no copy is held (verify_room).
  bool take_copy(std::uint64_t n) { return take(n, true); }
  void give(std::uint64_t n);
  void give_copy(std::uint64_t n);
  std::uint64_t used() const { return used_.load(); }
  std::uint64_t free() const { return total_ - std::min(total_, used_.load()); }

 private:
  bool take(std::uint64_t n, bool copy);
  const std::uint64_t total_;
  std::atomic<std::uint64_t> used_{0};
  std::mutex m_;     ///< (a copy's take and give: bytes and count together)
  int copies_ = 0;   ///< session copies held (under m_)
};

/// What one volunteer's checked windows hold in the coordinator for its verifier — the passes,
/// the answers the volunteer gave them, its copies of the windows' sessions — within its own
/// room (--verify-queue) and the room all volunteers share (--verify-queue-total). A session
/// copy is held whatever its size while no other copy is (in this room; in the shared one, no
/// other copy of any volunteer's): a session larger than the room is still checked while the
/// verifier keeps up, and a volunteer cannot escape its checks by inflating its copies (the
/// one held is loaded and judged like any other); the memory held is then at most the rooms
/// and one copy. Thread-safe (a copy is let go on whichever thread drops it last); what it
/// holds when it goes is given back to the shared room.
class verify_room {
 public:
  verify_room(std::uint64_t own, std::shared_ptr<verify_budget> all) : own_(own), all_(std::move(all)) {}
  ~verify_room();
  verify_room(const verify_room&) = delete;
  verify_room& operator=(const verify_room&) = delete;

  /// Takes `n` bytes (a pass, an answer) if they fit both rooms.
  bool take(std::uint64_t n);
  void give(std::uint64_t n);
  /// Takes a session copy's `n` bytes, as above.
  bool take_copy(std::uint64_t n);
  void give_copy(std::uint64_t n);
  std::uint64_t held() const;

 private:
  bool take(std::uint64_t n, bool copy);
  void give(std::uint64_t n, bool copy);
  const std::uint64_t own_;
  const std::shared_ptr<verify_budget> all_;
  mutable std::mutex m_;
  std::uint64_t held_ = 0;
  int copies_ = 0;
};

struct verify_config {
  double fraction = 0.02;            ///< --verify-fraction: passes checked after the first ones
  std::uint32_t first_passes = 8;    ///< --verify-first: a new volunteer's passes always checked
  /// --verify-window: the mean number of passes in a window of the later passes (check_windows.hpp)
  double window_passes = 64;
  std::uint64_t memory = std::uint64_t(2) << 30;  ///< --verify-memory: the verifiers' room, in all
  /// --verify-queue: what a volunteer's checked passes and the answers it gave them may hold in
  /// the coordinator while they wait for its verifier (past it the window's check ends)
  std::uint64_t queue_bytes = std::uint64_t(256) << 20;
  /// --verify-queue-total: the same, all volunteers together (default 1G)
  std::uint64_t queue_total = std::uint64_t(1) << 30;
  /// What the verifiers hold (shared by every checked worker; null: `memory` per volunteer).
  std::shared_ptr<verify_budget> budget;
  /// What every volunteer's checked windows hold for its verifier (shared by every checked
  /// worker; null: only `queue_bytes` per volunteer bounds it).
  std::shared_ptr<verify_budget> queue_budget;
  /// How a verifier reads the model host (the coordinator's own rules, as its embedded workers
  /// read it: `serve --worker-fetch`); absent, the verifier never reads it and the volunteer's
  /// weights always pass through the coordinator.
  std::optional<loader::host_fetcher::options> fetch;
};

/// Volunteers quarantined since the coordinator started (shared by the checked workers, the
/// gate, which refuses their tokens, and the coordinator's status).
class quarantine_registry {
 public:
  struct entry {
    std::string worker_id;
    std::string volunteer;  ///< the token's name
    std::string reason;
    std::uint64_t at_unix_ms = 0;
    std::string token_digest;  ///< (never shown)
  };
  void add(entry e);
  std::vector<entry> list() const;
  bool has_digest(const std::string& digest) const;

 private:
  mutable std::mutex m_;
  std::vector<entry> entries_;
};

/// What a checked worker needs to know of the volunteer it stands in for.
struct checked_volunteer {
  worker_actor worker;       ///< what it talks to: the volunteer's handle, or its data relay
  std::string name;          ///< its token's name
  std::string token_digest;  ///< to refuse the token after a quarantine
  worker_actor own;          ///< the volunteer's own handle, which a quarantine ends (null: `worker`)
};

/// Spawns the stand-in for `v`; it ends when the volunteer does, or on a quarantine.
worker_actor spawn_checked_worker(caf::actor_system& sys, checked_volunteer v, verify_config cfg,
                                  std::shared_ptr<quarantine_registry> registry);

/// Whether two graph answers ({"name": {"shape", "data" | "dataB64"}}) agree: exactly
/// (`tolerance` 0: the same kernel path), or every value within `tolerance` times the output's
/// largest magnitude (plus 1e-5); shapes and names equal. `why` says where they differ.
bool answers_agree(const std::string& a, const std::string& b, float tolerance, std::string* why);

/// Whether two dumps of a session (the volunteer's `a`, the verifier's `b`) agree after a
/// pass: the same tensors, shapes and dtypes, and bytes equal — or, `tolerance` > 0 (another
/// kernel path), float values (f32, bf16, f16, widened) within `tolerance` times the tensor's
/// largest magnitude (plus 1e-5). `why` names the first tensor (and value) that differs.
bool sessions_agree(const session_dump& a, const session_dump& b, float tolerance, std::string* why);

/// How far apart two kernel paths may put a pass's values, as a fraction of an output's
/// largest magnitude, for weights held as `resident` (docs/decisions.md, "Spot-checks"):
/// f32 and f16 weights 1e-3; bf16 3e-2, as a product of many rows rounds its activations to
/// bf16 (a path's last f32 bit can move a value by a bf16 step); q8 and q4 8e-2, as a product
/// of many rows multiplies int8 activations on some paths and int16 on others.
float path_tolerance(std::string_view resident);

}  // namespace mpakt
