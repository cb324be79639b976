/// Fast CPU kernel for rope: the reference's arithmetic (backends/cpu/ref/rope.cpp) with its
/// cos/sin table kept between steps. Every layer of a pass ropes q and k at the same
/// positions with the same frequencies, so the table a step computes (cos and sin in double
/// of the f32 angles, as transformers computes them) is reused by the others: one table per
/// pass instead of two per layer. The rotation runs in vectors of doubles on AVX2 and AVX-512
/// (pairs i, i + rotaryDim/2; interleaved pairs take the reference's loop) and a pass's rows
/// are split over the kernel threads. The result is the reference's, bit for bit.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/fast/families.hpp"
#include "backends/cpu/fast/isa_kernels.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/rope_rotate.hpp"
#include "runtime/ops/rope_params.hpp"

namespace mpakt::cpu_fast {

namespace {

/// The workspace slot holding the table between steps (no other kernel uses it).
constexpr int table_slot = 12;
/// Rows × frequencies the table holds at most (4 MB each for cos and sin); a longer pass is
/// roped a piece at a time.
constexpr std::int64_t max_table_entries = std::int64_t(1) << 20;

/// A level's rotation of rows [r_begin, r_end) in pairs (i, i + rotaryDim/2)
/// (isa_kernels.hpp, rope_half_rows); nullptr: the reference's loop.
using half_rows_fn = void (*)(const float*, float*, std::int64_t, std::int64_t, std::int64_t, const float*, const float*,
                              std::int64_t, std::int64_t);

/// Below this many values a pass is roped on the caller alone (a decode step's q and k).
constexpr std::int64_t parallel_min_values = std::int64_t(1) << 14;

/// Ropes rows [r0, r0 + rows) of the pass, positions offset + r, with the frequencies `inv`
/// (half of them) and attention factor of the whole pass.
template <half_rows_fn F>
void rope_rows(const kernel_call& call, const float* inv, float factor, std::int64_t r0, std::int64_t rows) {
  const auto& p = params_of<ops::rope_params>(call);
  const tensor& x = *call.inputs[0];
  const std::int64_t width = x.cols(), half = p.rotary_dim / 2, heads = width / p.head_dim;
  const std::int64_t offset = static_cast<std::int64_t>(p.offset) + r0;
  // table: [offset, rows, half, factor, inv…][cos rows×half][sin rows×half]
  constexpr std::size_t head = 4;
  float* t = call.scratch->floats(head + std::size_t(half) + 2 * std::size_t(rows * half), table_slot);
  float* key = t + head;
  float* cs = key + half;
  float* sn = cs + rows * half;
  // positions a float holds exactly can key the table; others are computed every time
  const bool keyable = offset >= 0 && offset < (std::int64_t(1) << 24) && rows < (std::int64_t(1) << 24);
  const bool same = keyable && t[0] == float(offset) && t[1] == float(rows) && t[2] == float(half) && t[3] == factor &&
                    std::memcmp(key, inv, std::size_t(half) * sizeof(float)) == 0;
  if (!same) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const float pos = float(offset + r);
      for (std::int64_t i = 0; i < half; ++i) {
        const float angle = pos * inv[i];
        cs[r * half + i] = float(std::cos(double(angle))) * factor;
        sn[r * half + i] = float(std::sin(double(angle))) * factor;
      }
    }
    t[0] = float(offset);
    t[1] = keyable ? float(rows) : -1.0f;
    t[2] = float(half);
    t[3] = factor;
    std::memcpy(key, inv, std::size_t(half) * sizeof(float));
  }
  const float* src = x.f32() + r0 * width;
  float* dst = call.output->f32() + r0 * width;
  auto rotate = [&](std::int64_t b, std::int64_t e) {
    if (F != nullptr && !p.interleaved) return F(src, dst, width, p.head_dim, p.rotary_dim, cs, sn, b, e);
    for (std::int64_t r = b; r < e; ++r)
      for (std::int64_t h = 0; h < heads; ++h)
        cpu_rope::rotate_head(src + r * width + h * p.head_dim, dst + r * width + h * p.head_dim, cs + r * half,
                              sn + r * half, p.head_dim, p.rotary_dim, p.interleaved);
  };
  const int parts = int(std::min<std::int64_t>(kernel_threads(), rows));
  if (parts <= 1 || rows * width < parallel_min_values) return rotate(0, rows);
  parallel_for(parts, [&](int part) { rotate(rows * part / parts, rows * (part + 1) / parts); });
}

/// The workspace slot keeping plain rope's frequencies between calls (no other kernel uses it).
constexpr int freq_slot = 13;

/// What plain rope's frequencies and factor depend on: the base in use and the width (and the
/// attention factor, which may be bound per call).
struct freq_key {
  double theta, attention_factor;
  std::int64_t rotary_dim, has_attention_factor;
  bool operator==(const freq_key&) const = default;
};

/// The frequencies (half of them) and the factor on cos and sin for a pass reaching position
/// seq_len − 1. Without scaling or explicit invFreq they depend on the base and the width
/// only — every layer of every step asks for the same — so they are kept in freq_slot under
/// their key: rope_frequencies (a pow per frequency) runs once per base instead of per call.
const float* frequencies(const kernel_call& call, const ops::rope_params& p, std::int64_t seq_len, float& factor) {
  const std::int64_t half = p.rotary_dim / 2;
  const bool plain = p.inv_freq.empty() && p.scaling.type == ops::rope_scaling::kind::none;
  if (!plain) {
    float* inv = call.scratch->floats(std::size_t(half), 0);
    factor = float(ops::rope_frequencies(p, seq_len, inv));
    return inv;
  }
  const freq_key key{p.scaling.has_theta ? p.scaling.theta : p.base, p.has_attention_factor ? p.attention_factor : 0,
                     p.rotary_dim, p.has_attention_factor ? 1 : 0};
  // [key][factor][valid][inv…], the key and factor as bytes
  constexpr std::size_t key_floats = (sizeof(freq_key) + sizeof(float) - 1) / sizeof(float);
  float* kept = call.scratch->floats(key_floats + 2 + std::size_t(half), freq_slot);
  float* inv = kept + key_floats + 2;
  freq_key held;
  std::memcpy(&held, kept, sizeof held);
  if (kept[key_floats + 1] != 1.0f || !(held == key)) {
    kept[key_floats] = float(ops::rope_frequencies(p, seq_len, inv));
    std::memcpy(kept, &key, sizeof key);
    kept[key_floats + 1] = 1.0f;
  }
  factor = kept[key_floats];
  return inv;
}

template <half_rows_fn F>
status rope_cached(const kernel_call& call) {
  const auto& p = params_of<ops::rope_params>(call);
  const std::int64_t rows = call.inputs[0]->rows(), half = p.rotary_dim / 2;
  const auto offset = static_cast<std::int64_t>(p.offset);
  // The frequencies of the whole pass (dynamic scaling reads its length), then the rows.
  float factor = 1;
  const float* inv = frequencies(call, p, offset + rows, factor);
  const std::int64_t piece = std::max<std::int64_t>(1, max_table_entries / std::max<std::int64_t>(half, 1));
  for (std::int64_t r0 = 0; r0 < rows; r0 += piece) rope_rows<F>(call, inv, factor, r0, std::min(piece, rows - r0));
  return ok_status();
}

bool accepts_rope(std::span<const tensor_desc> inputs, const op_params&) { return inputs[0].type == dtype::f32; }

}  // namespace

void add_rope_kernels(std::vector<cpu_kernel>& out) {
  out.push_back({"rope", rope_cached<avx512::rope_half_rows>, accepts_rope, "avx512", cpu_isa::level::avx512});
  out.push_back({"rope", rope_cached<avx2::rope_half_rows>, accepts_rope, "avx2", cpu_isa::level::avx2});
  out.push_back({"rope", rope_cached<nullptr>, accepts_rope, "cached", cpu_isa::level::scalar});
}

}  // namespace mpakt::cpu_fast
