#include "backends/cpu/cpu_backend.hpp"

#include "runtime/schema.hpp"

namespace mpakt {

cpu_backend::cpu_backend(config cfg) : cfg_(cfg) {}

kernel_fn cpu_backend::reference(std::string_view op) {
  for (const auto& k : cpu_reference_kernels())
    if (k.op == op) return k.fn;
  return nullptr;
}

kernel_fn cpu_backend::kernel(std::string_view op, std::span<const tensor_desc> inputs,
                              const op_params& params) const {
  if (!cfg_.reference_only) {
    for (const auto& k : cpu_fast_kernels())
      if (k.op == op && (!k.accepts || k.accepts(inputs, params))) return k.fn;
  }
  return reference(op);
}

std::vector<std::string> cpu_backend::features() const {
  // The reference kernels implement every feature of the schema.
  return schema::instance().feature_names();
}

}  // namespace mpakt
