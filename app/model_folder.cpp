#include "app/model_folder.hpp"

#include <rapidjson/document.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/json.hpp"
#include "runtime/safetensors.hpp"

namespace mpakt::app {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Weights of a local folder (single file or sharded index).
result<tensor_store::tensor_map> load_folder(const std::string& dir) {
  std::vector<std::string> files;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    files.push_back(single.string());
  } else if (fs::exists(index)) {
    const std::string text = slurp(index.string());
    auto parsed = parse_json(text, index.string());
    if (!parsed) return std::move(parsed).err();
    const rapidjson::Document& d = *parsed;
    if (!d.IsObject() || !d.HasMember("weight_map") || !d["weight_map"].IsObject())
      return invalid(index.string() + " has no weight_map");
    for (auto it = d["weight_map"].MemberBegin(); it != d["weight_map"].MemberEnd(); ++it) {
      if (!it->value.IsString()) return invalid(index.string() + ": weight_map values must be file names");
      const std::string f = (fs::path(dir) / it->value.GetString()).string();
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    }
  } else {
    return make_error(errc::not_found, dir + " holds neither model.safetensors nor model.safetensors.index.json");
  }
  tensor_store::tensor_map out;
  for (const auto& f : files) {
    auto ts = load_safetensors_file(f);
    if (!ts) return std::move(ts).err();
    for (auto& [name, t] : *ts) out[name] = std::move(t);
  }
  return out;
}

}  // namespace mpakt::app
