#pragma once
/// What the CPU offers, and which kernel level the fast kernels use.
///
/// One binary runs on every x86-64 volunteer: the project is built for the baseline
/// instruction set, and the fast kernels come in per-level translation units
/// (backends/cpu/fast/*_avx2.cpp, *_avx512.cpp) compiled for that level only. At start-up
/// the CPU (cpuid) and the OS (xgetbv: which register states it saves) are asked what they
/// support; the kernels of the best level both allow are used. AMX tiles additionally need
/// the kernel's permission (arch_prctl), asked for once.
///
/// The level can be lowered — by `MPAKT_CPU_LEVEL=avx2` in the environment, or by tests
/// that run every path this machine supports — but never raised above what was detected.
/// Thread-safety: detection runs once (thread-safe static); set_level is for start-up and
/// tests, before graphs are planned (a planned graph keeps the kernels it was given).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mpakt::cpu_isa {

/// Kernel levels, each including the ones before it.
enum class level {
  scalar,       ///< plain C++ (any x86-64, or another architecture)
  avx2,         ///< AVX2 + FMA + F16C (x86-64-v3)
  avx512,       ///< AVX-512 F/BW/VL/DQ
  avx512_vnni,  ///< + AVX512-VNNI int8 dot products
  avx512_bf16,  ///< + AVX512-BF16 dot products (Zen 4/5, Sapphire Rapids and later)
  amx,          ///< + AMX tiles (BF16, INT8), granted by the kernel (Sapphire Rapids and later)
};

/// What cpuid and the OS report.
struct features {
  std::string vendor, model;
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_vnni = false, avx512_bf16 = false, avx_vnni = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  bool pclmul = false, vpclmulqdq = false;  ///< carry-less multiplies (128-bit; in 512-bit registers)
  bool os_avx = false, os_avx512 = false, os_amx = false;  ///< register state saved by the OS
  bool amx_granted = false;  ///< the kernel gave this process AMX tile data (arch_prctl)
};

/// Detected once.
const features& detected();
/// The best level this CPU and OS support.
level best();
/// The level kernels are chosen for now.
level current();
/// Lowers (or restores, up to best()) the level; false when `l` is above best().
bool set_level(level l);
/// Every level this machine supports, lowest first (tests run each).
std::vector<level> supported_levels();

std::string_view level_name(level l);
std::optional<level> level_from_name(std::string_view name);

/// The revision of the fast kernels' arithmetic: raised whenever a change makes any kernel give
/// other bits for the same inputs on the same level (another summation order, another
/// quantization). Two workers compute the same bits only when both their level and this agree,
/// which is what lets a spot-check demand equal bits from a volunteer (checked_worker.hpp);
/// a volunteer on an older build then gets the tolerance between kernel paths instead.
inline constexpr int arithmetic_revision = 14;

/// One line for banners and status: the level in use, the features behind it, whether q8/q4
/// matrices are held in lanes, and the arithmetic revision, e.g. "avx512_bf16 (avx2 fma f16c
/// avx512f avx512bw avx512vl avx512dq avx512_vnni avx512_bf16, q8/q4 in lanes, arithmetic 12)".
std::string describe();
/// Whether a CPU worker at the current level holds its q8/q4 matrices in lanes (tensor::lanes16):
/// every level from AVX2, whose matmul kernels read that form (AVX2's and VNNI's held-lanes
/// kernels; AMX tiles take its runs as B tiles in place).
bool quantized_in_lanes();
/// The feature names present, in a fixed order (status JSON).
std::vector<std::string> feature_names();

/// `vdpbf16ps`'s issue rate over `vfmadd231ps`'s on this core (512-bit, twelve independent
/// chains of each, timed once at first use, about a millisecond): about 1 on a Zen 4,
/// 0.62–0.72 on a Sapphire Rapids, 0 without AVX512-BF16. A dot product takes 32 multiply-adds
/// an instruction where an FMA takes 16.
double bf16_dot_rate();
/// Whether many-row bf16 products without tiles take AVX512-BF16's dot products (the pairs
/// kernel) rather than the f32 panels, which give the same bits: where `vdpbf16ps` issues at
/// 0.85 of the FMA rate or more (a Sapphire Rapids held without AMX ran a bf16 prefill in pairs
/// at 0.72 of the panels' speed; a Zen 4 at 1.7 times it). `MPAKT_BF16_PAIRS=on|off` or a test
/// (prefer_bf16_pairs) may choose; nullopt restores the environment's choice, else the measured one.
bool bf16_pairs();
void prefer_bf16_pairs(std::optional<bool> on);

/// Whether the q8/q4 lanes kernels of the AVX2 level take AVX-VNNI's 256-bit dot products
/// (matmul_avx_vnni.cpp: the same bits): where the CPU has AVX-VNNI and the level is avx2 or
/// avx512 (from avx512_vnni on, the 512-bit kernels take those products) — Intel's Alder Lake
/// and later cores without AVX-512. `MPAKT_AVX_VNNI=off` or a test (prefer_avx_vnni(false))
/// keeps them to plain AVX2; nullopt restores the environment's choice, else the default (on
/// where the CPU has it).
bool avx_vnni_dots();
void prefer_avx_vnni(std::optional<bool> on);

/// What is wrong with the kernel settings of the environment, one line each (none: empty):
/// `MPAKT_CPU_LEVEL` naming no level, or one above what this CPU has (the best is used);
/// `MPAKT_BF16_PAIRS` or `MPAKT_AVX_VNNI` other than on/off (the default is used). The
/// start-up banners print them, so a mistyped setting is not silently ignored.
std::vector<std::string> setting_problems();

}  // namespace mpakt::cpu_isa
