#pragma once
/// A worker: holds tensors and runs graphs on a backend (see worker_actor in
/// actors/protocol.hpp for its messages). It is three actors, so that computing never keeps
/// it from answering:
///
///   - the front (worker_actor.cpp; the handle returned): on CAF's scheduler, never computes,
///     never blocks. Answers status (memory, and what the compute side is busy with),
///     reserve and runcancel itself; passes loading messages to the receiver and everything
///     else, in the order received, to the compute side (`delegate`, so replies go straight
///     back to the caller). It registers each graph call's run_control (its limit counts from
///     here) so that runcancel, or the front's own end, can stop it between steps.
///   - the compute side (compute_actor.hpp): detached; owns the tensor store and runs graphs.
///   - the receiver (load_receiver.hpp): detached; builds arriving weights.
///
/// They share a worker_shared (the memory ledger, calls in flight, busy state). Threads: the
/// compute side's (plus the kernels' helpers, --threads in all) is the only one that
/// computes; the receiver's converts pieces during a load and otherwise sleeps; the front
/// uses a scheduler thread only while handling a message.
///
/// Lifecycle: spawned by `mpakt serve` (embedded workers) or `mpakt worker` (a volunteer);
/// the three are linked and live until the system shuts down or the front is told to exit
/// (which cancels the graph in flight first).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/data_link.hpp"
#include "actors/protocol.hpp"
#include "backends/backend.hpp"

namespace mpakt::loader {
class host_fetcher;
}

namespace mpakt {

struct worker_config {
  std::string worker_id = "w_local";
  /// Memory this worker offers the grid (resident bytes).
  std::uint64_t memory_bytes = std::uint64_t(8) << 30;
  /// Run only the reference kernels (debugging, tests).
  bool reference_only = false;
  /// Behave like a worker that predates packed weights and quantize-on-load: widens bf16/f16
  /// to f32 on load and never quantizes (tests of the pool's least-capable planning).
  bool legacy = false;
  /// Ops and features this worker leaves out (behaving like an older volunteer; tests of
  /// routing by capability).
  std::vector<std::string> lacks;
  /// Answers every graph call this many milliseconds late, as a volunteer on a slow machine or
  /// a long link would (tests and demonstrations of ranking by measured time).
  int delay_ms = 0;
  /// What it computes on: a GPU backend chosen by the program (`mpakt worker` picks CUDA where
  /// a usable GPU exists), which falls back to the CPU reference kernels for any step its
  /// device path lacks; null = the CPU backend.
  std::shared_ptr<backend> device;
  /// Why it computes on the CPU when it was started with `--backend auto` (app/backend_choice.hpp);
  /// reported in its status. Empty otherwise.
  std::string backend_note;
  /// A testing aid (`mpakt worker --fault corrupt-results:P`): this fraction of its graph
  /// answers gets one output value changed, and this fraction of the tokens its decode loops
  /// draw is replaced (and fed on as if drawn) — a volunteer that lies, for the coordinator's
  /// spot-checks to catch. The draws are seeded by the worker id, so a run repeats. 0 = honest.
  double corrupt_results = 0;
  /// A testing aid (`mpakt worker --fault corrupt-weights`): one byte of every weight it
  /// receives is changed once the weight is complete — a volunteer whose memory or program
  /// alters what it was sent, for the coordinator's weight checks to catch.
  bool corrupt_weights = false;
  /// A testing aid (`mpakt worker --fault corrupt-weights-later`): a weight is received intact
  /// and changes (one byte) right after it answered its first digest challenge — a volunteer
  /// that passes the checks on arrival and alters its weights afterwards, for an operator's
  /// re-check to catch.
  bool corrupt_weights_later = false;
  /// A testing aid (`mpakt worker --fault corrupt-caches`): after each graph call in a session,
  /// one value of the session's first f32 tensor is changed while the answer stays right — a
  /// volunteer that keeps wrong caches, for the spot-checks' session comparison to catch.
  bool corrupt_caches = false;
  /// A testing aid (`mpakt worker --fault corrupt-generation-caches`): the same, after each
  /// worker-side generation only (its tokens stay right) — for the comparison of a checked
  /// generation's session.
  bool corrupt_generation_caches = false;
  /// A testing aid (`mpakt worker --fault corrupt-generation-tokens`): every token of a
  /// worker-side generation altered (and fed on), graph calls answered right.
  bool corrupt_generation_tokens = false;
  /// A testing aid (`mpakt worker --fault malformed-answers`): every graph answer is text that
  /// is not an outputs object (deeply nested and unfinished) — a hostile volunteer, for the
  /// coordinator's answer checks to catch.
  bool malformed_answers = false;
  /// A testing aid (`mpakt worker --fault forge-messages`): to each actor of another process
  /// that sends it a request, it sends the pool's `add` with its own handle, as a volunteer
  /// would that addresses the coordinator's actors by number to join the pool a second time,
  /// past its checked worker — for the cluster port's front to cut.
  bool forge_messages = false;
  /// A testing aid (`mpakt worker --fault unanswered-calls`): graph calls and compiles are taken
  /// and never answered, the pool's probe calls are — a volunteer that swallows work while it looks
  /// healthy, for the coordinator's answer deadline to catch.
  bool unanswered_calls = false;
  /// A testing aid (`mpakt worker --fault unanswered-dumps`): copies of sessions (`sdump`) are
  /// taken and never answered, all else is — a volunteer that will not show its sessions, for
  /// the coordinator's answer deadline to catch.
  bool unanswered_dumps = false;
  /// A testing aid (`mpakt worker --fault refused-dumps`): every copy of a session is refused
  /// as if the session were not there — a volunteer that hides its sessions' state, for the
  /// spot-checks' windows to catch.
  bool refused_dumps = false;
  /// A testing aid (`mpakt worker --fault refused-dumps-after-generations`): the first copy of
  /// a session asked for after a generation on it began is refused as if the session were not
  /// there, every other copy answered — a volunteer that hides the state its generations leave
  /// (the copy a checked generation's end asks for), for the checks to catch.
  bool refused_dumps_after_generations = false;
  /// A testing aid (`mpakt worker --fault malformed-dumps`): every copy of a session comes with
  /// its first tensor a byte short — a copy no worker writes and no verifier can load, for the
  /// spot-checks to catch (a window that could not start from it would go unchecked).
  bool malformed_dumps = false;
  /// A testing aid (`mpakt worker --fault silent-generations`): generations are accepted and
  /// never run — no token, no end — for the coordinator's step deadline to catch.
  bool silent_generations = false;
  /// A testing aid (`mpakt worker --fault bloated-status`): its status lists 20,000 features, a
  /// volunteer that would make every status and placement answer of the coordinator huge.
  bool bloated_status = false;
  /// A testing aid (`mpakt worker --fault cheat-unless-dumped`): a graph call or worker-side
  /// generation on a session is answered right only when the session was dumped since its last
  /// pass — a volunteer that takes a dump for the sign of a spot-check and lies otherwise (one
  /// value of the answer changed, every token altered and fed on); calls on no session are honest.
  bool cheat_unless_dumped = false;
  /// A testing aid (`mpakt worker --fault flood-tokens`): each token of a worker-side
  /// generation is sent 101 times, a volunteer flooding its listener.
  bool flood_tokens = false;
  /// A volunteer's data connection (actors/data_link.hpp): where the bytes of pieces sent on it
  /// wait for their `tpieceref`, and how to open it when the coordinator offers one (data port,
  /// ticket; called on the receiver's thread). Both null for an embedded worker, which refuses
  /// offers.
  std::shared_ptr<datalink::piece_inbox> pieces;
  std::function<status(std::uint16_t, const std::string&)> open_data_link;
  /// A worker that reads its own weights from the model host where the coordinator asks
  /// (actors/loader/host_fetch.hpp: `tprobe`, then `tfetch` in the place of pieces). Null: it
  /// refuses, and its weights come through the coordinator.
  std::shared_ptr<loader::host_fetcher> fetcher;
  /// Whether it reads the ranges of tensors it converts (quantizes, widens) too, or only of
  /// those it keeps as published (its `tprobe` answer; the coordinator relays the others).
  /// Every worker the program starts reads all: a volunteer's relayed bytes would cross the
  /// network twice, and an embedded worker converting whole ranges it read itself spends less
  /// CPU a byte than one converting pieces relayed in-process (q8 on load, two cores: 1.08
  /// against 1.30 s of CPU per GB; the coordinator's pieces are fresh buffers each).
  bool fetch_converted = true;
};

/// Spawns a worker (its front, compute side and receiver); returns the front.
worker_actor spawn_worker(caf::actor_system& sys, worker_config cfg);

}  // namespace mpakt
