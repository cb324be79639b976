#pragma once
/// CUDA handles with RAII, and the device context the CUDA kernels run on.
///
/// Internal to backends/cuda (includes CUDA headers). Every CUDA or cuBLAS failure becomes
/// an `error` whose message names the op and the CUDA error string; nothing here throws,
/// aborts or exits.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backends/resident_cache.hpp"
#include "runtime/status.hpp"

namespace mpakt::cuda {

/// errc::internal: "CUDA <what> failed in <where>: <CUDA's error string>", e.g. "CUDA
/// cudaMalloc of 4096 bytes failed in op 'rmsnorm': out of memory". `where` names the op
/// ("op 'rmsnorm'", see op_where) or the device being opened ("device 0").
error cuda_error(std::string_view where, std::string_view what, cudaError_t e);
error cublas_error(std::string_view where, std::string_view what, cublasStatus_t s);
/// ok for cudaSuccess / CUBLAS_STATUS_SUCCESS, else the error above.
status check(cudaError_t e, std::string_view where, std::string_view what);
status check(cublasStatus_t s, std::string_view where, std::string_view what);
/// "op 'rmsnorm'".
std::string op_where(std::string_view op);

/// One cudaMalloc allocation, freed on destruction. Move-only.
class device_buffer {
 public:
  device_buffer() = default;
  ~device_buffer();
  device_buffer(device_buffer&& o) noexcept;
  device_buffer& operator=(device_buffer&& o) noexcept;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  /// `where` names the caller in the error message (see cuda_error).
  static result<device_buffer> allocate(std::size_t bytes, std::string_view where);
  void* get() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  void reset();
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

/// A non-blocking CUDA stream, destroyed on destruction. Move-only.
class stream_handle {
 public:
  stream_handle() = default;
  ~stream_handle();
  stream_handle(stream_handle&& o) noexcept;
  stream_handle& operator=(stream_handle&& o) noexcept;
  stream_handle(const stream_handle&) = delete;
  stream_handle& operator=(const stream_handle&) = delete;

  static result<stream_handle> create(std::string_view where);
  cudaStream_t get() const { return s_; }

 private:
  void reset();
  cudaStream_t s_ = nullptr;
};

/// A cuBLAS handle bound to a stream, destroyed on destruction. Move-only.
class cublas_handle {
 public:
  cublas_handle() = default;
  ~cublas_handle();
  cublas_handle(cublas_handle&& o) noexcept;
  cublas_handle& operator=(cublas_handle&& o) noexcept;
  cublas_handle(const cublas_handle&) = delete;
  cublas_handle& operator=(const cublas_handle&) = delete;

  static result<cublas_handle> create(cudaStream_t stream, std::string_view where);
  cublasHandle_t get() const { return h_; }

 private:
  void reset();
  cublasHandle_t h_ = nullptr;
};

/// Everything CUDA kernels of one cuda_backend use: its device, one stream, one cuBLAS
/// handle and grow-only scratch buffers (one per slot, reaching a steady size after the
/// first calls, like runtime's `workspace`).
///
/// Owned (shared) by its cuda_backend and, for the length of one kernel call, by that
/// call. Thread-safety: all use goes through `device_call` (ops/call.hpp), which holds
/// mutex() for the whole call; nothing else touches the stream, the handle or the slots.
class device_context {
 public:
  /// Selects `device` and creates the stream and cuBLAS handle.
  static result<std::shared_ptr<device_context>> open(int device);
  ~device_context();
  device_context(const device_context&) = delete;
  device_context& operator=(const device_context&) = delete;

  int device() const { return device_; }
  const std::string& name() const { return name_; }
  cudaStream_t stream() const { return stream_.get(); }
  cublasHandle_t blas() const { return blas_.get(); }
  std::mutex& mutex() { return mu_; }

  /// At least `bytes` of device memory in scratch slot `slot` (contents undefined), valid
  /// until the slot is asked for again. Caller holds mutex(). `where` names the caller in
  /// errors. Growing a slot first waits for the stream, so queued work never reads freed
  /// memory.
  result<void*> scratch(int slot, std::size_t bytes, std::string_view where);

  /// The device's copies of the weights kernels have read (kernel_call::immutable_inputs),
  /// made once each and kept while their host tensors live. Caller holds mutex().
  resident_cache<device_buffer>& weights() { return weights_; }

 private:
  device_context() = default;
  int device_ = 0;
  std::string name_;
  std::mutex mu_;
  // Destroyed in reverse order: buffers, then the cuBLAS handle, then the stream.
  stream_handle stream_;
  cublas_handle blas_;
  std::vector<device_buffer> slots_;
  resident_cache<device_buffer> weights_;
};

/// The context CUDA kernels run on: the one the calling thread's worker activated for its run
/// (set_thread_context), else the live context most recently made current process-wide, or
/// nullptr when no cuda_backend is alive (cuda_backend.hpp). Safe from any thread.
std::shared_ptr<device_context> current_context();
/// Makes `ctx` the calling thread's context until another is set (held weakly).
void set_thread_context(const std::shared_ptr<device_context>& ctx);
/// Makes `ctx` current. Held weakly, so a context never outlives its backend; when it goes,
/// the live context made current before it is current again.
void set_current_context(const std::shared_ptr<device_context>& ctx);

}  // namespace mpakt::cuda
