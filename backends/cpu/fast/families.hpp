#pragma once
/// Fast CPU kernels, registered family by family (one function per source file). Each
/// claims the cases it handles through `accepts`; the reference kernel covers the rest.

#include <vector>

#include "backends/cpu/cpu_backend.hpp"

namespace mpakt::cpu_fast {

/// `accepts` for kernels that read every input as f32 (other dtypes go to the reference).
inline bool all_inputs_f32(std::span<const tensor_desc> inputs, const op_params&) {
  for (const auto& in : inputs)
    if (in.type != dtype::f32) return false;
  return true;
}

void add_matmul_kernels(std::vector<cpu_kernel>& out);     // matmul.cpp: matmul, linear (transB: true)
void add_attention_kernels(std::vector<cpu_kernel>& out);  // attention.cpp
void add_simple_kernels(std::vector<cpu_kernel>& out);     // simple.cpp: swiglu, silu, rmsnorm, add, sub, mul
void add_rope_kernels(std::vector<cpu_kernel>& out);       // rope.cpp
void add_sample_kernels(std::vector<cpu_kernel>& out);     // sample.cpp

}  // namespace mpakt::cpu_fast
