#include "backends/cpu/fast/families.hpp"

namespace mpakt {

std::span<const cpu_kernel> cpu_fast_kernels() {
  // Fast kernels register here as they are written; each is checked against the
  // reference by the op table (test/backends/op_table_test.cpp).
  static const std::vector<cpu_kernel> all = [] {
    std::vector<cpu_kernel> v;
    cpu_fast::add_matmul_kernels(v);
    cpu_fast::add_attention_kernels(v);
    cpu_fast::add_simple_kernels(v);
    cpu_fast::add_rope_kernels(v);
    cpu_fast::add_sample_kernels(v);
    return v;
  }();
  return all;
}

}  // namespace mpakt
