#include "runtime/ops/moe_params.hpp"

#include <cmath>

#include "runtime/ops/families.hpp"

namespace mpakt::ops {

namespace {

constexpr std::int64_t max_count = std::int64_t(1) << 24;

using layout_kind = moe_params::layout_kind;

result<std::unique_ptr<op_params>> parse_moe(const param_map& pm) {
  auto p = std::make_unique<moe_params>();
  auto top_k = pm.required_integer("topK", 1, max_count);
  if (!top_k) return std::move(top_k).err();
  p->top_k = *top_k;

  const std::string scoring = pm.string("scoring", "softmax");
  if (scoring == "sigmoid") p->scoring = moe_params::scoring_kind::sigmoid;
  else if (scoring != "softmax")
    return invalid("parameter scoring must be \"softmax\" or \"sigmoid\", not \"" + scoring + "\"");

  const std::string layout = pm.string("layout", "separate");
  if (layout == "fused") p->layout = layout_kind::fused;
  else if (layout == "stacked") p->layout = layout_kind::stacked;
  else if (layout != "separate")
    return invalid("parameter layout must be \"separate\", \"fused\" or \"stacked\", not \"" + layout + "\"");

  const std::string act = pm.string("activation", "silu");
  if (act == "gelu") p->activation = moe_params::activation_kind::gelu;
  else if (act != "silu") return invalid("parameter activation must be \"silu\" or \"gelu\", not \"" + act + "\"");

  p->normalize = pm.boolean("normalize", false);
  p->selection_bias = pm.boolean("selectionBias", false);
  auto scale = pm.number("scale", 1);  // bindable: check_moe checks it
  if (!scale) return std::move(scale).err();
  p->scale = *scale;

  auto n_group = pm.integer("nGroup", 1, 1, max_count);
  if (!n_group) return std::move(n_group).err();
  p->n_group = *n_group;
  auto top_k_group = pm.integer("topKGroup", p->n_group, 1, max_count);
  if (!top_k_group) return std::move(top_k_group).err();
  if (*top_k_group > p->n_group)
    return invalid("parameter topKGroup must not exceed nGroup (topKGroup " + std::to_string(*top_k_group) +
                   ", nGroup " + std::to_string(p->n_group) + ")");
  p->top_k_group = *top_k_group;
  auto group_top_k = pm.integer("groupTopK", 1, 1, max_count);
  if (!group_top_k) return std::move(group_top_k).err();
  p->group_top_k = *group_top_k;
  return std::unique_ptr<op_params>(std::move(p));
}

/// Name of expert input i (counted from the first expert input) for messages.
std::string expert_input_name(const moe_params& p, std::size_t i, std::size_t absolute) {
  std::string name;
  switch (p.layout) {
    case layout_kind::separate: {
      static constexpr const char* parts[] = {"gate_", "up_", "down_"};
      name = parts[i % 3] + std::to_string(i / 3);
      break;
    }
    case layout_kind::fused: name = i == 0 ? "gate_up" : "down"; break;
    case layout_kind::stacked: {
      static constexpr const char* parts[] = {"gate", "up", "down"};
      name = parts[i];
      break;
    }
  }
  return name + " (input " + std::to_string(absolute) + ")";
}

status expect_shape(const moe_params& p, const shape_query& q, std::size_t i, const shape_t& want, std::string_view what) {
  const std::size_t at = p.first_expert_input() + i;
  const tensor_desc& d = q.inputs[at];
  if (d.shape != want)
    return invalid("input " + expert_input_name(p, i, at) + " has shape " + shape_str(d.shape) + " but must be " +
                   std::string(what) + " = " + shape_str(want));
  return ok_status();
}

/// Expert weight shapes; I is read from the first gate tensor.
status check_experts(const moe_params& p, const shape_query& q, std::int64_t experts, std::int64_t c) {
  const std::size_t at = p.first_expert_input();
  const tensor_desc& first = q.inputs[at];
  const bool separate = p.layout == layout_kind::separate;
  const std::size_t want_rank = separate ? 2 : 3;
  const char* form = separate ? "[I, C]" : p.layout == layout_kind::fused ? "[E, 2I, C]" : "[E, I, C]";
  std::int64_t inter = first.shape.size() == want_rank ? first.shape[want_rank - 2] : 0;
  if (p.layout == layout_kind::fused) inter = inter % 2 == 0 ? inter / 2 : 0;
  if (inter <= 0)
    return invalid("input " + expert_input_name(p, 0, at) + " has shape " + shape_str(first.shape) + " but must be " + form +
                   " with I > 0");
  const std::int64_t e = experts, i = inter;
  switch (p.layout) {
    case layout_kind::separate:
      for (std::int64_t x = 0; x < e; ++x) {
        MPAKT_TRY(expect_shape(p, q, std::size_t(3 * x), {i, c}, "[I, C]"));
        MPAKT_TRY(expect_shape(p, q, std::size_t(3 * x + 1), {i, c}, "[I, C]"));
        MPAKT_TRY(expect_shape(p, q, std::size_t(3 * x + 2), {c, i}, "[C, I]"));
      }
      break;
    case layout_kind::fused:
      MPAKT_TRY(expect_shape(p, q, 0, {e, 2 * i, c}, "[E, 2I, C]"));
      MPAKT_TRY(expect_shape(p, q, 1, {e, c, i}, "[E, C, I]"));
      break;
    case layout_kind::stacked:
      MPAKT_TRY(expect_shape(p, q, 0, {e, i, c}, "[E, I, C]"));
      MPAKT_TRY(expect_shape(p, q, 1, {e, i, c}, "[E, I, C]"));
      MPAKT_TRY(expect_shape(p, q, 2, {e, c, i}, "[E, C, I]"));
      break;
  }
  return ok_status();
}

/// Routing parameters against the expert count E.
status check_routing(const moe_params& p, std::int64_t e) {
  const std::string experts = " the " + std::to_string(e) + " experts of input logits";
  if (p.top_k > e) return invalid("parameter topK is " + std::to_string(p.top_k) + ", more than" + experts);
  if (e % p.n_group != 0)
    return invalid("parameter nGroup must divide" + experts + " (nGroup " + std::to_string(p.n_group) + ")");
  const std::int64_t per_group = e / p.n_group;
  if (p.group_top_k > per_group)
    return invalid("parameter groupTopK is " + std::to_string(p.group_top_k) + " but each group holds " +
                   std::to_string(per_group) + " experts");
  if (p.top_k > p.top_k_group * per_group)
    return invalid("parameter topK is " + std::to_string(p.top_k) + " but the " + std::to_string(p.top_k_group) +
                   " groups kept (topKGroup) hold only " + std::to_string(p.top_k_group * per_group) + " experts");
  return ok_status();
}

result<tensor_desc> infer_moe(const shape_query& q) {
  const auto& p = static_cast<const moe_params&>(q.params);
  const tensor_desc& x = q.inputs[0];
  const tensor_desc& logits = q.inputs[1];
  if (x.shape.empty() || x.shape.back() <= 0)
    return invalid("input x has shape " + shape_str(x.shape) + " but must be [T, C] with C > 0");
  const std::int64_t c = x.shape.back();
  const std::int64_t t = shape_numel(x.shape) / c;
  if (logits.shape.empty() || logits.shape.back() <= 0)
    return invalid("input logits has shape " + shape_str(logits.shape) + " but must be [T, E] with E > 0");
  const std::int64_t e = logits.shape.back();
  if (shape_numel(logits.shape) / e != t)
    return invalid("input logits has shape " + shape_str(logits.shape) + " but x has " + std::to_string(t) + " rows");
  MPAKT_TRY(check_routing(p, e));
  const std::size_t want = p.first_expert_input() + p.expert_inputs(e);
  if (q.inputs.size() != want)
    return invalid("input count is " + std::to_string(q.inputs.size()) + " but layout " +
                   (p.layout == layout_kind::separate ? std::string("separate") : p.layout == layout_kind::fused ? "fused" : "stacked") +
                   " with " + std::to_string(e) + " experts" + (p.selection_bias ? " and a selection bias" : "") +
                   " needs " + std::to_string(want));
  if (p.selection_bias && q.inputs[2].shape != shape_t{e})
    return invalid("input bias (input 2) has shape " + shape_str(q.inputs[2].shape) + " but must be [E] = " +
                   shape_str({e}));
  MPAKT_TRY(check_experts(p, q, e, c));
  return tensor_desc{dtype::f32, x.shape};
}

double* bind_moe(op_params& base, std::string_view name) {
  auto& p = static_cast<moe_params&>(base);
  return name == "scale" ? &p.scale : nullptr;
}

status check_moe(const op_params& base) {
  const auto& p = static_cast<const moe_params&>(base);
  if (!std::isfinite(p.scale)) return invalid("parameter scale must be a finite number");
  return ok_status();
}

void moe_features(const param_map&, std::size_t, std::vector<std::string>&) {}  // none in the schema

}  // namespace

void add_moe_ops(std::vector<op_def>& out) {
  op_def d;
  d.name = "moe";
  d.parse = &parse_moe;
  d.infer = &infer_moe;
  d.bindable = &bind_moe;
  d.check = &check_moe;
  d.features = &moe_features;
  d.packed_from = 2;  // the experts, and a selection bias when present (read with load_row)
  out.push_back(d);
}

}  // namespace mpakt::ops
