#pragma once
/// Op parameter values as they arrive in a graph, before an op types them.
///
/// A step's "params" object becomes a param_map. The schema (schemas/ops.json) has
/// already checked every name and its JSON type when an op's parse function sees it,
/// so parse functions only check ranges and integrality. Values are small; copying is fine.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/status.hpp"

namespace mpakt {

struct param_value {
  enum class kind : std::uint8_t { null, number, boolean, string, array, object };
  kind k = kind::null;
  double num = 0;
  bool flag = false;
  std::string str;
  std::vector<param_value> items;                             ///< array elements
  std::vector<std::pair<std::string, param_value>> fields;    ///< object members, in order

  static param_value number(double v) { param_value p; p.k = kind::number; p.num = v; return p; }
  static param_value boolean(bool v) { param_value p; p.k = kind::boolean; p.flag = v; return p; }
  static param_value string(std::string v) { param_value p; p.k = kind::string; p.str = std::move(v); return p; }

  bool is_number() const { return k == kind::number; }
  /// Member of an object, or nullptr.
  const param_value* field(std::string_view name) const;

  // Declared here, defaulted below where param_value is complete: clang 14 (the fuzz build,
  // docs/building.md) would otherwise destroy a pair<string, param_value> of an incomplete type.
  param_value();
  param_value(const param_value&);
  param_value(param_value&&) noexcept;
  param_value& operator=(const param_value&);
  param_value& operator=(param_value&&) noexcept;
  ~param_value();
};
inline param_value::param_value() = default;
inline param_value::param_value(const param_value&) = default;
inline param_value::param_value(param_value&&) noexcept = default;
inline param_value& param_value::operator=(const param_value&) = default;
inline param_value& param_value::operator=(param_value&&) noexcept = default;
inline param_value::~param_value() = default;

/// Parameters of one step, in the order written.
class param_map {
 public:
  void set(std::string name, param_value v);
  const param_value* find(std::string_view name) const;
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const std::vector<std::pair<std::string, param_value>>& items() const { return items_; }

  // Typed readers. `what` prefixes messages, e.g. "step 3 (rope)". The schema already
  // guaranteed the JSON type, so these check values only.
  result<double> number(std::string_view name, double fallback) const;
  result<double> required_number(std::string_view name) const;
  /// Integer-valued number within [lo, hi].
  result<std::int64_t> integer(std::string_view name, std::int64_t fallback, std::int64_t lo, std::int64_t hi) const;
  result<std::int64_t> required_integer(std::string_view name, std::int64_t lo, std::int64_t hi) const;
  bool boolean(std::string_view name, bool fallback) const;
  std::string string(std::string_view name, std::string fallback) const;
  result<std::vector<double>> numbers(std::string_view name) const;  ///< empty when absent

 private:
  std::vector<std::pair<std::string, param_value>> items_;
};

/// Formats a number the way messages show it: integers without a decimal point.
std::string num_str(double v);

}  // namespace mpakt
