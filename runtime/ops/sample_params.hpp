#pragma once
/// Typed parameters of the sample op. Every field is bindable: a decode graph binds step,
/// penaltyEnd and the sampling settings per call.

#include <cstdint>

#include "runtime/op.hpp"

namespace mpakt::ops {

/// sample: logits [..., V], optional history [N] or [N, 1]; one token id per row.
struct sample_params final : op_params {
  double temperature = 0;         ///< 0 = greedy (exactly argmax of the penalised logits)
  double top_k = 0;               ///< 0 = off
  double top_p = 1;               ///< 1 = off
  double seed = 0;                ///< non-negative integer
  double step = 0;                ///< RNG counter of row 0; row r uses step + r
  double repetition_penalty = 1;  ///< 1 = off
  double presence_penalty = 0;    ///< 0 = off
  // Beyond the spec's op (not in the op catalogue, so no client graph names them): set by the
  // server's decode loops for the OpenAI-compatible API (docs/decisions.md).
  double frequency_penalty = 0;   ///< 0 = off; subtracted once per occurrence in the window
  double penalty_start = 0;       ///< first history row that may count (0 = from the start)
  double penalty_window = 0;      ///< history rows counted back from the end; all when not given
  bool has_penalty_window = false;
  double penalty_end = 0;         ///< one past the last history row of row 0; N when not given
  bool has_penalty_end = false;
};

}  // namespace mpakt::ops
