#pragma once
/// The CPU backend: a reference kernel for every op, plus faster kernels that claim the
/// cases they handle.
///
/// Reference kernels (backends/cpu/ref/) are plain, obviously-correct C++ and stay forever
/// as the oracle. Fast kernels (backends/cpu/fast/: SIMD, AMX) register with an
/// `accepts` predicate; the backend picks the first fast kernel that accepts a step, else
/// the reference. The op test table (test/backends/op_table_test.cpp) runs every fixture
/// on the reference-only backend and on the full backend.

#include <span>
#include <string_view>
#include <vector>

#include "backends/backend.hpp"
#include "backends/cpu/isa.hpp"

namespace mpakt {

/// One registered CPU kernel.
struct cpu_kernel {
  std::string_view op;
  kernel_fn fn = nullptr;
  /// For fast kernels: whether this kernel handles these inputs/params. nullptr = all.
  bool (*accepts)(std::span<const tensor_desc> inputs, const op_params& params) = nullptr;
  std::string_view variant = "ref";
  /// The instruction-set level the kernel needs (isa.hpp); kernels above the current level
  /// are skipped, so registering the fastest first gives each CPU the best it can run.
  cpu_isa::level min_level = cpu_isa::level::scalar;
  /// For fast kernels: the same arithmetic over several steps at once, or nullptr.
  group_kernel_fn group = nullptr;
  /// For `group`: whether the steps of a group must read the same first input
  /// (backend::group_needs_same_input).
  bool group_same_input = true;
};

/// Every reference kernel, one per op (backends/cpu/ref/registry.cpp).
std::span<const cpu_kernel> cpu_reference_kernels();
/// Every fast kernel (may be several per op and level, tried in order: highest level first).
std::span<const cpu_kernel> cpu_fast_kernels();

class cpu_backend final : public backend {
 public:
  struct config {
    /// Use only the reference kernels (the oracle in tests).
    bool reference_only = false;
  };
  cpu_backend() : cpu_backend(config{}) {}
  explicit cpu_backend(config cfg);

  std::string_view name() const override { return "cpu"; }
  kernel_fn kernel(std::string_view op, std::span<const tensor_desc> inputs,
                   const op_params& params) const override;
  group_kernel_fn group_kernel(kernel_fn single) const override;
  bool group_needs_same_input(kernel_fn single) const override;
  bool holds_in_lanes() const override;
  std::vector<std::string> features() const override;

  /// The reference kernel for `op`, or nullptr when none is registered.
  static kernel_fn reference(std::string_view op);
  /// The kernel variant kernel() would give (the level name, or "ref"): what a worker reports.
  std::string_view variant(std::string_view op, std::span<const tensor_desc> inputs, const op_params& params) const;

 private:
  config cfg_;
};

}  // namespace mpakt
