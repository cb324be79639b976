/// CUDA kernel_fns of matmul, linear and embedding, whose weight may arrive as f32, bf16 or
/// f16 (q8/q4 weights stay on the CPU reference). Shape rules: runtime/ops/matmul.cpp.
///
/// The weight (and linear's bias), when the call marks it immutable (kernel_call::
/// immutable_inputs: a model weight), is read from the device's kept copy (device_call::input):
/// copied to the GPU on its first use only.
///
/// matmul / linear, by rows (out.rows()) and weight type:
///  - up to k::few_rows_max rows (decode, batched decode, verify passes), every weight type:
///    an own kernel reading the weight in place (k::matmul_few_rows), f32 activations, sums in
///    f32 in an order that does not depend on the number of rows, so each row gets the bits it
///    gets alone;
///  - more rows, bf16 weights: the activations rounded to bf16 (nearest even) once per call,
///    then cuBLAS's tensor cores (cublasGemmEx, bf16 x bf16, f32 accumulation and output) on the
///    weight as stored, as docs/decisions.md has it ("bf16 weights in a prefill meet bf16
///    activations": each product of two bf16 values is exact in f32);
///  - more rows, f16 weights: the weight widened to f32 on the device, then SGEMM with f32
///    activations (activations may exceed f16's range, so they are not narrowed);
///  - more rows, f32 weights: SGEMM (default math mode: no TF32).
/// linear then adds its bias as a row.

#include <climits>
#include <cmath>
#include <cstdint>
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

/// sgemm's product with bf16 operands (x already rounded to bf16), f32 accumulation and f32
/// output, on the tensor cores: the same column-major mapping, w read as stored.
status gemm_bf16(device_call& call, const std::uint16_t* x, const void* w, bool trans_b, std::int64_t m,
                 std::int64_t kd, std::int64_t n, float* y) {
  const float one = 1.0f, zero = 0.0f;  // (CUBLAS_COMPUTE_32F: f32 scalars)
  return call.check(cublasGemmEx(call.ctx().blas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m),
                                 int(kd), &one, w, CUDA_R_16BF, trans_b ? int(kd) : int(n), x, CUDA_R_16BF, int(kd),
                                 &zero, y, CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx");
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

  MPAKT_CUDA_ASSIGN(auto call, device_call::begin(op, c));
  MPAKT_CUDA_ASSIGN(const float* dx, call.input_f32(slot_in0, c, 0));
  MPAKT_CUDA_ASSIGN(const void* dw, call.input(slot_in1, c, 1));  // (a weight: kept on the device)
  MPAKT_CUDA_ASSIGN(float* dy, call.output_f32(c));
  if (kd == 0) {
    MPAKT_TRY(call.check(cudaMemsetAsync(dy, 0, out.nbytes(), call.stream()), "cudaMemsetAsync"));
  } else if (rows <= k::few_rows_max) {
    MPAKT_TRY(call.check(k::matmul_few_rows(dx, dw, *wt, trans_b, rows, kd, n, dy, call.stream()), "kernel launch"));
  } else if (*wt == k::weight_type::f32) {
    MPAKT_TRY(sgemm(call, dx, static_cast<const float*>(dw), trans_b, rows, kd, n, dy));
  } else if (*wt == k::weight_type::bf16) {
    const std::int64_t count = rows * kd;  // x's values (x.numel(): kd > 0 here)
    MPAKT_CUDA_ASSIGN(void* xb_raw, call.scratch(slot_tmp, std::size_t(count) * sizeof(std::uint16_t)));
    auto* xb = static_cast<std::uint16_t*>(xb_raw);
    MPAKT_TRY(call.check(k::round_to_bf16(dx, count, xb, call.stream()), "kernel launch (round to bf16)"));
    MPAKT_TRY(gemm_bf16(call, xb, dw, trans_b, rows, kd, n, dy));
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
  return call.finish(c, dy);
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
  if (c.device) {  // ids an earlier device kernel drew (an argmax in the graph) are read here
    const tensor* held = &ids;
    MPAKT_TRY(c.device->to_host(std::span<const tensor* const>(&held, 1)));
  }
  for (std::int64_t t = 0; t < count; ++t) {
    const float id = ids.f32()[t];
    if (id != std::floor(id))  // NaN too
      return invalid("input ids[" + std::to_string(t) + "] is " + num_str(id) + ", not a whole number");
  }
  if (out.numel() == 0) return ok_status();
  const auto wt = weight_type_of(table.type());
  if (!wt) return make_error(errc::internal, "CUDA kernel for op 'embedding' got an unsupported table dtype");
  // The table is a weight: the device keeps its copy (call.input), read by every later call.
  MPAKT_CUDA_ASSIGN(auto call, device_call::begin("embedding", c));
  MPAKT_CUDA_ASSIGN(const float* dids, call.input_f32(slot_in0, c, 0));
  MPAKT_CUDA_ASSIGN(const void* dt, call.input(slot_in1, c, 1));
  MPAKT_CUDA_ASSIGN(float* dy, call.output_f32(c));
  MPAKT_TRY(call.check(k::embedding(dids, count, dt, *wt, vocab, width, dy, call.stream()), "kernel launch"));
  return call.finish(c, dy);
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
