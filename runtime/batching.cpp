#include "runtime/batching.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

namespace mpakt {

namespace {

/// How a template value exists in the batched graph.
enum class form : std::uint8_t {
  shared,   ///< one value for every session (weights, constants, what only they feed)
  stacked,  ///< one value holding every session's rows along axis 0, session 0 first
  split,    ///< one value per session, named session_value_name(name, b)
};

/// An op that computes each row of its row inputs on its own, so stacking the sessions'
/// rows along axis 0 gives every session exactly its own result.
struct row_rule {
  std::vector<std::size_t> rows;  ///< the inputs that are rows; every other input must be shared
  bool elementwise = false;       ///< any rank; otherwise rows must be at least 2-D
  bool broadcast_b = false;       ///< input 1 may instead be a shared single row or scalar
};

const row_rule* row_wise(std::string_view op) {
  static const std::map<std::string, row_rule, std::less<>> rules = {
      {"matmul", {{0}}},
      {"linear", {{0}}},
      {"embedding", {{0}, true}},  // ids [T] -> [T, C]
      {"rmsnorm", {{0}}},
      {"layernorm", {{0}}},
      {"argmax", {{0}}},
      {"softmax", {{0}}},
      {"swiglu", {{0, 1}}},
      {"geglu", {{0, 1}}},
      {"add", {{0, 1}, true, true}},
      {"sub", {{0, 1}, true, true}},
      {"mul", {{0, 1}, true, true}},
      {"gelu", {{0}, true}},
      {"gelu_exact", {{0}, true}},
      {"gelu_quick", {{0}, true}},
      {"relu", {{0}, true}},
      {"sigmoid", {{0}, true}},
      {"silu", {{0}, true}},
      {"tanh", {{0}, true}},
      {"scale", {{0}, true}},
      {"softcap", {{0}, true}},
  };
  auto it = rules.find(op);
  return it == rules.end() ? nullptr : &it->second;
}

class rewriter {
 public:
  rewriter(const executable_graph& built, int n, batched_graph& out) : built_(built), n_(n), out_(out) {}

  status add_input(const input_decl& in) {
    if (in.kind == input_kind::session) {
      if (in.of >= 0) return invalid("input " + in.name + " already picks a session with of");
      for (int b = 0; b < n_; ++b) {
        input_decl c = in;
        c.name = session_value_name(in.name, b);
        c.of = b;
        out_.decl.inputs.push_back(std::move(c));
      }
      values_[in.name] = {form::split, false, true};
    } else if (in.kind == input_kind::bound) {
      for (int b = 0; b < n_; ++b) {
        input_decl c = in;
        c.name = session_value_name(in.name, b);
        c.bind = session_value_name(in.bind, b);
        out_.decl.inputs.push_back(std::move(c));
      }
      values_[in.name] = {form::split, false, true};
    } else {
      out_.decl.inputs.push_back(in);
      values_[in.name] = {form::shared, false, false};
    }
    return {};
  }

  status add_step(const step_decl& s) {
    std::vector<form> forms;
    for (const auto& name : s.in) {
      auto it = values_.find(name);
      if (it == values_.end()) return invalid("step " + s.op + " reads " + name + ", which is not defined before it");
      forms.push_back(it->second.f);
    }
    bool all_shared = true;
    for (form f : forms) all_shared = all_shared && f == form::shared;
    if (all_shared && s.binds.empty()) {
      out_.decl.steps.push_back(s);
      values_[s.out] = {form::shared, false, false};
      return {};
    }
    auto stack = stackable(s, forms);
    if (!stack) return stack.err();
    if (*stack) return add_stacked(s, forms);
    return add_split(s);
  }

  status add_outputs(const std::vector<std::string>& outputs) {
    std::set<std::string> listed;
    auto list = [&](const std::string& name) {
      if (listed.insert(name).second) out_.decl.outputs.push_back(name);
    };
    out_.session_outputs.assign(std::size_t(n_), {});
    for (const auto& o : outputs) {
      auto it = values_.find(o);
      if (it == values_.end()) return invalid("output " + o + " is not a value of the template");
      for (int b = 0; b < n_; ++b) {
        auto name = per_session(o, b);
        if (!name) return name.err();
        list(*name);
        out_.session_outputs[std::size_t(b)].push_back(*name);
      }
    }
    out_.decl.has_outputs = true;
    return {};
  }

 private:
  struct value_state {
    form f = form::shared;
    bool stacked_ready = false;  ///< a split value also exists stacked under its own name
    bool split_ready = false;    ///< a stacked value also exists per session
  };

  result<shape_t> template_shape(const std::string& name) const {
    const tensor_desc* d = built_.desc(name);
    if (!d) return invalid("the template has no value " + name);
    return d->shape;
  }

  /// Whether the step can run once over stacked rows: a row-wise op without bindings whose
  /// non-row inputs are shared and whose row inputs are per-session (of one shape).
  result<bool> stackable(const step_decl& s, const std::vector<form>& forms) const {
    const row_rule* rule = row_wise(s.op);
    if (!rule || !s.binds.empty()) return false;
    for (std::size_t i = 0; i < s.in.size(); ++i) {
      const bool is_row = std::find(rule->rows.begin(), rule->rows.end(), i) != rule->rows.end();
      if (!is_row && forms[i] != form::shared) return false;
    }
    auto first = template_shape(s.in[0]);
    if (!first) return first.err();
    if (forms[0] == form::shared) return false;
    if (!rule->elementwise && first->size() < 2) return false;
    if (s.op == "embedding" && first->size() != 1) return false;
    for (std::size_t r : rule->rows) {
      if (r == 0 || r >= s.in.size()) continue;
      auto shape = template_shape(s.in[r]);
      if (!shape) return shape.err();
      if (forms[r] == form::shared) {
        // a shared operand is fine only as a row or scalar broadcast over every row
        if (!rule->broadcast_b || r != 1) return false;
        const std::int64_t n = shape_numel(*shape);
        if (n != 1 && (first->empty() || n != first->back())) return false;
      } else if (*shape != *first) {
        return false;
      }
    }
    return true;
  }

  status add_stacked(const step_decl& s, const std::vector<form>& forms) {
    step_decl c = s;
    for (std::size_t i = 0; i < s.in.size(); ++i)
      if (forms[i] != form::shared) {
        auto name = stacked(s.in[i]);
        if (!name) return name.err();
        c.in[i] = *name;
      }
    out_.decl.steps.push_back(std::move(c));
    values_[s.out] = {form::stacked, true, false};
    return {};
  }

  status add_split(const step_decl& s) {
    for (int b = 0; b < n_; ++b) {
      step_decl c = s;
      for (auto& name : c.in) {
        auto p = per_session(name, b);
        if (!p) return p.err();
        name = *p;
      }
      c.out = session_value_name(s.out, b);
      for (auto& r : c.binds) r.name = session_value_name(r.name, b);
      out_.session_steps[std::size_t(b)].push_back(out_.decl.steps.size());
      out_.decl.steps.push_back(std::move(c));
    }
    values_[s.out] = {form::split, false, true};
    return {};
  }

  /// The stacked value of a per-session template value, concatenating once if needed.
  result<std::string> stacked(const std::string& name) {
    value_state& v = values_[name];
    if (v.f == form::shared || v.stacked_ready) return name;
    std::string acc = session_value_name(name, 0);
    for (int b = 1; b < n_; ++b) {
      step_decl cat;
      cat.op = "concat";
      cat.in = {acc, session_value_name(name, b)};
      cat.out = b + 1 == n_ ? name : name + "@cat" + std::to_string(b);
      cat.params.set("axis", param_value::number(0));
      acc = cat.out;
      out_.decl.steps.push_back(std::move(cat));
    }
    v.stacked_ready = true;
    return name;
  }

  /// Session b's part of a template value, slicing a stacked value once if needed.
  result<std::string> per_session(const std::string& name, int b) {
    value_state& v = values_[name];
    if (v.f == form::shared) return name;
    if (!v.split_ready) {
      auto shape = template_shape(name);
      if (!shape) return shape.err();
      if (shape->empty()) return invalid("value " + name + " has no rows to split by session");
      const std::int64_t rows = shape->front();
      for (int s = 0; s < n_; ++s) {
        step_decl cut;
        cut.op = "slice";
        cut.in = {name};
        cut.out = session_value_name(name, s);
        cut.params.set("start", param_value::number(double(rows * s)));
        cut.params.set("length", param_value::number(double(rows)));
        cut.params.set("axis", param_value::number(0));
        out_.decl.steps.push_back(std::move(cut));
      }
      v.split_ready = true;
    }
    return session_value_name(name, b);
  }

  const executable_graph& built_;
  int n_;
  batched_graph& out_;
  std::unordered_map<std::string, value_state> values_;
};

bool has_at(const std::string& s) { return s.find('@') != std::string::npos; }

status check_names(const graph_decl& t) {
  for (const auto& in : t.inputs)
    if (has_at(in.name) || has_at(in.bind)) return invalid("input " + in.name + " has '@' in a name");
  for (const auto& s : t.steps) {
    if (has_at(s.out)) return invalid("value " + s.out + " has '@' in its name");
    for (const auto& r : s.binds)
      if (has_at(r.name)) return invalid("binding " + r.name + " has '@' in its name");
  }
  return {};
}

}  // namespace

std::string session_value_name(std::string_view name, int b) {
  return std::string(name) + "@" + std::to_string(b);
}

result<batched_graph> batch_graph(const graph_decl& tmpl, const executable_graph& built, int sessions) {
  if (sessions < 2 || sessions > 64) return invalid("a batched graph runs 2 to 64 sessions, not " + std::to_string(sessions));
  if (tmpl.session || !tmpl.sessions.empty()) return invalid("the template names its sessions itself");
  if (!tmpl.retain.empty()) return invalid("the template retains values");
  MPAKT_TRY(check_names(tmpl));
  batched_graph out;
  out.sessions = sessions;
  out.session_steps.assign(std::size_t(sessions), {});
  rewriter rw(built, sessions, out);
  for (const auto& in : tmpl.inputs) MPAKT_TRY(rw.add_input(in));
  for (const auto& s : tmpl.steps) MPAKT_TRY(rw.add_step(s));
  MPAKT_TRY(rw.add_outputs(tmpl.outputs));
  std::size_t own = 0;
  for (const auto& v : out.session_steps) own += v.size();
  out.shared_steps = out.decl.steps.size() - own;
  return out;
}

}  // namespace mpakt
