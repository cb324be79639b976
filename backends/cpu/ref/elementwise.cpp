/// Reference kernels of the elementwise ops (shape rules: runtime/ops/elementwise.cpp).
/// Each value is computed in double and rounded once to f32.

#include <cmath>

#include "backends/cpu/ref/families.hpp"
#include "runtime/ops/elementwise_params.hpp"

namespace mpakt::cpu_ref {

namespace {

constexpr double sqrt_2_over_pi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double inv_sqrt_2 = 0.70710678118654752440;      // 1 / sqrt(2)

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_tanh(double x) { return 0.5 * x * (1.0 + std::tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x))); }

/// Applies f to every element of input 0.
template <class F>
status unary(const kernel_call& c, F f) {
  const tensor& x = *c.inputs[0];
  const float* in = x.f32();
  float* out = c.output->f32();
  const std::int64_t n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) out[i] = float(f(double(in[i])));
  return ok_status();
}

/// out = f(a, b) with b shaped like a, a single row as wide as a's last dimension, or a
/// single value (the shape rule allowed nothing else; leading dimensions of b are 1).
template <class F>
status binary(const kernel_call& c, F f) {
  const tensor& a = *c.inputs[0];
  const tensor& b = *c.inputs[1];
  const float* pa = a.f32();
  const float* pb = b.f32();
  float* out = c.output->f32();
  const std::int64_t n = a.numel();
  if (b.numel() == a.numel()) {  // same shape, or a row of a tensor that is one row
    for (std::int64_t i = 0; i < n; ++i) out[i] = float(f(double(pa[i]), double(pb[i])));
  } else if (b.numel() == 1) {
    const double s = pb[0];
    for (std::int64_t i = 0; i < n; ++i) out[i] = float(f(double(pa[i]), s));
  } else {  // a row as wide as a's last dimension
    const std::int64_t cols = a.cols(), rows = a.rows();
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < cols; ++j)
        out[r * cols + j] = float(f(double(pa[r * cols + j]), double(pb[j])));
  }
  return ok_status();
}

/// out = act(gate) * up, up shaped like gate.
template <class F>
status gated(const kernel_call& c, F act) {
  const float* gate = c.inputs[0]->f32();
  const float* up = c.inputs[1]->f32();
  float* out = c.output->f32();
  const std::int64_t n = c.inputs[0]->numel();
  for (std::int64_t i = 0; i < n; ++i) out[i] = float(act(double(gate[i])) * double(up[i]));
  return ok_status();
}

status add_k(const kernel_call& c) { return binary(c, [](double a, double b) { return a + b; }); }
status sub_k(const kernel_call& c) { return binary(c, [](double a, double b) { return a - b; }); }
status mul_k(const kernel_call& c) { return binary(c, [](double a, double b) { return a * b; }); }

status scale_k(const kernel_call& c) {
  const double f = params_of<ops::scale_params>(c).factor;
  return unary(c, [f](double x) { return x * f; });
}

status relu_k(const kernel_call& c) {
  return unary(c, [](double x) { return x < 0 ? 0.0 : x; });  // NaN stays NaN
}
status silu_k(const kernel_call& c) { return unary(c, [](double x) { return x * sigmoid(x); }); }
status tanh_k(const kernel_call& c) { return unary(c, [](double x) { return std::tanh(x); }); }
status sigmoid_k(const kernel_call& c) { return unary(c, sigmoid); }
status gelu_k(const kernel_call& c) { return unary(c, gelu_tanh); }
status gelu_exact_k(const kernel_call& c) {
  return unary(c, [](double x) { return 0.5 * x * (1.0 + std::erf(x * inv_sqrt_2)); });
}
status gelu_quick_k(const kernel_call& c) { return unary(c, [](double x) { return x * sigmoid(1.702 * x); }); }

status softcap_k(const kernel_call& c) {
  const double cap = params_of<ops::softcap_params>(c).cap;
  return unary(c, [cap](double x) { return cap * std::tanh(x / cap); });
}

status swiglu_k(const kernel_call& c) { return gated(c, [](double g) { return g * sigmoid(g); }); }
status geglu_k(const kernel_call& c) { return gated(c, gelu_tanh); }

}  // namespace

void add_elementwise_kernels(std::vector<cpu_kernel>& out) {
  out.push_back({"add", add_k});
  out.push_back({"sub", sub_k});
  out.push_back({"mul", mul_k});
  out.push_back({"scale", scale_k});
  out.push_back({"relu", relu_k});
  out.push_back({"silu", silu_k});
  out.push_back({"tanh", tanh_k});
  out.push_back({"sigmoid", sigmoid_k});
  out.push_back({"gelu", gelu_k});
  out.push_back({"gelu_exact", gelu_exact_k});
  out.push_back({"gelu_quick", gelu_quick_k});
  out.push_back({"softcap", softcap_k});
  out.push_back({"swiglu", swiglu_k});
  out.push_back({"geglu", geglu_k});
}

}  // namespace mpakt::cpu_ref
