#include "backends/cpu/ref/families.hpp"

namespace mpakt::cpu_ref {

void add_norm_kernels(std::vector<cpu_kernel>& out) {}

}  // namespace mpakt::cpu_ref
