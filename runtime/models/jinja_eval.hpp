#pragma once
/// The evaluator of runtime/models/jinja.hpp, shared by jinja_eval.cpp (statements,
/// expressions, scopes) and jinja_builtins.cpp (filters, tests, methods, globals). Internal.
///
/// One evaluator runs one render on one thread. Errors inside are thrown as render_failure
/// and turned into error values by render(); nothing thrown leaves jinja_eval.cpp.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/models/jinja_ast.hpp"

namespace mpakt::models::jinja {

/// A refusal during a render. `raised`: the template's own raise_exception().
struct render_failure {
  std::string message;
  bool raised = false;
  int line = 0;
};

/// Variables of one scope. Jinja gives each loop iteration, macro call and call-block body a
/// scope of its own; `if` bodies share their enclosing one.
struct frame {
  std::vector<std::pair<std::string, value>> vars;
  std::shared_ptr<frame> parent;

  const value* find(std::string_view name) const {
    for (const frame* f = this; f; f = f->parent.get())
      for (const auto& [k, v] : f->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, value v) {
    for (auto& [k, old] : vars)
      if (k == name) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};
using frame_ptr = std::shared_ptr<frame>;

class evaluator {
 public:
  evaluator(const program& p, const render_options& o) : p_(p), o_(o) {}
  ~evaluator();
  evaluator(const evaluator&) = delete;
  evaluator& operator=(const evaluator&) = delete;
  /// Remembers a namespace() made in this render, emptied when the render ends.
  void track_namespace(const value& ns);

  std::string run(const std::vector<std::pair<std::string, value>>& variables);

  [[noreturn]] void fail(const std::string& message) const { throw render_failure{message, false, line_}; }
  int line() const { return line_; }
  /// Counts one unit of work (a loop iteration, a call) against limits.max_steps.
  void step();
  /// Refuses a string about to be built longer than limits.max_output_bytes.
  void check_size(std::size_t bytes) const;
  const render_options& options() const { return o_; }

  value call(const value& callee, call_args& args);
  /// `obj.name` as Jinja's sandbox reads it: a method, else a key, else Undefined.
  value attribute(const value& obj, const std::string& name);
  /// `obj[key]`: a key or index, else a method for a string key, else Undefined.
  value item(const value& obj, const value& key);
  bool test(const std::string& name, const value& subject, call_args& args);
  value filter(const std::string& name, const value& input, call_args& args);

 private:
  enum class flow { normal, break_loop, continue_loop };

  flow exec(const body& b, const frame_ptr& f);
  flow exec_stmt(const stmt& s, const frame_ptr& f);
  flow exec_for(const stmt& s, const frame_ptr& f);
  void assign(const stmt& s, const frame_ptr& f, value v);
  value define_macro(const stmt& s, const frame_ptr& f);
  std::string capture(const body& b, const frame_ptr& f);
  void emit(std::string_view text);

  value eval(const expr& e, const frame_ptr& f);
  value eval_binary(const expr& e, const frame_ptr& f);
  value eval_compare(const expr& e, const frame_ptr& f);
  call_args eval_args(const expr& e, const frame_ptr& f, std::size_t first);

  const program& p_;
  const render_options& o_;
  std::string out_;
  std::vector<frame_ptr> scopes_;   ///< scopes that macros were defined in
  std::vector<value> namespaces_;   ///< namespace() objects made
  std::uint64_t steps_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
  friend struct line_scope;
};

/// The iterable view of a value as a for loop or a filter sees it: a list's items, a
/// dict's keys, a string's characters; Undefined is empty. Fails for others.
std::vector<value> iterate(evaluator& ev, const value& v);
/// Python's < for sorting and comparisons (numbers, strings, lists); fails for mixed types.
bool less_than(evaluator& ev, const value& a, const value& b);
/// A string method or dict method bound to `self`; Undefined when there is none.
value method_of(evaluator& ev, const value& self, const std::string& name);
/// markupsafe's escape: & < > " ' as HTML entities.
std::string html_escape(const std::string& s);
/// Python's `fmt % args` for %s, %r, %d, %i and %%.
value printf_format(evaluator& ev, const std::string& fmt, const value& args);
/// range, namespace, dict, raise_exception, strftime_now.
std::vector<std::pair<std::string, value>> globals();

}  // namespace mpakt::models::jinja
