#pragma once
/// Start-up check that the schema, the op_defs and the CPU kernels agree.

#include <string>
#include <vector>

namespace mpakt {

/// Every disagreement between schemas/ops.json, the op_defs (runtime/ops/) and the CPU
/// reference kernels (backends/cpu/ref/), one message per problem; empty when consistent.
/// `mpakt` refuses to start unless it is empty.
std::vector<std::string> check_registry();
class schema;
/// The same check against any schema (tests feed it broken ones).
std::vector<std::string> check_registry(const schema& sc);

}  // namespace mpakt
