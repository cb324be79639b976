#pragma once
/// op_defs, registered family by family (one function per source file).

#include <vector>

#include "runtime/op.hpp"

namespace mpakt::ops {

void add_elementwise_ops(std::vector<op_def>& out);  // elementwise.cpp: add sub mul scale relu silu tanh sigmoid gelu gelu_exact gelu_quick softcap swiglu geglu
void add_norm_ops(std::vector<op_def>& out);         // norm.cpp: rmsnorm layernorm softmax causal_mask
void add_reduce_ops(std::vector<op_def>& out);       // reduce.cpp: argmax reduce_max reduce_sum reduce_mean
void add_matmul_ops(std::vector<op_def>& out);       // matmul.cpp: matmul linear embedding
void add_layout_ops(std::vector<op_def>& out);       // layout.cpp: reshape transpose slice concat zeros cache_write
void add_rope_ops(std::vector<op_def>& out);         // rope.cpp: rope
void add_attention_ops(std::vector<op_def>& out);    // attention.cpp: attention
void add_moe_ops(std::vector<op_def>& out);          // moe.cpp: moe
void add_conv_ops(std::vector<op_def>& out);         // conv.cpp: conv1d short_conv
void add_sample_ops(std::vector<op_def>& out);       // sample.cpp: sample

}  // namespace mpakt::ops
