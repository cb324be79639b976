#include "runtime/ops/sample_params.hpp"

#include <cmath>

#include "runtime/ops/families.hpp"

namespace mpakt::ops {

namespace {

constexpr double max_integer = 9007199254740992.0;  // 2^53: every integer below is exact in a double

struct field_ref {
  const char* name;
  double sample_params::*field;
};

constexpr field_ref sample_fields[] = {
    {"temperature", &sample_params::temperature},
    {"topK", &sample_params::top_k},
    {"topP", &sample_params::top_p},
    {"seed", &sample_params::seed},
    {"step", &sample_params::step},
    {"repetitionPenalty", &sample_params::repetition_penalty},
    {"presencePenalty", &sample_params::presence_penalty},
    {"frequencyPenalty", &sample_params::frequency_penalty},
    {"penaltyStart", &sample_params::penalty_start},
    {"penaltyWindow", &sample_params::penalty_window},
    {"penaltyEnd", &sample_params::penalty_end},
};

result<std::unique_ptr<op_params>> parse_sample(const param_map& pm) {
  auto p = std::make_unique<sample_params>();
  // All bindable: ranges are checked by check_sample once the values are known.
  for (const auto& f : sample_fields) {
    auto v = pm.number(f.name, p.get()->*f.field);
    if (!v) return std::move(v).err();
    p.get()->*f.field = *v;
  }
  p->has_penalty_window = pm.has("penaltyWindow");
  p->has_penalty_end = pm.has("penaltyEnd");
  return std::unique_ptr<op_params>(std::move(p));
}

result<tensor_desc> infer_sample(const shape_query& q) {
  const tensor_desc& logits = q.inputs[0];
  if (logits.shape.empty() || logits.shape.back() <= 0)
    return invalid("input logits has shape " + shape_str(logits.shape) + " but must be [..., V] with V > 0");
  if (q.inputs.size() > 1) {
    const shape_t& h = q.inputs[1].shape;
    if (!(h.size() == 1 || (h.size() == 2 && h[1] == 1)))
      return invalid("input history has shape " + shape_str(h) + " but must be [N] or [N, 1]");
  }
  if (logits.shape.size() == 1) return tensor_desc{dtype::f32, shape_t{1}};
  shape_t out = logits.shape;
  out.pop_back();
  return tensor_desc{dtype::f32, out};
}

double* bind_sample(op_params& base, std::string_view name) {
  auto& p = static_cast<sample_params&>(base);
  for (const auto& f : sample_fields)
    if (name == f.name) return &(p.*f.field);
  return nullptr;
}

bool is_count(double v) { return std::isfinite(v) && v >= 0 && v == std::floor(v) && v <= max_integer; }

status check_sample(const op_params& base) {
  const auto& p = static_cast<const sample_params&>(base);
  if (!(std::isfinite(p.temperature) && p.temperature >= 0))
    return invalid("parameter temperature must be 0 or more, not " + num_str(p.temperature));
  if (!is_count(p.top_k)) return invalid("parameter topK must be a non-negative integer, not " + num_str(p.top_k));
  if (!(p.top_p >= 0 && p.top_p <= 1)) return invalid("parameter topP must lie in [0, 1], not " + num_str(p.top_p));
  if (!is_count(p.seed)) return invalid("parameter seed must be a non-negative integer, not " + num_str(p.seed));
  if (!is_count(p.step)) return invalid("parameter step must be a non-negative integer, not " + num_str(p.step));
  if (!(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0))
    return invalid("parameter repetitionPenalty must be positive, not " + num_str(p.repetition_penalty));
  if (!std::isfinite(p.presence_penalty)) return invalid("parameter presencePenalty must be a finite number");
  if (!std::isfinite(p.frequency_penalty)) return invalid("parameter frequencyPenalty must be a finite number");
  if (!is_count(p.penalty_start))
    return invalid("parameter penaltyStart must be a non-negative integer, not " + num_str(p.penalty_start));
  if (p.has_penalty_window && !is_count(p.penalty_window))
    return invalid("parameter penaltyWindow must be a non-negative integer, not " + num_str(p.penalty_window));
  if (p.has_penalty_end && !is_count(p.penalty_end))
    return invalid("parameter penaltyEnd must be a non-negative integer, not " + num_str(p.penalty_end));
  return ok_status();
}

void sample_features(const param_map& pm, std::size_t n_inputs, std::vector<std::string>& out) {
  if (n_inputs > 1 || pm.has("repetitionPenalty") || pm.has("presencePenalty") || pm.has("frequencyPenalty") ||
      pm.has("penaltyWindow") || pm.has("penaltyEnd") || pm.has("penaltyStart"))
    out.emplace_back("sample.penalty");
}

}  // namespace

void add_sample_ops(std::vector<op_def>& out) {
  op_def d;
  d.name = "sample";
  d.parse = &parse_sample;
  d.infer = &infer_sample;
  d.bindable = &bind_sample;
  d.check = &check_sample;
  d.features = &sample_features;
  out.push_back(d);
}

}  // namespace mpakt::ops
