// Filters, tests, methods and globals of runtime/models/jinja.hpp, as Jinja 3.1 and
// transformers define them. Adding a filter or test: a line in the table of names at the top
// (the parser refuses names not listed) and a branch in filter() or test().
//
// Case mapping (upper, lower, title, capitalize) covers ASCII letters only; other characters
// are kept as they are.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "runtime/models/jinja_eval.hpp"

namespace mpakt::models::jinja {

namespace {

const std::set<std::string, std::less<>> filter_names = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float", "format",
    "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
    "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum", "title",
    "tojson", "trim", "unique", "upper", "wordcount"};

const std::set<std::string, std::less<>> test_names = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false", "float", "ge",
    "gt", "greaterthan", "in", "integer", "iterable", "le", "lower", "lt", "lessthan", "mapping", "ne", "none",
    "number", "odd", "sameas", "sequence", "string", "true", "undefined", "upper", "==", "!=", "<", "<=", ">", ">="};

bool numeric(const value& v) { return v.is_number() || v.is_bool(); }
std::int64_t int_of(const value& v) { return v.is_bool() ? std::int64_t(v.as_bool()) : v.as_int(); }

/// Argument `index` / `name` of a call, or `fallback`.
value arg(const call_args& a, std::size_t index, std::string_view name, value fallback = value::undefined()) {
  for (const auto& [k, v] : a.named)
    if (k == name) return v;
  if (index < a.positional.size()) return a.positional[index];
  return fallback;
}

void check_args(evaluator& ev, const call_args& a, std::size_t max_positional, std::initializer_list<std::string_view> names,
                std::string_view what) {
  if (a.positional.size() > max_positional) ev.fail(std::string(what) + " takes at most " + std::to_string(max_positional) + " positional arguments");
  for (const auto& [k, v] : a.named) {
    (void)v;
    if (std::find(names.begin(), names.end(), k) == names.end())
      ev.fail(std::string(what) + " got an unexpected keyword argument '" + k + "'");
  }
}

std::string need_string(evaluator& ev, const value& v, std::string_view what) {
  if (v.is_string()) return v.as_string();
  if (v.is_undefined()) return "";
  ev.fail(std::string(what) + " needs a string, not a " + std::string(v.type_name()));
}

std::int64_t need_int(evaluator& ev, const value& v, std::string_view what) {
  if (v.is_int() || v.is_bool()) return int_of(v);
  ev.fail(std::string(what) + " needs an integer, not a " + std::string(v.type_name()));
}

char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? char(c - 32) : c; }
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? char(c + 32) : c; }
bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
std::string upper(std::string s) {
  for (char& c : s) c = ascii_upper(c);
  return s;
}
std::string lower(std::string s) {
  for (char& c : s) c = ascii_lower(c);
  return s;
}

/// Python's str.strip/lstrip/rstrip: whitespace, or any of the code points in `chars`.
std::string strip(const std::string& s, const value& chars, bool left, bool right) {
  std::vector<std::uint32_t> set;
  const bool whitespace = !chars.is_string();
  if (!whitespace)
    for (std::size_t i = 0; i < chars.as_string().size();) {
      std::size_t len = 1;
      set.push_back(utf8_decode(chars.as_string(), i, len));
      i += len;
    }
  auto strippable = [&](std::uint32_t cp) {
    return whitespace ? python_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  std::size_t begin = 0, end = s.size();
  if (left)
    while (begin < end) {
      std::size_t len = 1;
      if (!strippable(utf8_decode(s, begin, len))) break;
      begin += len;
    }
  if (right)
    while (end > begin) {
      std::size_t start = end - 1;
      while (start > begin && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      std::size_t len = 1;
      const std::uint32_t cp = utf8_decode(s, start, len);
      if (start + len != end || !strippable(cp)) break;
      end = start;
    }
  return s.substr(begin, end - begin);
}

/// Python's str.split(sep, maxsplit) (sep none: runs of whitespace).
std::vector<value> split(evaluator& ev, const std::string& s, const value& sep, std::int64_t maxsplit) {
  std::vector<value> out;
  if (!sep.is_string()) {
    std::size_t i = 0;
    while (i < s.size()) {
      std::size_t len = 1;
      while (i < s.size() && python_space(utf8_decode(s, i, len))) i += len;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && std::int64_t(out.size()) == maxsplit) {
        out.emplace_back(strip(s.substr(i), value(), false, true));
        return out;
      }
      std::size_t j = i;
      while (j < s.size() && !python_space(utf8_decode(s, j, len))) j += len;
      out.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  const std::string& d = sep.as_string();
  if (d.empty()) ev.fail("split: empty separator");
  std::size_t at = 0;
  for (;;) {
    if (maxsplit >= 0 && std::int64_t(out.size()) == maxsplit) break;
    const std::size_t found = s.find(d, at);
    if (found == std::string::npos) break;
    out.emplace_back(s.substr(at, found - at));
    at = found + d.size();
  }
  out.emplace_back(s.substr(at));
  return out;
}

std::string replace(evaluator& ev, const std::string& s, const std::string& from, const std::string& to, std::int64_t count) {
  std::string out;
  if (from.empty()) {
    std::int64_t done = 0;
    for (const auto& c : utf8_chars(s)) {
      if (count < 0 || done < count) out += to, ++done;
      out += c;
      ev.check_size(out.size());
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  std::size_t at = 0;
  std::int64_t done = 0;
  for (;;) {
    const std::size_t found = count >= 0 && done >= count ? std::string::npos : s.find(from, at);
    if (found == std::string::npos) break;
    out.append(s, at, found - at).append(to);
    ev.check_size(out.size());
    at = found + from.size();
    ++done;
  }
  out.append(s, at, std::string::npos);
  return out;
}

/// Python's str.splitlines() (without keepends).
std::vector<std::string> splitlines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0, i = 0;
  while (i < s.size()) {
    std::size_t len = 1;
    const std::uint32_t cp = utf8_decode(s, i, len);
    const bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) ||
                     cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!brk) {
      i += len;
      continue;
    }
    out.push_back(s.substr(start, i - start));
    i += len;
    if (cp == '\r' && i < s.size() && s[i] == '\n') ++i;
    start = i;
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

/// Python's str.format for `{}`, `{0}`, `{name}` fields, `!r`/`!s`, no format specs.
std::string str_format(evaluator& ev, const std::string& fmt, const call_args& a) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const std::size_t close = fmt.find('}', i);
    if (close == std::string::npos) ev.fail("str.format: a '{' is not closed");
    std::string field = fmt.substr(i + 1, close - i - 1);
    char conversion = 's';
    if (const auto bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 's';
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos) ev.fail("str.format: format specifications are not supported");
    value v;
    if (field.empty()) {
      if (auto_index >= a.positional.size()) ev.fail("str.format: not enough arguments");
      v = a.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const std::size_t k = std::stoul(field.substr(0, 6));
      if (k >= a.positional.size()) ev.fail("str.format: not enough arguments");
      v = a.positional[k];
    } else {
      v = arg(a, std::size_t(-1), field);
      if (v.is_undefined()) ev.fail("str.format: no argument named '" + field + "'");
    }
    out += conversion == 'r' ? v.repr() : v.str();
    ev.check_size(out.size());
    i = close;
  }
  return out;
}

/// `obj.a.b` as Jinja's attribute= arguments read it (dotted, integer parts index).
value path(evaluator& ev, const value& obj, const value& attribute) {
  if (numeric(attribute)) return ev.item(obj, attribute);
  const std::string spec = need_string(ev, attribute, "attribute");
  value cur = obj;
  std::size_t at = 0;
  for (;;) {
    const std::size_t dot = spec.find('.', at);
    const std::string part = spec.substr(at, dot == std::string::npos ? std::string::npos : dot - at);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? ev.item(cur, value(std::int64_t(std::stoll(part.substr(0, 18))))) : ev.item(cur, value(part));
    if (dot == std::string::npos) return cur;
    at = dot + 1;
  }
}

value sort_key(const value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return value(lower(v.as_string()));
  return v;
}

/// select/reject/selectattr/rejectattr: args from `first` on are the test name and its args.
value select(evaluator& ev, const value& input, const call_args& a, bool keep, bool by_attribute) {
  std::size_t first = 0;
  value attribute;
  if (by_attribute) {
    if (a.positional.empty()) ev.fail("selectattr and rejectattr need an attribute name");
    attribute = a.positional[0];
    first = 1;
  }
  std::string test_name;
  call_args test_args;
  if (a.positional.size() > first) {
    test_name = need_string(ev, a.positional[first], "the test name");
    if (!test_names.count(test_name)) ev.fail("the test '" + test_name + "' is not supported");
    test_args.positional.assign(a.positional.begin() + std::ptrdiff_t(first) + 1, a.positional.end());
  }
  std::vector<value> out;
  if (!input.truthy()) return value::generator({});  // Jinja yields nothing for a falsy input
  for (const auto& item : iterate(ev, input)) {
    ev.step();
    const value subject = by_attribute ? path(ev, item, attribute) : item;
    call_args copy = test_args;
    const bool pass = test_name.empty() ? subject.truthy() : ev.test(test_name, subject, copy);
    if (pass == keep) out.push_back(item);
  }
  return value::generator(std::move(out));
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

value round_value(evaluator& ev, const value& v, std::int64_t precision, const std::string& method) {
  if (!numeric(v)) ev.fail("round needs a number, not a " + std::string(v.type_name()));
  if (method != "common" && method != "ceil" && method != "floor") ev.fail("round: method must be common, ceil or floor");
  const double x = v.as_double();
  if (method == "common") {
    if (!v.is_float()) return value(int_of(v));  // Python's round() keeps an int an int
    if (precision < -300 || precision > 300) ev.fail("round: precision out of range");
    // printf rounds the exact binary value half-to-even, as Python's round(x, n) does.
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", int(std::max<std::int64_t>(precision, 0)), x);
    if (precision >= 0) return value(std::strtod(buf, nullptr));
    const double scale = std::pow(10.0, double(-precision));
    return value(std::nearbyint(x / scale) * scale);
  }
  const double scale = std::pow(10.0, double(precision));
  return value((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
}

value to_int(const value& v, const value& fallback, std::int64_t base) {
  if (v.is_int()) return v;
  if (v.is_bool()) return value(int_of(v));
  if (v.is_float()) {
    if (!std::isfinite(v.as_double()) || std::fabs(v.as_double()) > 9.2e18) return fallback;
    return value(std::int64_t(v.as_double()));
  }
  if (v.is_string()) {
    std::string s = strip(v.as_string(), value(), true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (s.empty()) return fallback;
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, int(base));
    if (end && *end == '\0' && errno == 0) return value(std::int64_t(i));
    const double d = std::strtod(s.c_str(), &end);
    if (base == 10 && end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) return value(std::int64_t(d));
  }
  return fallback;
}

value to_float(const value& v, const value& fallback) {
  if (numeric(v)) return value(v.as_double());
  if (v.is_string()) {
    const std::string s = strip(v.as_string(), value(), true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return value(d);
  }
  return fallback;
}

value tojson(evaluator& ev, const value& v, const call_args& a) {
  check_args(ev, a, 4, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
  json_options o;
  o.ensure_ascii = arg(a, 0, "ensure_ascii", value(false)).truthy();
  const value indent = arg(a, 1, "indent", value::none());
  if (indent.is_int() || indent.is_bool()) {
    o.has_indent = true;
    o.indent = std::string(std::size_t(std::clamp<std::int64_t>(int_of(indent), 0, 64)), ' ');
  } else if (indent.is_string()) {
    o.has_indent = true;
    o.indent = indent.as_string();
  } else if (!indent.is_none() && !indent.is_undefined()) {
    ev.fail("tojson: indent must be an integer or a string");
  }
  const value separators = arg(a, 2, "separators", value::none());
  if (separators.is_list()) {
    if (separators.items().size() != 2 || !separators.items()[0].is_string() || !separators.items()[1].is_string())
      ev.fail("tojson: separators must be two strings");
    o.has_separators = true;
    o.item_separator = separators.items()[0].as_string();
    o.key_separator = separators.items()[1].as_string();
  }
  o.sort_keys = arg(a, 3, "sort_keys", value(false)).truthy();
  std::string out, why;
  if (!to_json(v, o, out, why)) ev.fail(why);
  ev.check_size(out.size());
  return value(std::move(out));
}

std::string title_filter(const std::string& s) {
  // Jinja's title: words start after runs of -, whitespace, (, {, [ or <.
  std::string out;
  bool start = true;
  for (const char c : s) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || c == ' ' || (c >= '\t' && c <= '\r');
    if (sep) {
      out += c;
      start = true;
    } else {
      out += start ? ascii_upper(c) : ascii_lower(c);
      start = false;
    }
  }
  return out;
}

std::string title_method(const std::string& s) {
  // Python's str.title: a letter after a non-letter starts a word.
  std::string out;
  bool prev_letter = false;
  for (const char c : s) {
    const bool letter = ascii_alpha(c) || (static_cast<unsigned char>(c) >= 0x80);
    out += letter ? (prev_letter ? ascii_lower(c) : ascii_upper(c)) : c;
    prev_letter = letter;
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = ascii_upper(out[0]);
  return out;
}

std::string indent(const std::string& input, const value& width, bool first, bool blank) {
  const std::string pad = width.is_string() ? width.as_string() : std::string(std::size_t(std::clamp<std::int64_t>(width.is_int() ? width.as_int() : 4, 0, 256)), ' ');
  std::vector<std::string> lines = splitlines(input + "\n");
  std::string out;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" + pad : "") + lines[i];
  } else if (!lines.empty()) {
    out = lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i) out += "\n" + (lines[i].empty() ? "" : pad + lines[i]);
  }
  return first ? pad + out : out;
}

bool is_iterable(const value& v) { return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace()) || v.is_undefined(); }

value bound(std::string name, value self, value (*fn)(evaluator&, const value&, call_args&)) {
  return value::callable(std::move(name), [self = std::move(self), fn](evaluator& ev, call_args& a) { return fn(ev, self, a); });
}

[[noreturn]] value refuse_mutation(evaluator& ev, const value& self, call_args&) {
  (void)self;
  ev.fail("the template calls a method that changes a list or dict, which transformers' sandbox forbids");
}

}  // namespace

bool known_filter(std::string_view name) { return filter_names.count(name) > 0; }
bool known_test(std::string_view name) { return test_names.count(name) > 0; }

std::vector<value> iterate(evaluator& ev, const value& v) {
  if (v.is_list()) return v.items();
  if (v.is_undefined()) return {};
  if (v.is_dict() && !v.is_namespace()) {
    std::vector<value> keys;
    for (const auto& e : v.entries()) keys.push_back(key_value(e.first));
    return keys;
  }
  if (v.is_string()) {
    std::vector<value> chars;
    for (auto& c : utf8_chars(v.as_string())) chars.emplace_back(std::move(c));
    return chars;
  }
  ev.fail("a " + std::string(v.type_name()) + " is not iterable");
}

bool less_than(evaluator& ev, const value& a, const value& b) {
  if (numeric(a) && numeric(b)) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return int_of(a) < int_of(b);
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto &x = a.items(), &y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal(x[i], y[i])) continue;
      return less_than(ev, x[i], y[i]);
    }
    return x.size() < y.size();
  }
  ev.fail("a " + std::string(a.type_name()) + " and a " + std::string(b.type_name()) + " cannot be ordered");
}

value method_of(evaluator& ev, const value& self, const std::string& name) {
  (void)ev;
  if (self.is_string()) {
    static const std::set<std::string, std::less<>> names = {
        "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower", "title",
        "capitalize", "replace", "count", "find", "rfind", "index", "join", "format", "splitlines", "isdigit",
        "isalpha", "isalnum", "isspace", "islower", "isupper", "removeprefix", "removesuffix"};
    if (!names.count(name)) return value::undefined(name);
    return value::callable("str." + name, [self, name](evaluator& ev, call_args& a) -> value {
      const std::string& s = self.as_string();
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const value chars = arg(a, 0, "chars", value::none());
        return value(strip(s, chars, name != "rstrip", name != "lstrip"));
      }
      if (name == "split" || name == "rsplit") {
        const value sep = arg(a, 0, "sep", value::none());
        const std::int64_t max = need_int(ev, arg(a, 1, "maxsplit", value(std::int64_t(-1))), "split's maxsplit");
        if (name == "rsplit" && max >= 0) {
          if (!sep.is_string()) ev.fail("rsplit with maxsplit needs a separator");
          std::vector<value> parts = split(ev, s, sep, -1);
          if (std::int64_t(parts.size()) <= max + 1) return value::list(std::move(parts));
          const std::size_t head = parts.size() - std::size_t(max);
          std::string joined;
          for (std::size_t i = 0; i < head; ++i) joined += (i ? sep.as_string() : "") + parts[i].as_string();
          std::vector<value> out{value(joined)};
          out.insert(out.end(), parts.begin() + std::ptrdiff_t(head), parts.end());
          return value::list(std::move(out));
        }
        return value::list(split(ev, s, sep, max));
      }
      if (name == "startswith" || name == "endswith") {
        const value what = arg(a, 0, "prefix");
        std::vector<value> options = what.is_list() ? what.items() : std::vector<value>{what};
        for (const auto& o : options) {
          if (!o.is_string()) ev.fail("str." + name + " needs a string or a tuple of strings");
          const std::string& p = o.as_string();
          if (p.size() > s.size()) continue;
          if (name == "startswith" ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0)
            return value(true);
        }
        return value(false);
      }
      if (name == "upper") return value(upper(s));
      if (name == "lower") return value(lower(s));
      if (name == "title") return value(title_method(s));
      if (name == "capitalize") return value(capitalize(s));
      if (name == "replace") {
        return value(replace(ev, s, need_string(ev, arg(a, 0, "old"), "str.replace"), need_string(ev, arg(a, 1, "new"), "str.replace"),
                             need_int(ev, arg(a, 2, "count", value(std::int64_t(-1))), "str.replace's count")));
      }
      if (name == "count") {
        const std::string sub = need_string(ev, arg(a, 0, "sub"), "str.count");
        if (sub.empty()) return value(std::int64_t(utf8_length(s) + 1));
        std::int64_t n = 0;
        for (std::size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
        return value(n);
      }
      if (name == "find" || name == "rfind" || name == "index") {
        const std::string sub = need_string(ev, arg(a, 0, "sub"), "str." + name);
        const std::size_t at = name == "rfind" ? s.rfind(sub) : s.find(sub);
        if (at == std::string::npos) {
          if (name == "index") ev.fail("str.index: substring not found");
          return value(std::int64_t(-1));
        }
        return value(std::int64_t(utf8_length(std::string_view(s).substr(0, at))));
      }
      if (name == "join") {
        std::string out;
        bool first = true;
        for (const auto& item : iterate(ev, arg(a, 0, "iterable"))) {
          if (!item.is_string()) ev.fail("str.join needs strings, found a " + std::string(item.type_name()));
          if (!first) out += s;
          first = false;
          out += item.as_string();
          ev.check_size(out.size());
        }
        return value(std::move(out));
      }
      if (name == "format") return value(str_format(ev, s, a));
      if (name == "splitlines") {
        std::vector<value> out;
        for (auto& line : splitlines(s)) out.emplace_back(std::move(line));
        return value::list(std::move(out));
      }
      if (name == "removeprefix" || name == "removesuffix") {
        const std::string p = need_string(ev, arg(a, 0, "affix"), "str." + name);
        if (p.size() <= s.size()) {
          if (name == "removeprefix" && s.compare(0, p.size(), p) == 0) return value(s.substr(p.size()));
          if (name == "removesuffix" && s.compare(s.size() - p.size(), p.size(), p) == 0) return value(s.substr(0, s.size() - p.size()));
        }
        return value(s);
      }
      // is… predicates, ASCII
      if (s.empty()) return value(false);
      bool all = true, cased = false;
      for (const char c : s) {
        const bool up = c >= 'A' && c <= 'Z', lo = c >= 'a' && c <= 'z', digit = c >= '0' && c <= '9';
        if (name == "isdigit") all = all && digit;
        if (name == "isalpha") all = all && (up || lo);
        if (name == "isalnum") all = all && (up || lo || digit);
        if (name == "isspace") all = all && (c == ' ' || (c >= '\t' && c <= '\r'));
        if (name == "islower") all = all && !up, cased = cased || lo;
        if (name == "isupper") all = all && !lo, cased = cased || up;
      }
      if (name == "islower" || name == "isupper") return value(all && cased);
      return value(all);
    });
  }
  if (self.is_dict() && !self.is_namespace()) {
    if (name == "get")
      return bound("dict.get", self, [](evaluator&, const value& d, call_args& a) -> value {
        std::string key;
        const value* v = dict_key(arg(a, 0, "key"), key) ? d.find(key) : nullptr;
        return v ? *v : arg(a, 1, "default", value::none());
      });
    if (name == "items")
      return bound("dict.items", self, [](evaluator&, const value& d, call_args&) -> value {
        std::vector<value> out;
        for (const auto& [k, v] : d.entries()) out.push_back(value::list({key_value(k), v}, true));
        return value::list(std::move(out));
      });
    if (name == "keys")
      return bound("dict.keys", self, [](evaluator&, const value& d, call_args&) -> value {
        std::vector<value> out;
        for (const auto& e : d.entries()) out.push_back(key_value(e.first));
        return value::list(std::move(out));
      });
    if (name == "values")
      return bound("dict.values", self, [](evaluator&, const value& d, call_args&) -> value {
        std::vector<value> out;
        for (const auto& e : d.entries()) out.push_back(e.second);
        return value::list(std::move(out));
      });
    if (name == "copy") return bound("dict.copy", self, [](evaluator&, const value& d, call_args&) -> value { return d; });
    if (name == "pop" || name == "popitem" || name == "update" || name == "setdefault" || name == "clear")
      return bound("dict." + name, self, refuse_mutation);
  }
  if (self.is_list()) {
    if (name == "index" || name == "count")
      return value::callable("list." + name, [self, name](evaluator& ev, call_args& a) -> value {
        const value x = arg(a, 0, "value");
        std::int64_t n = 0;
        for (std::size_t i = 0; i < self.items().size(); ++i) {
          if (!equal(self.items()[i], x)) continue;
          if (name == "index") return value(std::int64_t(i));
          ++n;
        }
        if (name == "index") ev.fail("list.index: the value is not in the list");
        return value(n);
      });
    if (!self.is_tuple() && (name == "append" || name == "pop" || name == "extend" || name == "insert" ||
                             name == "remove" || name == "sort" || name == "reverse" || name == "clear"))
      return bound("list." + name, self, refuse_mutation);
  }
  return value::undefined(name);
}

value evaluator::filter(const std::string& name, const value& v, call_args& a) {
  if (name == "default" || name == "d") {
    const bool boolean = arg(a, 1, "boolean", value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, 0, "default_value", value(std::string()));
    return v;
  }
  if (name == "tojson") return tojson(*this, v, a);
  if (name == "safe") return v.is_markup() ? v : value::markup(v.str());
  if (name == "string") return v.is_string() ? v : value(v.str());
  if (name == "length" || name == "count") {
    if (v.is_generator()) fail("a generator (what map, select and reject give) has no length; apply | list first");
    if (v.is_string()) return value(std::int64_t(utf8_length(v.as_string())));
    if (v.is_list()) return value(std::int64_t(v.items().size()));
    if (v.is_dict()) return value(std::int64_t(v.entries().size()));
    if (v.is_undefined()) return value(std::int64_t(0));
    fail("a " + std::string(v.type_name()) + " has no length");
  }
  if (name == "trim") return value(strip(v.str(), arg(a, 0, "chars", value::none()), true, true));
  if (name == "upper") return value(upper(v.str()));
  if (name == "lower") return value(lower(v.str()));
  if (name == "title") return value(title_filter(v.str()));
  if (name == "capitalize") return value(capitalize(v.str()));
  if (name == "e" || name == "escape") return v.is_markup() ? v : value::markup(html_escape(v.str()));
  if (name == "replace") {
    const value count = arg(a, 2, "count", value::none());
    return value(replace(*this, v.str(), arg(a, 0, "old").str(), arg(a, 1, "new").str(),
                         count.is_none() ? -1 : need_int(*this, count, "replace's count")));
  }
  if (name == "items") {
    if (v.is_undefined()) return value::list({});
    if (!v.is_dict()) fail("items needs a mapping, not a " + std::string(v.type_name()));
    std::vector<value> out;
    for (const auto& [k, x] : v.entries()) out.push_back(value::list({key_value(k), x}, true));
    return value::list(std::move(out));
  }
  if (name == "list") return value::list(iterate(*this, v));
  if (name == "last" && v.is_generator()) fail("last cannot read a generator (what map, select and reject give)");
  if (name == "first" || name == "last") {
    std::vector<value> items = iterate(*this, v);
    if (items.empty()) return value::undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> chars = utf8_chars(v.as_string());
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return value(std::move(out));
    }
    std::vector<value> items = iterate(*this, v);
    std::reverse(items.begin(), items.end());
    return value::list(std::move(items));
  }
  if (name == "join") {
    const std::string sep = arg(a, 0, "d", value(std::string())).str();
    const value attribute = arg(a, 1, "attribute", value::none());
    std::string out;
    bool first = true;
    for (const auto& item : iterate(*this, v)) {
      if (!first) out += sep;
      first = false;
      out += (attribute.is_none() ? item : path(*this, item, attribute)).str();
      check_size(out.size());
    }
    return value(std::move(out));
  }
  if (name == "map") {
    std::vector<value> out;
    if (!v.truthy()) return value::generator({});  // Jinja yields nothing for a falsy input
    const value attribute = arg(a, std::size_t(-1), "attribute");
    if (!attribute.is_undefined()) {
      const value fallback = arg(a, std::size_t(-1), "default");
      for (const auto& item : iterate(*this, v)) {
        value x = path(*this, item, attribute);
        out.push_back(x.is_undefined() && !fallback.is_undefined() ? fallback : x);
      }
      return value::generator(std::move(out));
    }
    if (a.positional.empty()) fail("map needs a filter name or attribute=");
    const std::string f = need_string(*this, a.positional[0], "map's filter name");
    if (!known_filter(f) || f == "map") fail("the filter '" + f + "' is not supported");
    call_args rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.named = a.named;
    for (const auto& item : iterate(*this, v)) {
      step();
      call_args copy = rest;
      out.push_back(filter(f, item, copy));
    }
    return value::generator(std::move(out));
  }
  if (name == "select" || name == "reject") return select(*this, v, a, name == "select", false);
  if (name == "selectattr" || name == "rejectattr") return select(*this, v, a, name == "selectattr", true);
  if (name == "attr") return attribute(v, need_string(*this, arg(a, 0, "name"), "attr"));
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    const bool case_sensitive = arg(a, name == "sort" ? 1 : 0, "case_sensitive", value(false)).truthy();
    const value attribute = arg(a, name == "sort" ? 2 : 1, "attribute", value::none());
    std::vector<value> items = iterate(*this, v);
    auto key = [&](const value& x) { return sort_key(attribute.is_none() ? x : path(*this, x, attribute), case_sensitive); };
    if (name == "unique") {
      std::vector<value> out, seen;
      for (const auto& x : items) {
        const value k = key(x);
        if (std::any_of(seen.begin(), seen.end(), [&](const value& s) { return equal(s, k); })) continue;
        seen.push_back(k);
        out.push_back(x);
      }
      return value::list(std::move(out));
    }
    if (name == "sort") {
      const bool reverse = arg(a, 0, "reverse", value(false)).truthy();
      std::stable_sort(items.begin(), items.end(), [&](const value& x, const value& y) {
        return reverse ? less_than(*this, key(y), key(x)) : less_than(*this, key(x), key(y));
      });
      return value::list(std::move(items));
    }
    if (items.empty()) return value::undefined(name);
    std::size_t best = 0;
    for (std::size_t i = 1; i < items.size(); ++i) {
      const bool better = name == "min" ? less_than(*this, key(items[i]), key(items[best]))
                                        : less_than(*this, key(items[best]), key(items[i]));
      if (better) best = i;
    }
    return items[best];
  }
  if (name == "dictsort") {
    if (!v.is_dict()) fail("dictsort needs a mapping");
    const bool case_sensitive = arg(a, 0, "case_sensitive", value(false)).truthy();
    const std::string by = arg(a, 1, "by", value("key")).str();
    const bool reverse = arg(a, 2, "reverse", value(false)).truthy();
    std::vector<value> items;
    for (const auto& [k, x] : v.entries()) items.push_back(value::list({key_value(k), x}, true));
    const std::size_t pos = by == "value" ? 1 : 0;
    std::stable_sort(items.begin(), items.end(), [&](const value& x, const value& y) {
      const value kx = sort_key(x.items()[pos], case_sensitive), ky = sort_key(y.items()[pos], case_sensitive);
      return reverse ? less_than(*this, ky, kx) : less_than(*this, kx, ky);
    });
    return value::list(std::move(items));
  }
  if (name == "sum") {
    const value attribute = arg(a, 0, "attribute", value::none());
    value total = arg(a, 1, "start", value(std::int64_t(0)));
    for (const auto& x : iterate(*this, v)) {
      const value term = attribute.is_none() ? x : path(*this, x, attribute);
      if (!numeric(term) || !numeric(total)) fail("sum needs numbers");
      if (total.is_float() || term.is_float()) total = value(total.as_double() + term.as_double());
      else {
        std::int64_t r = 0;
        if (__builtin_add_overflow(int_of(total), int_of(term), &r)) fail("integer overflow");
        total = value(r);
      }
    }
    return total;
  }
  if (name == "abs") {
    if (v.is_float()) return value(std::fabs(v.as_double()));
    if (!numeric(v)) fail("abs needs a number");
    if (int_of(v) == std::numeric_limits<std::int64_t>::min()) fail("integer overflow");
    return value(std::int64_t(std::llabs(int_of(v))));
  }
  if (name == "round")
    return round_value(*this, v, need_int(*this, arg(a, 0, "precision", value(std::int64_t(0))), "round's precision"),
                       arg(a, 1, "method", value("common")).str());
  if (name == "int") {
    const std::int64_t base = need_int(*this, arg(a, 1, "base", value(std::int64_t(10))), "int's base");
    if (base < 2 || base > 36) fail("int: base must be between 2 and 36");
    return to_int(v, arg(a, 0, "default", value(std::int64_t(0))), base);
  }
  if (name == "float") return to_float(v, arg(a, 0, "default", value(0.0)));
  if (name == "indent")
    return value(indent(v.str(), arg(a, 0, "width", value(std::int64_t(4))), arg(a, 1, "first", value(false)).truthy(),
                        arg(a, 2, "blank", value(false)).truthy()));
  if (name == "wordcount") {
    std::int64_t n = 0;
    bool in_word = false;
    for (const char c : v.str()) {
      const bool w = ascii_alpha(c) || (c >= '0' && c <= '9') || c == '_' || static_cast<unsigned char>(c) >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return value(n);
  }
  if (name == "format") {
    if (!a.named.empty()) fail("format with keyword arguments is not supported");
    const value args = a.positional.size() == 1 && !a.positional[0].is_list() ? a.positional[0] : value::list(a.positional, true);
    return printf_format(*this, v.str(), args);
  }
  fail("the filter '" + name + "' is not supported");
}

bool evaluator::test(const std::string& name, const value& v, call_args& a) {
  const value other = arg(a, 0, "value");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return numeric(v);
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.is_namespace();
  if (name == "iterable") return is_iterable(v);
  if (name == "sequence") return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "lower") return v.is_string() && lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && upper(v.as_string()) == v.as_string();
  if (name == "even" || name == "odd") {
    const std::int64_t i = need_int(*this, v, "the " + name + " test");
    return (i % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    const std::int64_t d = need_int(*this, other, "divisibleby");
    if (d == 0) fail("divisibleby zero");
    return need_int(*this, v, "divisibleby") % d == 0;
  }
  if (name == "sameas") {
    if (v.type() != other.type()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.as_bool() == other.as_bool();
    return v.is_int() ? v.as_int() == other.as_int() : false;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(v, other);
  if (name == "ne" || name == "!=") return !equal(v, other);
  if (name == "lt" || name == "lessthan" || name == "<") return less_than(*this, v, other);
  if (name == "gt" || name == "greaterthan" || name == ">") return less_than(*this, other, v);
  if (name == "le" || name == "<=") return !less_than(*this, other, v);
  if (name == "ge" || name == ">=") return !less_than(*this, v, other);
  if (name == "in") {
    if (other.is_string()) return v.is_string() && other.as_string().find(v.as_string()) != std::string::npos;
    if (other.is_dict()) return v.is_string() && other.find(v.as_string());
    for (const auto& x : iterate(*this, other))
      if (equal(v, x)) return true;
    return false;
  }
  fail("the test '" + name + "' is not supported");
}

std::vector<std::pair<std::string, value>> globals() {
  std::vector<std::pair<std::string, value>> g;
  g.emplace_back("range", value::callable("range", [](evaluator& ev, call_args& a) -> value {
    if (a.positional.empty() || a.positional.size() > 3 || !a.named.empty()) ev.fail("range takes 1 to 3 integers");
    std::int64_t start = 0, stop = 0, stride = 1;
    if (a.positional.size() == 1) stop = need_int(ev, a.positional[0], "range");
    else start = need_int(ev, a.positional[0], "range"), stop = need_int(ev, a.positional[1], "range");
    if (a.positional.size() == 3) stride = need_int(ev, a.positional[2], "range");
    if (stride == 0) ev.fail("range: the step cannot be zero");
    std::vector<value> out;
    for (std::int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride) {
      // Jinja's sandbox refuses ranges over 100,000 items.
      if (out.size() >= 100000) ev.fail("range: more than 100000 items");
      out.emplace_back(i);
    }
    return value::list(std::move(out));
  }));
  g.emplace_back("namespace", value::callable("namespace", [](evaluator& ev, call_args& a) -> value {
    std::vector<std::pair<std::string, value>> attrs;
    for (const auto& p : a.positional) {
      if (!p.is_dict()) ev.fail("namespace() takes a mapping and keyword arguments");
      for (const auto& e : p.entries()) attrs.push_back(e);
    }
    for (const auto& [k, v] : a.named) {
      if (!k.empty() && k[0] == '_') ev.fail("namespace attributes cannot start with an underscore");
      attrs.emplace_back(k, v);
    }
    value ns = value::namespace_of(std::move(attrs));
    ev.track_namespace(ns);
    return ns;
  }));
  g.emplace_back("dict", value::callable("dict", [](evaluator& ev, call_args& a) -> value {
    std::vector<std::pair<std::string, value>> entries;
    for (const auto& p : a.positional) {
      if (!p.is_dict()) ev.fail("dict() takes a mapping and keyword arguments");
      for (const auto& e : p.entries()) entries.push_back(e);
    }
    for (const auto& e : a.named) entries.push_back(e);
    return value::dict(std::move(entries));
  }));
  g.emplace_back("raise_exception", value::callable("raise_exception", [](evaluator& ev, call_args& a) -> value {
    throw render_failure{a.positional.empty() ? std::string() : a.positional[0].str(), true, ev.line()};
  }));
  g.emplace_back("strftime_now", value::callable("strftime_now", [](evaluator& ev, call_args& a) -> value {
    const std::string fmt = need_string(ev, arg(a, 0, "format"), "strftime_now");
    std::tm tm{};
    if (ev.options().now_utc_seconds) {
      const std::time_t t = std::time_t(*ev.options().now_utc_seconds);
      gmtime_r(&t, &tm);
    } else {
      const std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    char buf[512];
    const std::size_t n = fmt.empty() || fmt.size() > 200 ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    if (n == 0 && !fmt.empty()) ev.fail("strftime_now: the format gives no text or is too long");
    return value(std::string(buf, n));
  }));
  return g;
}

}  // namespace mpakt::models::jinja
