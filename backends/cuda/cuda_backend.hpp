#pragma once
/// The CUDA backend: device kernels for the ops a GPU does best, the CPU's kernels for the rest.
///
/// Plain C++: this header includes no CUDA header, so app/ and actors/ can create and hold a
/// cuda_backend in a build where it exists. The target `mpakt_cuda` exists only when nvcc was
/// found; targets linking it get MPAKT_HAS_CUDA=1, so use this header behind
/// `#if defined(MPAKT_HAS_CUDA)`.
///
/// Which ops run on the GPU: see backends/cuda/ops/registry.hpp. For any other op, or a
/// step with inputs a CUDA kernel does not handle (a q8/q4 weight, a dimension past cuBLAS's
/// int range), `kernel()` returns the CPU backend's kernel for it (a fast one where one
/// accepts the step, else the reference), run on the host.
///
/// Tensors are host memory (runtime/tensor.hpp). The device keeps the inputs a call marks
/// immutable (model weights: kernel_call::immutable_inputs) after their first use
/// (device_context::weights), and each planned graph's values between its CUDA kernels
/// (make_device_state, device_values.hpp): a value crosses to the host only when a host
/// kernel or the caller reads it. Other inputs (data inputs, KV caches) are copied in per
/// call — a cache only the rows a step reads.
///
/// Handles: each cuda_backend owns one device context (a CUDA stream, a cuBLAS handle and
/// growing device scratch buffers, all RAII). kernel_fn is a plain function pointer that
/// cannot carry the backend, so the kernels find their context through the running thread: a
/// worker calls activate() on the thread that is about to run a graph (a worker actor may
/// plan a graph on one scheduler thread and run it on another, so it is set per run, not at
/// planning), and the kernels that run there use that context — each embedded GPU worker its
/// own device and stream. A thread that activated none uses the process-wide current context:
/// that of the live cuda_backend most recently created or made current (make_current()); when
/// it is destroyed, the one current before it is current again. Kernel calls lock the
/// context, so two threads never use its stream or cuBLAS handle at once.
///
/// Thread-safety: as for every backend, one worker thread at a time; kernel calls are
/// serialised on the context's mutex in any case. Lifecycle: create() → (kernels run) →
/// destroyed; a kernel run after its backend is gone returns an error, never crashes.

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.hpp"
#include "runtime/status.hpp"

namespace mpakt {

/// Number of usable CUDA devices; 0 when there is no driver or no GPU (never fails).
int cuda_device_count();
/// The same, or why there is none: errc::unavailable with CUDA's own words, e.g. "no usable
/// CUDA device: CUDA driver version is insufficient for CUDA runtime version
/// (cudaErrorInsufficientDriver)", for a worker asked for CUDA to print before it exits.
result<int> cuda_probe();

namespace cuda {
class device_context;
}

class cuda_backend final : public backend {
 public:
  struct config {
    /// CUDA device ordinal.
    int device = 0;
  };

  /// Opens `cfg.device` (stream, cuBLAS handle) and makes this backend's context current.
  /// errc::unavailable when there is no such device (no driver, no GPU);
  /// errc::internal naming the CUDA call when opening the device fails.
  static result<std::unique_ptr<cuda_backend>> create(config cfg);
  static result<std::unique_ptr<cuda_backend>> create() { return create(config{}); }

  ~cuda_backend() override;
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  std::string_view name() const override { return "cuda"; }
  /// A CUDA kernel when one handles this op with these input dtypes/shapes and params,
  /// else the CPU backend's kernel for the step (run on the host).
  kernel_fn kernel(std::string_view op, std::span<const tensor_desc> inputs,
                   const op_params& params) const override;
  /// The CPU backend's batched form of a host kernel; none for CUDA kernels.
  group_kernel_fn group_kernel(kernel_fn single) const override;
  bool group_needs_same_input(kernel_fn single) const override;
  /// A plan's values kept on this backend's device between its CUDA kernels
  /// (backends/cuda/device_values.hpp).
  std::unique_ptr<device_state> make_device_state() const override;
  /// Whether `fn` is one of the CUDA kernels (else a host kernel of the CPU backend).
  bool on_device(kernel_fn fn) const override;
  /// Every schema feature: steps the GPU does not handle fall back to the CPU's kernels,
  /// which implement them all.
  std::vector<std::string> features() const override;
  /// The ops with no CUDA kernel (cuda::host_ops): their steps run on the CPU's kernels.
  std::vector<std::string> host_ops() const override;

  /// Makes this backend's context the one CUDA kernels run on (see the header comment).
  void make_current() const;
  /// Makes it the context of the kernels the calling thread runs (see the header comment).
  void activate() const override;
  /// Its device context (stream, cuBLAS handle, scratch): what activate() makes current.
  const std::shared_ptr<cuda::device_context>& context() const { return ctx_; }
  /// Device ordinal and name, e.g. "NVIDIA H200", for status reports.
  int device() const;
  const std::string& device_name() const;

 private:
  explicit cuda_backend(std::shared_ptr<cuda::device_context> ctx);
  std::shared_ptr<cuda::device_context> ctx_;
};

}  // namespace mpakt
