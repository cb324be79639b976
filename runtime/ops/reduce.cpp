#include "runtime/ops/families.hpp"

namespace mpakt::ops {

void add_reduce_ops(std::vector<op_def>& out) {}

}  // namespace mpakt::ops
