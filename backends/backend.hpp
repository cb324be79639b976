#pragma once
/// The backend interface: what a worker computes with.
///
/// A backend knows tensors and ops, never graphs. The executor (runtime/executor.hpp)
/// asks it once per step, at planning time, for the kernel that will run that step; a
/// backend returning nullptr for an op means "not supported here" and the executor falls
/// back to the reference CPU kernel (every worker ships every op). Thread-safety: a
/// backend is used by one worker thread at a time.

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/op.hpp"

namespace mpakt {

class backend {
 public:
  virtual ~backend() = default;
  /// "cpu" or "cuda": what /api/v3/status counts under backends.
  virtual std::string_view name() const = 0;
  /// The kernel to run `op` on inputs like these with these params, or nullptr.
  virtual kernel_fn kernel(std::string_view op, std::span<const tensor_desc> inputs,
                           const op_params& params) const = 0;
  /// A kernel that runs consecutive steps for which kernel() gave `single` together, when
  /// they read the same first input (op.hpp, group_kernel_fn); nullptr: one at a time.
  virtual group_kernel_fn group_kernel(kernel_fn single) const { return nullptr; }
  /// Whether group_kernel(single) takes only steps that read the same first input (products
  /// sharing their activations); false: any consecutive steps that read none of each
  /// other's outputs (the sessions' attention steps of a batched pass).
  virtual bool group_needs_same_input(kernel_fn single) const { return true; }
  /// Whether this backend's workers hold q8/q4 matrices in lanes (tensor::lanes16): the CPU
  /// backend where its matmul kernels read that form (AVX512-VNNI without AMX tiles).
  virtual bool holds_in_lanes() const { return false; }
  /// Every feature name (e.g. "attention.window") this backend implements.
  virtual std::vector<std::string> features() const = 0;
  /// Ops whose steps this backend always leaves to the CPU reference kernels: a device
  /// backend's declared fallbacks, reported in the pool's status (`hostOps`). Steps of other
  /// ops may still fall back for a dtype or size its kernels do not take. CPU: none.
  virtual std::vector<std::string> host_ops() const { return {}; }
  /// Called on the thread that is about to run this backend's kernels (a worker's graph run or
  /// generation pass): a device backend makes its device the one they use there. CPU: nothing.
  virtual void activate() const {}
  /// A device backend whose kernels keep a plan's values in device memory between steps: its
  /// state for one planned graph (op.hpp, device_state); nullptr (CPU) = every value is a
  /// host tensor at every step.
  virtual std::unique_ptr<device_state> make_device_state() const { return nullptr; }
  /// Whether `fn` (a kernel this backend gave) runs on the device, reading and writing the
  /// device_state; other kernels run on the host and the executor brings their tensors back.
  virtual bool on_device(kernel_fn fn) const { return false; }
};

}  // namespace mpakt
