#pragma once
/// Whether a compiled template can drive server-side generation (decisions.md: checked when
/// used): it binds ids and pos and ends in one token id per fed row from argmax or sample.

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/graph.hpp"
#include "runtime/status.hpp"

namespace mpakt {

/// The op choosing a template's token ids: the producer of `value`, looking through concat
/// steps that join per-row choices (one sample step per row); "" for an input, and the
/// first op that is neither when the parts disagree.
std::string token_producer(const graph_decl& d, const std::string& value);

/// Checks `d` (with its binding names) for generation. A plain decode graph feeds one token;
/// a verify graph (`verify`) feeds k+1 >= 2. Returns k (0 for a plain graph). What needs the
/// output's shape (one id per row) is left to the caller that knows it.
result<std::int32_t> check_generate_template(const graph_decl& d, const std::vector<std::string>& bindings, bool sampling,
                                             bool verify);

}  // namespace mpakt
