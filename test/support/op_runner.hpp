#pragma once
/// Runs one op with no graph around it: parse params, infer the output, run a kernel.
/// For kernel unit tests; graph-level behaviour is tested through the executor.

#include <string_view>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "runtime/graph.hpp"
#include "runtime/op.hpp"

namespace mpakt::test {

/// Runs `op` with params given as JSON text on `inputs`. `kernel` defaults to the CPU
/// reference kernel. Input tensors are passed by value but share storage, so in-place
/// ops are visible through the caller's handles.
inline result<tensor> run_op(std::string_view op, std::string_view params_json, std::vector<tensor> inputs,
                             kernel_fn kernel = nullptr, std::uint32_t immutable_inputs = 0) {
  const op_def* def = find_op_def(op);
  if (!def) return invalid("no op_def for " + std::string(op));
  auto pm = parse_params_text(params_json);
  if (!pm) return std::move(pm).err();
  auto params = def->parse(*pm);
  if (!params) return std::move(params).err();
  std::vector<tensor_desc> descs;
  for (const auto& t : inputs) descs.push_back(t.desc());
  auto out_desc = def->infer(shape_query{descs, **params});
  if (!out_desc) return std::move(out_desc).err();
  tensor out;
  if (def->aliases_input >= 0) {
    out = inputs[std::size_t(def->aliases_input)];
  } else {
    auto t = tensor::make(out_desc->type, out_desc->shape);
    if (!t) return std::move(t).err();
    out = std::move(*t);
  }
  std::vector<tensor*> ptrs;
  for (auto& t : inputs) ptrs.push_back(&t);
  if (!kernel) kernel = cpu_backend::reference(op);
  if (!kernel) return invalid("no kernel for " + std::string(op));
  workspace ws;
  kernel_call call{params->get(), ptrs, &out, &ws, immutable_inputs};
  auto st = kernel(call);
  if (!st) return std::move(st).err();
  return out;
}

}  // namespace mpakt::test
