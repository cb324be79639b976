#include "runtime/registry_check.hpp"

#include "backends/cpu/cpu_backend.hpp"
#include "runtime/op.hpp"
#include "runtime/schema.hpp"

namespace mpakt {

std::vector<std::string> check_registry() { return check_registry(schema::instance()); }

std::vector<std::string> check_registry(const schema& sc) {
  std::vector<std::string> problems;
  if (sc.ops().empty()) problems.push_back("the embedded ops schema did not parse");
  for (const auto& op : sc.ops()) {
    const op_def* def = find_op_def(op.name);
    if (!def) problems.push_back("op " + op.name + " is in the schema but has no op_def");
    else {
      if (!def->parse || !def->infer) problems.push_back("op " + op.name + " has an incomplete op_def");
      if (def->aliases_input != op.mutates_input)
        problems.push_back("op " + op.name + ": op_def aliases_input disagrees with the schema's mutatesInput");
      if (def->writes_input != op.writes_input)
        problems.push_back("op " + op.name + ": op_def writes_input disagrees with the schema's writesInput");
    }
    if (!cpu_backend::reference(op.name)) problems.push_back("op " + op.name + " has no reference CPU kernel");
  }
  for (const auto& def : op_defs())
    if (!sc.find(def.name)) problems.push_back("op_def " + std::string(def.name) + " is not in the schema");
  for (const auto& k : cpu_reference_kernels())
    if (!sc.find(k.op)) problems.push_back("CPU kernel for " + std::string(k.op) + " is not in the schema");
  for (const auto& k : cpu_fast_kernels())
    if (!sc.find(k.op)) problems.push_back("fast CPU kernel for " + std::string(k.op) + " is not in the schema");
  return problems;
}

}  // namespace mpakt
