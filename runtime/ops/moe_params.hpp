#pragma once
/// Typed parameters of the moe op (sparse mixture-of-experts feed-forward).

#include <cstdint>

#include "runtime/op.hpp"

namespace mpakt::ops {

/// moe: x [T, C], router logits [T, E], [selection bias [E]], then the expert weights in
/// the chosen layout; output [T, C].
struct moe_params final : op_params {
  enum class scoring_kind : std::uint8_t { softmax, sigmoid };
  enum class layout_kind : std::uint8_t { separate, fused, stacked };
  enum class activation_kind : std::uint8_t { silu, gelu };

  std::int64_t top_k = 1;
  scoring_kind scoring = scoring_kind::softmax;
  bool normalize = false;
  double scale = 1;                ///< bindable: routed_scaling_factor
  std::int64_t n_group = 1;        ///< groups for group-limited routing (1 = none)
  std::int64_t top_k_group = 1;    ///< groups kept; defaults to n_group
  std::int64_t group_top_k = 1;    ///< a group's score sums its best group_top_k choice scores
  bool selection_bias = false;
  layout_kind layout = layout_kind::separate;
  activation_kind activation = activation_kind::silu;

  /// Index of the first expert weight input.
  std::size_t first_expert_input() const { return selection_bias ? 3 : 2; }
  /// Expert weight inputs the layout needs for `experts` experts.
  std::size_t expert_inputs(std::int64_t experts) const {
    return layout == layout_kind::separate ? std::size_t(3 * experts) : layout == layout_kind::fused ? 2 : 3;
  }
};

}  // namespace mpakt::ops
