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
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "test/support/device_chain.hpp"

namespace mpakt {
namespace {

using test::run_chain;

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
