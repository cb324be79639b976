#pragma once
/// The fast kernels of an op on every instruction-set level this machine supports, so a
/// test can check each path (isa.hpp), not only the one the CPU would pick.

#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/isa.hpp"
#include "runtime/graph.hpp"

namespace mpakt::test {

struct level_kernel {
  std::string level;  ///< the variant name, e.g. "avx512_vnni"
  kernel_fn fn = nullptr;
  bool (*accepts)(std::span<const tensor_desc>, const op_params&) = nullptr;
  /// Whether the kernel claims a step with these inputs and params (JSON text).
  bool claims(const std::vector<tensor>& inputs, std::string_view params_json) const {
    if (!accepts) return true;
    std::vector<tensor_desc> d;
    for (const auto& t : inputs) d.push_back(t.desc());
    const op_def* def = find_op_def(op);
    auto p = def->parse(*parse_params_text(params_json));
    return accepts(d, **p);
  }
  std::string op;
  group_kernel_fn group = nullptr;  ///< its form for several steps at once, if any
};

/// Every registered fast kernel of `op` this CPU can run, whatever `accepts` says.
inline std::vector<level_kernel> fast_kernels_on_this_cpu(std::string_view op) {
  std::vector<level_kernel> out;
  for (const auto& k : cpu_fast_kernels())
    if (k.op == op && k.min_level <= cpu_isa::best())
      out.push_back({std::string(k.variant), k.fn, k.accepts, std::string(op), k.group});
  return out;
}

/// Restores the kernel level and thread count a test changed.
struct level_guard {
  cpu_isa::level saved = cpu_isa::current();
  ~level_guard() { cpu_isa::set_level(saved); }
};

/// Has many-row bf16 products without tiles take AVX512-BF16's pairs (on) or the f32 panels
/// (off) whatever this core's measured rates choose (cpu_isa::bf16_pairs), until it goes.
struct bf16_pairs_guard {
  explicit bf16_pairs_guard(bool on) { cpu_isa::prefer_bf16_pairs(on); }
  ~bf16_pairs_guard() { cpu_isa::prefer_bf16_pairs(std::nullopt); }
};

/// Has the AVX2 level's q8/q4 lanes kernels take AVX-VNNI's dot products where the CPU has them
/// (on) or keep to plain AVX2 (off), whatever the environment says (cpu_isa::avx_vnni_dots),
/// until it goes.
struct avx_vnni_guard {
  explicit avx_vnni_guard(bool on) { cpu_isa::prefer_avx_vnni(on); }
  ~avx_vnni_guard() { cpu_isa::prefer_avx_vnni(std::nullopt); }
};

}  // namespace mpakt::test
