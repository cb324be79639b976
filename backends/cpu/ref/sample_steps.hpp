#pragma once
/// Steps of the sample op that its reference kernel (sample.cpp) and its fast kernel
/// (backends/cpu/fast/sample.cpp) take alike, in double: the penalties, the greedy choice and
/// topK. The order of the steps and what each computes are documented in sample.cpp.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

#include "runtime/ops/sample_params.hpp"
#include "runtime/tensor.hpp"

namespace mpakt::cpu_ref::sample_steps {

/// A logit taken out of the draw (topK, topP).
inline constexpr double removed = -std::numeric_limits<double>::infinity();

/// Applies the penalties of row r to `work`; `seen` holds V stamps, -1 before the first row.
inline void apply_penalties(const ops::sample_params& p, const tensor& history, std::int64_t r, double* work,
                            std::int64_t v, std::int32_t* seen) {
  const std::int64_t n = history.numel();
  const std::int64_t end_param = p.has_penalty_end ? static_cast<std::int64_t>(p.penalty_end) : n;
  const std::int64_t end = std::min(n, end_param + r);
  std::int64_t start = static_cast<std::int64_t>(p.penalty_start);
  if (p.has_penalty_window) start = std::max<std::int64_t>(start, end - static_cast<std::int64_t>(p.penalty_window));
  const float* ids = history.f32();
  for (std::int64_t i = start; i < end; ++i) {
    const double id = ids[i];
    if (!(id >= 0 && id < double(v) && id == std::floor(id))) continue;  // empty slot or not a token
    const auto tok = static_cast<std::int64_t>(id);
    if (seen[tok] == std::int32_t(r)) continue;
    seen[tok] = std::int32_t(r);
    double& l = work[tok];
    l = l < 0 ? l * p.repetition_penalty : l / p.repetition_penalty;
    l -= p.presence_penalty;
  }
  if (p.frequency_penalty == 0) return;
  for (std::int64_t i = start; i < end; ++i) {  // after the others, once per occurrence
    const double id = ids[i];
    if (id >= 0 && id < double(v) && id == std::floor(id)) work[static_cast<std::int64_t>(id)] -= p.frequency_penalty;
  }
}

/// Row `row` (row r of the logits) in double, its penalties applied when there is a history:
/// where every draw starts.
inline void penalised_row(const ops::sample_params& p, const float* row, const tensor* history, std::int64_t r,
                          double* work, std::int64_t v, std::int32_t* seen) {
  for (std::int64_t i = 0; i < v; ++i) work[i] = row[i];
  if (history) apply_penalties(p, *history, r, work, v, seen);
}

/// Lowest index of the maximum; NaN counts as the maximum (the first NaN wins), exactly as
/// the argmax op decides, so temperature 0 and argmax pick the same token on any logits.
inline std::int64_t argmax(const double* work, std::int64_t v) {
  std::int64_t best = 0;
  for (std::int64_t i = 0; i < v; ++i) {
    if (std::isnan(work[i])) return i;
    if (work[i] > work[best]) best = i;
  }
  return best;
}

/// Keeps logits >= the k-th largest.
inline void keep_top_k(double* work, std::int64_t v, std::int64_t k, double* copy) {
  if (k <= 0 || k >= v) return;
  std::copy(work, work + v, copy);
  std::nth_element(copy, copy + (k - 1), copy + v, std::greater<>());
  const double kth = copy[k - 1];
  for (std::int64_t i = 0; i < v; ++i)
    if (work[i] < kth) work[i] = removed;
}

}  // namespace mpakt::cpu_ref::sample_steps
