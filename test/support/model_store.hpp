#pragma once
/// Puts a checkpoint's tensors into a tensor_store as a loaded model, for tests that run the
/// runtime directly (no actors).

#include <string>

#include "runtime/safetensors.hpp"
#include "runtime/status.hpp"
#include "runtime/tensor_store.hpp"

namespace mpakt::test {

/// Loads `safetensors_path` into `store` under `model_id`.
inline status put_checkpoint(tensor_store& store, const std::string& model_id, const std::string& safetensors_path) {
  auto weights = load_safetensors_file(safetensors_path);
  if (!weights) return std::move(weights).err();
  tensor_store::tensor_map m;
  for (auto& [name, t] : *weights) m[name] = t;
  store.put_model(model_id, std::move(m));
  return {};
}

}  // namespace mpakt::test
