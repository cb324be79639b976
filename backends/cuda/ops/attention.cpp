/// CUDA kernel_fn of attention: every parameter of the op (grouped-query heads, causal and
/// windowed visibility, scale, softcap, ALiBi, a bias input), keys and values f32, bf16 or f16.
/// Shape rules: runtime/ops/attention.cpp; semantics: backends/cpu/ref/attention.cpp.
///
/// Only the key rows some query row can see are copied to the device: with a preallocated
/// KV cache that is the rows up to the last position, not the whole cache. The keys each row
/// sees are split into chunks over thread blocks when rows × heads alone would leave the
/// GPU's multiprocessors idle (a decode step), and the chunks merged exactly.

#include <algorithm>
#include <climits>
#include <optional>
#include <utility>
#include <vector>

#include "backends/cuda/device_values.hpp"
#include "backends/cuda/kernels/launch.hpp"
#include "backends/cuda/ops/attention_plan.hpp"
#include "backends/cuda/ops/call.hpp"
#include "backends/cuda/ops/registry.hpp"
#include "runtime/ops/attention_params.hpp"

namespace mpakt::cuda {

namespace {

/// Rows [first, first + count) of k or v (input i) on the device, as the kernel indexes them
/// from row `first`: the device's own copy when an earlier CUDA kernel left the whole tensor
/// there (a prefill's keys), else those rows alone copied in (a KV cache: the rows up to the
/// position, not the whole preallocated cache).
result<const void*> key_rows(device_call& call, const kernel_call& c, std::size_t i, slot s, std::int64_t first,
                             std::int64_t count) {
  const tensor& t = *c.inputs[i];
  const std::size_t row = t.row_bytes();
  if (auto* values = static_cast<device_values*>(c.device)) {
    if (const void* d = values->current(t)) return static_cast<const void*>(static_cast<const std::byte*>(d) + std::size_t(first) * row);
    MPAKT_TRY(values->bring_back(t.data(), t.nbytes(), call.where()));
  }
  MPAKT_CUDA_ASSIGN(void* d, call.upload_bytes(s, t.data() + std::size_t(first) * row, std::size_t(count) * row));
  return static_cast<const void*>(d);
}

status attention_k(const kernel_call& c) {
  const auto& p = params_of<ops::attention_params>(c);
  const tensor& q = *c.inputs[0];
  const tensor& kt = *c.inputs[1];
  const tensor& vt = *c.inputs[2];
  const tensor* bias = c.inputs.size() > 3 ? c.inputs[3] : nullptr;
  tensor& out = *c.output;
  if (out.numel() == 0) return ok_status();
  attention_plan plan = plan_attention(p, q, kt, vt, bias, out);
  k::attention_args& a = plan.args;
  const std::int64_t held = plan.held;

  MPAKT_CUDA_ASSIGN(auto call, device_call::begin("attention", c));
  MPAKT_CUDA_ASSIGN(a.q, call.input_f32(slot_in0, c, 0));
  MPAKT_CUDA_ASSIGN(a.k, key_rows(call, c, 1, slot_in1, a.key_base, held));
  MPAKT_CUDA_ASSIGN(a.v, key_rows(call, c, 2, slot_in2, a.key_base, held));
  if (bias) {
    MPAKT_CUDA_ASSIGN(a.bias, call.input_f32(slot_in3, c, 3));
  }
  if (p.alibi != ops::attention_params::alibi_kind::none) {
    std::vector<float> slopes(std::size_t(p.heads));
    ops::alibi_slopes(p, slopes.data());
    MPAKT_CUDA_ASSIGN(a.slopes, call.upload_floats(slot_in4, slopes.data(), slopes.size()));
    // (the copy from pageable memory is staged before the call returns: `slopes` may go)
  }
  MPAKT_CUDA_ASSIGN(a.out, call.output_f32(c));
  float* partial = nullptr;
  if (const std::size_t n = k::attention_partial_floats(a)) {
    MPAKT_CUDA_ASSIGN(partial, call.scratch_f32(slot_tmp, std::int64_t(n)));
  }
  MPAKT_TRY(call.check(k::attention(a, partial, call.stream()), "kernel launch"));
  return call.finish(c, a.out);
}

/// q and an optional bias f32, k and v f32/bf16/f16, head widths the kernel holds.
bool accepts_attention(std::span<const tensor_desc> in, const op_params& params) {
  if (in.size() < 3 || in[0].type != dtype::f32 || !kv_type_of(in[1].type) || !kv_type_of(in[2].type)) return false;
  if (in.size() > 3 && in[3].type != dtype::f32) return false;
  const auto* p = dynamic_cast<const ops::attention_params*>(&params);
  if (!p || p->head_dim > k::attention_max_head_dim || p->v_head_dim > k::attention_max_v_dim || p->kv_heads <= 0)
    return false;
  for (const auto& d : in)
    if (shape_numel(d.shape) > INT_MAX) return false;  // (indices stay far inside int64 anyway)
  return true;
}

}  // namespace

void add_attention_kernels(std::vector<cuda_kernel>& out) { out.push_back({"attention", &attention_k, &accepts_attention}); }

}  // namespace mpakt::cuda
