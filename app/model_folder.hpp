#pragma once
/// Loading a local model folder (the CLI's view of a checkpoint).

#include <string>

#include "runtime/tensor_store.hpp"

namespace mpakt::app {

/// Weights of a folder holding model.safetensors, or model.safetensors.index.json and the
/// shards its weight_map names.
result<tensor_store::tensor_map> load_folder(const std::string& dir);

/// The whole file as a string (empty when unreadable).
std::string slurp(const std::string& path);

}  // namespace mpakt::app
