// Attention on the device: every query row and head in its own block, the keys it may see
// split into chunks over blocks (flash-decoding: a decode step has one row, so its few heads
// alone would leave most multiprocessors idle), each chunk reduced with a running softmax and
// the chunks merged exactly (each carries its maximum, its sum of exponentials and its
// weighted values). Semantics: backends/cpu/ref/attention.cpp; launch.hpp says what differs.

#include <cuda_fp16.h>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/launch.hpp"

namespace mpakt::cuda::k {

namespace {

constexpr int att_warps = 4;
/// Value lanes per thread: a warp holds v_head_dim <= 32 * att_max_slots accumulators.
constexpr int att_max_slots = attention_max_v_dim / 32;

__device__ inline float kv_load(const void* base, kv_type t, std::int64_t i) {
  switch (t) {
    case kv_type::bf16: return __uint_as_float(unsigned(static_cast<const std::uint16_t*>(base)[i]) << 16);
    case kv_type::f16: return __half2float(static_cast<const __half*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

/// The keys query position `pos` sees, as the reference's visible_keys: [first, last].
__device__ inline void visible(const attention_args& a, std::int64_t pos, std::int64_t& first, std::int64_t& last) {
  first = 0;
  last = a.keys - 1;
  if (a.causal) {
    last = min(last, pos);
    if (a.has_window) first = max(std::int64_t(0), pos - a.window + 1);
  } else if (a.has_window) {
    first = max(std::int64_t(0), pos - a.window);
    last = min(last, pos + a.window);
  }
}

/// One block per (query row, head) and chunk of its visible keys. Warps take keys in turn,
/// each keeping its own running maximum, sum and weighted values (lane j holds value
/// dimensions j, j + 32, ...); the block's warps then merge in shared memory. With one
/// chunk the block writes the output row; with several it writes its partial (maximum,
/// sum, values) for attention_merge_kernel.
__global__ void attention_kernel(attention_args a, float* partial) {
  extern __shared__ float smem[];
  float* q_s = smem;                                   // head_dim
  float* m_s = q_s + a.head_dim;                       // att_warps
  float* l_s = m_s + att_warps;                        // att_warps
  float* acc_s = l_s + att_warps;                      // att_warps * v_head_dim
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::int64_t group = a.heads / a.kv_heads;
  const std::int64_t jobs = a.rows * a.heads;
  for (std::int64_t job = blockIdx.x; job < jobs; job += gridDim.x) {
    const std::int64_t t = job / a.heads, h = job % a.heads, kvh = h / group;
    const std::int64_t pos = a.pos_offset + t;
    std::int64_t first, last;
    visible(a, pos, first, last);
    const std::int64_t count = last >= first ? last - first + 1 : 0;
    // This row's chunks, from its own key count (launch.hpp): a row gets the same bits alone
    // or in a verify pass. Blocks past its chunks see no key and add nothing to the merge.
    const std::int64_t chunks =
        min(std::int64_t(a.row_split_cap), max(std::int64_t(1), (count + attention_chunk_keys - 1) / attention_chunk_keys));
    const std::int64_t per = (count + chunks - 1) / chunks;
    const std::int64_t s0 = first + std::int64_t(blockIdx.y) * per;
    const std::int64_t s1 = min(last + 1, s0 + per);  // one past the chunk's last key

    __syncthreads();  // the previous job's readers of q_s are done
    for (std::int64_t i = threadIdx.x; i < a.head_dim; i += blockDim.x) q_s[i] = a.q[t * a.q_stride + h * a.head_dim + i];
    __syncthreads();

    const float slope = a.slopes ? a.slopes[h] : 0.0f;
    const float* bias_row = a.bias ? a.bias + ((a.bias_per_head ? h * a.rows : 0) + t) * a.keys : nullptr;
    float m = -CUDART_INF_F, l = 0.0f;
    float acc[att_max_slots];
#pragma unroll
    for (int j = 0; j < att_max_slots; ++j) acc[j] = 0.0f;

    for (std::int64_t s = s0 + warp; s < s1; s += att_warps) {
      const std::int64_t krow = (s - a.key_base) * a.k_stride + kvh * a.head_dim;
      float dot = 0.0f;
      for (std::int64_t i = lane; i < a.head_dim; i += 32) dot += q_s[i] * kv_load(a.k, a.k_type, krow + i);
      dot = warp_sum(dot);  // every lane holds the whole dot product
      float score = a.scale * dot;
      if (a.has_softcap) score = a.softcap * tanhf(score / a.softcap);
      score += slope * float(s - pos);
      if (bias_row) score += bias_row[s];
      if (score == -CUDART_INF_F) continue;  // masked by the bias (the whole warp agrees)
      if (score > m) {  // rescale what was accumulated under the old maximum
        const float c = expf(m - score);  // 0 for the first key (m = -inf)
        l *= c;
#pragma unroll
        for (int j = 0; j < att_max_slots; ++j) acc[j] *= c;
        m = score;
      }
      const float w = expf(score - m);
      l += w;
      const std::int64_t vrow = (s - a.key_base) * a.v_stride + kvh * a.v_head_dim;
#pragma unroll
      for (int j = 0; j < att_max_slots; ++j) {
        const std::int64_t i = lane + 32 * j;
        if (i < a.v_head_dim) acc[j] += w * kv_load(a.v, a.v_type, vrow + i);
      }
    }

    // Merge the warps: M = max m_w, L = sum l_w e^(m_w - M), values likewise.
    if (lane == 0) {
      m_s[warp] = m;
      l_s[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < att_max_slots; ++j) {
      const std::int64_t i = lane + 32 * j;
      if (i < a.v_head_dim) acc_s[warp * a.v_head_dim + i] = acc[j];
    }
    __syncthreads();
    float big = -CUDART_INF_F;
    for (int w = 0; w < att_warps; ++w) big = fmaxf(big, m_s[w]);
    float total = 0.0f;
    float factor[att_warps];
    for (int w = 0; w < att_warps; ++w) {
      // A warp that saw no key has m = -inf and l = 0: it adds nothing (and no NaN).
      factor[w] = m_s[w] == -CUDART_INF_F ? 0.0f : expf(m_s[w] - big);
      total += l_s[w] * factor[w];
    }
    if (a.splits == 1) {
      float* out_row = a.out + t * a.out_stride + h * a.v_head_dim;
      for (std::int64_t i = threadIdx.x; i < a.v_head_dim; i += blockDim.x) {
        float v = 0.0f;
        for (int w = 0; w < att_warps; ++w) v += acc_s[w * a.v_head_dim + i] * factor[w];
        out_row[i] = total > 0.0f ? v / total : 0.0f;  // (a row that sees no key: zeros)
      }
    } else {
      float* p = partial + (job * a.splits + blockIdx.y) * (2 + a.v_head_dim);
      if (threadIdx.x == 0) {
        p[0] = big;
        p[1] = total;
      }
      for (std::int64_t i = threadIdx.x; i < a.v_head_dim; i += blockDim.x) {
        float v = 0.0f;
        for (int w = 0; w < att_warps; ++w) v += acc_s[w * a.v_head_dim + i] * factor[w];
        p[2 + i] = v;
      }
    }
  }
}

/// Merges the chunks of each (row, head) as the warps were merged above.
__global__ void attention_merge_kernel(attention_args a, const float* partial) {
  const std::int64_t jobs = a.rows * a.heads;
  const std::int64_t width = 2 + a.v_head_dim;
  for (std::int64_t job = blockIdx.x; job < jobs; job += gridDim.x) {
    const std::int64_t t = job / a.heads, h = job % a.heads;
    const float* p = partial + job * a.splits * width;
    float big = -CUDART_INF_F;
    for (int c = 0; c < a.splits; ++c) big = fmaxf(big, p[c * width]);
    // A chunk that saw no key has maximum -inf, sum 0 and values 0: its factor 0 adds nothing.
    // One whose scores were all NaN has maximum -inf too but a NaN sum: NaN * 0 keeps the NaN,
    // and the row outputs zeros as in the reference (and as a warp's NaN does above).
    float total = 0.0f;
    for (int c = 0; c < a.splits; ++c) {
      const float mc = p[c * width];
      total += p[c * width + 1] * (mc == -CUDART_INF_F ? 0.0f : expf(mc - big));
    }
    float* out_row = a.out + t * a.out_stride + h * a.v_head_dim;
    for (std::int64_t i = threadIdx.x; i < a.v_head_dim; i += blockDim.x) {
      float v = 0.0f;
      for (int c = 0; c < a.splits; ++c) {
        const float mc = p[c * width];
        v += p[c * width + 2 + i] * (mc == -CUDART_INF_F ? 0.0f : expf(mc - big));
      }
      out_row[i] = total > 0.0f ? v / total : 0.0f;
    }
  }
}

}  // namespace

std::size_t attention_partial_floats(const attention_args& a) {
  return a.splits > 1 ? std::size_t(a.rows * a.heads * a.splits * (2 + a.v_head_dim)) : 0;
}

cudaError_t attention(const attention_args& a, float* partial, cudaStream_t s) {
  if (a.rows <= 0 || a.heads <= 0) return cudaSuccess;
  if (a.v_head_dim > attention_max_v_dim || a.head_dim > attention_max_head_dim || a.splits < 1 ||
      a.row_split_cap < 1 ||
      a.kv_heads <= 0 || a.heads % a.kv_heads != 0)
    return cudaErrorInvalidValue;
  const std::int64_t jobs = a.rows * a.heads;
  const unsigned bx = row_blocks(jobs);
  const std::size_t shared = sizeof(float) * std::size_t(a.head_dim + 2 * att_warps + att_warps * a.v_head_dim);
  attention_kernel<<<dim3(bx, unsigned(a.splits)), 32 * att_warps, shared, s>>>(a, partial);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || a.splits == 1) return e;
  attention_merge_kernel<<<bx, row_threads(a.v_head_dim), 0, s>>>(a, partial);
  return cudaGetLastError();
}

}  // namespace mpakt::cuda::k
