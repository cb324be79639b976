#pragma once
/// A graph for the tests of values kept on a device between its kernels
/// (test/runtime/device_state_test.cpp with a simulated device, test/cuda/cuda_backend_test.cpp
/// on a GPU): device steps with host steps between them (tanh has no device kernel,
/// cache_write writes in place on the host, reshape is a view), a cache the host wrote read by
/// a device step; and a runner that reads its outputs, intermediate values and a value handed
/// out after one or more runs of one plan.

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/tensor_store.hpp"

namespace mpakt::test {

inline std::string numbers(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::string out = "[";
  for (std::int64_t i = 0; i < n; ++i) out += (i ? "," : "") + std::to_string(d(rng));
  return out + "]";
}

inline std::string chain_graph() {
  return std::string(R"({"inputs": [)") +  //
         R"({"name": "x", "shape": [5, 64], "data": )" + numbers(5 * 64, 90) + "}," +
         R"({"name": "g", "shape": [64], "data": )" + numbers(64, 91) + "}," +
         R"({"name": "w", "shape": [64, 64], "data": )" + numbers(64 * 64, 92) + "}," +
         R"({"name": "cache", "shape": [16, 64], "data": )" + numbers(16 * 64, 93) + "}]," +
         R"("steps": [)"
         R"({"op": "rmsnorm", "in": ["x", "g"], "out": "n"},)"
         R"({"op": "matmul", "in": ["n", "w"], "out": "h"},)"
         R"({"op": "rope", "in": ["h"], "out": "r", "params": {"headDim": 16, "offset": 3}},)"
         R"({"op": "add", "in": ["r", "x"], "out": "s"},)"
         R"({"op": "tanh", "in": ["s"], "out": "t"},)"
         R"({"op": "mul", "in": ["t", "r"], "out": "u"},)"
         R"({"op": "cache_write", "in": ["cache", "u"], "out": "c2", "params": {"offset": 3}},)"
         R"({"op": "attention", "in": ["u", "c2", "c2"], "out": "a", "params": {"heads": 4, "headDim": 16, "posOffset": 3}},)"
         R"({"op": "reshape", "in": ["a"], "out": "a2", "params": {"shape": [5, 4, 16]}},)"
         R"({"op": "add", "in": ["a2", "a2"], "out": "d"},)"
         R"({"op": "matmul", "in": ["a", "w"], "out": "o"}],)"
         R"("outputs": ["o", "c2"]})";
}

/// Values by name after the runs: the outputs o and c2, intermediates h, s, u, a, d, and r taken.
struct chain_run {
  std::map<std::string, std::vector<float>> values;
};

inline chain_run run_chain(backend& be, int runs) {
  chain_run out;
  auto decl = parse_graph_text(chain_graph(), false);
  EXPECT_TRUE(decl.ok()) << (decl.ok() ? "" : decl.err().message);
  if (!decl) return out;
  tensor_store store;
  tensor_store::source src(store, {});
  auto g = executable_graph::build(std::move(*decl), src, be);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.err().message);
  if (!g) return out;
  for (int r = 0; r < runs; ++r) {
    auto st = (*g)->run(src);
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.err().message);
  }
  // the outputs are on the host as run() returns: read them straight from the tensors
  for (const char* name : {"o", "c2"}) {
    const tensor* t = (*g)->value(name);
    EXPECT_NE(t, nullptr) << name;
    if (t) out.values[name].assign(t->f32(), t->f32() + t->numel());
  }
  for (const char* name : {"h", "s", "u", "a", "d"}) {
    const tensor* t = (*g)->value(name);
    EXPECT_NE(t, nullptr) << name;
    if (t) out.values[name].assign(t->f32(), t->f32() + t->numel());
  }
  auto taken = (*g)->take("r");  // a value the device holds alone: brought back first
  EXPECT_TRUE(taken.ok());
  if (taken) out.values["r"].assign(taken->f32(), taken->f32() + taken->numel());
  return out;
}

}  // namespace mpakt::test
