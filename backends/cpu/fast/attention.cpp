/// Fast CPU kernel for attention: f32 online softmax in vectors (attention_impl.inc, one
/// translation unit per level), with the work split over the kernel threads.
///
/// Many query rows (prefill, verify): the (kv head, row) pairs are dealt round-robin to the
/// threads, so the long rows at the end of a causal prefill spread evenly. Few rows
/// (decode): the keys are cut into chunks, each (kv head, chunk) computes a partial softmax
/// (its maximum, sum and weighted values), and the partials are merged exactly —
/// flash-decoding — so a long context keeps every thread busy.
///
/// Claims attention with f32 inputs whose head widths are multiples of 16 (at most 256 for
/// q/k and 512 for v); the reference kernel covers the rest. Agrees with the reference
/// (which accumulates in double) to f32 rounding.

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/fast/families.hpp"
#include "backends/cpu/fast/isa_kernels.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/isa.hpp"
#include "runtime/ops/attention_params.hpp"

namespace mpakt::cpu_fast {

namespace {

using rows_fn = void (*)(const attention_args&, std::int64_t, std::int64_t, int, std::int64_t, std::int64_t,
                         attention_partial*);

/// Below this many multiply-adds the caller runs everything alone.
constexpr double parallel_min_work = 1 << 15;
/// Keys per chunk when a decode step splits its keys (at least).
constexpr std::int64_t min_chunk_keys = 128;

template <rows_fn F>
status attention_kernel(const kernel_call& call) {
  const auto& p = params_of<ops::attention_params>(call);
  const tensor& q = *call.inputs[0];
  const tensor& k = *call.inputs[1];
  const tensor& v = *call.inputs[2];
  const tensor* bias = call.inputs.size() > 3 ? call.inputs[3] : nullptr;
  tensor& out = *call.output;

  attention_args a;
  a.q = q.f32();
  a.k = k.f32();
  a.v = v.f32();
  a.out = out.f32();
  a.q_stride = q.cols();
  a.k_stride = k.cols();
  a.v_stride = v.cols();
  a.out_stride = out.cols();
  a.rows = q.rows();
  a.keys = k.rows();
  a.heads = int(p.heads);
  a.kv_heads = int(p.kv_heads);
  a.head_dim = int(p.head_dim);
  a.v_head_dim = int(p.v_head_dim);
  a.pos_offset = std::int64_t(p.pos_offset);
  a.causal = p.causal;
  a.window = p.has_window ? std::int64_t(p.window) : 0;
  a.scale = float(p.score_scale());
  a.softcap = p.has_softcap ? float(p.softcap) : 0.0f;
  if (p.alibi != ops::attention_params::alibi_kind::none) {
    float* slopes = call.scratch->floats(std::size_t(p.heads), 0);
    ops::alibi_slopes(p, slopes);
    a.slopes = slopes;
  }
  if (bias) {
    a.bias = bias->f32();
    a.bias_head_stride = bias->shape().size() == 3 ? a.rows * a.keys : 0;
  }
  if (a.rows == 0) return ok_status();

  const int group = a.heads / a.kv_heads;
  const std::int64_t last_key = std::min(a.keys, a.causal && a.window == 0 ? a.pos_offset + a.rows : a.keys);
  const double work = double(a.rows) * a.heads * double(std::max<std::int64_t>(last_key, 1)) * (a.head_dim + a.v_head_dim);
  const int threads = kernel_threads();
  if (threads <= 1 || work < parallel_min_work) {
    for (int g = 0; g < a.kv_heads; ++g) F(a, 0, a.rows, g, 0, a.keys, nullptr);
    return ok_status();
  }
  const std::int64_t pairs = std::int64_t(a.kv_heads) * a.rows;
  if (pairs >= 4 * threads || last_key < 2 * min_chunk_keys) {
    const int parts = int(std::min<std::int64_t>(threads, pairs));
    parallel_for(parts, [&](int part) {
      for (std::int64_t i = part; i < pairs; i += parts) {
        const int g = int(i % a.kv_heads);
        const std::int64_t t = i / a.kv_heads;
        F(a, t, t + 1, g, 0, a.keys, nullptr);
      }
    });
    return ok_status();
  }
  // Few rows: chunks of keys per kv head, merged after.
  const std::int64_t want = (2 * threads + a.kv_heads - 1) / a.kv_heads;
  const std::int64_t chunks = std::max<std::int64_t>(1, std::min(want, last_key / min_chunk_keys));
  const std::int64_t per = (last_key + chunks - 1) / chunks;
  const std::int64_t slots = std::int64_t(a.kv_heads) * chunks;  // one partial per (g, chunk)
  const std::int64_t entries = a.rows * group;                    // (row, head of the group)
  float* ml = call.scratch->floats(std::size_t(2 * slots * entries), 1);
  float* acc = call.scratch->floats(std::size_t(slots * entries * a.v_head_dim), 2);
  auto partial_of = [&](std::int64_t slot) {
    return attention_partial{ml + slot * entries, ml + (slots + slot) * entries, acc + slot * entries * a.v_head_dim};
  };
  const int parts = int(std::min<std::int64_t>(threads, slots));
  parallel_for(parts, [&](int part) {
    for (std::int64_t slot = part; slot < slots; slot += parts) {
      const int g = int(slot / chunks);
      const std::int64_t c = slot % chunks;
      attention_partial pt = partial_of(slot);
      // the last chunk also takes any keys past last_key (visible to non-causal rows)
      F(a, 0, a.rows, g, c * per, c + 1 == chunks ? a.keys : std::min(a.keys, (c + 1) * per), &pt);
    }
  });
  for (int g = 0; g < a.kv_heads; ++g)
    for (std::int64_t e = 0; e < entries; ++e) {
      float m = -INFINITY;
      for (std::int64_t c = 0; c < chunks; ++c) m = std::max(m, partial_of(g * chunks + c).m[e]);
      const std::int64_t t = e / group, h = std::int64_t(g) * group + e % group;
      float* o = a.out + t * a.out_stride + h * a.v_head_dim;
      std::fill(o, o + a.v_head_dim, 0.0f);
      if (m == -INFINITY) continue;  // the row sees no key
      double l = 0;
      for (std::int64_t c = 0; c < chunks; ++c) {
        const attention_partial pt = partial_of(g * chunks + c);
        if (pt.m[e] == -INFINITY) continue;
        const float w = std::exp(pt.m[e] - m);
        l += double(pt.l[e]) * w;
        const float* src = pt.acc + e * a.v_head_dim;
        for (int i = 0; i < a.v_head_dim; ++i) o[i] += w * src[i];
      }
      const float inv = l > 0 ? float(1.0 / l) : 0.0f;
      for (int i = 0; i < a.v_head_dim; ++i) o[i] *= inv;
    }
  return ok_status();
}

bool accepts_attention(std::span<const tensor_desc> inputs, const op_params& params) {
  const auto& p = static_cast<const ops::attention_params&>(params);
  for (const auto& in : inputs)
    if (in.type != dtype::f32) return false;
  return p.head_dim % 16 == 0 && p.v_head_dim % 16 == 0 && p.head_dim > 0 && p.head_dim <= 256 && p.v_head_dim > 0 &&
         p.v_head_dim <= 512;
}

}  // namespace

void add_attention_kernels(std::vector<cpu_kernel>& out) {
  using cpu_isa::level;
  out.push_back({"attention", attention_kernel<avx512::attention_rows>, accepts_attention, "avx512", level::avx512});
  out.push_back({"attention", attention_kernel<avx2::attention_rows>, accepts_attention, "avx2", level::avx2});
}

}  // namespace mpakt::cpu_fast
