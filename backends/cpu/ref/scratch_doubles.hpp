#pragma once
/// Double-precision scratch for reference kernels, carved from the executor's workspace
/// (which hands out floats) so the steady state allocates nothing. Reference kernels
/// accumulate in double because they are the oracle faster kernels are checked against.

#include <cstdint>
#include <new>

#include "runtime/op.hpp"

namespace mpakt::cpu_ref {

/// At least n doubles, valid until the next request for the same slot. Uses float slot `slot`.
inline double* scratch_doubles(workspace& ws, std::size_t n, int slot) {
  float* raw = ws.floats(2 * n + 2, slot);
  // Heap blocks are at least 8-byte aligned; the +2 floats cover a 4-byte misalignment.
  auto addr = reinterpret_cast<std::uintptr_t>(raw);
  void* aligned = reinterpret_cast<void*>((addr + alignof(double) - 1) & ~std::uintptr_t(alignof(double) - 1));
  return new (aligned) double[n];
}

}  // namespace mpakt::cpu_ref
