// The executor's side of values kept in device memory (runtime/op.hpp, device_state): a
// simulated device backend whose kernels compute with the CPU reference on private copies of
// the bytes (the "device") and leave the host's bytes NaN, so any value the executor fails to
// bring back before a host kernel, the graph's outputs, value() or take() reads it shows as
// NaN or as a difference from the same graph on the CPU backend. CI has no GPU: this is where
// the protocol the CUDA backend relies on (backends/cuda/device_values.hpp) is checked.

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/tensor_store.hpp"

namespace mpakt {
namespace {

/// The simulated device memory: one private copy per value a device kernel wrote.
class sim_device final : public device_state {
 public:
  enum class state { stale, device_newer, same };
  struct value {
    const std::byte* host = nullptr;
    std::vector<std::byte> bytes;
    state st = state::stale;
  };

  status to_host(std::span<const tensor* const> tensors) override {
    for (const tensor* t : tensors)
      for (auto& v : values)
        if (v.st == state::device_newer && overlaps(v, *t)) {
          std::memcpy(const_cast<std::byte*>(v.host), v.bytes.data(), v.bytes.size());
          v.st = state::same;
        }
    return {};
  }
  void host_wrote(const tensor& t) override {
    for (auto& v : values)
      if (overlaps(v, t)) v.st = state::stale;
  }

  /// The device's current bytes for t, or nullptr.
  const std::byte* current(const tensor& t) const {
    for (const auto& v : values)
      if (v.host == t.data() && v.st != state::stale && v.bytes.size() >= t.nbytes()) return v.bytes.data();
    return nullptr;
  }
  value& output(const tensor& t) {
    for (auto& v : values)
      if (v.host == t.data()) return v;
    values.push_back(value{t.data(), {}, state::stale});
    return values.back();
  }

  std::vector<value> values;

 private:
  static bool overlaps(const value& v, const tensor& t) {
    return !v.bytes.empty() && t.nbytes() > 0 && v.host < t.data() + t.nbytes() && t.data() < v.host + v.bytes.size();
  }
};

constexpr std::array<std::string_view, 6> sim_ops = {"rmsnorm", "matmul", "rope", "add", "mul", "attention"};

/// The device kernel of sim_ops[I]: the reference kernel on the device's bytes (or the host's
/// where the device holds none), its output kept on the device and the host's bytes poisoned.
template <std::size_t I>
status sim_kernel(const kernel_call& c) {
  const kernel_fn real = cpu_backend::reference(sim_ops[I]);
  auto* dev = static_cast<sim_device*>(c.device);
  if (!dev) return real(c);  // a step the executor keeps on the host: host tensors throughout
  std::vector<tensor> ins;
  std::vector<tensor*> ptrs;
  ins.reserve(c.inputs.size());
  for (const tensor* t : c.inputs) {
    auto copy = tensor::make(t->type(), t->shape());
    if (!copy) return copy.err();
    const std::byte* from = dev->current(*t);
    std::memcpy(copy->data(), from ? from : t->data(), t->nbytes());
    ins.push_back(std::move(*copy));
  }
  for (auto& t : ins) ptrs.push_back(&t);
  auto out = tensor::make(c.output->type(), c.output->shape());
  if (!out) return out.err();
  kernel_call inner{c.params, ptrs, &*out, c.scratch, c.immutable_inputs, nullptr};
  MPAKT_TRY(real(inner));
  auto& v = dev->output(*c.output);
  v.bytes.assign(out->data(), out->data() + out->nbytes());
  v.st = sim_device::state::device_newer;
  float* host = c.output->f32();
  std::fill(host, host + c.output->numel(), std::numeric_limits<float>::quiet_NaN());
  return {};
}

template <std::size_t... I>
constexpr std::array<kernel_fn, sizeof...(I)> sim_table(std::index_sequence<I...>) {
  return {&sim_kernel<I>...};
}
constexpr auto sim_kernels = sim_table(std::make_index_sequence<sim_ops.size()>());

class sim_backend final : public backend {
 public:
  std::string_view name() const override { return "sim"; }
  kernel_fn kernel(std::string_view op, std::span<const tensor_desc> inputs, const op_params& params) const override {
    for (std::size_t i = 0; i < sim_ops.size(); ++i)
      if (sim_ops[i] == op) return sim_kernels[i];
    return cpu_.kernel(op, inputs, params);
  }
  std::vector<std::string> features() const override { return cpu_.features(); }
  std::unique_ptr<device_state> make_device_state() const override { return std::make_unique<sim_device>(); }
  bool on_device(kernel_fn fn) const override {
    return std::find(sim_kernels.begin(), sim_kernels.end(), fn) != sim_kernels.end();
  }

 private:
  cpu_backend cpu_{cpu_backend::config{true}};
};

std::string numbers(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::string out = "[";
  for (std::int64_t i = 0; i < n; ++i) out += (i ? "," : "") + std::to_string(d(rng));
  return out + "]";
}

/// Device steps, host steps between them (tanh: no device kernel; cache_write: in place on
/// the host; reshape: a view), a cache the host wrote read by a device step.
std::string chain_graph() {
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

struct chain_run {
  std::map<std::string, std::vector<float>> values;
};

chain_run run_chain(backend& be, int runs) {
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

TEST(DeviceState, ValuesComeBackBeforeTheHostReadsThem) {
  cpu_backend reference(cpu_backend::config{true});
  sim_backend sim;
  const auto want = run_chain(reference, 1);
  ASSERT_EQ(want.values.size(), 8u);
  for (int runs : {1, 3}) {
    const auto got = run_chain(sim, runs);
    ASSERT_EQ(got.values.size(), want.values.size()) << runs;
    for (const auto& [name, w] : want.values) {
      const auto& v = got.values.at(name);
      ASSERT_EQ(v.size(), w.size()) << name;
      for (std::size_t i = 0; i < w.size(); ++i)
        ASSERT_EQ(std::memcmp(&v[i], &w[i], sizeof(float)), 0)
            << name << "[" << i << "]: " << v[i] << " on the simulated device, " << w[i] << " on the CPU (runs " << runs << ")";
    }
  }
}

}  // namespace
}  // namespace mpakt
