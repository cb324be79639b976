/// Model replies as JSON: inspect, load and the model list.

#include "http/api/render.hpp"

#include "actors/json_text.hpp"

namespace mpakt::http {

namespace {

void write_placement(json_writer& w, const placement_view& p, bool layers) {
  w.StartObject();
  key(w, "workerId"); str(w, p.worker_id);
  key(w, "tensors"); w.Uint64(p.tensors);
  key(w, "residentBytes"); w.Uint64(p.resident_bytes);
  if (layers) { key(w, "layers"); strings(w, p.layers); }
  w.EndObject();
}

/// A commit, or null when unknown.
void write_commit(json_writer& w, const std::string& commit) {
  key(w, "commit");
  if (commit.empty()) w.Null();
  else str(w, commit);
}

}  // namespace

std::string render(const inspect_model_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "count"); w.Uint64(r.tensors.size());
    key(w, "totalBytes"); w.Uint64(r.total_bytes);
    key(w, "dtypes");
    w.StartObject();
    for (const auto& d : r.dtypes) {
      w.Key(d.dtype.c_str(), rapidjson::SizeType(d.dtype.size()));
      w.Uint64(d.count);
    }
    w.EndObject();
    key(w, "tensors");
    w.StartArray();
    for (const auto& t : r.tensors) tensor_entry(w, t);
    w.EndArray();
    key(w, "sharded"); w.Bool(r.sharded);
    key(w, "shards"); strings(w, r.shards);
    w.EndObject();
  });
}

std::string render(const load_model_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "modelId"); str(w, r.model_id);
    key(w, "source"); str(w, r.source);
    if (r.hub) {
      key(w, "revision"); str(w, r.revision);
      write_commit(w, r.commit);
    }
    key(w, "tensors");
    w.StartArray();
    for (const auto& t : r.tensors) {
      w.StartObject();
      key(w, "name"); str(w, t.name);
      key(w, "tensorId"); str(w, t.tensor_id);
      w.EndObject();
    }
    w.EndArray();
    key(w, "bytesTransferred"); w.Uint64(r.bytes_transferred);
    key(w, "throughputMBs"); w.Double(r.throughput_mbs);
    key(w, "storedOnCoordinator"); w.Uint(0);
    key(w, "quantize"); str(w, r.quantize);
    key(w, "kvDtype"); str(w, r.kv_dtype);
    key(w, "residentBytes"); w.Uint64(r.resident_bytes);
    // the most weight bytes the coordinator held at once (LOAD-19)
    key(w, "coordinatorPeakBytes"); w.Uint64(r.coordinator_peak_bytes);
    key(w, "elapsedMs"); w.Uint64(r.elapsed_ms);
    // one worker, or each worker's share of a spread model (its layers in order)
    key(w, "placement");
    w.StartArray();
    for (const auto& p : r.placement) write_placement(w, p, r.spread);
    w.EndArray();
    w.EndObject();
  });
}

std::string render(const list_models_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "models");
    w.StartArray();
    for (const auto& m : r.models) {
      w.StartObject();
      key(w, "modelId"); str(w, m.model_id);
      key(w, "source"); str(w, m.source);
      write_commit(w, m.commit);
      key(w, "tensors"); w.Uint64(m.tensors);
      key(w, "bytesTransferred"); w.Uint64(m.bytes_transferred);
      key(w, "residentBytes"); w.Uint64(m.resident_bytes);
      key(w, "quantize"); str(w, m.quantize);
      key(w, "kvDtype"); str(w, m.kv_dtype);
      key(w, "whole"); w.Bool(m.whole);
      key(w, "placement");
      w.StartArray();
      for (const auto& p : m.placement) write_placement(w, p, false);
      w.EndArray();
      key(w, "createdAt"); str(w, m.created_at);
      w.EndObject();
    }
    w.EndArray();
    key(w, "capacity");
    w.StartObject();
    key(w, "workers"); w.Uint64(r.workers);
    key(w, "freeBytes"); w.Uint64(r.free_bytes);
    key(w, "totalBytes"); w.Uint64(r.total_bytes);
    key(w, "byteUnits"); str(w, "resident");
    w.EndObject();
    w.EndObject();
  });
}

}  // namespace mpakt::http
