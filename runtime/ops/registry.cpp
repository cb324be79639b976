#include <algorithm>

#include "runtime/op.hpp"
#include "runtime/ops/families.hpp"

namespace mpakt {

namespace {
std::vector<op_def> build() {
  std::vector<op_def> all;
  ops::add_elementwise_ops(all);
  ops::add_norm_ops(all);
  ops::add_reduce_ops(all);
  ops::add_matmul_ops(all);
  ops::add_layout_ops(all);
  ops::add_rope_ops(all);
  ops::add_attention_ops(all);
  ops::add_moe_ops(all);
  ops::add_conv_ops(all);
  ops::add_sample_ops(all);
  std::sort(all.begin(), all.end(), [](const op_def& a, const op_def& b) { return a.name < b.name; });
  return all;
}
}  // namespace

std::span<const op_def> op_defs() {
  static const std::vector<op_def> all = build();
  return all;
}

const op_def* find_op_def(std::string_view name) {
  auto all = op_defs();
  auto it = std::lower_bound(all.begin(), all.end(), name, [](const op_def& d, std::string_view n) { return d.name < n; });
  return it != all.end() && it->name == name ? &*it : nullptr;
}

}  // namespace mpakt
