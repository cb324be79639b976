#pragma once
/// The op schema: schemas/ops.json, embedded in the binary at build time.
///
/// It is the one list of ops. It drives input counts, parameter names and JSON types,
/// required vs optional parameters, and feature names; code supplies shape rules and
/// kernels keyed by op name (runtime/op.hpp). `check_registry()` reports any op in the
/// schema without an op_def or reference kernel, and the reverse; `mpakt` refuses to
/// start when it reports anything. Immutable after first use; safe from any thread.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.hpp"

namespace mpakt {

/// A parameter's declared JSON type ("number?", "array", ...).
struct param_spec {
  enum class type : std::uint8_t { number, boolean, string, array, object };
  std::string name;
  type kind = type::number;
  bool optional = false;
  std::string type_text;  ///< as written in the schema
};

struct op_spec {
  std::string name;
  int min_inputs = 0;
  int max_inputs = 0;
  std::vector<param_spec> params;
  std::vector<std::string> features;
  std::string added_in;  ///< "v2" or "v3"
  bool core = false;
  int mutates_input = -1;
  int writes_input = -1;

  const param_spec* param(std::string_view n) const;
};

class schema {
 public:
  /// The embedded schema (parsed once).
  static const schema& instance();
  /// Parses a schema document (tests use this with broken documents).
  static result<schema> parse(std::string_view json);

  const std::vector<op_spec>& ops() const { return ops_; }
  const op_spec* find(std::string_view op) const;
  std::vector<std::string> feature_names() const;
  /// 16 lower-case hex digits: FNV-1a 64 over the structure (names, counts, param
  /// names and types, features, addedIn, core, in-place markers), not the prose.
  const std::string& ops_hash() const { return hash_; }
  /// The /api/ops document as compact JSON, with opsHash filled in.
  const std::string& ops_document() const { return document_; }

 private:
  std::vector<op_spec> ops_;
  std::vector<std::pair<std::string, std::string>> features_;
  std::string hash_;
  std::string document_;
};

/// The raw embedded schemas/ops.json text (generated source).
std::string_view embedded_ops_json();

}  // namespace mpakt
