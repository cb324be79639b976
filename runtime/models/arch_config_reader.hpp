#pragma once
/// Internal to the arch builder (runtime/models/arch_*.cpp), not a public API: typed reading
/// of config.json, the rope settings every family shares, and the family table.

#include <rapidjson/document.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/models/arch.hpp"

namespace mpakt::models::arch_detail {

/// Typed access to one JSON object of config.json. A key that is absent or null reads as
/// its fallback (transformers treats both the same); a present value of the wrong type is
/// refused naming the key.
class config_reader {
 public:
  explicit config_reader(const rapidjson::Value& v) : v_(v.IsObject() ? &v : &empty()) {}

  /// Present and not null.
  bool has(const char* key) const {
    auto it = v_->FindMember(key);
    return it != v_->MemberEnd() && !it->value.IsNull();
  }
  /// Present, even as null.
  bool has_key(const char* key) const { return v_->HasMember(key); }

  /// An integer under the first of `keys` present: required and positive without a
  /// fallback; with one, absent means the fallback and 0 is allowed only when it is 0.
  status positive(std::initializer_list<const char*> keys, int& out, std::optional<int> fallback = std::nullopt) const {
    for (const char* key : keys) {
      if (!has(key)) continue;
      const auto& v = (*v_)[key];
      const bool zero_ok = fallback && *fallback == 0;
      if (!v.IsInt() || v.GetInt() < 0 || (v.GetInt() == 0 && !zero_ok))
        return invalid(std::string("config.json ") + key + " must be a positive integer");
      out = v.GetInt();
      return ok_status();
    }
    if (!fallback) return invalid(std::string("config.json lacks ") + *keys.begin());
    out = *fallback;
    return ok_status();
  }
  double number(const char* key, double fallback) const {
    return has(key) && (*v_)[key].IsNumber() ? (*v_)[key].GetDouble() : fallback;
  }
  std::optional<double> number(const char* key) const {
    if (has(key) && (*v_)[key].IsNumber()) return (*v_)[key].GetDouble();
    return std::nullopt;
  }
  bool flag(const char* key, bool fallback) const {
    return has(key) && (*v_)[key].IsBool() ? (*v_)[key].GetBool() : fallback;
  }
  result<std::string> text(const char* key, const char* fallback) const {
    if (!has(key)) return std::string(fallback);
    if (!(*v_)[key].IsString()) return invalid(std::string("config.json ") + key + " must be a string");
    return std::string((*v_)[key].GetString());
  }
  /// A string value, or the fallback when absent or not a string.
  std::string text_or(const char* key, const char* fallback) const {
    return has(key) && (*v_)[key].IsString() ? std::string((*v_)[key].GetString()) : std::string(fallback);
  }
  result<std::vector<std::string>> strings(const char* key) const {
    std::vector<std::string> out;
    if (!has(key)) return out;
    if (!(*v_)[key].IsArray()) return invalid(std::string("config.json ") + key + " must be an array of strings");
    for (const auto& s : (*v_)[key].GetArray()) {
      if (!s.IsString()) return invalid(std::string("config.json ") + key + " must be an array of strings");
      out.emplace_back(s.GetString());
    }
    return out;
  }
  result<std::vector<int>> ints(const char* key) const {
    std::vector<int> out;
    if (!has(key)) return out;
    if (!(*v_)[key].IsArray()) return invalid(std::string("config.json ") + key + " must be an array of integers");
    for (const auto& s : (*v_)[key].GetArray()) {
      if (!s.IsInt()) return invalid(std::string("config.json ") + key + " must be an array of integers");
      out.push_back(s.GetInt());
    }
    return out;
  }
  /// A nested object (an empty one when absent).
  config_reader object(const char* key) const { return has(key) ? config_reader((*v_)[key]) : config_reader(empty()); }
  const rapidjson::Value& value() const { return *v_; }

 private:
  static const rapidjson::Value& empty() {
    static const rapidjson::Value e(rapidjson::kObjectType);
    return e;
  }
  const rapidjson::Value* v_;
};

/// Family defaults for the rope fields a config may leave out.
struct rope_defaults {
  double theta = 10000;
  double partial_factor = 1;
  bool honour_partial = false;  ///< the family rotates only part of each head
  bool interleaved = false;
};

/// A number from the rope object (rope_parameters, else rope_scaling), else the top level.
std::optional<double> rope_number(const config_reader& r, const char* key);

/// Rope settings from the config's rope object. `width` is the roped head width (0: head_dim;
/// MLA passes its rope part). Unsupported scaling types are refused naming the field.
result<arch_rope> read_rope(const config_reader& r, const arch_config& c, const rope_defaults& d, int width = 0);

/// Gemma 3's two rope tables: {sliding layers, full layers}.
result<std::pair<arch_rope, arch_rope>> read_gemma3_ropes(const config_reader& r, const arch_config& c);

/// hidden_size, layers, heads, kv heads, head_dim and vocab under their usual keys and aliases.
status read_dims(const config_reader& r, arch_config& c);

/// A family's mapping: fills everything family-specific of `c` (dims are read already).
using family_fn = std::function<status(const config_reader&, arch_config&)>;

/// model_type → mapping, for every family mpakt builds (runtime/models/arch_families.cpp).
const std::map<std::string, family_fn, std::less<>>& family_table();

}  // namespace mpakt::models::arch_detail
