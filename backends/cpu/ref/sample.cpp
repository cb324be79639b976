// Reference sample kernel: one token id per row of logits [..., V] (leading dims folded).
//
// Per row r, in this order (docs: penalties -> temperature -> topK -> topP -> draw):
//  1. Penalties, only with a history input [N] or [N, 1]. The window is history rows
//     [max(penaltyStart, end - penaltyWindow), end), end = min(N, penaltyEnd + r) (penaltyEnd
//     defaults to N, penaltyWindow to all rows, penaltyStart to 0; a multi-row sample is a
//     verify pass whose row r sits one position later per row). Each distinct id in the
//     window that is an integer in [0, V) (negative = empty slot) is penalised once:
//     repetitionPenalty p as transformers' RepetitionPenaltyLogitsProcessor (logit < 0 ->
//     logit * p, else logit / p), then presencePenalty subtracted; frequencyPenalty is
//     subtracted once per occurrence (OpenAI's mu - c * frequency - (c > 0) * presence).
//  2. temperature 0: the argmax of the penalised logits, ties to the lowest index, the first
//     NaN counting as the maximum (as the argmax op). Done.
//  3. Otherwise logits / temperature.
//  4. topK > 0: keep logits >= the k-th largest (TopKLogitsWarper, which keeps ties).
//  5. topP < 1: TopPLogitsWarper — sort the kept logits ascending, take the cumulative
//     softmax, drop those whose cumulative probability is <= 1 - topP, always keep the
//     largest. Equal logits sort with the higher id first, so the lower id survives.
//  6. Draw: u = sample_uniform(seed, step + r) (runtime/ops/sample_rng.hpp); the token is the
//     first kept id, in increasing id order, whose cumulative exp(logit - max) exceeds
//     u * (their total). All in double.

#include "backends/cpu/ref/families.hpp"
#include "backends/cpu/ref/sample_steps.hpp"
#include "backends/cpu/ref/scratch_doubles.hpp"
#include "runtime/ops/sample_params.hpp"
#include "runtime/ops/sample_rng.hpp"

#include <algorithm>
#include <cmath>

namespace mpakt::cpu_ref {

namespace {

using ops::sample_params;
using sample_steps::removed;

/// TopPLogitsWarper over the kept logits.
void keep_top_p(double* work, std::int64_t v, double top_p, std::int32_t* order) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < v; ++i)
    if (work[i] != removed) order[n++] = std::int32_t(i);
  if (n == 0) return;
  std::sort(order, order + n, [&](std::int32_t a, std::int32_t b) {
    return work[a] != work[b] ? work[a] < work[b] : a > b;  // ascending; ties: higher id first
  });
  const double m = work[order[n - 1]];
  double total = 0;
  for (std::int64_t j = 0; j < n; ++j) total += std::exp(work[order[j]] - m);
  double cum = 0;
  for (std::int64_t j = 0; j + 1 < n; ++j) {  // the largest is always kept
    cum += std::exp(work[order[j]] - m) / total;
    if (cum <= 1 - top_p) work[order[j]] = removed;
  }
}

/// The first kept id whose cumulative weight exceeds u * total.
std::int64_t draw(const double* work, std::int64_t v, double u) {
  double m = removed;
  for (std::int64_t i = 0; i < v; ++i) m = std::max(m, work[i]);
  double total = 0;
  for (std::int64_t i = 0; i < v; ++i)
    if (work[i] != removed) total += std::exp(work[i] - m);
  const double target = u * total;
  double cum = 0;
  std::int64_t last = 0;
  for (std::int64_t i = 0; i < v; ++i) {
    if (work[i] == removed) continue;
    cum += std::exp(work[i] - m);
    last = i;
    if (cum > target) return i;
  }
  return last;  // rounding left the target unreached: the last kept id
}

status sample_kernel(const kernel_call& call) {
  const auto& p = params_of<sample_params>(call);
  const tensor& logits = *call.inputs[0];
  const tensor* history = call.inputs.size() > 1 ? call.inputs[1] : nullptr;
  const std::int64_t v = logits.cols(), rows = logits.rows();
  double* work = scratch_doubles(*call.scratch, std::size_t(v), 0);
  double* copy = scratch_doubles(*call.scratch, std::size_t(v), 1);
  std::int32_t* seen = call.scratch->ints(std::size_t(v), 0);
  std::int32_t* order = call.scratch->ints(std::size_t(v), 1);
  std::fill(seen, seen + v, -1);
  const auto seed = static_cast<std::uint64_t>(p.seed);
  const auto step = static_cast<std::uint64_t>(p.step);

  for (std::int64_t r = 0; r < rows; ++r) {
    sample_steps::penalised_row(p, logits.f32() + r * v, history, r, work, v, seen);
    std::int64_t token;
    if (p.temperature == 0) {
      token = sample_steps::argmax(work, v);
    } else {
      for (std::int64_t i = 0; i < v; ++i) work[i] /= p.temperature;
      sample_steps::keep_top_k(work, v, static_cast<std::int64_t>(p.top_k), copy);
      if (p.top_p < 1) keep_top_p(work, v, p.top_p, order);
      token = draw(work, v, ops::sample_uniform(seed, step + std::uint64_t(r)));
    }
    call.output->f32()[r] = float(token);
  }
  return ok_status();
}

}  // namespace

void add_sample_kernels(std::vector<cpu_kernel>& out) { out.push_back({"sample", &sample_kernel}); }

}  // namespace mpakt::cpu_ref
