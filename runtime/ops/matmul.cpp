/// Weight-reading ops: matmul, linear and embedding. Their weight input (b, w, table) may
/// arrive packed (bf16, f16, q8, q4) and is read in place. Outputs are f32.
/// Kernels: backends/cpu/ref/matmul.cpp (reference), backends/cpu/fast/matmul.cpp.

#include "runtime/ops/matmul_params.hpp"

#include "runtime/ops/families.hpp"

namespace mpakt::ops {

namespace {

result<std::unique_ptr<op_params>> parse_matmul(const param_map& pm) {
  auto p = std::make_unique<matmul_params>();
  p->trans_b = pm.boolean("transB", false);
  return std::unique_ptr<op_params>(std::move(p));
}

std::string trans_str(bool t) { return t ? "true" : "false"; }

/// Output [..., N] of x [..., K] times the 2-D weight (named `a`, `b` in the messages).
result<tensor_desc> infer_product(const shape_query& q, std::string_view x_name, std::string_view w_name) {
  const bool tb = static_cast<const matmul_params&>(q.params).trans_b;
  const shape_t& x = q.inputs[0].shape;
  const shape_t& w = q.inputs[1].shape;
  if (x.empty()) return invalid("input " + std::string(x_name) + " must have at least one dimension");
  if (w.size() != 2)
    return invalid("input " + std::string(w_name) + " has shape " + shape_str(w) +
                   " but must be two-dimensional ([K, N], or [N, K] with transB: true)");
  const std::int64_t k = x.back();
  const std::int64_t wk = tb ? w[1] : w[0];
  const std::int64_t n = tb ? w[0] : w[1];
  if (wk != k) {
    std::string msg = "input " + std::string(w_name) + " has shape " + shape_str(w) + " but " + std::string(x_name) +
                      " has K = " + std::to_string(k) + " (transB: " + trans_str(tb) + ")";
    const std::int64_t other_k = tb ? w[0] : w[1];
    if (other_k == k) msg += "; with transB: " + trans_str(!tb) + " it would match";
    return invalid(msg);
  }
  shape_t out(x.begin(), x.end() - 1);
  out.push_back(n);
  return tensor_desc{dtype::f32, out};
}

result<tensor_desc> infer_matmul(const shape_query& q) { return infer_product(q, "a", "b"); }

result<tensor_desc> infer_linear(const shape_query& q) {
  auto out = infer_product(q, "x", "w");
  if (!out) return out;
  const std::int64_t n = out->shape.back();
  const shape_t& bias = q.inputs[2].shape;
  if (bias.size() != 1 || bias[0] != n)
    return invalid("input bias has shape " + shape_str(bias) + " but must be [" + std::to_string(n) +
                   "], one value per output column");
  return out;
}

/// ids [T] with table [V, C] -> [T, C].
result<tensor_desc> infer_embedding(const shape_query& q) {
  const shape_t& ids = q.inputs[0].shape;
  const shape_t& table = q.inputs[1].shape;
  if (ids.size() != 1) return invalid("input ids has shape " + shape_str(ids) + " but must be one-dimensional [T]");
  if (table.size() != 2) return invalid("input table has shape " + shape_str(table) + " but must be two-dimensional [V, C]");
  return tensor_desc{dtype::f32, {ids[0], table[1]}};
}

}  // namespace

void add_matmul_ops(std::vector<op_def>& out) {
  op_def mm;
  mm.name = "matmul";
  mm.parse = parse_matmul;
  mm.infer = infer_matmul;
  mm.features = no_features;
  mm.packed_inputs = 1u << 1;
  out.push_back(mm);

  op_def lin;
  lin.name = "linear";
  lin.parse = parse_matmul;
  lin.infer = infer_linear;
  lin.features = no_features;
  lin.packed_inputs = 1u << 1;
  out.push_back(lin);

  op_def emb;
  emb.name = "embedding";
  emb.parse = parse_no_params;
  emb.infer = infer_embedding;
  emb.features = no_features;
  emb.packed_inputs = 1u << 1;
  out.push_back(emb);
}

}  // namespace mpakt::ops
