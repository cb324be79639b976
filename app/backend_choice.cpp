#include "app/backend_choice.hpp"

#if defined(MPAKT_HAS_CUDA)
#include "backends/cuda/cuda_backend.hpp"
#endif

namespace mpakt::app {

std::optional<backend_kind> parse_backend_kind(std::string_view s) {
  if (s == "cpu") return backend_kind::cpu;
  if (s == "cuda") return backend_kind::cuda;
  if (s == "auto") return backend_kind::automatic;
  return std::nullopt;
}

std::string chosen_backend::describe() const {
#if defined(MPAKT_HAS_CUDA)
  if (auto* gpu = dynamic_cast<const cuda_backend*>(device.get()))
    return "cuda (GPU " + std::to_string(gpu->device()) + ": " + gpu->device_name() + ")";
#endif
  if (device) return std::string(device->name());
  return note.empty() ? "cpu" : "cpu (" + note + ")";
}

namespace {

/// The GPU backend on device `ordinal` modulo the devices present, or why there is none.
result<std::shared_ptr<backend>> open_gpu(int ordinal) {
#if defined(MPAKT_HAS_CUDA)
  auto count = cuda_probe();
  if (!count) return std::move(count).err();
  auto b = cuda_backend::create({.device = ordinal % *count});
  if (!b) return std::move(b).err();
  return std::shared_ptr<backend>(std::move(*b));
#else
  (void)ordinal;
  return make_error(errc::unavailable, "this build of mpakt has no CUDA backend (nvcc was not found when it was built)");
#endif
}

}  // namespace

result<chosen_backend> choose_backend(backend_kind kind, int ordinal) {
  chosen_backend c;
  if (kind == backend_kind::cpu) return c;
  auto gpu = open_gpu(ordinal);
  if (gpu) {
    c.device = std::move(*gpu);
    return c;
  }
  if (kind == backend_kind::cuda) return std::move(gpu).err();
  c.note = "auto: " + gpu.err().message;
  return c;
}

}  // namespace mpakt::app
