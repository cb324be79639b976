// Reference rope kernel.
//
// Row r of x (leading dimensions folded) sits at position pos = offset + r. For every
// frequency i < rotaryDim/2 the angle is float(pos) * inv_freq[i], computed in float32 as
// transformers does (`position_ids.float() * inv_freq`); cos and sin are rounded to float32
// and multiplied by the attention factor, as LlamaRotaryEmbedding.forward does. Each head
// rotates the channel pair (i, i + rotaryDim/2) (rotate_half, Llama/NeoX) or (2i, 2i+1)
// (rotate_every_two, GPT-J/Cohere/GLM); channels from rotaryDim on pass through.

#include "backends/cpu/ref/families.hpp"
#include "backends/cpu/rope_rotate.hpp"
#include "runtime/ops/rope_params.hpp"

#include <cmath>

namespace mpakt::cpu_ref {

namespace {

status rope_kernel(const kernel_call& call) {
  const auto& p = params_of<ops::rope_params>(call);
  const tensor& x = *call.inputs[0];
  tensor& y = *call.output;
  const std::int64_t rows = x.rows(), width = x.cols(), half = p.rotary_dim / 2;
  const std::int64_t heads = width / p.head_dim;
  const auto offset = static_cast<std::int64_t>(p.offset);

  float* inv = call.scratch->floats(std::size_t(half), 0);
  float* cs = call.scratch->floats(std::size_t(2 * half), 1);
  float* sn = cs + half;
  const float factor = float(ops::rope_frequencies(p, offset + rows, inv));

  for (std::int64_t r = 0; r < rows; ++r) {
    const float pos = float(offset + r);
    for (std::int64_t i = 0; i < half; ++i) {
      const float angle = pos * inv[i];
      cs[i] = float(std::cos(double(angle))) * factor;
      sn[i] = float(std::sin(double(angle))) * factor;
    }
    const float* src = x.f32() + r * width;
    float* dst = y.f32() + r * width;
    for (std::int64_t h = 0; h < heads; ++h)
      cpu_rope::rotate_head(src + h * p.head_dim, dst + h * p.head_dim, cs, sn, p.head_dim, p.rotary_dim, p.interleaved);
  }
  return ok_status();
}

}  // namespace

void add_rope_kernels(std::vector<cpu_kernel>& out) { out.push_back({"rope", &rope_kernel}); }

}  // namespace mpakt::cpu_ref
