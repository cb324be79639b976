#include "backends/cpu/isa.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mpakt::cpu_isa {

namespace {

#if defined(__x86_64__)
struct regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

regs cpuid(unsigned leaf, unsigned sub = 0) {
  regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) return {};
  return r;
}

/// XCR0: the register states the OS saves on a context switch.
unsigned long long xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

bool bit(unsigned v, int i) { return (v >> i) & 1u; }

/// Linux keeps AMX tile data off until a process asks (arch_prctl ARCH_REQ_XCOMP_PERM for
/// XFEATURE_XTILEDATA); asking is harmless elsewhere and simply fails.
bool request_amx() {
  constexpr long arch_get_xcomp_perm = 0x1022, arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) != 0) return false;
  unsigned long long perm = 0;
  if (syscall(SYS_arch_prctl, arch_get_xcomp_perm, &perm) != 0) return false;
  return (perm >> xfeature_xtiledata) & 1u;
}

// (GCC 12's AVX-512 headers start some intrinsics from a self-initialised "undefined" vector,
// a false alarm of -Wuninitialized wherever they are inlined)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
/// Seconds for `rounds` rounds of twelve independent 512-bit multiply-add chains: vdpbf16ps
/// (`dot`) or vfmadd231ps. (The chains stay: without -ffast-math nothing reorders them.)
__attribute__((target("avx512f,avx512bf16"))) double chains_seconds(bool dot, int rounds) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(1.0f / 3), b = _mm512_set1_ps(0.999f);
  const __m512bh ab = (__m512bh)_mm512_set1_epi32(0x3f803f80), bb = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < rounds; ++r) {
    if (dot)
      for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], ab, bb);
    else
      for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], b, a);
    __asm__ volatile("" : : : "memory");
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile float sink = 0;
  for (int i = 0; i < 12; ++i) sink = sink + _mm512_reduce_add_ps(acc[i]);
  return s;
}
#pragma GCC diagnostic pop
#endif

features detect() {
  features f;
#if defined(__x86_64__)
  const regs v = cpuid(0);
  char vendor[13] = {};
  std::memcpy(vendor, &v.b, 4);
  std::memcpy(vendor + 4, &v.d, 4);
  std::memcpy(vendor + 8, &v.c, 4);
  f.vendor = vendor;
  if (cpuid(0x80000000).a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
    f.model = brand;
    while (!f.model.empty() && f.model.back() == ' ') f.model.pop_back();
    while (!f.model.empty() && f.model.front() == ' ') f.model.erase(f.model.begin());
  }
  const regs l1 = cpuid(1);
  const bool osxsave = bit(l1.c, 27);
  const unsigned long long x = osxsave ? xcr0() : 0;
  f.os_avx = (x & 0x6) == 0x6;
  f.os_avx512 = (x & 0xe6) == 0xe6;
  f.os_amx = (x & 0x60000) == 0x60000;
  const bool avx = bit(l1.c, 28) && f.os_avx;
  f.fma = avx && bit(l1.c, 12);
  f.f16c = avx && bit(l1.c, 29);
  f.pclmul = bit(l1.c, 1);
  if (v.a >= 7) {
    const regs l7 = cpuid(7, 0), l71 = cpuid(7, 1);
    f.avx2 = avx && bit(l7.b, 5);
    f.avx_vnni = avx && bit(l71.a, 4);
    if (f.os_avx512) {
      f.avx512f = bit(l7.b, 16);
      f.avx512dq = bit(l7.b, 17);
      f.avx512bw = bit(l7.b, 30);
      f.avx512vl = bit(l7.b, 31);
      f.avx512_vnni = bit(l7.c, 11);
      f.avx512_bf16 = bit(l71.a, 5);
      f.vpclmulqdq = bit(l7.c, 10);
    }
    if (f.os_amx) {
      f.amx_bf16 = bit(l7.d, 22);
      f.amx_tile = bit(l7.d, 24);
      f.amx_int8 = bit(l7.d, 25);
    }
  }
  if (f.amx_tile) f.amx_granted = request_amx();
#endif
  return f;
}

level best_of(const features& f) {
  if (!(f.avx2 && f.fma && f.f16c)) return level::scalar;
  if (!(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq)) return level::avx2;
  if (!f.avx512_vnni) return level::avx512;
  if (!f.avx512_bf16) return level::avx512_vnni;
  if (!(f.amx_tile && f.amx_bf16 && f.amx_int8 && f.amx_granted)) return level::avx512_bf16;
  return level::amx;
}

/// The level in use: the best, unless MPAKT_CPU_LEVEL names a lower one.
std::atomic<level>& current_level() {
  static std::atomic<level> l = [] {
    level b = best_of(detected());
    if (const char* env = std::getenv("MPAKT_CPU_LEVEL"))
      if (auto want = level_from_name(env); want && *want < b) b = *want;
    return b;
  }();
  return l;
}

constexpr std::string_view names[] = {"scalar", "avx2", "avx512", "avx512_vnni", "avx512_bf16", "amx"};

}  // namespace

const features& detected() {
  static const features f = detect();
  return f;
}

level best() { return best_of(detected()); }

level current() { return current_level().load(std::memory_order_relaxed); }

bool set_level(level l) {
  if (l > best()) return false;
  current_level().store(l, std::memory_order_relaxed);
  return true;
}

std::vector<level> supported_levels() {
  std::vector<level> out;
  for (int i = 0; i <= int(best()); ++i) out.push_back(level(i));
  return out;
}

std::string_view level_name(level l) { return names[int(l)]; }

std::optional<level> level_from_name(std::string_view name) {
  for (int i = 0; i < int(std::size(names)); ++i)
    if (names[i] == name) return level(i);
  return std::nullopt;
}

std::vector<std::string> feature_names() {
  const features& f = detected();
  std::vector<std::string> out;
  auto add = [&](bool on, const char* n) {
    if (on) out.emplace_back(n);
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx_vnni, "avx_vnni");
  add(f.amx_bf16 && f.amx_tile, "amx_bf16");
  add(f.amx_int8 && f.amx_tile, "amx_int8");
  return out;
}

std::string describe() {
  std::string s(level_name(current()));
  s += " (";
  bool first = true;
  for (const auto& n : feature_names()) {
    s += (first ? "" : " ") + n;
    first = false;
  }
  if (first) s += "no vector extensions";
  if (detected().amx_tile) s += detected().amx_granted ? ", amx granted" : ", amx not granted";
  if (quantized_in_lanes()) s += ", q8/q4 in lanes";
  if (current() == level::avx512_bf16 && !bf16_pairs()) s += ", bf16 prefill on f32 panels";
  if (avx_vnni_dots()) s += ", q8/q4 in avx_vnni dot products";
  s += ", arithmetic " + std::to_string(arithmetic_revision) + ")";
  return s;
}

bool quantized_in_lanes() { return current() >= level::avx2; }

double bf16_dot_rate() {
  static const double rate = [] {
#if defined(__x86_64__)
    if (!detected().avx512_bf16) return 0.0;
    // ~0.1 ms a timing, best of five each, interleaved (the clock ramps, other tenants come and go)
    constexpr int rounds = 20000;
    double fma = 1e9, dot = 1e9;
    for (int i = 0; i < 5; ++i) {
      fma = std::min(fma, chains_seconds(false, rounds));
      dot = std::min(dot, chains_seconds(true, rounds));
    }
    return dot > 0 ? fma / dot : 0.0;
#else
    return 0.0;
#endif
  }();
  return rate;
}

namespace {
/// `var`=on|off of the environment: true or false; nullopt when unset or another value
/// (setting_problems names the latter).
std::optional<bool> on_off_setting(const char* var) {
  const char* env = std::getenv(var);
  if (env && std::strcmp(env, "on") == 0) return true;
  if (env && std::strcmp(env, "off") == 0) return false;
  return std::nullopt;
}
int choice_of(std::optional<bool> on) { return on ? int(*on) : -1; }  // -1: the default, 0: off, 1: on

std::atomic<int>& pairs_choice() {
  static std::atomic<int> c{choice_of(on_off_setting("MPAKT_BF16_PAIRS"))};
  return c;
}
std::atomic<int>& avx_vnni_choice() {
  static std::atomic<int> c{choice_of(on_off_setting("MPAKT_AVX_VNNI"))};
  return c;
}
}  // namespace

bool bf16_pairs() {
  const int c = pairs_choice().load(std::memory_order_relaxed);
  return c >= 0 ? c == 1 : bf16_dot_rate() >= 0.85;
}

void prefer_bf16_pairs(std::optional<bool> on) {
  pairs_choice().store(choice_of(on ? on : on_off_setting("MPAKT_BF16_PAIRS")), std::memory_order_relaxed);
}

bool avx_vnni_dots() {
  const level l = current();
  return detected().avx_vnni && (l == level::avx2 || l == level::avx512) &&
         avx_vnni_choice().load(std::memory_order_relaxed) != 0;
}

void prefer_avx_vnni(std::optional<bool> on) {
  avx_vnni_choice().store(choice_of(on ? on : on_off_setting("MPAKT_AVX_VNNI")), std::memory_order_relaxed);
}

std::vector<std::string> setting_problems() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("MPAKT_CPU_LEVEL")) {
    std::string all;
    for (auto n : names) all += (all.empty() ? "" : ", ") + std::string(n);
    if (auto want = level_from_name(env); !want)
      out.push_back("MPAKT_CPU_LEVEL=" + std::string(env) + " names no kernel level (" + all + "); " +
                    std::string(level_name(best())) + " is used");
    else if (*want > best())
      out.push_back("MPAKT_CPU_LEVEL=" + std::string(env) + " is above what this CPU has; " + std::string(level_name(best())) +
                    " is used");
  }
  for (const char* var : {"MPAKT_BF16_PAIRS", "MPAKT_AVX_VNNI"})
    if (const char* env = std::getenv(var); env && !on_off_setting(var))
      out.push_back(std::string(var) + "=" + env + " is neither on nor off; the default is used");
  return out;
}

}  // namespace mpakt::cpu_isa
