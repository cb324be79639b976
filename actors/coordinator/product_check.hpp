#pragma once
/// Spot-checks of a volunteer holding a model too large for its verifier: one product of the
/// pass redone alone (docs/decisions.md, "Spot-checks").
///
/// When a model does not fit the verifiers' room, the verifier keeps copies of its output
/// head only (the weights named like `lm_head.weight`, or the token embedding, which is the
/// head when the two are tied). A checked pass of such a model asks the volunteer, besides
/// what its caller asked for, for the activation entering a product that reads a held weight
/// and for the product itself; the verifier multiplies the same activation by its own copy of
/// the weight, and the two products must agree (bit for bit on the same kernel path, within
/// the dtype's tolerance otherwise), as must any token an argmax drew from it. The caller gets
/// the volunteer's answer without the extra values.
///
/// These are pure functions of graph and answer texts; the checked worker drives them.

#include <rapidjson/document.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/status.hpp"

namespace mpakt {

/// Whether a weight of a model held in part is one the verifier keeps: its output head.
bool is_head_weight(const std::string& name);

/// One product of a graph the verifier can redo alone: `out` = matmul(x, weight).
struct product_probe {
  std::string x;              ///< the activation's value name
  std::string out;            ///< the product's value name
  std::string model, weight;  ///< the weight it reads
  std::string params_json;    ///< the step's params object ("{}" when it has none)
  std::string argmax_out;     ///< a declared output drawn from `out` by an argmax step (empty: none)
  std::string argmax_params;  ///< that step's params
};

/// The matmul steps of `graph_json` whose second operand is a weight that `holds(model,
/// weight)` and whose first is a value of the pass, in step order (empty when the text is not a readable graph).
std::vector<product_probe> products_to_probe(const std::string& graph_json,
                                             const std::function<bool(const std::string&, const std::string&)>& holds);

/// The graph's declared outputs.
std::vector<std::string> declared_outputs(const std::string& graph_json);

/// `graph_json` with `names` added to its outputs (those it already declares are not repeated).
result<std::string> with_outputs(const std::string& graph_json, const std::vector<std::string>& names);

/// An answer's outputs object without the members `names`, written back as text (`answer`,
/// parsed once by the caller, loses them).
std::string without_outputs(rapidjson::Document& answer, const std::vector<std::string>& names);
result<std::string> without_outputs(const std::string& outputs_json, const std::vector<std::string>& names);

/// The values of one output object ({"shape", "data" | "dataB64"}) as floats, its shape as
/// written (a dimension that is no integer reads as -1); false when unreadable.
bool output_values_of(const rapidjson::Value& o, std::vector<std::int64_t>& shape, std::vector<float>& values);

/// One output of an answer (an outputs object, or its text): its shape and values — false
/// when absent, unreadable, or its values do not fill its shape.
bool output_of(const rapidjson::Value& answer, const std::string& name, std::vector<std::int64_t>& shape,
               std::vector<float>& values);
bool output_of(const std::string& outputs_json, const std::string& name, std::vector<std::int64_t>& shape,
               std::vector<float>& values);

/// The graph that redoes `p` for the activation `x` of `shape`: the product as `out`.
std::string probe_graph(const product_probe& p, const std::vector<std::int64_t>& shape, std::span<const float> x);

/// Whether the volunteer's product `theirs` agrees with the verifier's `mine`, and the tokens
/// the volunteer answered under `p.argmax_out` (when any) are the argmax of `mine`'s rows
/// (on another kernel path: a row's chosen value within the tolerance of its maximum). Empty
/// when they agree, else what differs.
std::string probe_difference(const product_probe& p, const rapidjson::Value& their_answer, std::span<const float> mine,
                             const std::vector<std::int64_t>& shape, float tolerance,
                             const std::function<std::string(const std::string&, std::span<const float>, std::span<const float>,
                                                             float)>& first_difference);

/// The caller's answer made from the verifier's product `mine` alone, when every output it
/// asked for (`asked`) is the product itself or the tokens an argmax drew from it — a
/// quarantined volunteer's call then still gets the verified answer; nullopt otherwise.
std::optional<std::string> verified_answer(const product_probe& p, const std::vector<std::string>& asked,
                                           std::span<const float> mine, const std::vector<std::int64_t>& shape, bool base64);

}  // namespace mpakt
