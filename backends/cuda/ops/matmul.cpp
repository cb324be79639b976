/// CUDA kernel_fns of matmul, linear and embedding, whose weight may arrive as f32, bf16 or
/// f16 (q8/q4 weights stay on the CPU reference). Shape rules: runtime/ops/matmul.cpp.
///
/// The weight (and linear's bias), when the call marks it immutable (kernel_call::
/// immutable_inputs: a model weight), is read from the device's kept copy (device_call::input):
/// copied to the GPU on its first use only.
///
/// matmul / linear: f32 weights go to cuBLAS SGEMM. Packed weights with few rows (a decode
/// step, <= k::few_rows_max) use an own kernel reading the weight in place; with more rows
/// the weight is widened to f32 on the device and goes to SGEMM, so every path accumulates
/// in f32 with f32 activations (no bf16 rounding of activations).

#include <climits>
#include <cmath>
#include <optional>
#include <string>

#include "backends/cuda/kernels/launch.hpp"
#include "backends/cuda/ops/call.hpp"
#include "backends/cuda/ops/registry.hpp"
#include "runtime/ops/matmul_params.hpp"

namespace mpakt::cuda {

namespace {

std::optional<k::weight_type> weight_type_of(dtype t) {
  switch (t) {
    case dtype::f32: return k::weight_type::f32;
    case dtype::bf16: return k::weight_type::bf16;
    case dtype::f16: return k::weight_type::f16;
    default: return std::nullopt;
  }
}

/// y[m, n] = x[m, :] . w(:, n) in row-major terms. cuBLAS is column-major, so it computes
/// y^T (N x M) = op(w) (N x K) * x^T (K x M): w stored [K, N] is column-major N x K (no
/// transpose, ld N); stored [N, K] it is column-major K x N (transpose, ld K).
status sgemm(device_call& call, const float* x, const float* w, bool trans_b, std::int64_t m, std::int64_t kd,
             std::int64_t n, float* y) {
  const float one = 1.0f, zero = 0.0f;
  return call.check(cublasSgemm(call.ctx().blas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m),
                                int(kd), &one, w, trans_b ? int(kd) : int(n), x, int(kd), &zero, y, int(n)),
                    "cublasSgemm");
}

/// matmul and linear: out = x . w (+ bias as a row).
status product(const kernel_call& c, std::string_view op, const tensor* bias) {
  const bool trans_b = params_of<ops::matmul_params>(c).trans_b;
  const tensor& x = *c.inputs[0];
  const tensor& w = *c.inputs[1];
  tensor& out = *c.output;
  // out.rows(), not x.rows(): x [3, 0] still has 3 rows (of bias alone).
  const std::int64_t rows = out.rows(), kd = x.cols();
  const std::int64_t n = trans_b ? w.shape()[0] : w.shape()[1];
  if (out.numel() == 0) return ok_status();
  const auto wt = weight_type_of(w.type());
  if (!wt) return make_error(errc::internal, "CUDA kernel for " + op_where(op) + " got an unsupported weight dtype");

  MPAKT_CUDA_ASSIGN(auto call, device_call::begin(op));
  MPAKT_CUDA_ASSIGN(const float* dx, call.upload_f32(slot_in0, x));
  MPAKT_CUDA_ASSIGN(const void* dw, call.input(slot_in1, c, 1));  // (a weight: kept on the device)
  MPAKT_CUDA_ASSIGN(float* dy, call.scratch_f32(slot_out, out.numel()));
  if (kd == 0) {
    MPAKT_TRY(call.check(cudaMemsetAsync(dy, 0, out.nbytes(), call.stream()), "cudaMemsetAsync"));
  } else if (*wt == k::weight_type::f32) {
    MPAKT_TRY(sgemm(call, dx, static_cast<const float*>(dw), trans_b, rows, kd, n, dy));
  } else if (rows <= k::few_rows_max) {
    MPAKT_TRY(call.check(k::matmul_few_rows(dx, dw, *wt, trans_b, rows, kd, n, dy, call.stream()), "kernel launch"));
  } else {
    MPAKT_CUDA_ASSIGN(float* dwide, call.scratch_f32(slot_tmp, w.numel()));
    MPAKT_TRY(call.check(k::widen(dw, *wt, w.numel(), dwide, call.stream()), "kernel launch (widen)"));
    MPAKT_TRY(sgemm(call, dx, dwide, trans_b, rows, kd, n, dy));
  }
  if (bias) {
    MPAKT_CUDA_ASSIGN(const void* db_kept, call.input(slot_in2, c, 2));  // (f32: accepts_product)
    const float* db = static_cast<const float*>(db_kept);
    MPAKT_TRY(call.check(k::binary(k::binary_op::add, dy, db, dy, out.numel(), n, k::broadcast::row, call.stream()),
                         "kernel launch (bias)"));
  }
  return call.download(out, dy);
}

status matmul_k(const kernel_call& c) { return product(c, "matmul", nullptr); }
status linear_k(const kernel_call& c) { return product(c, "linear", c.inputs[2]); }

/// x f32, w a 2-D f32/bf16/f16 weight, every dimension within cuBLAS's int range.
bool accepts_product(std::span<const tensor_desc> in, const op_params&) {
  if (in.size() < 2 || in[0].type != dtype::f32 || !weight_type_of(in[1].type) || in[1].shape.size() != 2) return false;
  for (std::size_t i = 2; i < in.size(); ++i)
    if (in[i].type != dtype::f32) return false;
  const std::int64_t kd = in[0].shape.empty() ? 1 : in[0].shape.back();
  const std::int64_t xn = shape_numel(in[0].shape);
  const std::int64_t rows = kd > 0 ? xn / kd : 0;
  for (std::int64_t d : {kd, rows, in[1].shape[0], in[1].shape[1]})
    if (d < 0 || d > INT_MAX) return false;
  return true;
}

/// Row t is table row ids[t]; an id outside [0, V) gives zeros; an id that is not a whole
/// number is the same error as in the reference, found on the host before any copy.
status embedding_k(const kernel_call& c) {
  const tensor& ids = *c.inputs[0];
  const tensor& table = *c.inputs[1];
  tensor& out = *c.output;
  const std::int64_t count = ids.numel(), vocab = table.shape()[0], width = table.cols();
  for (std::int64_t t = 0; t < count; ++t) {
    const float id = ids.f32()[t];
    if (id != std::floor(id))  // NaN too
      return invalid("input ids[" + std::to_string(t) + "] is " + num_str(id) + ", not a whole number");
  }
  if (out.numel() == 0) return ok_status();
  const auto wt = weight_type_of(table.type());
  if (!wt) return make_error(errc::internal, "CUDA kernel for op 'embedding' got an unsupported table dtype");
  // The table is a weight: the device keeps its copy (call.input), read by every later call.
  MPAKT_CUDA_ASSIGN(auto call, device_call::begin("embedding"));
  MPAKT_CUDA_ASSIGN(const float* dids, call.upload_f32(slot_in0, ids));
  MPAKT_CUDA_ASSIGN(const void* dt, call.input(slot_in1, c, 1));
  MPAKT_CUDA_ASSIGN(float* dy, call.scratch_f32(slot_out, out.numel()));
  MPAKT_TRY(call.check(k::embedding(dids, count, dt, *wt, vocab, width, dy, call.stream()), "kernel launch"));
  return call.download(out, dy);
}

bool accepts_embedding(std::span<const tensor_desc> in, const op_params&) {
  return in.size() == 2 && in[0].type == dtype::f32 && weight_type_of(in[1].type) && in[1].shape.size() == 2;
}

}  // namespace

void add_matmul_kernels(std::vector<cuda_kernel>& out) {
  out.push_back({"matmul", &matmul_k, &accepts_product});
  out.push_back({"linear", &linear_k, &accepts_product});
  out.push_back({"embedding", &embedding_k, &accepts_embedding});
}

}  // namespace mpakt::cuda
