#pragma once
/// Which of a volunteer's passes its verifier follows, decided so the volunteer cannot tell
/// (docs/decisions.md, "Spot-checks: windows"). Owned by one checked worker and touched only on
/// its thread.
///
/// After a volunteer's first passes, the passes on its sessions fall into *windows*: a window
/// covers a set of sessions, begins with a copy of each (a dump asked of the volunteer, whatever
/// the window is), takes the passes on them that follow, and ends after a number of passes
/// drawn at random (mean `mean_passes`) with a dump of each again, which begins the next. Whether
/// a window is checked is drawn when it opens (probability `fraction`) and never shown: a
/// checked window's passes are done again on the verifier from its first copies, each answer
/// compared once the volunteer gave it, and its last copies compared with the verifier's
/// sessions. So every pass lies in some window, each window is checked with the same
/// probability, and what the volunteer sees — a dump every few passes, its answers taken at
/// once — is the same whether its window is checked or not.
///
/// A pass on sessions of several windows (or of a session in none yet) waits until those
/// windows' passes are answered; then they close and one window opens over all their sessions.
/// A pass on no session is a window of its own, checked with the same probability.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace mpakt {

class check_windows {
 public:
  struct window {
    std::uint64_t id = 0;
    std::set<std::string> sessions;
    bool checked = false;   ///< (secret) the verifier follows its passes
    bool broken = false;    ///< checked, but the verifier could not follow: judged no further
    bool closing = false;   ///< no pass joins it; it closes once its passes are answered
    std::int64_t left = 0;  ///< passes it still takes
    std::uint32_t in_flight = 0;  ///< passes sent and not yet answered (a generation until it ends)
    std::uint32_t passes = 0;     ///< passes it took
    float tolerance = 0;    ///< the widest of its passes' (0 on the volunteer's kernel path)
  };
  using ptr = std::shared_ptr<window>;

  /// Windows closed together and the one opened over their sessions and the pass's: every
  /// session of `opened` is to be dumped now, before the pass that opened it (those copies end
  /// the closed windows and begin the opened one). `opened` is null when no session is left.
  struct turnover {
    std::vector<ptr> closed;
    ptr opened;
  };
  /// Where a pass goes: `into` (its in-flight count taken), after `turned` when windows closed
  /// first; `into` null: it must wait (park it, and admit it again after the next turnover).
  struct admission {
    ptr into;
    std::optional<turnover> turned;
  };

  /// `mean_passes` ≥ 1; `seed` for the draws (a random one in the service).
  check_windows(double fraction, double mean_passes, std::uint64_t seed);

  /// A pass on `sessions` (at least one) is about to be sent.
  admission admit(const std::vector<std::string>& sessions);
  /// A pass on no session: a window of its own, not kept here.
  ptr single();
  /// A pass of `w` was answered (or its generation ended, or it failed): the turnover when `w`
  /// closes now. Never for a `single()` window.
  std::optional<turnover> answered(const ptr& w);
  /// `session` leaves its window (closed, or its state replaced by a restore): that window, or
  /// null when it was in none.
  ptr leave(const std::string& session);
  /// The window `session` is in, or null.
  ptr of(const std::string& session) const;
  /// Windows open now (tests, status).
  std::size_t open_windows() const;

 private:
  /// A new window, its check drawn (the one draw a single pass takes too).
  ptr fresh();
  ptr open(std::set<std::string> sessions);
  turnover turn(std::vector<ptr> closed, std::set<std::string> sessions);

  double fraction_;
  double mean_passes_;
  std::mt19937_64 rng_;
  std::uint64_t next_id_ = 1;
  std::map<std::string, ptr> of_;
};

}  // namespace mpakt
