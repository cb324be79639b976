#pragma once
/// `--backend cpu|cuda|auto`: what a worker (a volunteer, or one embedded in `mpakt serve`)
/// computes on.
///
/// cpu   the CPU kernels (backends/cpu).
/// cuda  the GPU, or nothing: a worker asked for CUDA that cannot open its device (a build
///       without the CUDA backend, no driver, no GPU) says why and the program exits with
///       exit_no_cuda; it never falls back quietly.
/// auto  the GPU where the build has CUDA and a usable GPU exists, else the CPU, and the
///       reason it is the CPU is kept (`chosen_backend::note`): the banner prints it and the
///       pool shows it (`/api/v3/status` pool[].backendNote).

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "backends/backend.hpp"
#include "runtime/status.hpp"

namespace mpakt::app {

enum class backend_kind { cpu, cuda, automatic };

/// "cpu", "cuda" or "auto"; nullopt for anything else.
std::optional<backend_kind> parse_backend_kind(std::string_view s);

/// The exit status of a worker asked for CUDA that cannot open its device.
constexpr int exit_no_cuda = 6;

struct chosen_backend {
  /// The GPU backend, or null: the CPU backend.
  std::shared_ptr<backend> device;
  /// Why an `auto` choice is the CPU ("" when it is the GPU, or the CPU was asked for).
  std::string note;
  /// "cuda (GPU 0: NVIDIA H200)" or "cpu", for banners.
  std::string describe() const;
};

/// Opens the backend asked for; `ordinal` is the CUDA device (embedded workers take turns
/// over the devices there are). Errors (cuda only): errc::unavailable saying why there is no
/// device, or the CUDA call that failed opening it.
result<chosen_backend> choose_backend(backend_kind kind, int ordinal = 0);

}  // namespace mpakt::app
