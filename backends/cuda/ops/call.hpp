#pragma once
/// What every CUDA kernel_fn does around its device work: find its context, lock it, select
/// its device, find or copy in its inputs, and leave its output on the device or copy it back.
///
/// Weights (kernel_call::immutable_inputs) are kept on the device after their first use. In a
/// plan that keeps its values on the device (kernel_call::device, device_values.hpp) a kernel
/// reads the values earlier CUDA kernels left there and leaves its output there too; other
/// inputs (data inputs, KV caches, what host kernels computed) are copied in per call. Without
/// one (a kernel run alone, a step the executor keeps on the host) the output is copied back
/// and waited for.

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "backends/cuda/context.hpp"
#include "runtime/op.hpp"
#include "runtime/tensor.hpp"

/// Binds `lhs` (a declaration such as `float* p`) to the value of a result<T>
/// expression, or returns its error from the enclosing function.
#define MPAKT_CUDA_CAT2_(a, b) a##b
#define MPAKT_CUDA_CAT_(a, b) MPAKT_CUDA_CAT2_(a, b)
#define MPAKT_CUDA_ASSIGN(lhs, expr) MPAKT_CUDA_ASSIGN_IMPL_(MPAKT_CUDA_CAT_(mpakt_cuda_r_, __LINE__), lhs, expr)
#define MPAKT_CUDA_ASSIGN_IMPL_(tmp, lhs, expr)          \
  auto tmp = (expr);                                     \
  if (!tmp.ok()) return std::move(tmp).err();            \
  lhs = std::move(tmp).value()

namespace mpakt::cuda {

/// Scratch slots of the device context, by role, so one call's buffers never overlap.
enum slot : int { slot_in0 = 0, slot_in1 = 1, slot_in2 = 2, slot_out = 3, slot_tmp = 4, slot_in3 = 5, slot_in4 = 6 };

/// One kernel call on the current device context, held locked for the call's lifetime.
/// Created on the stack of a kernel_fn; move-only.
class device_call {
 public:
  /// Kernel call `c` of `op` on its plan's device context when it has device values, else
  /// on the current context. errc::internal when no cuda_backend is alive (the message names
  /// the op), or when selecting its device fails.
  static result<device_call> begin(std::string_view op, const kernel_call& c);

  std::string_view op() const { return op_; }
  /// "op 'add'", for messages.
  const std::string& where() const { return where_; }
  device_context& ctx() { return *ctx_; }
  cudaStream_t stream() const { return ctx_->stream(); }

  /// A CUDA/cuBLAS failure as an error naming this op and `what`.
  status check(cudaError_t e, std::string_view what) const { return cuda::check(e, where_, what); }
  status check(cublasStatus_t s, std::string_view what) const { return cuda::check(s, where_, what); }

  /// Device scratch of at least `bytes` in `s`.
  result<void*> scratch(slot s, std::size_t bytes) { return ctx_->scratch(int(s), bytes, where_); }
  result<float*> scratch_f32(slot s, std::int64_t count);
  /// Copies the tensor's bytes (any dtype, as stored) into scratch slot `s`; the device
  /// copy is the caller's to read or overwrite.
  result<void*> upload(slot s, const tensor& t);
  /// The device's kept copy of an immutable input (kernel_call::immutable_inputs: a weight),
  /// made on its first use and read by every later call; when the device has no room for it
  /// even with every kept copy given back, it is copied into scratch slot `s` for this call
  /// alone, as any input is.
  result<const void*> resident(slot s, const tensor& t);
  /// Input i of a kernel call on the device: the kept copy of a weight (resident()), the
  /// plan's device copy of a value a CUDA kernel left there, else a copy into slot `s`.
  result<const void*> input(slot s, const kernel_call& c, std::size_t i);
  /// The same for an f32 input (errc::internal for another dtype: kernel() let it in).
  result<const float*> input_f32(slot s, const kernel_call& c, std::size_t i);
  /// Where the kernel writes its f32 output: the plan's device memory for it, else (no such
  /// plan, or no room left on the device for it) scratch slot_out.
  result<float*> output_f32(const kernel_call& c);
  /// After the kernel writing the output at `dev` (output_f32) is queued: in a plan with
  /// device values it stays there; else it is copied back and waited for (download()).
  status finish(const kernel_call& c, const void* dev);
  /// Copies `bytes` bytes of host memory into scratch slot `s` (part of a tensor: the rows of
  /// a KV cache a step reads).
  result<void*> upload_bytes(slot s, const void* host, std::size_t bytes);
  /// Copies `count` floats of host memory into scratch slot `s`.
  result<float*> upload_floats(slot s, const float* host, std::size_t count);
  /// Copies `out.nbytes()` bytes from `dev` into `out` and waits for the stream, so every
  /// error of the call's queued work surfaces here.
  status download(tensor& out, const void* dev);

 private:
  device_call(std::shared_ptr<device_context> ctx, std::string_view op)
      : ctx_(std::move(ctx)), lock_(ctx_->mutex()), op_(op), where_(op_where(op)) {}
  std::shared_ptr<device_context> ctx_;
  std::unique_lock<std::mutex> lock_;
  std::string_view op_;  ///< a literal in the kernel_fn
  std::string where_;
  bool out_on_host_ = false;  ///< output_f32 found no device room: finish() copies it back
};

}  // namespace mpakt::cuda
