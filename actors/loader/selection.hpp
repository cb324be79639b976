#pragma once
/// Which tensors of a checkpoint a load takes (LOAD-03..08, Z-13), and the quantised-checkpoint
/// refusal (LOAD-28/29, Z-22).
///
/// selection = (include matches ∪ names) − exclude matches; everything when neither include
/// nor names is given (an empty list counts as not given). Globs: `*` matches any run of
/// characters including '.', `?` exactly one character; everything else is literal; a
/// pattern matches the whole name. An empty selection, or a `names` entry the checkpoint does
/// not hold, is refused (errc::invalid) naming the patterns or the name.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "actors/loader/inspect.hpp"

namespace mpakt::loader {

struct selection_request {
  std::vector<std::string> include;  ///< glob patterns
  std::vector<std::string> exclude;  ///< glob patterns
  std::vector<std::string> names;    ///< exact tensor names
};

/// Whole-string glob match (`*`, `?`; no escapes, no character classes).
bool glob_match(std::string_view pattern, std::string_view text);

/// Indices into `index.tensors` of the selected tensors, in index (streaming) order.
result<std::vector<std::size_t>> select_tensors(const model_index& index, const selection_request& req);

/// Refuses a quantised checkpoint (GPTQ, AWQ, bitsandbytes, int8, fp8), naming up to 10 of the
/// offending tensors. Decision (Z-22): refused when any *selected* tensor is quantised (a
/// dtype we cannot hold, or a marker name such as .qweight/.scales/.SCB), and also when the
/// checkpoint carries quantisation marker tensors anywhere, even unselected — their presence
/// means the checkpoint's other weights are not what their dtype says. An unselected tensor
/// whose only oddity is its dtype (an int32 buffer, say) does not block a load that leaves it
/// out.
status check_not_quantised(const model_index& index, const std::vector<std::size_t>& selected);

}  // namespace mpakt::loader
