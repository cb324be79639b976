#pragma once
/// The values a Jinja chat template computes with: Python's none/bool/int/float/str/list/
/// tuple/dict as Jinja sees them, plus Jinja's Undefined, namespace() objects and callables
/// (macros, globals, bound methods).
///
/// Lists and dicts are immutable once built and shared by pointer, as transformers' sandbox
/// (ImmutableSandboxedEnvironment) forbids templates to modify them; only a namespace's
/// attributes change, through `{% set ns.x = … %}`. Strings are UTF-8; where Python counts
/// characters (length, indexing, slicing) these count code points.
///
/// A value is not thread-safe to mutate; the values a render builds belong to that render.
/// Values given to a render (messages, tools) are only read, so one may be shared by renders
/// on several threads as long as nobody changes it.

#include <rapidjson/document.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mpakt::models::jinja {

class value;
class evaluator;

/// The arguments of a call: positional, then keyword ones in call order.
struct call_args {
  std::vector<value> positional;
  std::vector<std::pair<std::string, value>> named;
};

/// A callable: a global (range, namespace, raise_exception…), a macro, or a bound method.
/// `fn` reports errors by throwing the evaluator's internal error; only jinja*.cpp call it.
struct function {
  std::string name;
  std::function<value(evaluator&, call_args&)> fn;
};

struct list_data;
struct dict_data;

class value {
 public:
  enum class kind : std::uint8_t { undefined, none, boolean, integer, number, string, list, dict, callable };

  value() = default;  ///< Undefined
  static value none();
  static value undefined(std::string hint = {});
  value(bool b);
  value(std::int64_t i);
  value(int i) : value(std::int64_t(i)) {}
  value(double d);
  value(std::string s);
  value(const char* s) : value(std::string(s)) {}
  /// A string marked safe (Jinja's Markup, from the `safe` and `escape` filters): `+` with a
  /// plain string HTML-escapes the plain one, as markupsafe does even without autoescape.
  static value markup(std::string s);
  static value list(std::vector<value> items, bool tuple = false);
  /// What Jinja's map/select/reject filters return: a generator, which can be iterated but
  /// not measured, indexed or serialised.
  static value generator(std::vector<value> items);
  static value dict(std::vector<std::pair<std::string, value>> entries);
  static value namespace_of(std::vector<std::pair<std::string, value>> entries);
  static value callable(std::string name, std::function<value(evaluator&, call_args&)> fn);
  /// JSON as json.loads gives it to Python (objects keep their key order).
  static value from_json(const rapidjson::Value& v);

  kind type() const { return kind_; }
  bool is_undefined() const { return kind_ == kind::undefined; }
  bool is_none() const { return kind_ == kind::none; }
  bool is_bool() const { return kind_ == kind::boolean; }
  bool is_int() const { return kind_ == kind::integer; }
  bool is_float() const { return kind_ == kind::number; }
  bool is_number() const { return kind_ == kind::integer || kind_ == kind::number; }
  bool is_string() const { return kind_ == kind::string; }
  bool is_markup() const { return kind_ == kind::string && markup_; }
  bool is_list() const { return kind_ == kind::list; }
  bool is_tuple() const;
  bool is_generator() const;
  bool is_dict() const { return kind_ == kind::dict; }
  bool is_namespace() const;
  bool is_callable() const { return kind_ == kind::callable; }

  bool as_bool() const { return b_; }
  std::int64_t as_int() const { return i_; }
  double as_double() const { return kind_ == kind::integer ? double(i_) : kind_ == kind::boolean ? double(b_) : d_; }
  const std::string& as_string() const { return s_; }  ///< also an undefined value's hint
  const std::vector<value>& items() const;             ///< a list's items (empty otherwise)
  const std::vector<std::pair<std::string, value>>& entries() const;  ///< a dict's entries
  const function& as_function() const { return *f_; }

  /// A dict's or namespace's value for `key`, or nullptr.
  const value* find(std::string_view key) const;
  /// Sets a namespace attribute (the only mutation templates may make).
  void set_attribute(const std::string& key, value v) const;
  /// Empties a namespace (to break a cycle of a namespace holding itself).
  void clear_attributes() const;

  /// Python truthiness (Undefined is false).
  bool truthy() const;
  /// Python's str(): what `{{ x }}` prints (Undefined prints nothing).
  std::string str() const;
  /// Python's repr(), used inside str() of lists and dicts.
  std::string repr() const;
  /// A short name of the type for messages ("string", "list", …).
  std::string_view type_name() const;

 private:
  kind kind_ = kind::undefined;
  bool b_ = false;
  bool markup_ = false;
  std::int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
  std::shared_ptr<list_data> l_;
  std::shared_ptr<dict_data> m_;
  std::shared_ptr<const function> f_;
};

struct list_data {
  std::vector<value> items;
  bool tuple = false;
  bool generator = false;
};

struct dict_data {
  std::vector<std::pair<std::string, value>> entries;
  bool is_namespace = false;
};

/// Dict keys are stored as strings: a string key as itself, and the other keys Python allows
/// in a template's dict literal (int, float, bool, None) encoded after a NUL byte, so that
/// 1, 1.0 and True are one key as in Python. dict_key encodes (false for a key type that is
/// not supported), key_value decodes.
bool dict_key(const value& key, std::string& out);
value key_value(const std::string& key);

/// Python's == between two values (1 == 1.0 == True; lists and dicts compared deeply).
bool equal(const value& a, const value& b);

/// Python's repr of a float ("1.0", "0.1", "1e+16", "inf", "nan").
std::string float_repr(double d);

/// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as Python writes it. `indent`
/// is the indentation string (nullopt: one line); separators default as json.dumps does.
/// Returns false (and leaves a message in `why`) for what json.dumps refuses (Undefined,
/// callables).
struct json_options {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;
  std::string item_separator;  ///< empty: json.dumps' default for the indent setting
  std::string key_separator;
  bool has_separators = false;
  bool sort_keys = false;
};
bool to_json(const value& v, const json_options& o, std::string& out, std::string& why, int depth = 0);

// ---- UTF-8 helpers shared by the interpreter -----------------------------------------------

/// Number of code points (bytes that do not continue a sequence).
std::size_t utf8_length(std::string_view s);
/// The string's code points as separate strings (invalid bytes are kept one per item).
std::vector<std::string> utf8_chars(std::string_view s);
/// Python's str.isspace for one code point.
bool python_space(std::uint32_t cp);
/// Decodes the code point at s[i]; sets len (1 for an invalid byte, returned as 0xFFFFFFFF).
std::uint32_t utf8_decode(std::string_view s, std::size_t i, std::size_t& len);
void utf8_append(std::string& out, std::uint32_t cp);

}  // namespace mpakt::models::jinja
