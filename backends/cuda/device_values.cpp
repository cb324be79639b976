#include "backends/cuda/device_values.hpp"

#include <algorithm>
#include <mutex>

#include "backends/cuda/ops/call.hpp"

namespace mpakt::cuda {

namespace {
bool overlaps(const std::byte* a, std::size_t an, const std::byte* b, std::size_t bn) {
  return an > 0 && bn > 0 && a < b + bn && b < a + an;
}
}  // namespace

device_values::~device_values() {
  std::lock_guard<std::mutex> lock(ctx_->mutex());
  (void)cudaSetDevice(ctx_->device());
  (void)cudaStreamSynchronize(ctx_->stream());
  values_.clear();
}

device_values::value* device_values::find(const std::byte* host) {
  for (auto& v : values_)
    if (v.host == host) return &v;
  return nullptr;
}

const void* device_values::current(const tensor& t) const {
  for (const auto& v : values_)
    if (v.host == t.data() && v.st != state::stale && v.bytes >= t.nbytes()) return v.buf.get();
  return nullptr;
}

result<bool> device_values::queue_back(const std::byte* p, std::size_t n, std::string_view where) {
  bool queued = false;
  for (auto& v : values_) {
    if (v.st != state::device_newer || !overlaps(v.host, v.bytes, p, n)) continue;
    MPAKT_TRY(check(cudaMemcpyAsync(const_cast<std::byte*>(v.host), v.buf.get(), v.bytes, cudaMemcpyDeviceToHost,
                                    ctx_->stream()),
                    where, "cudaMemcpyAsync (device value to host)"));
    v.st = state::same;
    queued = true;
  }
  return queued;
}

status device_values::bring_back(const std::byte* p, std::size_t n, std::string_view where) {
  MPAKT_CUDA_ASSIGN(const bool queued, queue_back(p, n, where));
  if (queued) MPAKT_TRY(check(cudaStreamSynchronize(ctx_->stream()), where, "cudaStreamSynchronize"));
  return ok_status();
}

result<void*> device_values::output(const tensor& t, std::string_view where) {
  const std::byte* p = t.data();
  const std::size_t n = t.nbytes();
  bool queued = false;
  for (auto& v : values_) {
    if (v.host == p || !overlaps(v.host, v.bytes, p, n)) continue;
    MPAKT_CUDA_ASSIGN(const bool q, queue_back(v.host, v.bytes, where));
    queued = queued || q;
    v.st = state::stale;  // its bytes are t's now
  }
  if (queued) MPAKT_TRY(check(cudaStreamSynchronize(ctx_->stream()), where, "cudaStreamSynchronize"));
  value* v = find(p);
  if (!v) {
    values_.push_back(value{p, 0, {}, state::stale});
    v = &values_.back();
  }
  v->st = state::stale;  // what it held is dead: this step writes the value anew
  if (v->buf.size() < n) {
    // Queued kernels may still read the old buffer.
    MPAKT_TRY(check(cudaStreamSynchronize(ctx_->stream()), where, "cudaStreamSynchronize"));
    v->buf = device_buffer{};
    MPAKT_CUDA_ASSIGN(v->buf, device_buffer::allocate(n, where));
  }
  v->bytes = n;  // (stale until the kernel writing it is queued: written())
  return v->buf.get();
}

void device_values::written(const tensor& t) {
  if (value* v = find(t.data())) v->st = state::device_newer;
}

status device_values::to_host(std::span<const tensor* const> tensors) {
  std::lock_guard<std::mutex> lock(ctx_->mutex());
  // (a host step usually reads nothing only the device holds: no CUDA call then)
  if (std::none_of(values_.begin(), values_.end(), [](const value& v) { return v.st == state::device_newer; }))
    return ok_status();
  constexpr std::string_view where = "the device's values";
  // (the CUDA runtime's current device is per host thread)
  MPAKT_TRY(check(cudaSetDevice(ctx_->device()), where, "cudaSetDevice"));
  bool queued = false;
  for (const tensor* t : tensors) {
    if (!t) continue;
    MPAKT_CUDA_ASSIGN(const bool q, queue_back(t->data(), t->nbytes(), where));
    queued = queued || q;
  }
  if (queued) MPAKT_TRY(check(cudaStreamSynchronize(ctx_->stream()), where, "cudaStreamSynchronize"));
  return ok_status();
}

void device_values::host_wrote(const tensor& t) {
  std::lock_guard<std::mutex> lock(ctx_->mutex());
  for (auto& v : values_)
    if (overlaps(v.host, v.bytes, t.data(), t.nbytes())) v.st = state::stale;
}

}  // namespace mpakt::cuda
