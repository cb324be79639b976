#include "backends/cuda/ops/call.hpp"

#include <string>

#include "backends/cuda/device_values.hpp"

namespace mpakt::cuda {

result<device_call> device_call::begin(std::string_view op, const kernel_call& c) {
  auto ctx = c.device ? static_cast<device_values*>(c.device)->context() : current_context();
  if (!ctx) return make_error(errc::internal, "CUDA kernel for " + op_where(op) + " ran with no cuda_backend alive");
  device_call call(std::move(ctx), op);
  // The CUDA runtime's current device is per host thread, and a worker may run on any.
  MPAKT_TRY(call.check(cudaSetDevice(call.ctx().device()), "cudaSetDevice"));
  return call;
}

result<float*> device_call::scratch_f32(slot s, std::int64_t count) {
  MPAKT_CUDA_ASSIGN(void* p, scratch(s, std::size_t(count) * sizeof(float)));
  return static_cast<float*>(p);
}

result<void*> device_call::upload(slot s, const tensor& t) { return upload_bytes(s, t.data(), t.nbytes()); }

result<const void*> device_call::resident(slot s, const tensor& t) {
  auto kept = ctx_->weights().get(t, [&](const tensor& w) -> result<device_buffer> {
    MPAKT_CUDA_ASSIGN(auto b, device_buffer::allocate(w.nbytes(), where_));
    // (synchronous: the copy is complete before any kernel reads it, and the host tensor may
    // go on being used by the CPU meanwhile)
    if (w.nbytes() > 0)
      MPAKT_TRY(check(cudaMemcpy(b.get(), w.data(), w.nbytes(), cudaMemcpyHostToDevice), "cudaMemcpy (weight to device)"));
    return b;
  });
  if (kept) return static_cast<const void*>((*kept)->get());
  MPAKT_CUDA_ASSIGN(void* p, upload(s, t));
  return static_cast<const void*>(p);
}

result<const void*> device_call::input(slot s, const kernel_call& c, std::size_t i) {
  const tensor& t = *c.inputs[i];
  if (i < 32 && (c.immutable_inputs >> i) & 1u) return resident(s, t);
  if (auto* values = static_cast<device_values*>(c.device)) {
    if (const void* d = values->current(t)) return d;
    // (bytes a device value shares without being this tensor: back to the host first)
    MPAKT_TRY(values->bring_back(t.data(), t.nbytes(), where_));
  }
  MPAKT_CUDA_ASSIGN(void* p, upload(s, t));
  return static_cast<const void*>(p);
}

result<const float*> device_call::input_f32(slot s, const kernel_call& c, std::size_t i) {
  const tensor& t = *c.inputs[i];
  if (t.type() != dtype::f32)
    return make_error(errc::internal, "CUDA kernel for " + where_ + " got a " + std::string(dtype_name(t.type())) +
                                          " input where it reads f32");
  MPAKT_CUDA_ASSIGN(const void* p, input(s, c, i));
  return static_cast<const float*>(p);
}

result<float*> device_call::output_f32(const kernel_call& c) {
  if (auto* values = static_cast<device_values*>(c.device)) {
    auto p = values->output(*c.output, where_);
    if (p) return static_cast<float*>(*p);
    // No room on the device for one more value (a worker holding many plans): this output
    // goes back to the host as without device values; its device copy stays stale.
    out_on_host_ = true;
  }
  return scratch_f32(slot_out, c.output->numel());
}

status device_call::finish(const kernel_call& c, const void* dev) {
  if (auto* values = static_cast<device_values*>(c.device); values && !out_on_host_) {
    values->written(*c.output);
    return ok_status();
  }
  return download(*c.output, dev);
}

result<void*> device_call::upload_bytes(slot s, const void* host, std::size_t bytes) {
  MPAKT_CUDA_ASSIGN(void* p, scratch(s, bytes));
  // From pageable memory the call returns once the bytes are staged, so the host memory may
  // change afterwards without affecting the copy.
  if (bytes > 0)
    MPAKT_TRY(check(cudaMemcpyAsync(p, host, bytes, cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync (host to device)"));
  return p;
}

result<float*> device_call::upload_floats(slot s, const float* host, std::size_t count) {
  MPAKT_CUDA_ASSIGN(void* p, upload_bytes(s, host, count * sizeof(float)));
  return static_cast<float*>(p);
}

status device_call::download(tensor& out, const void* dev) {
  if (out.nbytes() > 0)
    MPAKT_TRY(check(cudaMemcpyAsync(out.data(), dev, out.nbytes(), cudaMemcpyDeviceToHost, stream()),
                    "cudaMemcpyAsync (device to host)"));
  return check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
}

}  // namespace mpakt::cuda
