/// The grid's replies as JSON: GET /api/versions, GET /api/v3/status, a volunteer's re-check,
/// and the answer every DELETE shares.

#include "http/api/render.hpp"

#include <algorithm>
#include <map>

#include "actors/json_text.hpp"
#include "http/api/console.hpp"
#include "runtime/schema.hpp"

namespace mpakt::http {

namespace {

void write_limits(json_writer& w, const grid_limits& l) {
  w.StartObject();
  key(w, "widenFactor");
  w.StartObject();
  key(w, "f32"); w.Int(1);
  key(w, "bf16"); w.Int(l.packed_weights ? 1 : 2);
  key(w, "f16"); w.Int(l.packed_weights ? 1 : 2);
  w.EndObject();
  key(w, "byteUnits"); str(w, "resident");
  key(w, "maxTensorBytes"); w.Uint64(l.max_tensor_bytes);
  key(w, "freeBytes"); w.Uint64(l.free_bytes);
  key(w, "workers"); w.Uint64(l.workers);
  key(w, "quantizeOnLoad"); w.Bool(l.quantize_on_load);
  key(w, "defaultQuantize"); str(w, l.default_quantize);
  key(w, "defaultKvDtype"); str(w, l.default_kv_dtype);
  key(w, "pieceBytes"); w.Uint64(16'000'000);
  key(w, "modelsPerKey"); w.Int(l.models_per_key);
  key(w, "sessionsPerKey"); w.Int(l.sessions_per_key);
  key(w, "compiledGraphsPerKey"); w.Int(l.graphs_per_key);
  key(w, "compiledGraphBytesPerKey"); w.Uint64(l.graph_budget_bytes);
  key(w, "graphTimeoutMs"); w.Int64(l.graph_timeout_ms);
  key(w, "maxSessionsPerGraph"); w.Int(64);
  key(w, "maxNewTokens"); w.Int(4096);
  key(w, "maxVerifyGraphs"); w.Int(16);
  key(w, "v2QuotaBytes"); w.Uint64(l.v2_quota_bytes);
  key(w, "randomMaxCount"); w.Int(10000);
  w.EndObject();
}

void write_worker(json_writer& w, const worker_view& s) {
  w.StartObject();
  key(w, "workerId"); str(w, s.worker_id);
  key(w, "backend"); str(w, s.backend);
  // why a worker left to choose (`--backend auto`) computes on the CPU; null otherwise
  key(w, "backendNote");
  if (s.backend_note.empty()) w.Null();
  else str(w, s.backend_note);
  // the ops whose steps its backend always runs on the CPU reference kernels (a GPU worker's)
  key(w, "hostOps"); strings(w, s.host_ops);
  key(w, "freeBytes"); w.Uint64(s.free_bytes);
  key(w, "totalBytes"); w.Uint64(s.total_bytes);
  key(w, "packedWeights"); w.Bool(s.packed_weights);
  key(w, "quantizeOnLoad"); w.Bool(s.quantize_on_load);
  // end-to-end time of the pool's probe call (placement ranks by it)
  key(w, "measuredMs");
  if (s.measured_ms > 0) w.Double(s.measured_ms);
  else w.Null();
  // which CPU kernel paths it runs (backends/cpu/isa.hpp)
  key(w, "kernels"); str(w, s.kernels);
  key(w, "cpu"); str(w, s.cpu);
  key(w, "threads"); w.Uint(s.threads);
  // what it is computing now (null when idle), and the calls waiting behind it
  key(w, "busy");
  if (s.busy_since_ms == 0) {
    w.Null();
  } else {
    w.StartObject();
    key(w, "since"); str(w, iso_time(s.busy_since_ms));
    key(w, "forMs"); w.Uint64(s.busy_ms);
    key(w, "graph"); str(w, s.busy_graph);
    key(w, "compiling"); w.Bool(s.busy_compiling);
    if (!s.busy_session.empty()) { key(w, "session"); str(w, s.busy_session); }
    key(w, "stepsDone"); w.Uint(s.busy_steps_done);
    key(w, "steps"); w.Uint(s.busy_steps);
    w.EndObject();
  }
  key(w, "queued"); w.Uint(s.queued);
  // a volunteer's spot-checks (actors/coordinator/checked_worker.hpp)
  key(w, "checks");
  if (!s.checked) {
    w.Null();
  } else {
    w.StartObject();
    key(w, "passed"); w.Uint(s.checks_passed);
    key(w, "unchecked"); w.Uint(s.checks_unchecked);
    key(w, "inconclusive"); w.Uint(s.checks_inconclusive);
    key(w, "firstLeft"); w.Uint(s.checks_first_left);
    key(w, "exact"); w.Bool(s.checks_exact);
    key(w, "weightsChecked"); w.Uint(s.weights_checked);
    key(w, "weightsUnchecked"); w.Uint(s.weights_unchecked);
    w.EndObject();
  }
  // a volunteer's data connection (actors/data_link.hpp)
  key(w, "dataLink");
  if (s.data_link.empty()) {
    w.Null();
  } else {
    w.StartObject();
    key(w, "state"); w.String(s.data_link.c_str());
    key(w, "bytes"); w.Uint64(s.data_link_bytes);
    w.EndObject();
  }
  key(w, "models"); strings(w, s.models);  // the caller's models placed there
  w.EndObject();
}

}  // namespace

std::string render(const versions_reply& r) {
  const auto& sc = schema::instance();
  std::vector<std::string> v2ops;
  for (const auto& o : sc.ops())
    if (o.added_in == "v2") v2ops.push_back(o.name);
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "current"); str(w, "v3");
    key(w, "versions");
    w.StartArray();
    w.StartObject();
    key(w, "version"); str(w, "v1");
    key(w, "status"); str(w, "live");
    key(w, "aliasOf"); str(w, "v2");
    w.EndObject();
    w.StartObject();
    key(w, "version"); str(w, "v2");
    key(w, "status"); str(w, "live");
    key(w, "supports"); strings(w, {"tensors", "graph"});
    key(w, "ops"); strings(w, v2ops);
    key(w, "uploadQuotaBytes"); w.Uint64(r.limits.v2_quota_bytes);
    w.EndObject();
    w.StartObject();
    key(w, "version"); str(w, "v3");
    key(w, "status"); str(w, "live");
    key(w, "current"); w.Bool(true);
    key(w, "supports");
    strings(w, {"models", "inspect", "quantize", "sessions", "graph", "compiledGraphs", "multiSessionGraphs", "random"});
    key(w, "ops"); w.Uint64(sc.ops().size());
    key(w, "opsHash"); str(w, sc.ops_hash());
    w.EndObject();
    w.EndArray();
    key(w, "compute");
    w.StartObject();
    key(w, "version"); str(w, "v0");
    key(w, "status"); str(w, "beta");
    key(w, "note"); str(w, "mPAKT Compute is a separate service, not part of this API");
    w.EndObject();
    key(w, "limits"); write_limits(w, r.limits);
    w.EndObject();
  });
}

std::string render(const status_reply& r) {
  // The pool's totals; features are those every worker offers.
  std::map<std::string, int> backends{{"webgpu", 0}, {"npu", 0}, {"npu+webgpu", 0}, {"cpu", 0}};
  std::uint64_t free = 0, total = 0, max_tensor = 0, generations = 0;
  std::vector<std::string> features;
  for (std::size_t i = 0; i < r.pool.size(); ++i) {
    const auto& s = r.pool[i];
    backends[s.backend]++;
    free += s.free_bytes;
    total += s.total_bytes;
    max_tensor = std::max(max_tensor, s.max_tensor_bytes);
    generations += s.generations;
    if (i == 0) {
      features = s.features;
    } else {
      std::vector<std::string> both;
      for (const auto& f : features)
        if (std::find(s.features.begin(), s.features.end(), f) != s.features.end()) both.push_back(f);
      features = both;
    }
  }
  const auto& sc = schema::instance();
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "workers"); w.Uint64(r.pool.size());
    key(w, "backends");
    w.StartObject();
    for (const auto& [b, n] : backends) { key(w, b.c_str()); w.Int(n); }
    w.EndObject();
    key(w, "ops"); w.Uint64(sc.ops().size());
    key(w, "opsHash"); str(w, sc.ops_hash());
    key(w, "features"); strings(w, features);
    key(w, "freeBytes"); w.Uint64(free);
    key(w, "totalBytes"); w.Uint64(total);
    key(w, "byteUnits"); str(w, "resident");
    key(w, "generations"); w.Uint64(generations);
    key(w, "device");
    w.StartObject();
    key(w, "maxTensorBytes"); w.Uint64(max_tensor);
    w.EndObject();
    key(w, "pool");
    w.StartArray();
    for (const auto& s : r.pool) write_worker(w, s);
    w.EndArray();
    // volunteers ended by spot-checks since the coordinator started
    key(w, "quarantined");
    w.StartArray();
    for (const auto& q : r.quarantined) {
      w.StartObject();
      key(w, "workerId"); str(w, q.worker_id);
      key(w, "volunteer"); str(w, q.volunteer);
      key(w, "reason"); str(w, q.reason);
      key(w, "at"); str(w, iso_time(q.at_unix_ms));
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  });
}

std::string render(const recheck_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    kv(w, "workerId", r.worker_id);
    kv(w, "volunteer", r.volunteer);
    key(w, "weights"); w.Uint64(r.agreed + r.unchecked + r.differed);
    key(w, "agreed"); w.Uint64(r.agreed);
    key(w, "unchecked"); w.Uint64(r.unchecked);
    key(w, "differed"); w.Uint64(r.differed);
    key(w, "notChecked"); w.Uint64(r.not_checked);
    key(w, "quarantined"); w.Bool(r.quarantined);
    w.EndObject();
  });
}

std::string render(const deleted_reply& r) {
  const std::string id_key = r.kind + "Id";
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "deleted"); w.Bool(true);
    kv(w, id_key.c_str(), r.id);
    w.EndObject();
  });
}

}  // namespace mpakt::http
