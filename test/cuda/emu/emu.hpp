#pragma once
/// A CPU emulator for the CUDA kernels' device code (test/cuda/kernels_emulated_test.cpp), so
/// the kernels run — against the CPU reference — on machines without a GPU, CI's among them.
/// rewrite_launches.py turns each kernels/*.cu into host C++: a launch runs its blocks one
/// after another, each block's threads as std::threads running at once, with __syncthreads
/// as a barrier of the block and __shfl_xor_sync through a per-warp buffer and barrier; the
/// dynamic shared memory of a launch is one buffer, filled with a NaN of a known payload
/// before every block (a read of a value the block did not write shows). 16-byte loads
/// through __ldg/__ldcs are counted, and those at a misaligned address too.
///
/// What it cannot show: timing, the hardware's own rounding of expf/tanhf (glibc's here), or
/// memory-model effects beyond what barriers order. Include it before the generated files.

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace emu {
inline thread_local uint3 thread_idx{};
inline thread_local uint3 block_idx{};
inline dim3 block_dim, grid_dim;
inline std::unique_ptr<std::barrier<>> block_barrier;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
inline float shuffle_buffer[1024];
inline std::vector<float> dynamic_shared;
inline constexpr unsigned poison_bits = 0x7fc0dead;
inline long launches = 0;
inline bool bad_launch = false;  ///< a launch the hardware would refuse (the test fails on it)
/// Caps one-block-per-row grids (0: none), so kernels' grid-stride loops over rows run.
inline unsigned row_cap = 0;
inline std::atomic<long> vector_loads{0}, misaligned_loads{0};

inline float poison() {
  float f;
  std::memcpy(&f, &poison_bits, 4);
  return f;
}
template <class T>
T* dyn_smem_ptr() {
  return reinterpret_cast<T*>(dynamic_shared.data());
}

template <class F>
void launch(dim3 grid, dim3 block, std::size_t smem, F f) {
  ++launches;
  const unsigned nt = block.x * block.y * block.z;
  if (nt == 0 || nt > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || smem > 48 * 1024) {
    bad_launch = true;
    return;
  }
  block_dim = block;
  grid_dim = grid;
  dynamic_shared.assign((smem + 3) / 4 + 1, poison());
  block_barrier = std::make_unique<std::barrier<>>(nt);
  warp_barriers.clear();
  for (unsigned w = 0; w < (nt + 31) / 32; ++w)
    warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32u, nt - 32 * w)));
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < nt; ++t)
    threads.emplace_back([&, t] {
      thread_idx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
      for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
          for (unsigned x = 0; x < grid.x; ++x) {
            block_idx = uint3{x, y, z};
            f();
            block_barrier->arrive_and_wait();  // the block is done
            if (t == 0) std::fill(dynamic_shared.begin(), dynamic_shared.end(), poison());
            block_barrier->arrive_and_wait();  // the next starts on poisoned shared memory
          }
    });
  for (auto& th : threads) th.join();
}

inline float shfl_xor(float v, int o) {
  const unsigned t = thread_idx.x + thread_idx.y * block_dim.x;
  const unsigned w = t / 32, l = t % 32;
  shuffle_buffer[t] = v;
  warp_barriers[w]->arrive_and_wait();
  const float r = shuffle_buffer[w * 32 + (l ^ unsigned(o))];
  warp_barriers[w]->arrive_and_wait();
  return r;
}

template <class T>
T counted_load(const T* p) {
  if (sizeof(T) > 4) {
    ++vector_loads;
    if (reinterpret_cast<std::uintptr_t>(p) % sizeof(T)) ++misaligned_loads;
  }
  return *p;
}
}  // namespace emu

#undef __global__
#undef __device__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(...)
#define threadIdx emu::thread_idx
#define blockIdx emu::block_idx
#define blockDim emu::block_dim
#define gridDim emu::grid_dim
#define __syncthreads() emu::block_barrier->arrive_and_wait()
#define __shfl_xor_sync(mask, v, o) emu::shfl_xor(v, o)
#define cudaGetLastError() (emu::bad_launch ? cudaErrorInvalidConfiguration : cudaSuccess)

template <class T>
T __ldg(const T* p) {
  return emu::counted_load(p);
}
template <class T>
T __ldcs(const T* p) {
  return emu::counted_load(p);
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
using std::fmaf;
using std::isnan;
using std::max;
using std::min;
using ::expf;
using ::fmaxf;
using ::tanhf;

#include "backends/cuda/kernels/common.cuh"

namespace emu {
inline unsigned capped_row_blocks(std::int64_t rows) {
  const unsigned b = mpakt::cuda::k::row_blocks(rows);
  return row_cap > 0 && b > row_cap ? row_cap : b;
}
}  // namespace emu
