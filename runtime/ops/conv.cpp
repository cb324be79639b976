// conv1d (pure depthwise causal convolution over a carried state) and short_conv (LFM2's
// gated short-convolution block, state advanced in place). Neither has parameters.

#include <memory>

#include "runtime/ops/families.hpp"

namespace mpakt::ops {

namespace {

/// x [T, C]: returns C.
result<std::int64_t> channels_of(const tensor_desc& x) {
  if (x.shape.empty() || x.shape.back() <= 0)
    return invalid("input x has shape " + shape_str(x.shape) + " but must be [T, C] with C > 0");
  return x.shape.back();
}

status expect(const tensor_desc& d, std::string_view name, const shape_t& want, std::string_view what) {
  if (d.shape != want)
    return invalid("input " + std::string(name) + " has shape " + shape_str(d.shape) + " but must be " +
                   std::string(what) + " = " + shape_str(want));
  return ok_status();
}

/// weight [C, 1, K] and state [K-1, C]: returns K.
result<std::int64_t> check_kernel_and_state(const tensor_desc& w, std::string_view w_name, const tensor_desc& state,
                                            std::int64_t c) {
  if (w.shape.size() != 3 || w.shape[0] != c || w.shape[1] != 1 || w.shape[2] < 1)
    return invalid("input " + std::string(w_name) + " has shape " + shape_str(w.shape) + " but must be [C, 1, K] with C = " +
                   std::to_string(c) + " and K >= 1");
  const std::int64_t k = w.shape[2];
  MPAKT_TRY(expect(state, "state", {k - 1, c}, "[K-1, C]"));
  return k;
}

result<tensor_desc> infer_conv1d(const shape_query& q) {
  auto c = channels_of(q.inputs[0]);
  if (!c) return std::move(c).err();
  auto k = check_kernel_and_state(q.inputs[1], "weight", q.inputs[2], *c);
  if (!k) return std::move(k).err();
  return tensor_desc{dtype::f32, q.inputs[0].shape};
}

result<tensor_desc> infer_short_conv(const shape_query& q) {
  auto c = channels_of(q.inputs[0]);
  if (!c) return std::move(c).err();
  MPAKT_TRY(expect(q.inputs[1], "w_in", {3 * *c, *c}, "[3C, C]"));
  auto k = check_kernel_and_state(q.inputs[2], "w_conv", q.inputs[4], *c);
  if (!k) return std::move(k).err();
  MPAKT_TRY(expect(q.inputs[3], "w_out", {*c, *c}, "[C, C]"));
  return tensor_desc{dtype::f32, q.inputs[0].shape};
}

}  // namespace

void add_conv_ops(std::vector<op_def>& out) {
  op_def conv1d;
  conv1d.name = "conv1d";
  conv1d.parse = &parse_no_params;
  conv1d.infer = &infer_conv1d;
  conv1d.features = &no_features;
  conv1d.packed_inputs = 1u << 1;  // weight
  out.push_back(conv1d);

  op_def short_conv;
  short_conv.name = "short_conv";
  short_conv.parse = &parse_no_params;
  short_conv.infer = &infer_short_conv;
  short_conv.features = &no_features;
  short_conv.writes_input = 4;  // the state advances in place
  short_conv.packed_inputs = (1u << 1) | (1u << 2) | (1u << 3);  // w_in, w_conv, w_out
  out.push_back(short_conv);
}

}  // namespace mpakt::ops
