#pragma once
/// How an attention step maps onto the CUDA kernel (kernels/attention.cu): which key rows the
/// device needs and every launch argument but the device pointers. Host code with no CUDA
/// call, shared by the kernel_fn (ops/attention.cpp) and the kernel's emulated test
/// (test/cuda/kernels_emulated_test.cpp), so the test runs this logic as the GPU path does.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "backends/cuda/kernels/launch.hpp"
#include "runtime/ops/attention_params.hpp"
#include "runtime/tensor.hpp"

namespace mpakt::cuda {

inline std::optional<k::kv_type> kv_type_of(dtype t) {
  switch (t) {
    case dtype::f32: return k::kv_type::f32;
    case dtype::bf16: return k::kv_type::bf16;
    case dtype::f16: return k::kv_type::f16;
    default: return std::nullopt;
  }
}

/// [first, last] keys query position `pos` sees, as the reference's visible_keys (unclipped
/// below last: the caller clips).
inline std::pair<std::int64_t, std::int64_t> visible_keys(const ops::attention_params& p, std::int64_t pos, std::int64_t keys) {
  std::int64_t first = 0, last = keys - 1;
  const auto w = static_cast<std::int64_t>(p.window);
  if (p.causal) {
    last = std::min(last, pos);
    if (p.has_window) first = std::max<std::int64_t>(0, pos - w + 1);
  } else if (p.has_window) {
    first = std::max<std::int64_t>(0, pos - w);
    last = std::min(last, pos + w);
  }
  return {first, last};
}

/// Blocks that keep every multiprocessor of a large GPU busy a few times over.
inline constexpr std::int64_t attention_busy_blocks = 4 * 132;

/// The launch for attention of q against keys kt and values vt (and an optional bias): the
/// kernel reads key rows [args.key_base, args.key_base + held) at its k and v pointers.
struct attention_plan {
  k::attention_args args;
  std::int64_t held = 0;
};

inline attention_plan plan_attention(const ops::attention_params& p, const tensor& q, const tensor& kt, const tensor& vt,
                                     const tensor* bias, const tensor& out) {
  const std::int64_t rows = q.rows(), keys = kt.rows();
  const auto offset = static_cast<std::int64_t>(p.pos_offset);

  // Visibility only grows with the position (both ends), so the first row's first key and
  // the last row's last key bound every row's keys.
  std::int64_t lo = visible_keys(p, offset, keys).first, hi = visible_keys(p, offset + rows - 1, keys).second;
  lo = std::max<std::int64_t>(lo, 0);
  hi = std::min(hi, keys - 1);
  const std::int64_t held = hi >= lo ? hi - lo + 1 : 0;

  attention_plan plan;
  k::attention_args& a = plan.args;
  plan.held = held;
  a.rows = rows;
  a.heads = p.heads;
  a.kv_heads = p.kv_heads;
  a.head_dim = p.head_dim;
  a.v_head_dim = p.v_head_dim;
  a.q_stride = q.cols();
  a.k_stride = kt.cols();
  a.v_stride = vt.cols();
  a.out_stride = out.cols();
  a.k_type = *kv_type_of(kt.type());
  a.v_type = *kv_type_of(vt.type());
  a.key_base = held > 0 ? lo : 0;
  a.keys = keys;
  a.pos_offset = offset;
  a.scale = float(p.score_scale());
  a.causal = p.causal;
  a.has_window = p.has_window;
  a.window = static_cast<std::int64_t>(p.window);
  a.has_softcap = p.has_softcap;
  a.softcap = float(p.softcap);
  a.bias_per_head = bias && bias->shape().size() == 3;
  // Chunks per row (launch.hpp): up to few_rows_max rows (a decode step, a verify pass) as
  // many as a row alone would take, so each row gets the bits it gets alone (docs/decisions.md,
  // "A row is the same bits alone, batched or verified"); longer passes by their jobs.
  const std::int64_t jobs = rows <= k::few_rows_max ? p.heads : rows * p.heads;
  a.row_split_cap = int(std::clamp<std::int64_t>((attention_busy_blocks + jobs - 1) / jobs, 1, 64));
  std::int64_t most = 1;  // the most chunks any row takes (a window's middle rows may see the most keys)
  for (std::int64_t t = 0; t < rows; ++t) {
    auto [f, l] = visible_keys(p, offset + t, keys);
    const std::int64_t n = std::min(l, keys - 1) - std::max<std::int64_t>(f, 0) + 1;
    if (n > 0) most = std::max(most, std::min<std::int64_t>(a.row_split_cap, (n + k::attention_chunk_keys - 1) / k::attention_chunk_keys));
  }
  a.splits = int(most);

  return plan;
}

}  // namespace mpakt::cuda
