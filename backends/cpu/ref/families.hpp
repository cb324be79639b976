#pragma once
/// Reference kernels, registered family by family (one function per source file).

#include <vector>

#include "backends/cpu/cpu_backend.hpp"

namespace mpakt::cpu_ref {

void add_elementwise_kernels(std::vector<cpu_kernel>& out);  // elementwise.cpp
void add_norm_kernels(std::vector<cpu_kernel>& out);         // norm.cpp
void add_reduce_kernels(std::vector<cpu_kernel>& out);       // reduce.cpp
void add_matmul_kernels(std::vector<cpu_kernel>& out);       // matmul.cpp
void add_layout_kernels(std::vector<cpu_kernel>& out);       // layout.cpp
void add_rope_kernels(std::vector<cpu_kernel>& out);         // rope.cpp
void add_attention_kernels(std::vector<cpu_kernel>& out);    // attention.cpp
void add_moe_kernels(std::vector<cpu_kernel>& out);          // moe.cpp
void add_conv_kernels(std::vector<cpu_kernel>& out);         // conv.cpp
void add_sample_kernels(std::vector<cpu_kernel>& out);       // sample.cpp

}  // namespace mpakt::cpu_ref
