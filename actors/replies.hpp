#pragma once
/// Typed replies the coordinator and the accounts actor answer the HTTP edge with: what an
/// endpoint has to say, as values. The edge writes each as its JSON response body
/// (http/api/render.hpp), so the actors never build API text and a client of the coordinator
/// inside the server (chat) reads fields, not JSON. Each struct is one endpoint's answer (or
/// a few endpoints' that answer alike); field order follows the body's. Plain data: copied
/// freely, safe to read from any thread.

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mpakt {

// ---------------------------------------------------------------- the grid

/// What the grid's workers allow a caller (GET /api/versions: `limits`).
struct grid_limits {
  bool packed_weights = true;    ///< every worker keeps bf16/f16 packed (widenFactor 1)
  bool quantize_on_load = false;  ///< there are workers and every one converts on load
  std::uint64_t max_tensor_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::uint64_t workers = 0;
  std::string default_quantize;
  std::string default_kv_dtype = "f32";
  std::int32_t models_per_key = 0, sessions_per_key = 0, graphs_per_key = 0;
  std::int64_t graph_timeout_ms = 0;
  std::uint64_t v2_quota_bytes = 0;
  std::uint64_t graph_budget_bytes = 0;
};

/// GET /api/versions: the grid's limits (the API versions and ops come from the op schema,
/// which the edge reads itself).
struct versions_reply {
  grid_limits limits;
};

/// One worker as GET /api/v3/status shows it to a caller: what the worker reported, with what
/// it is busy with narrowed to what the caller may see, and the caller's models placed there.
struct worker_view {
  std::string worker_id;
  std::string backend;
  std::string backend_note;  ///< why an `--backend auto` worker is on the CPU; empty otherwise
  std::vector<std::string> host_ops;  ///< ops its backend leaves to the CPU (a GPU worker's fallbacks)
  std::uint64_t free_bytes = 0, total_bytes = 0, max_tensor_bytes = 0;
  std::vector<std::string> features;
  std::uint32_t generations = 0;
  bool packed_weights = true;
  bool quantize_on_load = true;
  double measured_ms = 0;  ///< the pool's probe time; 0 = not measured yet
  std::string kernels, cpu;
  std::uint32_t threads = 1;
  std::uint64_t busy_since_ms = 0;  ///< 0 = idle
  std::uint64_t busy_ms = 0;
  /// The compiled graph it runs: the caller's graph id, "inline", or "another account's graph"
  /// (ids are shown only to their owner).
  std::string busy_graph;
  bool busy_compiling = false;
  std::string busy_session;  ///< the caller's session it runs in; empty when none or another's
  std::uint32_t busy_steps_done = 0, busy_steps = 0;
  std::uint32_t queued = 0;
  bool checked = false;  ///< a volunteer's spot-checks follow
  std::uint32_t checks_passed = 0, checks_unchecked = 0, checks_inconclusive = 0, checks_first_left = 0;
  bool checks_exact = false;
  std::uint32_t weights_checked = 0, weights_unchecked = 0;
  std::string data_link;  ///< a volunteer's data connection: "waiting", "up", "closed: why"; empty: none
  std::uint64_t data_link_bytes = 0;
  std::vector<std::string> models;  ///< the caller's models placed on it (or on a part of it)
};

/// A volunteer ended by spot-checks since the coordinator started.
struct quarantine_view {
  std::string worker_id;
  std::string volunteer;
  std::string reason;
  std::uint64_t at_unix_ms = 0;
};

/// GET /api/v3/status: the pool as the caller sees it (the totals are the workers' sums).
struct status_reply {
  std::vector<worker_view> pool;
  std::vector<quarantine_view> quarantined;
};

/// POST /api/v3/admin/workers/:workerId/check: a volunteer's weights challenged afresh.
struct recheck_reply {
  std::string worker_id;
  std::string volunteer;
  std::uint64_t agreed = 0, unchecked = 0, differed = 0;
  std::uint64_t not_checked = 0;  ///< not answered before a difference ended the volunteer
  bool quarantined = false;
};

/// DELETE of a model, session, graph, v2 tensor or key: {"deleted": true, "<kind>Id": id}.
struct deleted_reply {
  std::string kind;  ///< "model", "session", "graph", "tensor" or "key"
  std::string id;
};

// ---------------------------------------------------------------- models

/// One tensor of a checkpoint as inspect lists it (published dtype and bytes).
struct inspect_tensor {
  std::string name;
  std::vector<std::int64_t> shape;  ///< as stored
  std::string dtype;
  std::uint64_t bytes = 0;
};

/// How many tensors of one published dtype a checkpoint holds.
struct dtype_count {
  std::string dtype;
  std::uint64_t count = 0;
};

/// GET /api/v3/models/inspect: a checkpoint's tensor index, read from headers only.
struct inspect_model_reply {
  std::uint64_t total_bytes = 0;
  std::vector<dtype_count> dtypes;  ///< by dtype name
  std::vector<inspect_tensor> tensors;
  bool sharded = false;
  std::vector<std::string> shards;  ///< shard file names
};

/// Where a model's weights are: one worker, or each worker's share of a spread model.
struct placement_view {
  std::string worker_id;
  std::uint64_t tensors = 0;
  std::uint64_t resident_bytes = 0;
  std::vector<std::string> layers;  ///< a spread model's share, as a load reports it
};

/// A loaded weight's tensorId.
struct weight_id {
  std::string name;
  std::string tensor_id;
};

/// POST /api/v3/models: what was loaded and where.
struct load_model_reply {
  std::string model_id;
  std::string source;
  bool hub = false;       ///< a hub source: revision and commit follow
  std::string revision;
  std::string commit;     ///< empty: the hub did not say (null)
  std::vector<weight_id> tensors;
  std::uint64_t bytes_transferred = 0;
  double throughput_mbs = 0;  ///< rounded to a tenth
  std::string quantize;
  std::string kv_dtype = "f32";  ///< the KV caches of the sessions the server opens on it
  std::uint64_t resident_bytes = 0;
  std::uint64_t coordinator_peak_bytes = 0;
  std::uint64_t elapsed_ms = 0;
  bool spread = false;  ///< placement lists each part with its layers
  std::vector<placement_view> placement;
};

/// One of the caller's models in GET /api/v3/models.
struct model_view {
  std::string model_id;
  std::string source;
  std::string commit;  ///< empty: unknown (null)
  std::uint64_t tensors = 0;
  std::uint64_t bytes_transferred = 0;
  std::uint64_t resident_bytes = 0;
  std::string quantize;
  bool whole = false;
  std::vector<placement_view> placement;  ///< where it is now (a lost worker's share left out)
  std::string created_at;
  std::string kv_dtype = "f32";
};

/// GET /api/v3/models: the caller's models and the grid's capacity.
struct list_models_reply {
  std::vector<model_view> models;
  std::uint64_t workers = 0, free_bytes = 0, total_bytes = 0;
};

// ---------------------------------------------------------------- sessions

/// POST /api/v3/sessions: the session opened.
struct open_session_reply {
  std::string session_id;
  std::string model_id;  ///< empty: a session of no model
  std::string label;
  std::string created_at;
};

/// One tensor a session holds.
struct session_tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype;
  std::uint64_t bytes = 0;
};

/// GET /api/v3/sessions/:id: the session, its tensors and steps.
struct session_state_reply {
  std::string session_id;
  std::string model_id;
  std::string label;
  std::string created_at;
  std::vector<session_tensor> tensors;
  std::uint64_t bytes = 0;
  std::uint64_t steps = 0;
};

/// POST …/checkpoint and …/restore: the session's checkpoint, taken or put back.
struct checkpoint_reply {
  std::string session_id;
  std::uint64_t tensors = 0;
  std::uint64_t bytes = 0;
  std::uint64_t step = 0;
};

// ---------------------------------------------------------------- graphs and v2 tensors

/// POST /api/v3/graphs: the template compiled.
struct compile_graph_reply {
  std::string graph_id;
  std::string label;
  std::uint32_t steps = 0;
  std::vector<std::string> bindings;
  std::uint64_t body_bytes = 0, per_call_bytes = 0;
  std::vector<std::string> features;
};

/// One of the caller's compiled graphs in GET /api/v3/graphs.
struct graph_view {
  std::string graph_id;
  std::string label;
  std::uint32_t steps = 0;
  std::vector<std::string> bindings;
  std::uint64_t body_bytes = 0, per_call_bytes = 0;
  std::string created_at;
};

/// GET /api/v3/graphs.
struct list_graphs_reply {
  std::vector<graph_view> graphs;
};

/// POST /api/v2/tensors: the tensor uploaded.
struct upload_tensor_reply {
  std::string tensor_id;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes = 0;
};

// ---------------------------------------------------------------- accounts

/// Sign-up (with created_at) and approval (without): the account's state.
struct account_reply {
  std::string username;
  std::string status;
  std::string created_at;  ///< empty: not shown
};

/// Login: the session token for key management.
struct login_reply {
  std::string token;
  std::string username;
};

/// An API key: as created (with the key itself, shown once) or listed (without).
struct key_reply {
  std::string key;  ///< empty: not shown
  std::string key_id;
  std::string label;
  std::string created_at;
  std::string last_used_at;  ///< empty: never used
  std::string state;
};

/// The account's keys.
struct keys_reply {
  std::vector<key_reply> keys;
};

// ---------------------------------------------------------------- inspect()

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, grid_limits& x) {
  return f(caf::meta::type_name("grid_limits"), x.packed_weights, x.quantize_on_load, x.max_tensor_bytes, x.free_bytes,
           x.workers, x.default_quantize, x.default_kv_dtype, x.models_per_key, x.sessions_per_key, x.graphs_per_key, x.graph_timeout_ms,
           x.v2_quota_bytes, x.graph_budget_bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, versions_reply& x) {
  return f(caf::meta::type_name("versions_reply"), x.limits);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_view& x) {
  return f(caf::meta::type_name("worker_view"), x.worker_id, x.backend, x.free_bytes, x.total_bytes, x.max_tensor_bytes,
           x.features, x.generations, x.packed_weights, x.quantize_on_load, x.measured_ms, x.kernels, x.cpu, x.threads,
           x.busy_since_ms, x.busy_ms, x.busy_graph, x.busy_compiling, x.busy_session, x.busy_steps_done, x.busy_steps,
           x.queued, x.checked, x.checks_passed, x.checks_unchecked, x.checks_inconclusive, x.checks_first_left,
           x.checks_exact, x.weights_checked, x.weights_unchecked, x.data_link, x.data_link_bytes, x.models);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, quarantine_view& x) {
  return f(caf::meta::type_name("quarantine_view"), x.worker_id, x.volunteer, x.reason, x.at_unix_ms);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, status_reply& x) {
  return f(caf::meta::type_name("status_reply"), x.pool, x.quarantined);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, recheck_reply& x) {
  return f(caf::meta::type_name("recheck_reply"), x.worker_id, x.volunteer, x.agreed, x.unchecked, x.differed,
           x.not_checked, x.quarantined);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, deleted_reply& x) {
  return f(caf::meta::type_name("deleted_reply"), x.kind, x.id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, inspect_tensor& x) {
  return f(caf::meta::type_name("inspect_tensor"), x.name, x.shape, x.dtype, x.bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, dtype_count& x) {
  return f(caf::meta::type_name("dtype_count"), x.dtype, x.count);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, inspect_model_reply& x) {
  return f(caf::meta::type_name("inspect_model_reply"), x.total_bytes, x.dtypes, x.tensors, x.sharded, x.shards);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, placement_view& x) {
  return f(caf::meta::type_name("placement_view"), x.worker_id, x.tensors, x.resident_bytes, x.layers);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, weight_id& x) {
  return f(caf::meta::type_name("weight_id"), x.name, x.tensor_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, load_model_reply& x) {
  return f(caf::meta::type_name("load_model_reply"), x.model_id, x.source, x.hub, x.revision, x.commit, x.tensors,
           x.bytes_transferred, x.throughput_mbs, x.quantize, x.kv_dtype, x.resident_bytes, x.coordinator_peak_bytes, x.elapsed_ms,
           x.spread, x.placement);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_view& x) {
  return f(caf::meta::type_name("model_view"), x.model_id, x.source, x.commit, x.tensors, x.bytes_transferred,
           x.resident_bytes, x.quantize, x.whole, x.placement, x.created_at, x.kv_dtype);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, list_models_reply& x) {
  return f(caf::meta::type_name("list_models_reply"), x.models, x.workers, x.free_bytes, x.total_bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, open_session_reply& x) {
  return f(caf::meta::type_name("open_session_reply"), x.session_id, x.model_id, x.label, x.created_at);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_tensor& x) {
  return f(caf::meta::type_name("session_tensor"), x.name, x.shape, x.dtype, x.bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_state_reply& x) {
  return f(caf::meta::type_name("session_state_reply"), x.session_id, x.model_id, x.label, x.created_at, x.tensors,
           x.bytes, x.steps);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, checkpoint_reply& x) {
  return f(caf::meta::type_name("checkpoint_reply"), x.session_id, x.tensors, x.bytes, x.step);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, compile_graph_reply& x) {
  return f(caf::meta::type_name("compile_graph_reply"), x.graph_id, x.label, x.steps, x.bindings, x.body_bytes,
           x.per_call_bytes, x.features);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, graph_view& x) {
  return f(caf::meta::type_name("graph_view"), x.graph_id, x.label, x.steps, x.bindings, x.body_bytes, x.per_call_bytes,
           x.created_at);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, list_graphs_reply& x) {
  return f(caf::meta::type_name("list_graphs_reply"), x.graphs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, upload_tensor_reply& x) {
  return f(caf::meta::type_name("upload_tensor_reply"), x.tensor_id, x.shape, x.bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, account_reply& x) {
  return f(caf::meta::type_name("account_reply"), x.username, x.status, x.created_at);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, login_reply& x) {
  return f(caf::meta::type_name("login_reply"), x.token, x.username);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, key_reply& x) {
  return f(caf::meta::type_name("key_reply"), x.key, x.key_id, x.label, x.created_at, x.last_used_at, x.state);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, keys_reply& x) {
  return f(caf::meta::type_name("keys_reply"), x.keys);
}

}  // namespace mpakt
