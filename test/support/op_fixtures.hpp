#pragma once
/// The op table's fixtures (test/fixtures/ops/<op>.json, made from PyTorch and transformers by
/// tools/goldens/gen_ops.py) and the runner that checks one case on one backend: shared by the
/// op table (test/backends/op_table_test.cpp, the CPU backends) and the CUDA tests
/// (test/cuda/cuda_backend_test.cpp, on a GPU).
///
/// Needs MPAKT_FIXTURES_DIR defined at compile time (the source tree's test/fixtures); the
/// environment variable of the same name overrides it, for binaries run from another tree.

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/tensor_store.hpp"

namespace mpakt::test {

/// test/fixtures/ops.
inline std::filesystem::path op_fixtures_dir() {
  const char* env = std::getenv("MPAKT_FIXTURES_DIR");
  return std::filesystem::path(env && *env ? env : MPAKT_FIXTURES_DIR) / "ops";
}

/// The ops with a fixture file, sorted.
inline std::vector<std::string> fixture_ops() {
  std::vector<std::string> ops;
  const auto dir = op_fixtures_dir();
  if (std::filesystem::exists(dir))
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".json") ops.push_back(e.path().stem().string());
  std::sort(ops.begin(), ops.end());
  return ops;
}

inline std::string json_text(const rapidjson::Value& v) {
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  v.Accept(w);
  return std::string(b.GetString(), b.GetSize());
}

/// Runs one fixture case on one backend through the real parser, validator and executor;
/// returns a failure description or "".
inline std::string run_case(const rapidjson::Value& c, backend& be) {
  const std::string name = c["name"].GetString();
  auto decl = parse_graph_text(json_text(c["graph"]), false);
  if (!decl) return name + ": graph does not parse: " + decl.err().message;

  // Inputs the case holds packed become model weights converted as a worker would.
  tensor_store store;
  tensor_store::tensor_map held;
  if (c.HasMember("hold")) {
    for (auto it = c["hold"].MemberBegin(); it != c["hold"].MemberEnd(); ++it) {
      const std::string in_name = it->name.GetString();
      auto t = dtype_from_name(it->value.GetString());
      if (!t) return name + ": unknown hold dtype";
      for (auto& in : decl->inputs) {
        if (in.name != in_name) continue;
        auto f = make_f32(in.shape, in.data);
        if (!f) return name + ": " + f.err().message;
        auto packed = convert_tensor(*f, *t);
        if (!packed) return name + ": " + packed.err().message;
        held[in_name] = std::move(*packed);
        in.kind = input_kind::weight;
        in.model = "m_fixture";
        in.weight = in_name;
        in.data.clear();
      }
    }
  }
  store.put_model("m_fixture", std::move(held));
  tensor_store::source src(store, {});

  const std::string check = c.HasMember("check") ? c["check"].GetString() : "close";
  build_options opts;
  if (check == "distribution") {
    // Sample many times with step bound 0..N-1 and compare frequencies with the
    // reference distribution.
    opts.compiled = true;
    for (auto& st : decl->steps)
      if (st.op == "sample") st.binds.push_back({"step", "step", 1, 0});
  }
  auto g = executable_graph::build(std::move(*decl), src, be, opts);
  if (!g) return name + ": does not validate: " + g.err().message;

  const auto& expected = c["expected"];
  if (check == "distribution") {
    auto it = expected.MemberBegin();
    const std::string out = it->name.GetString();
    auto probs = decode_f32_base64(it->value["dataB64"].GetString());
    const auto& shp = it->value["shape"];
    const std::int64_t rows = shp[0].GetInt64(), vocab = shp[1].GetInt64();
    constexpr int draws = 20000;
    std::vector<std::vector<int>> counts(static_cast<std::size_t>(rows), std::vector<int>(static_cast<std::size_t>(vocab)));
    for (int s = 0; s < draws; ++s) {
      if (!(*g)->bind_param("step", s)) return name + ": cannot bind step";
      auto st = (*g)->run(src);
      if (!st) return name + ": run failed: " + st.err().message;
      const tensor* tok = (*g)->value(out);
      for (std::int64_t r = 0; r < rows; ++r) {
        const float id = tok->f32()[r];
        if (id < 0 || id >= float(vocab) || id != std::floor(id)) return name + ": sampled id out of range";
        const double p = (*probs)[std::size_t(r * vocab + std::int64_t(id))];
        if (p <= 0) return name + ": sampled token " + std::to_string(int(id)) + " of row " + std::to_string(r) + " has probability 0";
        counts[std::size_t(r)][std::size_t(id)]++;
      }
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      double tv = 0, bound = 0.02;
      for (std::int64_t v = 0; v < vocab; ++v) {
        const double p = (*probs)[std::size_t(r * vocab + v)];
        tv += 0.5 * std::fabs(double(counts[std::size_t(r)][std::size_t(v)]) / draws - p);
        bound += std::sqrt(p / draws);
      }
      if (tv > bound) return name + ": row " + std::to_string(r) + " frequencies are " + std::to_string(tv) + " from the reference distribution (bound " + std::to_string(bound) + ")";
    }
    return "";
  }

  auto st = (*g)->run(src);
  if (!st) return name + ": run failed: " + st.err().message;
  const double abs_tol = c["tol"]["abs"].GetDouble(), rel_tol = c["tol"]["rel"].GetDouble();
  for (auto it = expected.MemberBegin(); it != expected.MemberEnd(); ++it) {
    const std::string out = it->name.GetString();
    const tensor* got = (*g)->value(out);
    if (!got) return name + ": no value " + out;
    shape_t want_shape;
    for (const auto& d : it->value["shape"].GetArray()) want_shape.push_back(d.GetInt64());
    if (got->shape() != want_shape) return name + ": " + out + " has shape " + shape_str(got->shape()) + ", expected " + shape_str(want_shape);
    auto want = decode_f32_base64(it->value["dataB64"].GetString());
    auto wide = to_f32(*got);
    for (std::size_t i = 0; i < want->size(); ++i) {
      const double w = (*want)[i], v = wide->f32()[i];
      const bool ok = std::isinf(w) ? v == w : (std::isnan(w) ? std::isnan(v) : std::fabs(v - w) <= abs_tol + rel_tol * std::fabs(w));
      if (!ok)
        return name + ": " + out + "[" + std::to_string(i) + "] = " + std::to_string(v) + ", expected " + std::to_string(w) +
               " (tol abs " + std::to_string(abs_tol) + " rel " + std::to_string(rel_tol) + ")";
    }
  }
  return "";
}

}  // namespace mpakt::test
