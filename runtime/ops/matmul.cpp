#include "runtime/ops/families.hpp"

namespace mpakt::ops {

void add_matmul_ops(std::vector<op_def>& out) {}

}  // namespace mpakt::ops
