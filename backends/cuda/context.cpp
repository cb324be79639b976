#include "backends/cuda/context.hpp"

#include <utility>

namespace mpakt::cuda {

error cuda_error(std::string_view where, std::string_view what, cudaError_t e) {
  return make_error(errc::internal, "CUDA " + std::string(what) + " failed in " + std::string(where) + ": " +
                                        cudaGetErrorString(e));
}

error cublas_error(std::string_view where, std::string_view what, cublasStatus_t s) {
  return make_error(errc::internal, "CUDA " + std::string(what) + " failed in " + std::string(where) + ": " +
                                        cublasGetStatusString(s));
}

status check(cudaError_t e, std::string_view where, std::string_view what) {
  if (e == cudaSuccess) return ok_status();
  return cuda_error(where, what, e);
}

status check(cublasStatus_t s, std::string_view where, std::string_view what) {
  if (s == CUBLAS_STATUS_SUCCESS) return ok_status();
  return cublas_error(where, what, s);
}

std::string op_where(std::string_view op) { return "op '" + std::string(op) + "'"; }

// ---- device_buffer ----

device_buffer::~device_buffer() { reset(); }

device_buffer::device_buffer(device_buffer&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}

device_buffer& device_buffer::operator=(device_buffer&& o) noexcept {
  if (this != &o) {
    reset();
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

void device_buffer::reset() {
  // A failure here (e.g. the runtime already unloading at exit) leaves nothing to do.
  if (p_) (void)cudaFree(p_);
  p_ = nullptr;
  n_ = 0;
}

result<device_buffer> device_buffer::allocate(std::size_t bytes, std::string_view where) {
  device_buffer b;
  if (bytes == 0) return b;
  cudaError_t e = cudaMalloc(&b.p_, bytes);
  if (e != cudaSuccess) {
    b.p_ = nullptr;
    // An allocation that fails is recorded as the thread's last error, which the next kernel
    // launch's check (cudaGetLastError) would report as its own: callers may go on without
    // this memory (the kept weights, the device values), so it is cleared here.
    (void)cudaGetLastError();
    return cuda_error(where, "cudaMalloc of " + std::to_string(bytes) + " bytes", e);
  }
  b.n_ = bytes;
  return b;
}

// ---- stream_handle ----

stream_handle::~stream_handle() { reset(); }

stream_handle::stream_handle(stream_handle&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}

stream_handle& stream_handle::operator=(stream_handle&& o) noexcept {
  if (this != &o) {
    reset();
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}

void stream_handle::reset() {
  if (s_) (void)cudaStreamDestroy(s_);
  s_ = nullptr;
}

result<stream_handle> stream_handle::create(std::string_view where) {
  stream_handle h;
  MPAKT_TRY(check(cudaStreamCreateWithFlags(&h.s_, cudaStreamNonBlocking), where, "cudaStreamCreate"));
  return h;
}

// ---- cublas_handle ----

cublas_handle::~cublas_handle() { reset(); }

cublas_handle::cublas_handle(cublas_handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}

cublas_handle& cublas_handle::operator=(cublas_handle&& o) noexcept {
  if (this != &o) {
    reset();
    h_ = std::exchange(o.h_, nullptr);
  }
  return *this;
}

void cublas_handle::reset() {
  if (h_) (void)cublasDestroy(h_);
  h_ = nullptr;
}

result<cublas_handle> cublas_handle::create(cudaStream_t stream, std::string_view where) {
  cublas_handle h;
  MPAKT_TRY(check(cublasCreate(&h.h_), where, "cublasCreate"));
  MPAKT_TRY(check(cublasSetStream(h.h_, stream), where, "cublasSetStream"));
  // Plain f32 arithmetic: the default mode never uses TF32 tensor cores for Sgemm, so
  // results match the CPU reference to f32 rounding. (Say so, in case defaults change.)
  MPAKT_TRY(check(cublasSetMathMode(h.h_, CUBLAS_DEFAULT_MATH), where, "cublasSetMathMode"));
  return h;
}

// ---- device_context ----

result<std::shared_ptr<device_context>> device_context::open(int device) {
  const std::string where = "device " + std::to_string(device);
  std::shared_ptr<device_context> ctx(new device_context());
  ctx->device_ = device;
  MPAKT_TRY(check(cudaSetDevice(device), where, "cudaSetDevice"));
  cudaDeviceProp prop{};
  MPAKT_TRY(check(cudaGetDeviceProperties(&prop, device), where, "cudaGetDeviceProperties"));
  ctx->name_ = prop.name;
  auto s = stream_handle::create(where);
  MPAKT_TRY(s);
  ctx->stream_ = std::move(s).value();
  auto b = cublas_handle::create(ctx->stream_.get(), where);
  MPAKT_TRY(b);
  ctx->blas_ = std::move(b).value();
  return ctx;
}

device_context::~device_context() {
  // Handles belong to this device; select it so their destruction runs there.
  (void)cudaSetDevice(device_);
  if (stream_.get()) (void)cudaStreamSynchronize(stream_.get());
  slots_.clear();
  weights_.clear();
}

result<void*> device_context::scratch(int slot, std::size_t bytes, std::string_view where) {
  if (slot < 0) return make_error(errc::internal, "bad CUDA scratch slot in " + std::string(where));
  if (std::size_t(slot) >= slots_.size()) slots_.resize(std::size_t(slot) + 1);
  device_buffer& b = slots_[std::size_t(slot)];
  if (b.size() < bytes) {
    // Work already queued may still read the old buffer.
    MPAKT_TRY(check(cudaStreamSynchronize(stream()), where, "cudaStreamSynchronize"));
    b = device_buffer{};  // free first, so the old and new buffers never coexist
    auto nb = device_buffer::allocate(bytes, where);
    MPAKT_TRY(nb);
    b = std::move(nb).value();
  }
  return b.get();
}

// ---- the current context ----

namespace {
std::mutex current_mu;
/// Contexts made current, most recent last, held weakly: when the newest backend goes, the
/// one made current before it (if still alive) becomes current again.
std::vector<std::weak_ptr<device_context>> current_stack;
}  // namespace

namespace {
/// The context the calling thread's worker made current for its runs (activate()).
thread_local std::weak_ptr<device_context> thread_current;
}  // namespace

void set_thread_context(const std::shared_ptr<device_context>& ctx) { thread_current = ctx; }

std::shared_ptr<device_context> current_context() {
  if (auto ctx = thread_current.lock()) return ctx;
  std::lock_guard lk(current_mu);
  while (!current_stack.empty()) {
    if (auto ctx = current_stack.back().lock()) return ctx;
    current_stack.pop_back();
  }
  return nullptr;
}

void set_current_context(const std::shared_ptr<device_context>& ctx) {
  std::lock_guard lk(current_mu);
  // Drop expired entries and any earlier entry for ctx, then put ctx on top.
  std::erase_if(current_stack, [&](const std::weak_ptr<device_context>& w) {
    auto p = w.lock();
    return !p || p == ctx;
  });
  if (ctx) current_stack.push_back(ctx);
}

}  // namespace mpakt::cuda
