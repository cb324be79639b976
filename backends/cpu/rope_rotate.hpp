#pragma once
/// The rotation of one head by rope, shared by the reference kernel and the fast one (which
/// differ only in how they keep the cos/sin table): so their results are the same bits.

#include <cstdint>

namespace mpakt::cpu_rope {

/// Rotates one head: `src` and `dst` are headDim wide; c and s hold rotaryDim/2 values. Each
/// pair is rotated in double and rounded once: pairs (i, i + rotaryDim/2) (rotate_half,
/// Llama/NeoX) or (2i, 2i+1) (rotate_every_two, GPT-J/Cohere/GLM); channels from rotaryDim on
/// pass through.
inline void rotate_head(const float* src, float* dst, const float* c, const float* s, std::int64_t head_dim,
                        std::int64_t rotary_dim, bool interleaved) {
  const std::int64_t half = rotary_dim / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    const std::int64_t ia = interleaved ? 2 * i : i;
    const std::int64_t ib = interleaved ? 2 * i + 1 : i + half;
    const double a = src[ia], b = src[ib];
    dst[ia] = float(a * c[i] - b * s[i]);
    dst[ib] = float(b * c[i] + a * s[i]);
  }
  for (std::int64_t j = rotary_dim; j < head_dim; ++j) dst[j] = src[j];
}

}  // namespace mpakt::cpu_rope
