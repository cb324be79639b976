// Reference attention kernel.
//
// Query row t (leading dimensions of q folded) sits at pos = posOffset + t; key row s at
// position s. Query head h reads kv head h / (heads / kvHeads) (grouped-query attention).
// For each visible key:
//   score = scale * q.k                       (scale defaults to 1/sqrt(headDim))
//   score = cap * tanh(score / cap)           (softcap, before any bias or mask: Gemma 2)
//   score += slope_h * (s - pos)              (ALiBi; softmax-equivalent to BLOOM's slope*s
//                                              and MPT's slope*(s - (S-1)))
//   score += bias[(h,) t, s]                  (optional fourth input)
// Visibility follows transformers' masking_utils: causal keeps s <= pos
// (causal_mask_function); a causal window keeps s > pos - window as well
// (sliding_window_overlay); a non-causal window keeps |pos - s| <= window
// (sliding_window_bidirectional_overlay). Only visible keys are read, so a preallocated
// cache longer than posOffset + T works through causality. A score of -inf counts as
// masked. Softmax runs online in one pass over the visible keys, accumulated in double; a
// row that sees no key outputs zeros. k and v may be bf16 or f16 (KV caches stored at half
// width): each element is widened exactly, then used as the f32 value it stands for.

#include "backends/cpu/ref/families.hpp"
#include "backends/cpu/ref/scratch_doubles.hpp"
#include "runtime/dtype.hpp"
#include "runtime/ops/attention_params.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mpakt::cpu_ref {

namespace {

/// [first, last] key range query position `pos` may see, clipped to [0, S); empty when first > last.
struct key_range {
  std::int64_t first = 0, last = -1;
};

key_range visible_keys(const ops::attention_params& p, std::int64_t pos, std::int64_t keys) {
  key_range r{0, keys - 1};
  const auto w = static_cast<std::int64_t>(p.window);
  if (p.causal) {
    r.last = std::min(r.last, pos);
    if (p.has_window) r.first = std::max<std::int64_t>(0, pos - w + 1);
  } else if (p.has_window) {
    r.first = std::max<std::int64_t>(0, pos - w);
    r.last = std::min(r.last, pos + w);
  }
  return r;
}

/// Element i of a k or v row of dtype f32, bf16 or f16.
struct kv_reader {
  const std::byte* base = nullptr;
  dtype type = dtype::f32;
  double at(std::int64_t i) const {
    switch (type) {
      case dtype::bf16: return double(bf16_to_f32(reinterpret_cast<const std::uint16_t*>(base)[i]));
      case dtype::f16: return double(f16_to_f32(reinterpret_cast<const std::uint16_t*>(base)[i]));
      default: return double(reinterpret_cast<const float*>(base)[i]);
    }
  }
};

/// One (row, head): online softmax of the visible scores, weights applied to v rows.
struct head_job {
  const float* q;           ///< headDim values
  kv_reader k;              ///< key s, this kv head, at element s * k_stride
  kv_reader v;              ///< value s, this kv head, at element s * v_stride
  std::int64_t k_stride, v_stride;
  const float* bias;        ///< bias[s] for this row and head, or nullptr
  double slope;             ///< ALiBi slope (0 = none)
  std::int64_t pos;
};

void attend(const ops::attention_params& p, const head_job& j, key_range r, double* acc, float* out) {
  const double scale = p.score_scale();
  const std::int64_t dk = p.head_dim, dv = p.v_head_dim;
  double m = -std::numeric_limits<double>::infinity(), l = 0;
  std::fill(acc, acc + dv, 0.0);
  for (std::int64_t s = r.first; s <= r.last; ++s) {
    const std::int64_t ks = s * j.k_stride;
    double dot = 0;
    for (std::int64_t i = 0; i < dk; ++i) dot += double(j.q[i]) * j.k.at(ks + i);
    double score = scale * dot;
    if (p.has_softcap) score = p.softcap * std::tanh(score / p.softcap);
    score += j.slope * double(s - j.pos);
    if (j.bias) score += double(j.bias[s]);
    if (score == -std::numeric_limits<double>::infinity()) continue;  // masked by the bias
    if (score > m) {  // rescale what was accumulated under the old maximum
      const double c = std::exp(m - score);
      l *= c;
      for (std::int64_t i = 0; i < dv; ++i) acc[i] *= c;
      m = score;
    }
    const double w = std::exp(score - m);
    l += w;
    const std::int64_t vs = s * j.v_stride;
    for (std::int64_t i = 0; i < dv; ++i) acc[i] += w * j.v.at(vs + i);
  }
  for (std::int64_t i = 0; i < dv; ++i) out[i] = l > 0 ? float(acc[i] / l) : 0.0f;
}

status attention_kernel(const kernel_call& call) {
  const auto& p = params_of<ops::attention_params>(call);
  const tensor& q = *call.inputs[0];
  const tensor& k = *call.inputs[1];
  const tensor& v = *call.inputs[2];
  const tensor* bias = call.inputs.size() > 3 ? call.inputs[3] : nullptr;
  tensor& out = *call.output;
  const std::int64_t rows = q.rows(), keys = k.rows();
  const std::int64_t group = p.heads / p.kv_heads;
  const bool bias_per_head = bias && bias->shape().size() == 3;
  const auto offset = static_cast<std::int64_t>(p.pos_offset);
  for (const tensor* kv : {&k, &v})
    if (kv->type() != dtype::f32 && kv->type() != dtype::bf16 && kv->type() != dtype::f16)
      return invalid(std::string("input ") + (kv == &k ? "k" : "v") + " is " + std::string(dtype_name(kv->type())) +
                     "; attention reads f32, bf16 or f16 keys and values");
  const std::size_t k_elem = k.type() == dtype::f32 ? 4 : 2, v_elem = v.type() == dtype::f32 ? 4 : 2;

  float* slopes = call.scratch->floats(std::size_t(p.heads), 0);
  ops::alibi_slopes(p, slopes);
  double* acc = scratch_doubles(*call.scratch, std::size_t(p.v_head_dim), 1);

  for (std::int64_t t = 0; t < rows; ++t) {
    const std::int64_t pos = offset + t;
    const key_range r = visible_keys(p, pos, keys);
    for (std::int64_t h = 0; h < p.heads; ++h) {
      const std::int64_t kvh = h / group;
      head_job j{};
      j.q = q.f32() + t * q.cols() + h * p.head_dim;
      j.k = {k.data() + std::size_t(kvh * p.head_dim) * k_elem, k.type()};
      j.v = {v.data() + std::size_t(kvh * p.v_head_dim) * v_elem, v.type()};
      j.k_stride = k.cols();
      j.v_stride = v.cols();
      j.bias = bias ? bias->f32() + ((bias_per_head ? h * rows : 0) + t) * keys : nullptr;
      j.slope = slopes[h];
      j.pos = pos;
      attend(p, j, r, acc, out.f32() + t * out.cols() + h * p.v_head_dim);
    }
  }
  return ok_status();
}

}  // namespace

void add_attention_kernels(std::vector<cpu_kernel>& out) { out.push_back({"attention", &attention_kernel}); }

}  // namespace mpakt::cpu_ref
