#pragma once
/// The parsed form of a Jinja template (runtime/models/jinja.hpp), shared by the parser
/// (jinja_parse.cpp) and the evaluator (jinja_eval.cpp, jinja_builtins.cpp). Internal to them.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/models/jinja.hpp"
#include "runtime/models/jinja_value.hpp"

namespace mpakt::models::jinja {

struct expr;
using expr_ptr = std::unique_ptr<expr>;

enum class expr_kind {
  literal,    ///< `literal`
  name,       ///< a variable `name`
  list,       ///< [kids…]
  tuple,      ///< (kids…)
  dict,       ///< {kids[0]: kids[1], …}
  attribute,  ///< kids[0].name
  item,       ///< kids[0][kids[1]]
  slice,      ///< kids[0][kids[1]:kids[2]:kids[3]] (absent parts are null)
  call,       ///< kids[0](kids[1…], named…)
  filter,     ///< kids[0] | name(kids[1…], named…)
  test,       ///< kids[0] is [not] name(kids[1…]); `negated`
  unary,      ///< name (not, -, +) kids[0]
  binary,     ///< kids[0] name kids[1]: + - * / // % ** ~ and or in "not in"
  compare,    ///< kids[0] ops[0] kids[1] ops[1] kids[2] … (chained as Python does)
  condition,  ///< kids[0] if kids[1] else kids[2] (kids[2] null: Undefined)
};

struct expr {
  expr_kind kind = expr_kind::literal;
  int line = 0;
  value literal;
  std::string name;
  std::vector<expr_ptr> kids;
  std::vector<std::pair<std::string, expr_ptr>> named;
  std::vector<std::string> ops;  ///< compare only
  bool negated = false;          ///< test only
  /// filter/test only: a name Jinja itself does not define, inside an `if` or an inline
  /// if-else. Jinja compiles such a template and fails only when the filter is reached;
  /// so does the evaluator.
  bool unknown = false;
};

struct stmt;
using stmt_ptr = std::unique_ptr<stmt>;
using body = std::vector<stmt_ptr>;

enum class stmt_kind {
  text,         ///< literal output `text`
  output,       ///< {{ value }}
  if_,          ///< if value: then_body else else_body (elif is an if inside else_body)
  for_,         ///< for targets in value [if condition]: then_body else else_body
  set,          ///< set targets = value  |  set targets[0].attribute = value
  set_block,    ///< set targets[0] [| filters]: then_body
  macro,        ///< macro name(params) then_body
  call_block,   ///< call(params) value: then_body (the body is `caller`)
  filter_block, ///< filter …: then_body (value is the filter chain over a placeholder)
  break_,
  continue_,
  generation,   ///< transformers' {% generation %}: renders its body
};

struct param {
  std::string name;
  expr_ptr default_value;  ///< null: required
};

struct stmt {
  stmt_kind kind = stmt_kind::text;
  int line = 0;
  std::string text;                  ///< text, macro name
  std::string attribute;             ///< set ns.attribute
  expr_ptr value;                    ///< output, condition, iterable, set value, call, filter chain
  expr_ptr condition;                ///< for … if condition
  std::vector<std::string> targets;  ///< for / set targets (several: unpacking)
  bool target_tuple = false;         ///< for a, b in … / set a, b = …
  std::vector<param> params;         ///< macro / call block parameters
  body then_body;
  body else_body;
};

/// A parsed template. Immutable once built.
struct program {
  std::string origin;
  body root;
  limits lim;
  std::vector<std::string> literals;  ///< text blocks and string literals (literal_texts)
};

/// The name of the placeholder variable a filter block's chain is applied to.
inline constexpr const char* filter_block_input = " filter block input";

}  // namespace mpakt::models::jinja
