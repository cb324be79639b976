#pragma once
/// The small files beside a checkpoint that chat needs: config.json (the architecture),
/// tokenizer.json and tokenizer_config.json (tokenizer, special tokens, chat template), and
/// chat_template.jinja where a repository keeps its template apart.
///
/// They live in the folder of the source's checkpoint (the hub revision's folder, the URL's
/// folder, the local folder) and are read whole with the same reader as the weights.

#include <string>
#include <string_view>

#include "actors/loader/reader.hpp"
#include "actors/loader/source.hpp"

namespace mpakt::loader {

struct model_files {
  std::string config;            ///< config.json (required)
  std::string tokenizer;         ///< tokenizer.json, empty when the source has none
  std::string tokenizer_config;  ///< tokenizer_config.json, empty when the source has none
  std::string chat_template;     ///< chat_template.jinja (newer repos keep the template there), or empty
};

/// Where `file` lives beside the source's checkpoint.
std::string sibling_location(const model_source& source, std::string_view file);

/// Reads the files; a missing config.json is an error naming where it was looked for.
result<model_files> read_model_files(const model_source& source, byte_reader& reader);

}  // namespace mpakt::loader
