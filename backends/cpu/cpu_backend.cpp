#include "backends/cpu/cpu_backend.hpp"

#include "runtime/schema.hpp"

namespace mpakt {

cpu_backend::cpu_backend(config cfg) : cfg_(cfg) {}

kernel_fn cpu_backend::reference(std::string_view op) {
  for (const auto& k : cpu_reference_kernels())
    if (k.op == op) return k.fn;
  return nullptr;
}

namespace {
const cpu_kernel* pick(std::string_view op, std::span<const tensor_desc> inputs, const op_params& params) {
  const cpu_isa::level now = cpu_isa::current();
  for (const auto& k : cpu_fast_kernels())
    if (k.op == op && k.min_level <= now && (!k.accepts || k.accepts(inputs, params))) return &k;
  return nullptr;
}
}  // namespace

kernel_fn cpu_backend::kernel(std::string_view op, std::span<const tensor_desc> inputs,
                              const op_params& params) const {
  if (!cfg_.reference_only)
    if (const cpu_kernel* k = pick(op, inputs, params)) return k->fn;
  return reference(op);
}

group_kernel_fn cpu_backend::group_kernel(kernel_fn single) const {
  if (cfg_.reference_only || !single) return nullptr;
  for (const auto& k : cpu_fast_kernels())
    if (k.fn == single) return k.group;
  return nullptr;
}

bool cpu_backend::holds_in_lanes() const { return !cfg_.reference_only && cpu_isa::quantized_in_lanes(); }

bool cpu_backend::group_needs_same_input(kernel_fn single) const {
  for (const auto& k : cpu_fast_kernels())
    if (k.fn == single) return k.group_same_input;
  return true;
}

std::string_view cpu_backend::variant(std::string_view op, std::span<const tensor_desc> inputs,
                                      const op_params& params) const {
  if (!cfg_.reference_only)
    if (const cpu_kernel* k = pick(op, inputs, params)) return k->variant;
  return "ref";
}

std::vector<std::string> cpu_backend::features() const {
  // The reference kernels implement every feature of the schema.
  return schema::instance().feature_names();
}

}  // namespace mpakt
