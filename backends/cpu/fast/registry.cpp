#include "backends/cpu/cpu_backend.hpp"

namespace mpakt {

std::span<const cpu_kernel> cpu_fast_kernels() {
  // Fast kernels register here as they are written; each is checked against the
  // reference by the op table (test/backends/op_table_test.cpp).
  static const std::vector<cpu_kernel> all;
  return all;
}

}  // namespace mpakt
