#include "backends/cuda/cuda_backend.hpp"

#include <cuda_runtime_api.h>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cuda/context.hpp"
#include "backends/cuda/device_values.hpp"
#include "backends/cuda/ops/registry.hpp"
#include "runtime/schema.hpp"

namespace mpakt {

result<int> cuda_probe() {
  int n = 0;
  // Without a driver (or a GPU) this fails with e.g. cudaErrorInsufficientDriver or
  // cudaErrorNoDevice: that means no device, not a fault.
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later runtime calls do not report it
    return make_error(errc::unavailable, std::string("no usable CUDA device: ") + cudaGetErrorString(e) + " (" +
                                             cudaGetErrorName(e) + ")");
  }
  if (n == 0) return make_error(errc::unavailable, "no usable CUDA device: the driver reports none");
  return n;
}

int cuda_device_count() {
  auto n = cuda_probe();
  return n ? *n : 0;
}

result<std::unique_ptr<cuda_backend>> cuda_backend::create(config cfg) {
  auto probed = cuda_probe();
  if (!probed) return std::move(probed).err();
  const int count = *probed;
  if (cfg.device < 0 || cfg.device >= count)
    return make_error(errc::unavailable, "no CUDA device " + std::to_string(cfg.device) + " (found " +
                                             std::to_string(count) + ")");
  auto ctx = cuda::device_context::open(cfg.device);
  if (!ctx) return std::move(ctx).err();
  std::unique_ptr<cuda_backend> be(new cuda_backend(std::move(ctx).value()));
  be->make_current();
  return be;
}

cuda_backend::cuda_backend(std::shared_ptr<cuda::device_context> ctx) : ctx_(std::move(ctx)) {}

// The current-context registry holds a weak_ptr: once ctx_ goes, kernels report an error.
cuda_backend::~cuda_backend() = default;

kernel_fn cuda_backend::kernel(std::string_view op, std::span<const tensor_desc> inputs,
                               const op_params& params) const {
  if (kernel_fn fn = cuda::select_kernel(op, inputs, params)) return fn;
  // The host's own kernels: the CPU backend's fast ones where one accepts the step (threaded,
  // vectorised: attention of a head width the GPU kernel does not hold, q8/q4 products, moe),
  // else its reference.
  return cpu_backend{}.kernel(op, inputs, params);
}

group_kernel_fn cuda_backend::group_kernel(kernel_fn single) const { return cpu_backend{}.group_kernel(single); }
bool cuda_backend::group_needs_same_input(kernel_fn single) const {
  return cpu_backend{}.group_needs_same_input(single);
}

std::unique_ptr<device_state> cuda_backend::make_device_state() const {
  return std::make_unique<cuda::device_values>(ctx_);
}

bool cuda_backend::on_device(kernel_fn fn) const {
  for (const auto& k : cuda::cuda_kernels())
    if (k.fn == fn) return true;
  return false;
}

std::vector<std::string> cuda_backend::features() const {
  // Steps the CUDA kernels do not take run the CPU's kernels, which implement them all.
  return schema::instance().feature_names();
}

std::vector<std::string> cuda_backend::host_ops() const { return cuda::host_ops(); }

void cuda_backend::make_current() const { cuda::set_current_context(ctx_); }

void cuda_backend::activate() const { cuda::set_thread_context(ctx_); }

int cuda_backend::device() const { return ctx_->device(); }

const std::string& cuda_backend::device_name() const { return ctx_->name(); }

}  // namespace mpakt
