// The per-level kernels' scratch buffers (isa_kernels.hpp, kernel_scratch), kept here on the
// dispatching side: the containers and allocator calls are compiled for the baseline
// instruction set only.

#include <array>
#include <cstdlib>
#include <new>

#include "backends/cpu/fast/isa_kernels.hpp"

namespace mpakt::cpu_fast {

namespace {

struct scratch_buffer {
  void* data = nullptr;
  std::size_t bytes = 0;
  scratch_buffer() = default;
  scratch_buffer(const scratch_buffer&) = delete;
  scratch_buffer& operator=(const scratch_buffer&) = delete;
  ~scratch_buffer() { std::free(data); }
};

}  // namespace

void* kernel_scratch(scratch_slot slot, std::size_t bytes) {
  thread_local std::array<scratch_buffer, std::size_t(scratch_slot::count)> buffers;
  scratch_buffer& b = buffers[std::size_t(slot)];
  if (b.bytes < bytes || !b.data) {
    // aligned_alloc takes whole multiples of the alignment; one more line so that even an
    // empty request gets a buffer
    const std::size_t rounded = (bytes + 63) / 64 * 64 + 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    std::free(b.data);
    b.data = p;
    b.bytes = rounded;
  }
  return b.data;
}

}  // namespace mpakt::cpu_fast
