#pragma once
/// The actor message protocol, in one place.
///
/// Every actor interface of the system is declared here as a CAF typed actor, with the
/// payload structs it exchanges. Payloads have inspect() and are announced to CAF in
/// `add_protocol_types`, under the same names on every node, so a worker in this process
/// and a worker on another host are the same to the coordinator.
/// Naming: <verb>_atom; payloads <verb>_<noun>_request / _reply. Errors travel as
/// caf::error in category "mpakt" (actors/errors.hpp). docs/protocol.md explains each
/// message.

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "actors/describe.hpp"
#include "actors/replies.hpp"
#include "actors/requests.hpp"

namespace mpakt {

// ---------------------------------------------------------------- atoms
// (CAF 0.17: at most 10 characters each)
using status_atom = caf::atom_constant<caf::atom("status")>;
using tbegin_atom = caf::atom_constant<caf::atom("tbegin")>;
using tpiece_atom = caf::atom_constant<caf::atom("tpiece")>;
using tend_atom = caf::atom_constant<caf::atom("tend")>;
using tabort_atom = caf::atom_constant<caf::atom("tabort")>;
using dropmodel_atom = caf::atom_constant<caf::atom("dropmodel")>;
using sopen_atom = caf::atom_constant<caf::atom("sopen")>;
using sclose_atom = caf::atom_constant<caf::atom("sclose")>;
using sinfo_atom = caf::atom_constant<caf::atom("sinfo")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using compile_atom = caf::atom_constant<caf::atom("compile")>;
using dropgraph_atom = caf::atom_constant<caf::atom("dropgraph")>;
using tput_atom = caf::atom_constant<caf::atom("tput")>;
using sdump_atom = caf::atom_constant<caf::atom("sdump")>;
using genstart_atom = caf::atom_constant<caf::atom("genstart")>;
using genstep_atom = caf::atom_constant<caf::atom("genstep")>;
using gencancel_atom = caf::atom_constant<caf::atom("gencancel")>;
using gentoken_atom = caf::atom_constant<caf::atom("gentoken")>;
using gendone_atom = caf::atom_constant<caf::atom("gendone")>;
using gencheck_atom = caf::atom_constant<caf::atom("gencheck")>;
using sload_atom = caf::atom_constant<caf::atom("sload")>;
using tdrop_atom = caf::atom_constant<caf::atom("tdrop")>;
using tdigest_atom = caf::atom_constant<caf::atom("tdigest")>;
using recheck_atom = caf::atom_constant<caf::atom("recheck")>;
using runcancel_atom = caf::atom_constant<caf::atom("runcancel")>;
using reserve_atom = caf::atom_constant<caf::atom("reserve")>;
using tpieceref_atom = caf::atom_constant<caf::atom("tpieceref")>;
using dlink_atom = caf::atom_constant<caf::atom("dlink")>;
using tfetch_atom = caf::atom_constant<caf::atom("tfetch")>;
using tprobe_atom = caf::atom_constant<caf::atom("tprobe")>;

// ---------------------------------------------------------------- worker payloads

/// What a worker is and has free. Resident bytes throughout (decisions.md "Units").
struct worker_status {
  std::string worker_id;
  std::string backend;              ///< "cpu" or "cuda"
  /// Why a worker started with `--backend auto` computes on the CPU (no usable GPU, and CUDA's
  /// words for why); empty otherwise.
  std::string backend_note;
  /// Ops its backend always leaves to the CPU reference kernels (backend::host_ops): a GPU
  /// worker's declared fallbacks; empty for a CPU worker.
  std::vector<std::string> host_ops;
  std::uint64_t total_bytes = 0;    ///< memory the worker offers the grid
  std::uint64_t free_bytes = 0;     ///< total minus what it holds
  std::vector<std::string> features;
  bool packed_weights = true;       ///< keeps bf16/f16 packed (widenFactor 1)
  bool can_quantize = true;         ///< converts to q8/q4 on load
  std::uint64_t max_tensor_bytes = 0;
  std::uint32_t generations = 0;    ///< worker-side decode loops running now
  /// Ops and features this worker does not offer (an older volunteer): it is never given a
  /// graph using one.
  std::vector<std::string> lacks;
  /// Filled in by the pool, not the worker: the measured end-to-end time of a probe call
  /// (a small graph sent as any call is, answered and timed), milliseconds; 0 = not yet.
  double measured_ms = 0;
  /// What its CPU kernels run on: the instruction-set level in use and the CPU features
  /// behind it (backends/cpu/isa.hpp describe()), and its kernel threads.
  std::string kernels;
  std::string cpu;  ///< the CPU's model name
  std::uint32_t threads = 1;
  /// What the worker is computing now (a graph run or a compile); `busy_since_ms` 0 = idle.
  /// Answered by the worker's front while its compute side is busy, so a busy worker is
  /// listed as busy, never as absent.
  std::uint64_t busy_since_ms = 0;  ///< when it began, milliseconds since the Unix epoch
  std::uint64_t busy_ms = 0;        ///< how long it has been going
  std::string busy_graph;           ///< the compiled graph's id, or "inline"
  std::string busy_session;         ///< its primary session, if any
  std::uint32_t busy_steps_done = 0, busy_steps = 0;  ///< progress (0 of 0 while compiling)
  std::uint32_t queued = 0;         ///< graph calls waiting behind it
  /// Spot-checks (a volunteer's, filled in by its checked worker: actors/coordinator/checked_worker.hpp).
  bool checked = false;                  ///< its passes are spot-checked
  std::uint32_t checks_passed = 0;       ///< passes re-run on the verifier that agreed
  std::uint32_t checks_unchecked = 0;    ///< chosen but the verifier could not run them
  std::uint32_t checks_inconclusive = 0; ///< generations whose tokens parted on different kernel paths
  std::uint32_t checks_first_left = 0;   ///< of its first passes, all checked, those still to come
  bool checks_exact = false;             ///< same kernel path as the verifier: compared bit for bit
  std::uint32_t weights_checked = 0;     ///< weights whose digest challenge it answered right
  std::uint32_t weights_unchecked = 0;   ///< converted weights the verifier has no copy of
  /// A volunteer's data connection (filled in by its relay: actors/coordinator/data_relay.hpp):
  /// empty for a worker without one, else "waiting", "up" or "closed: why"; and the bytes of
  /// weights it carried.
  std::string data_link;
  std::uint64_t data_link_bytes = 0;
};

/// The run id of the pool's probe calls (timed, never spot-checked).
inline constexpr const char* probe_run_id = "pool-probe";
/// The run id of a spot-check's repeat of a generation's step (checked_worker.cpp): always
/// checked, never counted as a pass of its own.
inline constexpr const char* rerun_run_id = "spot-check-rerun";

/// Starts receiving one tensor of a model. `file_dtype` is the published safetensors dtype
/// ("BF16", "F64", ...); `resident` the dtype the worker keeps ("bf16", "q8", ...).
struct tensor_begin_request {
  std::string model_id;
  std::string name;
  std::string file_dtype;
  std::vector<std::int64_t> shape;
  std::string resident;
  std::uint64_t published_bytes = 0;
};

/// One piece of a tensor's published bytes, in order. At most 16 MB (LOAD-19).
struct tensor_piece {
  std::string model_id;
  std::string name;
  std::uint64_t offset = 0;
  std::string bytes;
};

/// A piece whose bytes travel on the volunteer's data connection (actors/data_link.hpp) as
/// number `seq`: the receiver takes them from there and goes on as with a tensor_piece.
struct tensor_piece_ref {
  std::string model_id;
  std::string name;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  std::uint64_t seq = 0;
};

/// A range of a checkpoint file that the worker reads from the model host itself (a volunteer
/// that fetches its own weights, docs/protocol.md "Volunteers fetching from the model host"),
/// in the place of the pieces the coordinator would otherwise send: bytes [first, first +
/// length) of `location`, which are the `parts` back to back — each the bytes of one tensor
/// from its `offset` on. It carries the tbegin of the tensors that start in it (done first)
/// and the tend of those that end with it (done after its bytes are added): one message per
/// range instead of one per tensor and step.
struct tensor_fetch_part {
  std::string name;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};
struct tensor_fetch {
  std::string model_id;
  std::string location;  ///< http(s) URL
  std::uint64_t first = 0;
  std::uint64_t length = 0;
  std::vector<tensor_fetch_part> parts;
  std::vector<tensor_begin_request> begins;  ///< of this model, in order
  std::vector<std::string> ends;             ///< names, in order
};
/// The answer to a tensor_fetch: the range's bytes, and each ended tensor's resident bytes
/// (as tend answers), in the order of `ends`.
struct tensor_fetch_reply {
  std::uint64_t bytes = 0;
  std::vector<std::uint64_t> resident;
};

/// Runs a graph on the worker: inline (`graph_json`) or a compiled template already
/// compiled here under `graph_id` with `bind_json` holding the call's bindings.
struct run_request {
  std::string graph_json;                ///< the graph object, for inline runs
  std::string graph_id;                  ///< compiled template id, for compiled runs
  std::string bind_json;                 ///< {"name": number | [numbers]} for compiled runs
  std::string session;                   ///< the primary session; empty = none
  std::vector<std::string> sessions;     ///< a multi-session graph's list (`of` indexes it)
  std::vector<std::string> outputs;      ///< compiled runs: what to return
  bool base64 = false;                   ///< outputs as dataB64
  /// Per-call settings of sample-step parameters that the template does not bind
  /// (server-side decoding's temperature, topK, topP, seed and step counter).
  std::vector<std::pair<std::string, double>> overrides;
  /// Names the call for `runcancel` (the coordinator's call id; a spread model's stages share
  /// it). Empty = cannot be cancelled by name.
  std::string run_id;
  /// The graph limit (--graph-timeout-ms), counted from when the worker receives the call:
  /// past it the worker stops the run between steps, applies nothing and answers
  /// errc::timeout saying whether it ran at all. 0 = no limit.
  std::uint64_t timeout_ms = 0;
  /// An inline graph the server built itself: its steps may name server-only parameters
  /// (build_options::server_params). Never set for a client's graph.
  bool server_params = false;
  /// The call promises no row the bits it gets alone (runtime/row_bits.hpp): a plain graph
  /// call listing at most one session (a prompt's prefill, the chat's). Its products of 16 to
  /// 32 rows may take the many-row kernels. False for every pass of a generation (plain,
  /// verify or batched) and for graphs listing several sessions (SES-20); kept in a session's
  /// journal, so a replay computes the same bits.
  bool free_rows = false;
};

struct run_reply {
  std::string outputs_json;              ///< {"name": {"shape": [...], "data"|"dataB64": ...}}
  std::uint32_t steps = 0;
};

/// Compiles a template on this worker: validated against the weights it holds, kept
/// under `graph_id` for later run_requests.
struct compile_request {
  std::string graph_id;
  std::string graph_json;
  /// Values whose shapes the reply should carry (a spread model's stage: what it sends on).
  std::vector<std::string> describe;
};

struct compile_reply {
  std::uint32_t steps = 0;
  std::vector<std::string> bindings;
  std::vector<std::string> features;
  std::vector<std::vector<std::int64_t>> shapes;  ///< of `describe`, in its order
};

struct tensor_info {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype;
  std::uint64_t bytes = 0;
};

struct session_info {
  std::vector<tensor_info> tensors;
  std::uint64_t bytes = 0;
};

/// One session tensor with its bytes, for checkpoints.
struct tensor_blob {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype;
  std::string bytes;
};

/// A whole session's tensors (a checkpoint).
struct session_dump {
  std::vector<tensor_blob> tensors;
  std::uint64_t bytes = 0;  ///< as its worker wrote it (a volunteer's may understate: see carried())
  /// The bytes its tensors hold.
  std::uint64_t carried() const {
    std::uint64_t n = 0;
    for (const auto& t : tensors) n += t.bytes.size();
    return n;
  }
};

/// What is wrong with a session's copy that no worker writes — a tensor of an unknown dtype,
/// an invalid shape, bytes that are not its shape's size, a name twice — or empty when it is
/// well formed. Read before a copy is restored (nothing is allocated for a shape its bytes
/// do not fill), and by the spot-checks, for which a volunteer's malformed copy is a lie.
std::string malformed_copy(const session_dump& d);

/// A v2 tensor uploaded by a client (f32 values).
struct tensor_upload {
  std::string tensor_id;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_status& x) {
  return f(caf::meta::type_name("worker_status"), x.worker_id, x.backend, x.total_bytes, x.free_bytes, x.features,
           x.packed_weights, x.can_quantize, x.max_tensor_bytes, x.generations, x.lacks, x.measured_ms, x.kernels,
           x.cpu, x.threads, x.busy_since_ms, x.busy_ms, x.busy_graph, x.busy_session, x.busy_steps_done, x.busy_steps,
           x.queued, x.checked, x.checks_passed, x.checks_unchecked, x.checks_inconclusive, x.checks_first_left,
           x.checks_exact, x.weights_checked, x.weights_unchecked, x.backend_note, x.host_ops, x.data_link,
           x.data_link_bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_begin_request& x) {
  return f(caf::meta::type_name("tensor_begin_request"), x.model_id, x.name, x.file_dtype, x.shape, x.resident,
           x.published_bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_piece& x) {
  return f(caf::meta::type_name("tensor_piece"), x.model_id, x.name, x.offset, x.bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_fetch_part& x) {
  return f(caf::meta::type_name("tensor_fetch_part"), x.name, x.offset, x.length);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_fetch& x) {
  return f(caf::meta::type_name("tensor_fetch"), x.model_id, x.location, x.first, x.length, x.parts, x.begins, x.ends);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_fetch_reply& x) {
  return f(caf::meta::type_name("tensor_fetch_reply"), x.bytes, x.resident);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_piece_ref& x) {
  return f(caf::meta::type_name("tensor_piece_ref"), x.model_id, x.name, x.offset, x.length, x.seq);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_request& x) {
  return f(caf::meta::type_name("run_request"), x.graph_json, x.graph_id, x.bind_json, x.session, x.sessions, x.outputs,
           x.base64, x.overrides, x.run_id, x.timeout_ms, x.server_params, x.free_rows);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_reply& x) {
  return f(caf::meta::type_name("run_reply"), x.outputs_json, x.steps);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, compile_request& x) {
  return f(caf::meta::type_name("compile_request"), x.graph_id, x.graph_json, x.describe);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, compile_reply& x) {
  return f(caf::meta::type_name("compile_reply"), x.steps, x.bindings, x.features, x.shapes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_info& x) {
  return f(caf::meta::type_name("tensor_info"), x.name, x.shape, x.dtype, x.bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_info& x) {
  return f(caf::meta::type_name("session_info"), x.tensors, x.bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_blob& x) {
  return f(caf::meta::type_name("tensor_blob"), x.name, x.shape, x.dtype, x.bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_dump& x) {
  return f(caf::meta::type_name("session_dump"), x.tensors, x.bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_upload& x) {
  return f(caf::meta::type_name("tensor_upload"), x.tensor_id, x.shape, x.values);
}

// ---------------------------------------------------------------- server-side decoding

/// One generated token, as the worker (or the ordinary loop) reports it.
struct gen_token {
  std::int64_t token = 0;
  std::uint32_t index = 0;
  std::int64_t pos = 0;  ///< the position fed (decisions.md)
  double ms = 0;         ///< time for this token
  /// With gen_request::logprobs ≥ 0: the token's log-probability under the model (log-softmax
  /// of the logits its sample step read, before penalties and temperature; NaN when the
  /// logits held a NaN), and the `logprobs` most likely ids with theirs, most likely first.
  float logprob = 0;
  std::vector<std::int64_t> top_ids;
  std::vector<float> top_logprobs;
  /// A speculative generation's drafts proposed and accepted so far in this run (counted up
  /// to and including the pass that produced this token; 0 when not speculative), so its
  /// acceptance can be watched live (docs/protocol.md, "Describing the grid").
  std::uint64_t drafted = 0, accepted = 0;
};

/// How a generation ended: "stop token", "max tokens", "cancelled" or "error".
struct gen_done {
  std::string stopped;
  std::string error;
  std::int64_t next_pos = 0;
  bool speculative = false;  ///< counters below are meaningful
  std::uint64_t verifies = 0, drafted = 0, accepted = 0, produced = 0, plain = 0;
  /// Tokens produced by passes shared with other generations (multi-session batching), and
  /// how many of those passes were verify passes.
  std::uint64_t batched = 0;
  std::uint64_t batched_verifies = 0;
  /// Passes the ordinary loop ran (each a round trip through the coordinator); 0 from a
  /// worker-side loop.
  std::uint64_t passes = 0;
};

/// Receives a generation's tokens and its end (the HTTP side's generation actor).
using gen_listener = caf::typed_actor<caf::reacts_to<gentoken_atom, std::string, gen_token>,
                                      caf::reacts_to<gendone_atom, std::string, gen_done>>;

/// Starts a decode loop on the worker (the worker-side loop): the compiled graph `graph_id`
/// (already compiled there) in `session`, fed `first_id` at `start_pos`.
struct gen_request {
  std::string gen_id;
  std::string graph_id;
  std::string session;
  std::vector<std::string> bindings;  ///< the template's bindings
  std::int64_t first_id = 0;
  std::int64_t start_pos = 0;
  std::uint32_t max_new = 0;
  std::vector<std::int64_t> stop_ids;
  std::vector<std::pair<std::string, double>> sampling;  ///< temperature, topK, topP, seed
  gen_listener listener;
  // speculative decoding (empty verify_graphs = off)
  std::vector<std::string> verify_graphs;
  std::vector<std::vector<std::string>> verify_bindings;
  std::vector<std::int64_t> context;  ///< token ids so far, ending with first_id
  bool always = false;
  /// -1: no log-probabilities; n ≥ 0: each gen_token carries its token's log-probability and
  /// the n most likely alternatives (at most max_top_logprobs).
  std::int32_t logprobs = -1;
};

/// Most alternatives a generation's tokens may carry (OpenAI's top_logprobs bound).
constexpr std::int32_t max_top_logprobs = 20;

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gen_token& x) {
  return f(caf::meta::type_name("gen_token"), x.token, x.index, x.pos, x.ms, x.logprob, x.top_ids, x.top_logprobs, x.drafted,
           x.accepted);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gen_done& x) {
  return f(caf::meta::type_name("gen_done"), x.stopped, x.error, x.next_pos, x.speculative, x.verifies, x.drafted, x.accepted,
           x.produced, x.plain, x.batched, x.passes, x.batched_verifies);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gen_request& x) {
  return f(caf::meta::type_name("gen_request"), x.gen_id, x.graph_id, x.session, x.bindings, x.first_id, x.start_pos,
           x.max_new, x.stop_ids, x.sampling, x.listener, x.verify_graphs, x.verify_bindings, x.context, x.always,
           x.logprobs);
}

// ---------------------------------------------------------------- worker interface

/// A worker: holds tensors (weights, sessions, v2 tensors) and runs graphs on its backend.
/// The handle is the worker's front (actors/worker/worker_actor.hpp), which never computes:
/// it answers status, reserve and runcancel at once, receives weights on a thread of their
/// own, and passes everything else, in the order received, to the compute side (its own
/// thread). Replies with caf::error (category "mpakt") on failure.
using worker_actor = caf::typed_actor<
    caf::replies_to<status_atom>::with<worker_status>,
    /// model, resident bytes: holds that much free for a load that passed its capacity check
    /// (0 releases it); its tensors then draw on it. errc::unavailable when it does not fit.
    caf::replies_to<reserve_atom, std::string, std::uint64_t>::with<bool>,
    /// run id: stops that graph call at its next step (or before it starts); it applies nothing
    caf::reacts_to<runcancel_atom, std::string>,
    // loading: begin, pieces in order, end (replies the resident bytes); abort drops it
    caf::replies_to<tbegin_atom, tensor_begin_request>::with<bool>,
    caf::replies_to<tpiece_atom, tensor_piece>::with<std::uint64_t>,
    caf::replies_to<tend_atom, std::string, std::string>::with<std::uint64_t>,  // model, tensor
    caf::replies_to<tabort_atom, std::string>::with<bool>,                      // model
    caf::replies_to<dropmodel_atom, std::string>::with<bool>,                   // model
    /// a volunteer's data connection (actors/data_link.hpp): data port, ticket -> connected;
    /// a piece whose bytes came on it (in tpiece's place, in the same order)
    caf::replies_to<dlink_atom, std::uint16_t, std::string>::with<bool>,
    caf::replies_to<tpieceref_atom, tensor_piece_ref>::with<std::uint64_t>,
    /// a worker that fetches its own weights: location, header bytes, SHA-256 (hex) of them ->
    /// it reads the same file there, and whether it also reads the ranges of tensors it
    /// converts (errors say why not: not allowed to, cannot reach it, other bytes); then a
    /// range in the place of its pieces, beginning and ending its tensors (its reply: the bytes
    /// added and each ended tensor's resident bytes)
    caf::replies_to<tprobe_atom, std::string, std::uint64_t, std::string>::with<bool>,
    caf::replies_to<tfetch_atom, tensor_fetch>::with<tensor_fetch_reply>,
    // sessions
    caf::replies_to<sopen_atom, std::string>::with<bool>,
    caf::replies_to<sclose_atom, std::string>::with<bool>,
    caf::replies_to<sinfo_atom, std::string>::with<session_info>,
    caf::replies_to<sdump_atom, std::string>::with<session_dump>,          // checkpoint: copy out
    caf::replies_to<sload_atom, std::string, session_dump>::with<bool>,    // restore: replace
    // graphs
    caf::replies_to<run_atom, run_request>::with<run_reply>,
    caf::replies_to<compile_atom, compile_request>::with<compile_reply>,
    caf::replies_to<dropgraph_atom, std::string>::with<bool>,
    // server-side decoding: check a compiled graph for generation (with sampling?), start a
    // loop. The worker advances every running loop by one pass per genstep message it sends
    // itself (so cancels and other work interleave); plain steps of one template share a
    // multi-session pass (runtime/batching.hpp).
    /// graph id, sampling?, verify? -> k (drafts per pass; 0 for a plain decode graph)
    caf::replies_to<gencheck_atom, std::string, bool, bool>::with<std::int32_t>,
    caf::replies_to<genstart_atom, gen_request>::with<bool>,
    caf::reacts_to<genstep_atom>,
    caf::reacts_to<gencancel_atom, std::string>,
    // v2 tensors
    caf::replies_to<tput_atom, tensor_upload>::with<bool>,
    caf::replies_to<tdrop_atom, std::string>::with<bool>,
    /// model, tensor, nonce -> GMAC of the weight's resident bytes under a key drawn from the
    /// nonce, as 32 hex digits (actors/digest.hpp: a challenge only a holder of those bytes can
    /// answer)
    caf::replies_to<tdigest_atom, std::string, std::string, std::string>::with<std::string>,
    /// A volunteer's checked worker: re-checks the weights it holds against its verifier and
    /// answers the tally (rendered at the HTTP edge); any other worker refuses (errc::invalid).
    caf::replies_to<recheck_atom>::with<recheck_reply>,
    /// what it is, whom it talks to, its counters (actors/describe.hpp)
    caf::replies_to<describe_atom>::with<actor_snapshot>>;

// ---------------------------------------------------------------- coordinator side
//
// The HTTP routes (http/api) check the key with the accounts actor, then send one of the
// messages below to the coordinator with the caller's identity. Replies are typed
// (actors/replies.hpp: one struct per endpoint's answer, or run_reply), written as JSON
// response bodies by the edge (http/api/render.hpp); failures are caf::errors carrying errc
// and the message.

using add_atom = caf::atom_constant<caf::atom("add")>;
using pick_atom = caf::atom_constant<caf::atom("pick")>;
using members_atom = caf::atom_constant<caf::atom("members")>;
using probe_atom = caf::atom_constant<caf::atom("probe")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using workers_atom = caf::atom_constant<caf::atom("workers")>;
using versions_atom = caf::atom_constant<caf::atom("versions")>;
using generate_atom = caf::atom_constant<caf::atom("generate")>;
using files_atom = caf::atom_constant<caf::atom("files")>;
using journal_atom = caf::atom_constant<caf::atom("journal")>;
using replan_atom = caf::atom_constant<caf::atom("replan")>;
using reportdue_atom = caf::atom_constant<caf::atom("reportdue")>;
using inspect_atom = caf::atom_constant<caf::atom("inspect")>;
using load_atom = caf::atom_constant<caf::atom("load")>;
using list_atom = caf::atom_constant<caf::atom("list")>;
using delete_atom = caf::atom_constant<caf::atom("delete")>;
using create_atom = caf::atom_constant<caf::atom("create")>;
using get_atom = caf::atom_constant<caf::atom("get")>;
using graph_atom = caf::atom_constant<caf::atom("graph")>;
using v2put_atom = caf::atom_constant<caf::atom("v2put")>;
using info_atom = caf::atom_constant<caf::atom("info")>;
using models_atom = caf::atom_constant<caf::atom("models")>;
using sessions_atom = caf::atom_constant<caf::atom("sessions")>;
using graphs_atom = caf::atom_constant<caf::atom("graphs")>;
using tensors_atom = caf::atom_constant<caf::atom("tensors")>;
using loaded_atom = caf::atom_constant<caf::atom("loaded")>;
using checkpt_atom = caf::atom_constant<caf::atom("checkpt")>;
using restore_atom = caf::atom_constant<caf::atom("restore")>;
using move_atom = caf::atom_constant<caf::atom("move")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using metrics_atom = caf::atom_constant<caf::atom("metrics")>;
using resolve_atom = caf::atom_constant<caf::atom("resolve")>;

/// Who is asking: the account owns what it creates; limits count per key.
struct caller {
  std::string account;
  std::string key_id;
  /// The HTTP request this call serves (its x-request-id), for log lines; empty when the
  /// call does not come from one.
  std::string request_id;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, caller& x) {
  return f(caf::meta::type_name("caller"), x.account, x.key_id, x.request_id);
}

/// The pool: the connected workers, their measured state, and placement.
using pool_actor = caf::typed_actor<
    /// what it is, whom it talks to, its counters (actors/describe.hpp)
    caf::replies_to<describe_atom>::with<actor_snapshot>,
    /// Sends `joined` and `lost` worker events to the listener from now on.
    caf::reacts_to<subscribe_atom, grid_listener>,
    caf::reacts_to<add_atom, worker_actor>,
    /// A volunteer admitted with a memory cap (bytes; its status is clamped to it).
    caf::reacts_to<add_atom, worker_actor, std::uint64_t>,
    /// Times a probe call on every worker again (sent to itself every few seconds).
    caf::reacts_to<probe_atom>,
    /// Fresh status of every connected worker.
    caf::replies_to<workers_atom>::with<std::vector<worker_status>>,
    /// Every connected worker with its fresh status, the most free memory first (spreading
    /// a model over several).
    caf::replies_to<members_atom>::with<std::vector<worker_actor>, std::vector<worker_status>>,
    /// A worker with at least `bytes` free (the most free first); errc::unavailable if none.
    caf::replies_to<pick_atom, std::uint64_t>::with<worker_actor, worker_status>,
    /// The same among the workers offering every op and feature named (a graph's needs).
    caf::replies_to<pick_atom, std::uint64_t, std::vector<std::string>>::with<worker_actor, worker_status>>;

 // session id

/// The one actor the cluster port publishes (actors/coordinator/gate_actor.hpp): a volunteer
/// presents its join token and its worker; the reply is the name the token was issued to.
/// Refusals are caf::errors (unauthorized, limit) naming why. Nothing else of the grid is
/// reachable by handle from the port.
using gate_actor = caf::typed_actor<
    caf::replies_to<join_atom, std::string, worker_actor>::with<std::string>,
    /// Re-checks the tokens of the connected volunteers (sent to itself every 2 s; at most one
    /// check a second whoever sends it).
    caf::reacts_to<probe_atom>>;

/// A compiled graph: the validated template, compiled lazily on each worker that runs it.
using graph_actor = caf::typed_actor<
    /// what it is, whom it talks to, its counters (actors/describe.hpp)
    caf::replies_to<describe_atom>::with<actor_snapshot>,
    caf::replies_to<run_atom, run_request, worker_actor>::with<run_reply>,
    caf::replies_to<compile_atom, worker_actor>::with<compile_reply>,
    caf::replies_to<delete_atom>::with<bool>>;

/// A session: a tensor namespace pinned to one worker. Every graph run in it — inline, or
/// compiled (through the graph's actor, on this session's worker) — counts as one step.
using session_actor = caf::typed_actor<
    /// what it is, whom it talks to, its counters (actors/describe.hpp)
    caf::replies_to<describe_atom>::with<actor_snapshot>,
    caf::replies_to<run_atom, run_request>::with<run_reply>,
    caf::replies_to<run_atom, run_request, graph_actor>::with<run_reply>,
    caf::replies_to<info_atom>::with<session_info, std::uint64_t>,  // tensors, steps
    /// Re-pins the session on another worker (after a restore) with its step count.
    caf::replies_to<move_atom, worker_actor, std::uint64_t>::with<bool>,
    caf::replies_to<delete_atom>::with<bool>>;

/// Everything the HTTP side needs to run one POST /api/v3/generate: where, what, and the
/// request's settings, checked by the coordinator (ownership, values, the graph's shape).
struct gen_plan {
  worker_actor worker;
  session_actor session;
  graph_actor graph;
  std::string graph_id;
  std::string session_id;
  std::vector<std::string> bindings;
  std::int64_t first_id = 0;
  std::int64_t start_pos = 0;
  std::uint32_t max_new = 256;
  std::vector<std::int64_t> stop_ids;
  std::vector<std::pair<std::string, double>> sampling;
  std::int64_t seed = 0;
  bool stream = true;
  bool worker_loop = true;
  std::vector<std::string> verify_graphs;
  std::vector<graph_actor> verify_actors;
  std::vector<std::vector<std::string>> verify_bindings;
  std::vector<std::int32_t> verify_ks;
  std::vector<std::int64_t> context;
  bool always = false;
};

/// What a generation fed to its session (one token per position from start_pos), reported
/// to the coordinator when it ends or loses its worker, so a checkpointed session's journal
/// can replay it after an automatic restore.
struct gen_journal {
  std::string session_id;
  std::string graph_id;
  std::vector<std::string> bindings;
  std::vector<std::pair<std::string, double>> sampling;
  std::int64_t start_pos = 0;
  std::vector<std::int64_t> fed;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gen_journal& x) {
  return f(caf::meta::type_name("gen_journal"), x.session_id, x.graph_id, x.bindings, x.sampling, x.start_pos, x.fed);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gen_plan& x) {
  return f(caf::meta::type_name("gen_plan"), x.worker, x.session, x.graph, x.graph_id, x.session_id, x.bindings, x.first_id,
           x.start_pos, x.max_new, x.stop_ids, x.sampling, x.seed, x.stream, x.worker_loop, x.verify_graphs, x.verify_actors,
           x.verify_bindings, x.verify_ks, x.context, x.always);
}

/// A loaded model: where its tensors live. Deleting releases them on every worker.
using model_actor = caf::typed_actor<caf::replies_to<delete_atom>::with<bool>,
                                      caf::replies_to<describe_atom>::with<actor_snapshot>>;

/// The coordinator: the directory of models, sessions, compiled graphs and v2 tensors,
/// ownership and per-key limits; it delegates to the actor of each entity.
using coordinator_actor = caf::typed_actor<
    /// what it is, whom it talks to, its counters (actors/describe.hpp)
    caf::replies_to<describe_atom>::with<actor_snapshot>,
    caf::replies_to<versions_atom>::with<versions_reply>,
    caf::replies_to<status_atom, caller>::with<status_reply>,
    /// POST /api/v3/admin/workers/:workerId/check (operators): a volunteer's weights re-checked
    caf::replies_to<recheck_atom, caller, std::string>::with<recheck_reply>,
    caf::replies_to<inspect_atom, caller, std::string, std::string>::with<inspect_model_reply>,  // source, token
    caf::replies_to<load_atom, caller, load_call>::with<load_model_reply>,
    caf::replies_to<list_atom, models_atom, caller>::with<list_models_reply>,
    caf::replies_to<delete_atom, models_atom, caller, std::string>::with<deleted_reply>,
    caf::replies_to<create_atom, sessions_atom, caller, session_call>::with<open_session_reply>,
    caf::replies_to<get_atom, sessions_atom, caller, std::string>::with<session_state_reply>,
    caf::replies_to<delete_atom, sessions_atom, caller, std::string>::with<deleted_reply>,
    /// a graph call, decoded at the edge (actors/requests.hpp); errc::retry when its worker
    /// left the grid mid-call (send it again: it then waits for the recovery)
    caf::replies_to<graph_atom, caller, graph_call>::with<run_reply>,
    /// tensorIds -> the caller's loaded weights they name, as (tensorId, model, weight) triples
    caf::replies_to<resolve_atom, caller, std::vector<std::string>>::with<std::vector<std::string>>,
    caf::replies_to<create_atom, graphs_atom, caller, compile_call>::with<compile_graph_reply>,
    caf::replies_to<list_atom, graphs_atom, caller>::with<list_graphs_reply>,
    caf::replies_to<delete_atom, graphs_atom, caller, std::string>::with<deleted_reply>,
    caf::replies_to<create_atom, tensors_atom, caller, tensor_call>::with<upload_tensor_reply>,   // v2 upload
    caf::replies_to<delete_atom, tensors_atom, caller, std::string>::with<deleted_reply>,
    caf::replies_to<generate_atom, caller, generate_call>::with<gen_plan>,
    /// a generation's fed tokens (journal of a checkpointed session)
    caf::reacts_to<journal_atom, caller, gen_journal>,
    /// a generation that lost its worker continues: the plan again, once the session is
    /// restored (waits for the recovery), on its new worker
    caf::replies_to<replan_atom, caller, gen_plan>::with<gen_plan>,
    /// (to itself) a restore that waits for generation reports stops waiting: session id
    caf::reacts_to<reportdue_atom, std::string>,
    /// model id -> its config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja
    /// (chat; read once)
    caf::replies_to<files_atom, caller, std::string>::with<std::string, std::string, std::string, std::string>,
    caf::replies_to<checkpt_atom, caller, std::string>::with<checkpoint_reply>,   // session id
    caf::replies_to<restore_atom, caller, std::string>::with<checkpoint_reply>,
    /// the HTTP request actor that sent a graph call: its client went away, so the call is
    /// stopped on its worker (it applies nothing)
    caf::reacts_to<cancel_atom, caf::actor_addr>,
    /// GET /metrics: sessions, compiled graphs and models held, and every worker's status
    /// (from the pool, whose workers' fronts answer at once)
    caf::replies_to<metrics_atom>::with<std::uint64_t, std::uint64_t, std::uint64_t, std::vector<worker_status>>,
    /// GET /api/v3/admin/actors (operators): every long-lived actor's snapshot, each asked
    /// with a short timeout (one that does not answer is listed with answered = false)
    caf::replies_to<actors_atom>::with<std::vector<actor_snapshot>>,
    /// something happened (from the pool: a worker joined or was lost; from a generation:
    /// it started or ended, with its handle, so it is described while it runs); numbered,
    /// kept in a ring and passed on to the subscribers
    caf::reacts_to<gridevent_atom, grid_event, describable>,
    /// the console's stream: grid events from now on, until the listener is gone
    caf::reacts_to<subscribe_atom, grid_listener>>;

using signup_atom = caf::atom_constant<caf::atom("signup")>;
using login_atom = caf::atom_constant<caf::atom("login")>;
using mkkey_atom = caf::atom_constant<caf::atom("mkkey")>;
using keys_atom = caf::atom_constant<caf::atom("keys")>;
using rmkey_atom = caf::atom_constant<caf::atom("rmkey")>;
using checkkey_atom = caf::atom_constant<caf::atom("checkkey")>;
using approve_atom = caf::atom_constant<caf::atom("approve")>;

/// Accounts and keys (SQLite under --data-dir). Replies are typed (actors/replies.hpp),
/// rendered at the HTTP edge; check replies the key's owner and whether the account is an
/// operator.
using accounts_actor = caf::typed_actor<
    /// what it is, whom it talks to, its counters (actors/describe.hpp)
    caf::replies_to<describe_atom>::with<actor_snapshot>,
    caf::replies_to<signup_atom, std::string, std::string>::with<account_reply>,  // username, password
    caf::replies_to<login_atom, std::string, std::string>::with<login_reply>,   // username, password
    caf::replies_to<mkkey_atom, std::string, std::string>::with<key_reply>,   // token, label
    caf::replies_to<keys_atom, std::string>::with<keys_reply>,                 // token
    caf::replies_to<rmkey_atom, std::string, std::string>::with<deleted_reply>,   // token, key id
    caf::replies_to<checkkey_atom, std::string>::with<caller, bool>,            // key -> caller, admin
    caf::replies_to<approve_atom, std::string>::with<account_reply>>;             // username

/// Announces every payload type to CAF (call on every node's actor_system_config).
void add_protocol_types(caf::actor_system_config& cfg);

}  // namespace mpakt
