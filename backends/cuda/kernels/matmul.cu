// Kernels that read weights in place (f32, bf16, f16): widening, the few-rows matmul of a
// decode step (a GEMV for each row, the weight read once per launch), rounding activations to
// bf16 for the tensor-core products, and embedding lookups. Many-row products are cuBLAS
// (ops/matmul.cpp).

#include <cuda_fp16.h>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/launch.hpp"

namespace mpakt::cuda::k {

namespace {

/// bf16 as stored: the upper 16 bits of an f32.
struct bf16_bits {
  std::uint16_t bits;
};

__device__ inline float load(const float* p, std::int64_t i) { return p[i]; }
__device__ inline float load(const bf16_bits* p, std::int64_t i) {
  return __uint_as_float(unsigned(p[i].bits) << 16);
}
__device__ inline float load(const __half* p, std::int64_t i) { return __half2float(p[i]); }

/// Calls f with the weight pointer cast to its element type.
template <class F>
cudaError_t with_weight(const void* w, weight_type t, F&& f) {
  switch (t) {
    case weight_type::f32: f(static_cast<const float*>(w)); return cudaSuccess;
    case weight_type::bf16: f(static_cast<const bf16_bits*>(w)); return cudaSuccess;
    case weight_type::f16: f(static_cast<const __half*>(w)); return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

template <class W>
__global__ void widen_kernel(const W* src, std::int64_t n, float* dst) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = load(src, i);
}

// ---- few-rows products (decode, batched decode, verify passes) ----
//
// Both layouts share one plan: a block of gemv_threads (8 warps) owns a tile of output columns
// for every row of the launch; each thread sums its share of k for each (row, column) in f32
// with fmaf, in increasing k; the shares meet in a fixed order (warp shuffles, then the warps
// in order through shared memory). Nothing in that order depends on the number of rows, the
// template's row capacity R or whether the weights arrive by vector or scalar loads (`Vec`), so
// a row gets the same bits alone, in a batch or in a verify pass, on either load path.

constexpr int gemv_threads = 256;
constexpr int gemv_warps = gemv_threads / 32;
/// Blocks of one launch at most; larger N loops (grid-stride). About 4 resident blocks per
/// SM: 4096 blocks are several waves even on a 132-SM H200, so the block scheduler still
/// balances the load, and one block per tile whenever N / (columns per tile) <= 4096.
constexpr std::int64_t gemv_max_blocks = 4096;
/// Rows one launch takes at most (its accumulators stay in registers); matmul_few_rows
/// launches once per run of this many rows.
constexpr int launch_rows_max = 16;

/// The 32-bit word u holding 4 / sizeof(W) weights (the first in its low bits: little
/// endian), widened to f32.
__device__ inline void widen_word(unsigned u, const float*, float* f) { f[0] = __uint_as_float(u); }
__device__ inline void widen_word(unsigned u, const bf16_bits*, float* f) {
  f[0] = __uint_as_float(u << 16);
  f[1] = __uint_as_float(u & 0xffff0000u);
}
__device__ inline void widen_word(unsigned u, const __half*, float* f) {
  f[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(u & 0xffffu)));
  f[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(u >> 16)));
}

/// f[j] = p[j] widened, for j < V. Vec: one 8- or 16-byte load (streaming: each weight is read
/// once per launch, so it should not push the activations out of L1); the caller guarantees p
/// is aligned to V * sizeof(W) bytes and all V weights lie inside the row. Otherwise element
/// by element, and 0 for j >= valid (past the end of the row).
template <bool Vec, int V, class W>
__device__ inline void load_weights(const W* p, std::int64_t valid, float (&f)[V]) {
  if constexpr (Vec) {
    constexpr int bytes = V * int(sizeof(W));
    static_assert(bytes == 8 || bytes == 16, "a vector load is 8 or 16 bytes");
    constexpr int per_word = 4 / int(sizeof(W));
    if constexpr (bytes == 16) {
      const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p));
      const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) widen_word(u[i], p, f + i * per_word);
    } else {
      const uint2 v = __ldcs(reinterpret_cast<const uint2*>(p));
      const unsigned u[2] = {v.x, v.y};
#pragma unroll
      for (int i = 0; i < 2; ++i) widen_word(u[i], p, f + i * per_word);
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) f[j] = j < valid ? load(p, j) : 0.0f;
  }
}

/// f[j] = p[j] for j < V, activations, through the read-only (L1) path. Vec: V / 4 16-byte
/// loads, p 16-byte aligned and all V inside the row; otherwise one by one, 0 for j >= valid.
template <bool Vec, int V>
__device__ inline void load_acts(const float* p, std::int64_t valid, float (&f)[V]) {
  if constexpr (Vec) {
    static_assert(V % 4 == 0, "whole float4s");
#pragma unroll
    for (int i = 0; i < V / 4; ++i) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(p) + i);
      f[4 * i] = v.x;
      f[4 * i + 1] = v.y;
      f[4 * i + 2] = v.z;
      f[4 * i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) f[j] = j < valid ? __ldg(p + j) : 0.0f;
  }
}

/// A tile's outputs: each (row, column) the sum of the 8 warps' parts, in warp order.
template <int R, int C>
__device__ inline void write_tile(const float (&part)[gemv_warps][R][C], int rows, std::int64_t nd, std::int64_t n0,
                                  float* out) {
  for (int t = threadIdx.x; t < R * C; t += gemv_threads) {
    const int m = t / C, col = t % C;
    if (m < rows && n0 + col < nd) {
      float v = part[0][m][col];
#pragma unroll
      for (int y = 1; y < gemv_warps; ++y) v += part[y][m][col];
      out[m * nd + n0 + col] = v;
    }
  }
}

// w stored [N, K] (trans_b). A block owns trans_cols consecutive weight rows (output columns);
// its 8 warps split k: lane L of warp W takes the runs of V = 16 / sizeof(W) weights starting
// at k0 = (32 W + L) V, k0 + 256 V, ..., so one warp reads 32 * 16 = 512 contiguous bytes of a
// weight row per load and the activations alongside. Sums: over a lane's runs in order, then
// the warp's lanes (shuffles), then the 8 warps in order.
// Vec: every run is whole (K a multiple of V) and 16-byte aligned in w and in a.
constexpr int trans_cols = 4;

template <class W, int R, bool Vec>
__global__ void __launch_bounds__(gemv_threads)
    gemv_trans_kernel(const float* __restrict__ a, const W* __restrict__ w, int rows, std::int64_t kd,
                      std::int64_t nd, float* __restrict__ out) {
  constexpr int V = 16 / int(sizeof(W));
  constexpr int C = trans_cols;
  __shared__ float part[gemv_warps][R][C];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::int64_t k_first = (std::int64_t(warp) * 32 + lane) * V;
  constexpr std::int64_t k_step = std::int64_t(gemv_warps) * 32 * V;
  for (std::int64_t n0 = std::int64_t(blockIdx.x) * C; n0 < nd; n0 += std::int64_t(gridDim.x) * C) {
    float acc[R][C];
#pragma unroll
    for (int m = 0; m < R; ++m)
#pragma unroll
      for (int c = 0; c < C; ++c) acc[m][c] = 0.0f;
    for (std::int64_t k0 = k_first; k0 < kd; k0 += k_step) {
      float wv[C][V];
#pragma unroll
      for (int c = 0; c < C; ++c) {
        if (n0 + c < nd) {
          load_weights<Vec>(w + (n0 + c) * kd + k0, kd - k0, wv[c]);
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) wv[c][j] = 0.0f;
        }
      }
#pragma unroll
      for (int m = 0; m < R; ++m) {
        if (m < rows) {
          float av[V];
          load_acts<Vec>(a + m * kd + k0, kd - k0, av);
#pragma unroll
          for (int c = 0; c < C; ++c)
#pragma unroll
            for (int j = 0; j < V; ++j) acc[m][c] = fmaf(wv[c][j], av[j], acc[m][c]);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < R; ++m) {
      if (m < rows) {  // (the same for the whole warp: every lane shuffles)
#pragma unroll
        for (int c = 0; c < C; ++c) {
          const float v = warp_sum(acc[m][c]);
          if (lane == 0) part[warp][m][c] = v;
        }
      }
    }
    __syncthreads();
    write_tile(part, rows, nd, n0, out);
    __syncthreads();  // (part is written again for the next tile)
  }
}

// w stored [K, N]. A block owns plain_cols consecutive output columns; lane L of a warp takes
// the plain_per_lane columns from (L % 8) * plain_per_lane on and the k slice s = 4 * warp +
// L / 8 of 32 (k = s, s + 32, ...): per load a warp reads 4 weight rows, 8 * 4 consecutive
// weights of each. Sums: over a slice's k in order, then the 4 slices of a warp
// ((s0 + s1) + (s2 + s3), shuffles), then the 8 warps in order.
// Vec: N a multiple of 4 and w aligned to 4 weights, so every lane's 4 weights are one
// aligned 8-byte (bf16, f16) or 16-byte (f32) load, all inside the row.
constexpr int plain_per_lane = 4;
constexpr int plain_groups = 8;  // column groups of a warp
constexpr int plain_cols = plain_groups * plain_per_lane;
constexpr int plain_slices = gemv_warps * (32 / plain_groups);

template <class W, int R, bool Vec>
__global__ void __launch_bounds__(gemv_threads)
    gemv_plain_kernel(const float* __restrict__ a, const W* __restrict__ w, int rows, std::int64_t kd,
                      std::int64_t nd, float* __restrict__ out) {
  constexpr int P = plain_per_lane;
  __shared__ float part[gemv_warps][R][plain_cols];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = lane % plain_groups, sub = lane / plain_groups;
  const std::int64_t slice = std::int64_t(warp) * (32 / plain_groups) + sub;
  for (std::int64_t n0 = std::int64_t(blockIdx.x) * plain_cols; n0 < nd; n0 += std::int64_t(gridDim.x) * plain_cols) {
    const std::int64_t n = n0 + group * P;  // this lane's first column
    float acc[R][P];
#pragma unroll
    for (int m = 0; m < R; ++m)
#pragma unroll
      for (int j = 0; j < P; ++j) acc[m][j] = 0.0f;
    if (n < nd) {
      for (std::int64_t k = slice; k < kd; k += plain_slices) {
        float wv[P];
        load_weights<Vec>(w + k * nd + n, nd - n, wv);
#pragma unroll
        for (int m = 0; m < R; ++m) {
          if (m < rows) {
            const float av = __ldg(a + m * kd + k);
#pragma unroll
            for (int j = 0; j < P; ++j) acc[m][j] = fmaf(wv[j], av, acc[m][j]);
          }
        }
      }
    }
    static_assert(32 / plain_groups == 4, "the shuffles below add 4 slices");
#pragma unroll
    for (int m = 0; m < R; ++m) {
      if (m < rows) {  // (the same for the whole warp: every lane shuffles)
#pragma unroll
        for (int j = 0; j < P; ++j) {
          float v = acc[m][j];
          v += __shfl_xor_sync(0xffffffffu, v, plain_groups);      // s0 + s1, s2 + s3
          v += __shfl_xor_sync(0xffffffffu, v, 2 * plain_groups);  // (s0 + s1) + (s2 + s3)
          if (sub == 0) part[warp][m][group * P + j] = v;
        }
      }
    }
    __syncthreads();
    write_tile(part, rows, nd, n0, out);
    __syncthreads();  // (part is written again for the next tile)
  }
}

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

unsigned gemv_blocks(std::int64_t n, int cols_per_block) {
  const std::int64_t want = (n + cols_per_block - 1) / cols_per_block;
  return unsigned(want < gemv_max_blocks ? want : gemv_max_blocks);
}

/// One launch: rows <= R <= launch_rows_max.
template <int R, class W>
void launch_gemv(const float* a, const W* w, bool trans_b, int rows, std::int64_t kd, std::int64_t nd, float* out,
                 cudaStream_t s) {
  if (trans_b) {
    // Vec: row n of w starts n * K * sizeof(W) bytes past w, a multiple of 16 when K *
    // sizeof(W) is; a lane's run starts a multiple of V weights (16 bytes) into it. K is then
    // a multiple of V (so no run is cut) and of 4 (so each activation row stays 16-byte aligned).
    const bool vec = aligned(w, 16) && aligned(a, 16) && (kd * std::int64_t(sizeof(W))) % 16 == 0;
    const unsigned blocks = gemv_blocks(nd, trans_cols);
    if (vec) gemv_trans_kernel<W, R, true><<<blocks, gemv_threads, 0, s>>>(a, w, rows, kd, nd, out);
    else gemv_trans_kernel<W, R, false><<<blocks, gemv_threads, 0, s>>>(a, w, rows, kd, nd, out);
  } else {
    // Vec: element k * N + n with N and n multiples of 4 sits a multiple of 4 weights past w.
    const bool vec = aligned(w, plain_per_lane * sizeof(W)) && nd % plain_per_lane == 0;
    const unsigned blocks = gemv_blocks(nd, plain_cols);
    if (vec) gemv_plain_kernel<W, R, true><<<blocks, gemv_threads, 0, s>>>(a, w, rows, kd, nd, out);
    else gemv_plain_kernel<W, R, false><<<blocks, gemv_threads, 0, s>>>(a, w, rows, kd, nd, out);
  }
}

/// bf16 bits of x, rounded to nearest even; NaN stays NaN (quiet), as f32_to_bf16 on the host.
__device__ inline std::uint16_t to_bf16(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

__global__ void round_bf16_kernel(const float* x, std::int64_t n, std::uint16_t* out) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = to_bf16(x[i]);
}

template <class W>
__global__ void embedding_kernel(const float* ids, std::int64_t count, const W* table, std::int64_t vocab,
                                 std::int64_t cols, float* out) {
  const std::int64_t n = count * cols;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const std::int64_t t = i / cols, c = i % cols;
    const float id = ids[t];
    // The comparison is false for NaN, so NaN too gives zeros.
    const bool inside = id >= 0.0f && id < float(vocab);
    float v = 0.0f;
    if (inside) {
      const std::int64_t row = std::int64_t(id);
      if (row < vocab) v = load(table, row * cols + c);
    }
    out[i] = v;
  }
}

}  // namespace

cudaError_t widen(const void* src, weight_type t, std::int64_t n, float* dst, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  cudaError_t e = with_weight(src, t, [&](auto* w) { widen_kernel<<<flat_blocks(n), flat_threads, 0, s>>>(w, n, dst); });
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t matmul_few_rows(const float* a, const void* w, weight_type t, bool trans_b, std::int64_t rows,
                            std::int64_t k, std::int64_t n, float* out, cudaStream_t s) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  if (rows > few_rows_max || k < 0) return cudaErrorInvalidValue;
  // Runs of up to launch_rows_max rows, one launch each (every row's sums are the same in any
  // run); the smallest row capacity that holds the run keeps unused accumulators out.
  for (std::int64_t r0 = 0; r0 < rows; r0 += launch_rows_max) {
    const int r = int(rows - r0 < launch_rows_max ? rows - r0 : launch_rows_max);
    const float* ar = a + r0 * k;
    float* outr = out + r0 * n;
    cudaError_t e = with_weight(w, t, [&](auto* wp) {
      if (r <= 1) launch_gemv<1>(ar, wp, trans_b, r, k, n, outr, s);
      else if (r <= 2) launch_gemv<2>(ar, wp, trans_b, r, k, n, outr, s);
      else if (r <= 4) launch_gemv<4>(ar, wp, trans_b, r, k, n, outr, s);
      else if (r <= 8) launch_gemv<8>(ar, wp, trans_b, r, k, n, outr, s);
      else launch_gemv<16>(ar, wp, trans_b, r, k, n, outr, s);
    });
    static_assert(launch_rows_max == 16, "the capacities above end at 16");
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t round_to_bf16(const float* x, std::int64_t n, std::uint16_t* out, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  round_bf16_kernel<<<flat_blocks(n), flat_threads, 0, s>>>(x, n, out);
  return cudaGetLastError();
}

cudaError_t embedding(const float* ids, std::int64_t count, const void* table, weight_type t, std::int64_t vocab,
                      std::int64_t cols, float* out, cudaStream_t s) {
  const std::int64_t n = count * cols;
  if (n <= 0) return cudaSuccess;
  cudaError_t e = with_weight(table, t, [&](auto* tp) {
    embedding_kernel<<<flat_blocks(n), flat_threads, 0, s>>>(ids, count, tp, vocab, cols, out);
  });
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace mpakt::cuda::k
