// The evaluator of runtime/models/jinja.hpp: statements, expressions, scopes and calls.
// Filters, tests, methods and globals are in jinja_builtins.cpp.

#include "runtime/models/jinja_eval.hpp"

#include <cmath>
#include <limits>

namespace mpakt::models::jinja {

namespace {

bool numeric(const value& v) { return v.is_number() || v.is_bool(); }
std::int64_t int_of(const value& v) { return v.is_bool() ? std::int64_t(v.as_bool()) : v.as_int(); }
bool integral(const value& v) { return v.is_int() || v.is_bool(); }

std::string what(const expr& e) {
  switch (e.kind) {
    case expr_kind::name: return "'" + e.name + "'";
    case expr_kind::attribute: return what(*e.kids[0]) + "." + e.name;
    case expr_kind::item: return what(*e.kids[0]) + "[…]";
    default: return "a value";
  }
}

}  // namespace

void evaluator::step() {
  if (++steps_ > o_.lim.max_steps)
    fail("the template ran more than " + std::to_string(o_.lim.max_steps) + " loop iterations and calls");
}

void evaluator::check_size(std::size_t bytes) const {
  if (bytes > o_.lim.max_output_bytes)
    fail("the template builds text longer than " + std::to_string(o_.lim.max_output_bytes) + " bytes");
}

void evaluator::emit(std::string_view text) {
  check_size(out_.size() + text.size());
  out_.append(text);
}

std::string evaluator::run(const std::vector<std::pair<std::string, value>>& variables) {
  auto root = std::make_shared<frame>();
  for (auto& g : globals()) root->set(g.first, std::move(g.second));
  for (const auto& [k, v] : variables) root->set(k, v);
  exec(p_.root, root);
  return std::move(out_);
}

std::string evaluator::capture(const body& b, const frame_ptr& f) {
  std::string saved;
  saved.swap(out_);
  // The captured text counts against the limit together with what is already written.
  struct restore {
    std::string& out;
    std::string& saved;
    ~restore() { out.swap(saved); }
  } r{out_, saved};
  exec(b, f);
  return out_;  // copied before the swap back
}

evaluator::~evaluator() {
  // A namespace may hold itself (`set ns.me = ns`): empty them all to break such cycles.
  for (const auto& ns : namespaces_) ns.clear_attributes();
}

void evaluator::track_namespace(const value& ns) { namespaces_.push_back(ns); }

evaluator::flow evaluator::exec(const body& b, const frame_ptr& f) {
  for (const auto& s : b) {
    const flow fl = exec_stmt(*s, f);
    if (fl != flow::normal) return fl;
  }
  return flow::normal;
}

void evaluator::assign(const stmt& s, const frame_ptr& f, value v) {
  if (!s.target_tuple) {
    f->set(s.targets[0], std::move(v));
    return;
  }
  std::vector<value> parts = iterate(*this, v);
  if (parts.size() != s.targets.size())
    fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(s.targets.size()) + " names");
  for (std::size_t i = 0; i < parts.size(); ++i) f->set(s.targets[i], std::move(parts[i]));
}

evaluator::flow evaluator::exec_stmt(const stmt& s, const frame_ptr& f) {
  line_ = s.line;
  switch (s.kind) {
    case stmt_kind::text: emit(s.text); return flow::normal;
    case stmt_kind::output: {
      const value v = eval(*s.value, f);
      if (v.is_string())
        emit(v.as_string());
      else
        emit(v.str());
      return flow::normal;
    }
    case stmt_kind::if_:
      if (eval(*s.value, f).truthy()) return exec(s.then_body, f);
      return exec(s.else_body, f);
    case stmt_kind::for_: return exec_for(s, f);
    case stmt_kind::set: {
      value v = eval(*s.value, f);
      if (s.attribute.empty()) {
        assign(s, f, std::move(v));
        return flow::normal;
      }
      const value* ns = f->find(s.targets[0]);
      if (!ns || !ns->is_namespace()) fail("'" + s.targets[0] + "' is not a namespace(), so its attributes cannot be set");
      if (!s.attribute.empty() && s.attribute[0] == '_') fail("namespace attributes cannot start with an underscore");
      ns->set_attribute(s.attribute, std::move(v));
      return flow::normal;
    }
    case stmt_kind::set_block: {
      auto inner = std::make_shared<frame>();
      inner->parent = f;
      value v(capture(s.then_body, inner));
      if (s.value) {
        auto input = std::make_shared<frame>();
        input->parent = f;
        input->set(filter_block_input, std::move(v));
        v = eval(*s.value, input);
      }
      f->set(s.targets[0], std::move(v));
      return flow::normal;
    }
    case stmt_kind::macro: f->set(s.text, define_macro(s, f)); return flow::normal;
    case stmt_kind::call_block: {
      const expr& c = *s.value;
      value callee = eval(*c.kids[0], f);
      if (callee.is_undefined()) fail(what(*c.kids[0]) + " is undefined, so it cannot be called");
      call_args args = eval_args(c, f, 1);
      args.named.emplace_back("caller", define_macro(s, f));
      const value v = call(callee, args);
      emit(v.str());
      return flow::normal;
    }
    case stmt_kind::filter_block: {
      auto inner = std::make_shared<frame>();
      inner->parent = f;
      value text(capture(s.then_body, inner));
      inner->set(filter_block_input, std::move(text));
      emit(eval(*s.value, inner).str());
      return flow::normal;
    }
    case stmt_kind::break_: return flow::break_loop;
    case stmt_kind::continue_: return flow::continue_loop;
    case stmt_kind::generation: {
      auto inner = std::make_shared<frame>();
      inner->parent = f;
      exec(s.then_body, inner);
      return flow::normal;
    }
  }
  return flow::normal;
}

evaluator::flow evaluator::exec_for(const stmt& s, const frame_ptr& f) {
  std::vector<value> items = iterate(*this, eval(*s.value, f));
  if (s.condition) {
    std::vector<value> kept;
    for (auto& item : items) {
      step();
      auto probe = std::make_shared<frame>();
      probe->parent = f;
      assign(s, probe, item);
      if (eval(*s.condition, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto inner = std::make_shared<frame>();
    inner->parent = f;
    exec(s.else_body, inner);
    return flow::normal;
  }
  const auto n = std::int64_t(items.size());
  for (std::int64_t i = 0; i < n; ++i) {
    step();
    // Each iteration is a scope of its own: a `set` in the body is gone at the next one.
    auto inner = std::make_shared<frame>();
    inner->parent = f;
    assign(s, inner, items[std::size_t(i)]);
    std::vector<std::pair<std::string, value>> loop = {
        {"index", value(i + 1)},         {"index0", value(i)},          {"revindex", value(n - i)},
        {"revindex0", value(n - i - 1)}, {"first", value(i == 0)},      {"last", value(i == n - 1)},
        {"length", value(n)},            {"depth", value(std::int64_t(1))}, {"depth0", value(std::int64_t(0))},
        {"previtem", i > 0 ? items[std::size_t(i - 1)] : value::undefined("loop.previtem")},
        {"nextitem", i + 1 < n ? items[std::size_t(i + 1)] : value::undefined("loop.nextitem")},
    };
    loop.emplace_back("cycle", value::callable("loop.cycle", [i](evaluator& ev, call_args& a) -> value {
                        if (a.positional.empty()) ev.fail("loop.cycle() needs at least one value");
                        return a.positional[std::size_t(i) % a.positional.size()];
                      }));
    inner->set("loop", value::dict(std::move(loop)));
    if (exec(s.then_body, inner) == flow::break_loop) break;
  }
  return flow::normal;
}

value evaluator::define_macro(const stmt& s, const frame_ptr& defining) {
  const stmt* m = &s;
  // The macro reads its defining scope, which holds the macro: the evaluator keeps that scope
  // alive for the render and the macro refers to it by index, so no reference cycle leaks.
  const std::size_t scope = scopes_.size();
  scopes_.push_back(defining);
  return value::callable(s.kind == stmt_kind::macro ? s.text : "caller", [m, scope](evaluator& ev, call_args& a) -> value {
    const frame_ptr closure = ev.scopes_[scope];
    if (++ev.call_depth_ > ev.o_.lim.max_call_depth)
      ev.fail("macros call each other more than " + std::to_string(ev.o_.lim.max_call_depth) + " deep");
    struct depth_restore {
      int& d;
      ~depth_restore() { --d; }
    } restore{ev.call_depth_};
    auto f = std::make_shared<frame>();
    f->parent = closure;
    std::vector<bool> bound(m->params.size(), false);
    std::vector<value> extra;
    for (std::size_t i = 0; i < a.positional.size(); ++i) {
      if (i < m->params.size()) {
        f->set(m->params[i].name, a.positional[i]);
        bound[i] = true;
      } else {
        extra.push_back(a.positional[i]);
      }
    }
    std::vector<std::pair<std::string, value>> extra_named;
    for (auto& [k, v] : a.named) {
      if (k == "caller") {
        f->set("caller", v);
        continue;
      }
      bool found = false;
      for (std::size_t i = 0; i < m->params.size(); ++i)
        if (m->params[i].name == k) {
          f->set(k, v);
          bound[i] = found = true;
        }
      if (!found) extra_named.emplace_back(k, v);
    }
    for (std::size_t i = 0; i < m->params.size(); ++i) {
      if (bound[i]) continue;
      f->set(m->params[i].name, m->params[i].default_value ? ev.eval(*m->params[i].default_value, f)
                                                           : value::undefined(m->params[i].name));
    }
    f->set("varargs", value::list(std::move(extra)));
    f->set("kwargs", value::dict(std::move(extra_named)));
    const int line = ev.line_;
    value out(ev.capture(m->then_body, f));
    ev.line_ = line;
    return out;
  });
}

value evaluator::call(const value& callee, call_args& args) {
  if (!callee.is_callable()) fail("a " + std::string(callee.type_name()) + " is not callable");
  step();
  return callee.as_function().fn(*this, args);
}

call_args evaluator::eval_args(const expr& e, const frame_ptr& f, std::size_t first) {
  call_args a;
  for (std::size_t i = first; i < e.kids.size(); ++i) a.positional.push_back(eval(*e.kids[i], f));
  for (const auto& [k, v] : e.named) a.named.emplace_back(k, eval(*v, f));
  return a;
}

value evaluator::attribute(const value& obj, const std::string& name) {
  if (!name.empty() && name[0] == '_') return value::undefined(name);
  if (obj.is_namespace()) {
    const value* v = obj.find(name);
    return v ? *v : value::undefined(name);
  }
  value m = method_of(*this, obj, name);
  if (!m.is_undefined()) return m;
  if (obj.is_dict()) {
    const value* v = obj.find(name);
    return v ? *v : value::undefined(name);
  }
  return value::undefined(name);
}

value evaluator::item(const value& obj, const value& key) {
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const value* v = obj.find(key.as_string())) return *v;
      if (obj.is_namespace()) return value::undefined(key.as_string());
      return attribute(obj, key.as_string());
    }
    std::string encoded;
    if (dict_key(key, encoded))
      if (const value* v = obj.find(encoded)) return *v;
    return value::undefined();
  }
  if (obj.is_generator()) return value::undefined("index");
  if (integral(key) && (obj.is_list() || obj.is_string())) {
    std::int64_t i = int_of(key);
    if (obj.is_list()) {
      const auto n = std::int64_t(obj.items().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return value::undefined("index");
      return obj.items()[std::size_t(i)];
    }
    const std::vector<std::string> chars = utf8_chars(obj.as_string());
    const auto n = std::int64_t(chars.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return value::undefined("index");
    return value(chars[std::size_t(i)]);
  }
  if (key.is_string()) return attribute(obj, key.as_string());
  return value::undefined();
}

value evaluator::eval(const expr& e, const frame_ptr& f) {
  switch (e.kind) {
    case expr_kind::literal: return e.literal;
    case expr_kind::name: {
      if (const value* v = f->find(e.name)) return *v;
      return value::undefined(e.name);
    }
    case expr_kind::list:
    case expr_kind::tuple: {
      std::vector<value> items;
      items.reserve(e.kids.size());
      for (const auto& k : e.kids) items.push_back(eval(*k, f));
      return value::list(std::move(items), e.kind == expr_kind::tuple);
    }
    case expr_kind::dict: {
      std::vector<std::pair<std::string, value>> entries;
      for (std::size_t i = 0; i + 1 < e.kids.size(); i += 2) {
        const value k = eval(*e.kids[i], f);
        std::string encoded;
        if (!dict_key(k, encoded)) fail("a " + std::string(k.type_name()) + " cannot be a dict key");
        value v = eval(*e.kids[i + 1], f);
        bool replaced = false;
        for (auto& [key, old] : entries)
          if (key == encoded) old = v, replaced = true;
        if (!replaced) entries.emplace_back(std::move(encoded), std::move(v));
      }
      return value::dict(std::move(entries));
    }
    case expr_kind::attribute: {
      line_ = e.line;
      const value obj = eval(*e.kids[0], f);
      if (obj.is_undefined()) fail(what(*e.kids[0]) + " is undefined, so it has no attribute '" + e.name + "'");
      return attribute(obj, e.name);
    }
    case expr_kind::item: {
      line_ = e.line;
      const value obj = eval(*e.kids[0], f);
      const value key = eval(*e.kids[1], f);
      if (obj.is_undefined()) fail(what(*e.kids[0]) + " is undefined, so it cannot be indexed");
      return item(obj, key);
    }
    case expr_kind::slice: {
      line_ = e.line;
      const value obj = eval(*e.kids[0], f);
      if (obj.is_undefined()) fail(what(*e.kids[0]) + " is undefined, so it cannot be sliced");
      std::optional<std::int64_t> part[3];
      for (int k = 0; k < 3; ++k) {
        if (!e.kids[std::size_t(k) + 1]) continue;
        const value v = eval(*e.kids[std::size_t(k) + 1], f);
        if (v.is_none() || v.is_undefined()) continue;
        if (!integral(v)) fail("slice indices must be integers");
        part[k] = int_of(v);
      }
      const std::int64_t stride = part[2].value_or(1);
      if (stride == 0) fail("a slice step cannot be zero");
      std::vector<value> src;
      std::vector<std::string> chars;
      if (obj.is_list()) src = obj.items();
      else if (obj.is_string()) chars = utf8_chars(obj.as_string());
      else fail("a " + std::string(obj.type_name()) + " cannot be sliced");
      const auto n = std::int64_t(obj.is_list() ? src.size() : chars.size());
      auto clamp = [&](std::optional<std::int64_t> v, std::int64_t dflt, bool upper) {
        if (!v) return dflt;
        std::int64_t x = *v;
        if (x < 0) x += n;
        if (stride > 0) return std::clamp<std::int64_t>(x, 0, n);
        return std::clamp<std::int64_t>(x, -1, upper ? n - 1 : n - 1);
      };
      const std::int64_t start = clamp(part[0], stride > 0 ? 0 : n - 1, true);
      const std::int64_t stop = clamp(part[1], stride > 0 ? n : -1, false);
      std::vector<value> items;
      std::string text;
      for (std::int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride) {
        if (obj.is_list()) items.push_back(src[std::size_t(i)]);
        else text += chars[std::size_t(i)];
      }
      if (obj.is_list()) return value::list(std::move(items), obj.is_tuple());
      return value(std::move(text));
    }
    case expr_kind::call: {
      line_ = e.line;
      const value callee = eval(*e.kids[0], f);
      if (callee.is_undefined()) fail(what(*e.kids[0]) + " is undefined, so it cannot be called");
      call_args args = eval_args(e, f, 1);
      line_ = e.line;
      return call(callee, args);
    }
    case expr_kind::filter: {
      line_ = e.line;
      if (e.unknown) fail("the filter '" + e.name + "' is not supported");
      const value input = eval(*e.kids[0], f);
      call_args args = eval_args(e, f, 1);
      line_ = e.line;
      return filter(e.name, input, args);
    }
    case expr_kind::test: {
      line_ = e.line;
      if (e.unknown) fail("the test '" + e.name + "' is not supported");
      const value subject = eval(*e.kids[0], f);
      call_args args = eval_args(e, f, 1);
      line_ = e.line;
      return value(test(e.name, subject, args) != e.negated);
    }
    case expr_kind::unary: {
      const value v = eval(*e.kids[0], f);
      line_ = e.line;
      if (e.name == "not") return value(!v.truthy());
      if (!numeric(v)) fail("the operand of unary " + e.name + " is a " + std::string(v.type_name()) + ", not a number");
      if (e.name == "+") return v.is_bool() ? value(int_of(v)) : v;
      if (v.is_float()) return value(-v.as_double());
      if (int_of(v) == std::numeric_limits<std::int64_t>::min()) fail("integer overflow");
      return value(-int_of(v));
    }
    case expr_kind::binary: return eval_binary(e, f);
    case expr_kind::compare: return eval_compare(e, f);
    case expr_kind::condition: {
      if (eval(*e.kids[1], f).truthy()) return eval(*e.kids[0], f);
      if (e.kids[2]) return eval(*e.kids[2], f);
      return value::undefined();
    }
  }
  return value::undefined();
}

value printf_format(evaluator& ev, const std::string& fmt, const value& args) {
  std::vector<value> list = args.is_tuple() ? args.items() : std::vector<value>{args};
  std::string out;
  std::size_t next = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) ev.fail("a % format ends with a lone %");
    const char c = fmt[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= list.size()) ev.fail("not enough arguments for the % format");
    const value& v = list[next++];
    if (c == 's') out += v.str();
    else if (c == 'r') out += v.repr();
    else if (c == 'd' || c == 'i') {
      if (!numeric(v)) ev.fail("%d needs a number");
      out += std::to_string(v.is_float() ? std::int64_t(v.as_double()) : int_of(v));
    } else {
      ev.fail(std::string("the % format directive '%") + c + "' is not supported");
    }
  }
  if (next < list.size()) ev.fail("not all arguments converted during string formatting");
  return value(std::move(out));
}

value evaluator::eval_binary(const expr& e, const frame_ptr& f) {
  const std::string& op = e.name;
  if (op == "and") {
    value a = eval(*e.kids[0], f);
    return a.truthy() ? eval(*e.kids[1], f) : a;
  }
  if (op == "or") {
    value a = eval(*e.kids[0], f);
    return a.truthy() ? a : eval(*e.kids[1], f);
  }
  const value a = eval(*e.kids[0], f);
  const value b = eval(*e.kids[1], f);
  line_ = e.line;
  if (op == "~") {
    std::string s = a.str();
    const std::string t = b.str();
    check_size(s.size() + t.size());
    return value(s + t);
  }
  if (a.is_undefined() || b.is_undefined())
    fail(what(*e.kids[a.is_undefined() ? 0 : 1]) + " is undefined, so it cannot be used with " + op);
  const auto bad = [&]() -> value {
    fail("unsupported operand types for " + op + ": " + std::string(a.type_name()) + " and " + std::string(b.type_name()));
  };
  if (numeric(a) && numeric(b)) {
    const bool ints = integral(a) && integral(b);
    const std::int64_t x = ints ? int_of(a) : 0, y = ints ? int_of(b) : 0;
    const double p = a.as_double(), q = b.as_double();
    std::int64_t r = 0;
    if (op == "+") {
      if (!ints) return value(p + q);
      if (__builtin_add_overflow(x, y, &r)) fail("integer overflow");
      return value(r);
    }
    if (op == "-") {
      if (!ints) return value(p - q);
      if (__builtin_sub_overflow(x, y, &r)) fail("integer overflow");
      return value(r);
    }
    if (op == "*") {
      if (!ints) return value(p * q);
      if (__builtin_mul_overflow(x, y, &r)) fail("integer overflow");
      return value(r);
    }
    if (op == "/") {
      if (q == 0) fail("division by zero");
      return value(p / q);
    }
    if (op == "//" || op == "%") {
      if (q == 0) fail(op == "//" ? "integer division by zero" : "modulo by zero");
      if (ints) {
        if (x == std::numeric_limits<std::int64_t>::min() && y == -1) fail("integer overflow");
        std::int64_t quot = x / y, rem = x % y;
        if (rem != 0 && ((rem < 0) != (y < 0))) --quot, rem += y;
        return op == "//" ? value(quot) : value(rem);
      }
      if (op == "//") return value(std::floor(p / q));
      double m = std::fmod(p, q);
      if (m != 0 && ((m < 0) != (q < 0))) m += q;
      return value(m);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        std::int64_t acc = 1, base = x, exp = y;
        while (exp > 0) {
          if (exp & 1)
            if (__builtin_mul_overflow(acc, base, &acc)) fail("integer overflow");
          exp >>= 1;
          if (exp > 0 && __builtin_mul_overflow(base, base, &base)) fail("integer overflow");
        }
        return value(acc);
      }
      return value(std::pow(p, q));
    }
    return bad();
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_size(a.as_string().size() + b.as_string().size());
      if (a.is_markup() == b.is_markup())
        return a.is_markup() ? value::markup(a.as_string() + b.as_string()) : value(a.as_string() + b.as_string());
      // Markup + str escapes the str (markupsafe), with or without autoescape.
      return value::markup((a.is_markup() ? a.as_string() : html_escape(a.as_string())) +
                           (b.is_markup() ? b.as_string() : html_escape(b.as_string())));
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_generator() && !b.is_generator()) {
      check_size((a.items().size() + b.items().size()) * sizeof(value));
      std::vector<value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return value::list(std::move(items), a.is_tuple());
    }
    return bad();
  }
  if (op == "*") {
    const value* seq = integral(b) ? &a : integral(a) ? &b : nullptr;
    const value* count = integral(b) ? &b : &a;
    if (!seq || !(seq->is_string() || seq->is_list())) return bad();
    const std::int64_t n = std::max<std::int64_t>(0, int_of(*count));
    const std::size_t unit = seq->is_string() ? seq->as_string().size() : seq->items().size() * sizeof(value);
    if (unit > 0 && std::uint64_t(n) > o_.lim.max_output_bytes / unit) check_size(o_.lim.max_output_bytes + 1);
    if (seq->is_string()) {
      std::string s;
      for (std::int64_t i = 0; i < n; ++i) s += seq->as_string();
      return value(std::move(s));
    }
    std::vector<value> items;
    for (std::int64_t i = 0; i < n; ++i) items.insert(items.end(), seq->items().begin(), seq->items().end());
    return value::list(std::move(items), seq->is_tuple());
  }
  if (op == "%" && a.is_string()) return printf_format(*this, a.as_string(), b);
  return bad();
}

value evaluator::eval_compare(const expr& e, const frame_ptr& f) {
  value left = eval(*e.kids[0], f);
  for (std::size_t i = 0; i < e.ops.size(); ++i) {
    value right = eval(*e.kids[i + 1], f);
    line_ = e.line;
    const std::string& op = e.ops[i];
    bool r = false;
    if (op == "==") r = equal(left, right);
    else if (op == "!=") r = !equal(left, right);
    else if (op == "<") r = less_than(*this, left, right);
    else if (op == ">") r = less_than(*this, right, left);
    else if (op == "<=") r = !less_than(*this, right, left);
    else if (op == ">=") r = !less_than(*this, left, right);
    else {  // in, not in
      bool found = false;
      if (right.is_string()) {
        if (!left.is_string()) fail("'in <string>' needs a string on the left, not a " + std::string(left.type_name()));
        found = right.as_string().find(left.as_string()) != std::string::npos;
      } else if (right.is_dict()) {
        std::string encoded;
        found = dict_key(left, encoded) && right.find(encoded) != nullptr;
      } else if (right.is_list()) {
        for (const auto& x : right.items())
          if (equal(left, x)) {
            found = true;
            break;
          }
      } else if (!right.is_undefined()) {
        fail("a " + std::string(right.type_name()) + " cannot be searched with 'in'");
      }
      r = op == "in" ? found : !found;
    }
    if (!r) return value(false);
    left = std::move(right);
  }
  return value(true);
}

result<std::string> render(const program& p, const std::vector<std::pair<std::string, value>>& variables,
                           const render_options& options) {
  evaluator ev(p, options);
  try {
    return ev.run(variables);
  } catch (const render_failure& f) {
    const std::string at = p.origin + " line " + std::to_string(f.line);
    if (f.raised) return invalid(at + " raised an error: " + f.message);
    return invalid(at + ": " + f.message);
  } catch (const std::bad_alloc&) {
    return invalid(p.origin + ": the template ran out of memory");
  }
}

}  // namespace mpakt::models::jinja
