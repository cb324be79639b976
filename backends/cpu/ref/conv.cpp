// Reference conv1d and short_conv kernels.
//
// conv1d: z = concat(state [K-1, C], x [T, C]) along rows; y[t, c] = sum_j w[c, 0, j] *
// z[t + j, c] for j = 0..K-1 — PyTorch's cross-correlation, so w[c, 0, K-1] multiplies the
// current row, as nn.Conv1d(groups=C, padding=K-1) followed by dropping the extra outputs
// does in Lfm2ShortConv. Pure: the state is only read.
//
// short_conv (transformers Lfm2ShortConv.forward without bias):
//   BCx = x · w_inᵀ  [T, 3C], chunks B = [0, C), Cg = [C, 2C), xx = [2C, 3C)
//   Bx  = B * xx                      (float32 product, as torch computes it)
//   conv = conv1d(Bx) over the state
//   out = (Cg * conv) · w_outᵀ
// then the state becomes the last K-1 rows of concat(old state, Bx), in place; this holds
// for any T, including T < K-1. Weights may be packed and are read a row at a time; dot
// products and the convolution accumulate in double.

#include "backends/cpu/ref/families.hpp"
#include "backends/cpu/ref/packed.hpp"

#include <algorithm>
#include <cstring>

namespace mpakt::cpu_ref {

namespace {

/// Row r of a possibly packed tensor: in place for f32, else widened into tmp.
const float* row_of(const tensor& t, std::int64_t r, float* tmp) {
  if (t.type() == dtype::f32) return t.f32() + r * t.cols();
  load_row(t, r, tmp);
  return tmp;
}

/// y[t, c] = sum_j w[c, j] * z[t + j, c], z = state rows then x rows; optionally times gate[t, c].
void depthwise_conv(const float* x, const float* state, const tensor& w, std::int64_t rows, std::int64_t c,
                    const float* gate, float* wtmp, float* y) {
  const std::int64_t k = w.cols();
  for (std::int64_t ch = 0; ch < c; ++ch) {
    const float* wr = row_of(w, ch, wtmp);
    for (std::int64_t t = 0; t < rows; ++t) {
      double acc = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int64_t zi = t + j;  // row of z
        const float z = zi < k - 1 ? state[zi * c + ch] : x[(zi - (k - 1)) * c + ch];
        acc += double(wr[j]) * double(z);
      }
      y[t * c + ch] = gate ? gate[t * c + ch] * float(acc) : float(acc);
    }
  }
}

status conv1d_kernel(const kernel_call& call) {
  const tensor& x = *call.inputs[0];
  const tensor& w = *call.inputs[1];
  const tensor& state = *call.inputs[2];
  float* wtmp = call.scratch->floats(std::size_t(w.cols()), 0);
  depthwise_conv(x.f32(), state.f32(), w, x.rows(), x.cols(), nullptr, wtmp, call.output->f32());
  return ok_status();
}

/// The state becomes the last K-1 rows of concat(state, bx).
void advance_state(float* state, std::int64_t state_rows, const float* bx, std::int64_t rows, std::int64_t c) {
  if (rows >= state_rows) {
    std::memcpy(state, bx + (rows - state_rows) * c, std::size_t(state_rows * c) * sizeof(float));
    return;
  }
  const std::int64_t kept = state_rows - rows;
  std::memmove(state, state + rows * c, std::size_t(kept * c) * sizeof(float));
  std::memcpy(state + kept * c, bx, std::size_t(rows * c) * sizeof(float));
}

status short_conv_kernel(const kernel_call& call) {
  const tensor& x = *call.inputs[0];
  const tensor& w_in = *call.inputs[1];
  const tensor& w_conv = *call.inputs[2];
  const tensor& w_out = *call.inputs[3];
  tensor& state = *call.inputs[4];
  const std::int64_t rows = x.rows(), c = x.cols(), k = w_conv.cols();
  workspace& ws = *call.scratch;
  float* bx = ws.floats(std::size_t(rows * c), 0);
  float* gate = ws.floats(std::size_t(rows * c), 1);
  float* y = ws.floats(std::size_t(rows * c), 2);
  float* tmp = ws.floats(std::size_t(std::max(c, k)), 3);

  for (std::int64_t t = 0; t < rows; ++t) {  // in_proj, chunked B, C, x; gate B before the conv
    const float* xt = x.f32() + t * c;
    for (std::int64_t ch = 0; ch < c; ++ch) {
      const float b = float(dot_row(w_in, ch, xt, tmp));
      const float xx = float(dot_row(w_in, 2 * c + ch, xt, tmp));
      gate[t * c + ch] = float(dot_row(w_in, c + ch, xt, tmp));
      bx[t * c + ch] = b * xx;
    }
  }
  depthwise_conv(bx, state.f32(), w_conv, rows, c, gate, tmp, y);  // C gates after the conv
  for (std::int64_t t = 0; t < rows; ++t) {  // out_proj
    float* out = call.output->f32() + t * c;
    for (std::int64_t o = 0; o < c; ++o) out[o] = float(dot_row(w_out, o, y + t * c, tmp));
  }
  advance_state(state.f32(), k - 1, bx, rows, c);
  return ok_status();
}

}  // namespace

void add_conv_kernels(std::vector<cpu_kernel>& out) {
  out.push_back({"conv1d", &conv1d_kernel});
  out.push_back({"short_conv", &short_conv_kernel});
}

}  // namespace mpakt::cpu_ref
