#pragma once
/// The CUDA backend's device_state (runtime/op.hpp): a planned graph's values kept in device
/// memory between its CUDA kernels.
///
/// Each step output a CUDA kernel writes gets a device buffer of its own, keyed by the host
/// tensor's bytes (a plan's step outputs keep their host tensors for the plan's life), and
/// stays there: the next CUDA kernel that reads the value reads that buffer, and the bytes
/// cross to the host only when the executor asks (a host kernel reads or writes them, the
/// run's outputs, value() and take()). A value is in one of three states: only the device
/// copy is current (`device_newer`), both are (`same`, after a copy back), or the device
/// copy is not to be used (`stale`: never written, or the host wrote since).
///
/// Internal to backends/cuda. Thread-safety: the executor's calls (to_host, host_wrote) take
/// the device context's lock; the rest is called by kernels inside a device_call, which
/// holds it.

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backends/cuda/context.hpp"
#include "runtime/op.hpp"

namespace mpakt::cuda {

class device_values final : public device_state {
 public:
  explicit device_values(std::shared_ptr<device_context> ctx) : ctx_(std::move(ctx)) {}
  /// Waits for the stream (queued kernels may still use the buffers), then frees them.
  ~device_values() override;
  device_values(const device_values&) = delete;
  device_values& operator=(const device_values&) = delete;

  status to_host(std::span<const tensor* const> tensors) override;
  void host_wrote(const tensor& t) override;

  const std::shared_ptr<device_context>& context() const { return ctx_; }

  // ---- inside a device_call (its context's lock held) ----

  /// The device's current copy of t's bytes, or nullptr when it holds none.
  const void* current(const tensor& t) const;
  /// Device memory for a kernel's output t (contents undefined). Values whose bytes t's
  /// overlap without being t (none, in plans the executor makes) come back first and are
  /// dropped. `where` names the op in errors.
  result<void*> output(const tensor& t, std::string_view where);
  /// The kernel writing t is queued: its device copy is the current one.
  void written(const tensor& t);
  /// Copies back every value overlapping [p, p + n) whose device copy alone is current, and
  /// waits for the copies.
  status bring_back(const std::byte* p, std::size_t n, std::string_view where);

 private:
  enum class state : unsigned char { stale, device_newer, same };
  struct value {
    const std::byte* host = nullptr;
    std::size_t bytes = 0;
    device_buffer buf;
    state st = state::stale;
  };
  value* find(const std::byte* host);
  /// Queues the copy back of every overlapping device_newer value; true when any was queued.
  result<bool> queue_back(const std::byte* p, std::size_t n, std::string_view where);

  std::shared_ptr<device_context> ctx_;
  std::vector<value> values_;
};

}  // namespace mpakt::cuda
