// Reference moe kernel (sparse mixture of experts), token by token:
//   probs  = softmax(logits) or sigmoid(logits)           (scoring)
//   choice = probs + bias                                  (selectionBias; picks, never weighs)
//   with nGroup > 1: a group's score is the sum of its best groupTopK choice values; only
//   the best topKGroup groups stay eligible (DeepseekV3TopkRouter; groupTopK 1 is
//   DeepseekV2's group max)
//   top-k of choice over the eligible experts, ties to the lower expert index
//   weights = probs of the chosen; normalize: / (sum + 1e-20) (DeepseekV3TopkRouter's
//   epsilon; irrelevant for softmax scores); then * scale (routed_scaling_factor)
//   out = sum over chosen e of weight_e * down_e(act(gate_e x) * up_e x), act silu or gelu
//   (tanh approximation)
// This is Mixtral's and Qwen2-MoE's router (top-k of the softmax probabilities) and
// DeepSeek-V2/V3's. Expert weights may be packed; they are read a row at a time. Sums are
// accumulated in double.

#include "backends/cpu/ref/families.hpp"
#include "backends/cpu/ref/packed.hpp"
#include "backends/cpu/ref/scratch_doubles.hpp"
#include "runtime/ops/moe_params.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>

namespace mpakt::cpu_ref {

namespace {

using ops::moe_params;

/// Where expert e's gate, up and down rows live: a tensor and the index of its first row.
struct expert_rows {
  const tensor* gate;
  std::int64_t gate_row0;
  const tensor* up;
  std::int64_t up_row0;
  const tensor* down;
  std::int64_t down_row0;
};

expert_rows locate_expert(const moe_params& p, const kernel_call& call, std::int64_t e, std::int64_t inter, std::int64_t c) {
  const std::size_t f = p.first_expert_input();
  switch (p.layout) {
    case moe_params::layout_kind::separate: {
      const std::size_t at = f + std::size_t(3 * e);
      return {call.inputs[at], 0, call.inputs[at + 1], 0, call.inputs[at + 2], 0};
    }
    case moe_params::layout_kind::fused:  // gate_up [E, 2I, C]: gate is the first half
      return {call.inputs[f], e * 2 * inter, call.inputs[f], e * 2 * inter + inter, call.inputs[f + 1], e * c};
    case moe_params::layout_kind::stacked:
      return {call.inputs[f], e * inter, call.inputs[f + 1], e * inter, call.inputs[f + 2], e * c};
  }
  return {};
}

/// Row r of a possibly packed tensor: in place for f32, else widened into tmp.
const float* row_of(const tensor& t, std::int64_t r, float* tmp) {
  if (t.type() == dtype::f32) return t.f32() + r * t.cols();
  load_row(t, r, tmp);
  return tmp;
}

double activate(moe_params::activation_kind a, double g) {
  if (a == moe_params::activation_kind::silu) return g / (1.0 + std::exp(-g));
  const double k = std::sqrt(2.0 / std::numbers::pi);  // gelu, tanh approximation
  return 0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g)));
}

/// Index of the largest value among entries with eligible[i] != 0; ties to the lower index.
std::int64_t best_of(const double* v, const std::int32_t* eligible, std::int64_t n) {
  std::int64_t best = -1;
  for (std::int64_t i = 0; i < n; ++i)
    if (eligible[i] && (best < 0 || v[i] > v[best])) best = i;
  return best;
}

/// Scratch for routing one token.
struct router_scratch {
  double* probs;          ///< E
  double* choice;         ///< E
  double* group_score;    ///< nGroup
  double* group_values;   ///< E / nGroup
  std::int32_t* eligible; ///< E: 1 = may be picked
  std::int32_t* group_ok; ///< nGroup
};

/// Picks the token's experts into chosen[0..topK) and their weights into weight[0..topK).
void route(const moe_params& p, const float* logits, const double* bias, std::int64_t e, router_scratch& s,
           std::int32_t* chosen, double* weight) {
  if (p.scoring == moe_params::scoring_kind::softmax) {
    double m = -std::numeric_limits<double>::infinity(), sum = 0;
    for (std::int64_t i = 0; i < e; ++i) m = std::max(m, double(logits[i]));
    for (std::int64_t i = 0; i < e; ++i) sum += s.probs[i] = std::exp(double(logits[i]) - m);
    for (std::int64_t i = 0; i < e; ++i) s.probs[i] /= sum;
  } else {
    for (std::int64_t i = 0; i < e; ++i) s.probs[i] = 1.0 / (1.0 + std::exp(-double(logits[i])));
  }
  for (std::int64_t i = 0; i < e; ++i) {
    s.choice[i] = s.probs[i] + (bias ? bias[i] : 0.0);
    s.eligible[i] = 1;
  }
  if (p.n_group > 1) {  // group-limited routing
    const std::int64_t per = e / p.n_group;
    for (std::int64_t g = 0; g < p.n_group; ++g) {
      std::copy(s.choice + g * per, s.choice + (g + 1) * per, s.group_values);
      std::partial_sort(s.group_values, s.group_values + p.group_top_k, s.group_values + per, std::greater<>());
      s.group_score[g] = 0;
      for (std::int64_t j = 0; j < p.group_top_k; ++j) s.group_score[g] += s.group_values[j];
      s.group_ok[g] = 1;
    }
    std::fill(s.eligible, s.eligible + e, 0);
    for (std::int64_t kept = 0; kept < p.top_k_group; ++kept) {
      const std::int64_t g = best_of(s.group_score, s.group_ok, p.n_group);
      s.group_ok[g] = 0;
      std::fill(s.eligible + g * per, s.eligible + (g + 1) * per, 1);
    }
  }
  double sum = 0;
  for (std::int64_t k = 0; k < p.top_k; ++k) {
    chosen[k] = std::int32_t(best_of(s.choice, s.eligible, e));
    s.eligible[chosen[k]] = 0;
    weight[k] = s.probs[chosen[k]];
    sum += weight[k];
  }
  for (std::int64_t k = 0; k < p.top_k; ++k) weight[k] = (p.normalize ? weight[k] / (sum + 1e-20) : weight[k]) * p.scale;
}

/// acc[0..C) += w * down(act(gate x) * up x) for one expert.
void run_expert(const moe_params& p, const expert_rows& ex, const float* x, std::int64_t c, std::int64_t inter,
                double w, float* tmp, double* hidden, double* acc) {
  for (std::int64_t j = 0; j < inter; ++j) {
    const double g = dot_row(*ex.gate, ex.gate_row0 + j, x, tmp);
    const double u = dot_row(*ex.up, ex.up_row0 + j, x, tmp);
    hidden[j] = activate(p.activation, g) * u;
  }
  for (std::int64_t o = 0; o < c; ++o) {
    const float* row = row_of(*ex.down, ex.down_row0 + o, tmp);
    double d = 0;
    for (std::int64_t j = 0; j < inter; ++j) d += double(row[j]) * hidden[j];
    acc[o] += w * d;
  }
}

status moe_kernel(const kernel_call& call) {
  const auto& p = params_of<moe_params>(call);
  const tensor& x = *call.inputs[0];
  const tensor& logits = *call.inputs[1];
  const std::int64_t c = x.cols(), rows = x.rows(), e = logits.cols();
  const tensor& first = *call.inputs[p.first_expert_input()];
  const std::int64_t inter = p.layout == moe_params::layout_kind::fused ? first.shape()[1] / 2
                             : p.layout == moe_params::layout_kind::stacked ? first.shape()[1]
                                                                           : first.shape()[0];
  workspace& ws = *call.scratch;
  float* tmp = ws.floats(std::size_t(std::max({c, inter, e})), 0);
  const double* bias = nullptr;
  if (p.selection_bias) {
    double* b = scratch_doubles(ws, std::size_t(e), 1);
    const float* raw = row_of(*call.inputs[2], 0, tmp);
    for (std::int64_t i = 0; i < e; ++i) b[i] = raw[i];
    bias = b;
  }
  router_scratch rs{};
  rs.probs = scratch_doubles(ws, std::size_t(e), 2);
  rs.choice = scratch_doubles(ws, std::size_t(e), 3);
  rs.group_score = scratch_doubles(ws, std::size_t(p.n_group), 4);
  rs.group_values = scratch_doubles(ws, std::size_t(e / p.n_group), 5);
  rs.eligible = ws.ints(std::size_t(e), 0);
  rs.group_ok = ws.ints(std::size_t(p.n_group), 1);
  double* weight = scratch_doubles(ws, std::size_t(p.top_k), 6);
  double* hidden = scratch_doubles(ws, std::size_t(inter), 7);
  double* acc = scratch_doubles(ws, std::size_t(c), 8);
  std::int32_t* chosen = ws.ints(std::size_t(p.top_k), 2);

  for (std::int64_t t = 0; t < rows; ++t) {
    route(p, logits.f32() + t * e, bias, e, rs, chosen, weight);
    std::fill(acc, acc + c, 0.0);
    const float* xt = x.f32() + t * c;
    for (std::int64_t k = 0; k < p.top_k; ++k)
      run_expert(p, locate_expert(p, call, chosen[k], inter, c), xt, c, inter, weight[k], tmp, hidden, acc);
    float* out = call.output->f32() + t * c;
    for (std::int64_t o = 0; o < c; ++o) out[o] = float(acc[o]);
  }
  return ok_status();
}

}  // namespace

void add_moe_kernels(std::vector<cpu_kernel>& out) { out.push_back({"moe", &moe_kernel}); }

}  // namespace mpakt::cpu_ref
