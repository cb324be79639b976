#pragma once
/// Typed parameters of the attention op, and the ALiBi slopes every attention kernel shares.

#include <cstdint>
#include <vector>

#include "runtime/op.hpp"

namespace mpakt::ops {

/// attention: q [T, heads*headDim], k [S, kvHeads*headDim], v [S, kvHeads*vHeadDim],
/// optional bias [T, S] or [heads, T, S]; output [T, heads*vHeadDim].
struct attention_params final : op_params {
  enum class alibi_kind : std::uint8_t { none, bloom, mpt, explicit_slopes };

  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t kv_heads = 0;     ///< defaults to heads; divides heads
  std::int64_t v_head_dim = 0;   ///< defaults to headDim
  bool causal = true;
  double pos_offset = 0;         ///< bindable: absolute position of query row 0
  double scale = 0;              ///< bindable: score scale; 1/sqrt(headDim) unless has_scale
  bool has_scale = false;
  double softcap = 0;            ///< bindable: cap * tanh(score / cap) when has_softcap
  bool has_softcap = false;
  double window = 0;             ///< bindable: sliding window when has_window
  bool has_window = false;
  alibi_kind alibi = alibi_kind::none;
  double alibi_max = 8;          ///< bindable: MPT's alibi_bias_max (alibi == mpt)
  std::vector<float> alibi_slopes;  ///< alibi == explicit_slopes: one per head

  /// The scale in effect.
  double score_scale() const;
};

/// One ALiBi slope per head into slopes[0 .. heads): BLOOM's _get_alibi_slopes, MPT's
/// build_mpt_alibi_tensor slopes (alibi_bias_max), or the explicit list; zeros for none.
void alibi_slopes(const attention_params& p, float* slopes);

}  // namespace mpakt::ops
