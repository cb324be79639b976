#pragma once
/// The outputs of a run as the API returns them:
/// {"<name>": {"shape": [...], "data": [...]}} or, with base64 encoding,
/// {"<name>": {"shape": [...], "dataB64": "<little-endian f32>"}}.

#include <string>
#include <vector>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "runtime/executor.hpp"

namespace mpakt {

/// Writes the outputs object (packed values are widened to f32 for the wire).
void write_outputs(rapidjson::Writer<rapidjson::StringBuffer>& w, const executable_graph& g,
                   const std::vector<std::string>& names, bool base64);

/// Writes one named output (key and value) from f32 values.
void write_output(rapidjson::Writer<rapidjson::StringBuffer>& w, const std::string& name, const shape_t& shape,
                  std::span<const float> values, bool base64);

}  // namespace mpakt
