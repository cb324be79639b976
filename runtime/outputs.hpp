#pragma once
/// The outputs of a run as the API returns them:
/// {"<name>": {"shape": [...], "data": [...]}} or, with base64 encoding,
/// {"<name>": {"shape": [...], "dataB64": "<little-endian f32>"}}.

#include <string>
#include <utility>
#include <vector>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "runtime/executor.hpp"

namespace mpakt {

/// Writes the outputs object (packed values are widened to f32 for the wire).
void write_outputs(rapidjson::Writer<rapidjson::StringBuffer>& w, const executable_graph& g,
                   const std::vector<std::string>& names, bool base64);

/// A run's outputs copied out of its graph (widened to f32), to be written later — on
/// another thread, while the graph runs again.
struct output_values {
  std::vector<std::pair<std::string, tensor>> values;  ///< in the order asked, those the graph has
  std::size_t bytes() const;
};
output_values take_outputs(const executable_graph& g, const std::vector<std::string>& names);
/// The outputs object of `v`, as write_outputs writes it.
std::string outputs_json(const output_values& v, bool base64);

/// Writes one named output (key and value) from f32 values.
void write_output(rapidjson::Writer<rapidjson::StringBuffer>& w, const std::string& name, const shape_t& shape,
                  std::span<const float> values, bool base64);

}  // namespace mpakt
