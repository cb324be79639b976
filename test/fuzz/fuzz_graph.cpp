// libFuzzer target: a graph's whole path on a worker — parse (runtime/graph.cpp), validate and
// plan (executable_graph::build), bind, and run on the CPU backend — as POST /api/v3/graph and
// /api/v3/graphs drive it. The first byte chooses inline or compiled; the rest is the graph's
// JSON. Anything may be refused with an error; nothing may crash, read out of bounds or hang.
// Tensors are capped at 64 KiB so that every graph that validates also runs in moments.

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <string_view>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/tensor.hpp"
#include "runtime/tensor_store.hpp"

using namespace mpakt;

namespace {

/// What a graph may name: a model's weight and a session's cache (as the malformed-graph
/// corpus in test/runtime uses), fresh for every input so that runs do not build on each other.
void fill_store(tensor_store& store) {
  tensor_store::tensor_map m;
  m["w"] = *make_f32({3, 4}, std::vector<float>(12, 0.5f));
  m["model.embed_tokens.weight"] = *make_f32({8, 4}, std::vector<float>(32, 0.25f));
  store.put_model("m_t", std::move(m));
  store.session("s_1")["kcache"] = *make_f32({4, 2}, std::vector<float>(8, 0.0f));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool compiled = data[0] & 1;
  const std::string_view json(reinterpret_cast<const char*>(data + 1), size - 1);

  auto decl = parse_graph_text(json, compiled);
  if (!decl) return 0;
  tensor_store store;
  fill_store(store);
  tensor_store::source src(store, decl->session.value_or(""), decl->sessions);
  cpu_backend be;
  build_options opts;
  opts.compiled = compiled;
  opts.max_tensor_bytes = 64 * 1024;
  auto g = executable_graph::build(std::move(*decl), src, be, opts);
  if (!g) return 0;
  // Fill every hole: bound inputs with ones, $bind parameters with a small position.
  for (const auto& name : (*g)->bindings()) {
    if ((*g)->is_input_binding(name)) {
      const shape_t* s = (*g)->bound_shape(name);
      std::int64_t n = 1;
      for (auto d : *s) n *= d;
      if (n < 0 || n > 16384) return 0;
      std::vector<float> ones(static_cast<std::size_t>(n), 1.0f);
      if (!(*g)->bind_input(name, ones)) return 0;
    } else if (!(*g)->bind_param(name, 1.0)) {
      return 0;
    }
  }
  run_control control;
  control.deadline = run_control::clock::now() + std::chrono::seconds(2);
  (void)(*g)->run(src, &control);
  return 0;
}
