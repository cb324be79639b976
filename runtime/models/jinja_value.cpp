#include "runtime/models/jinja_value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace mpakt::models::jinja {

namespace {
const std::vector<value> no_items;
const std::vector<std::pair<std::string, value>> no_entries;
}  // namespace

value value::none() {
  value v;
  v.kind_ = kind::none;
  return v;
}

value value::undefined(std::string hint) {
  value v;
  v.s_ = std::move(hint);
  return v;
}

value::value(bool b) : kind_(kind::boolean), b_(b) {}
value::value(std::int64_t i) : kind_(kind::integer), i_(i) {}
value::value(double d) : kind_(kind::number), d_(d) {}
value::value(std::string s) : kind_(kind::string), s_(std::move(s)) {}

value value::markup(std::string s) {
  value v(std::move(s));
  v.markup_ = true;
  return v;
}

value value::list(std::vector<value> items, bool tuple) {
  value v;
  v.kind_ = kind::list;
  v.l_ = std::make_shared<list_data>(list_data{std::move(items), tuple});
  return v;
}

value value::dict(std::vector<std::pair<std::string, value>> entries) {
  value v;
  v.kind_ = kind::dict;
  v.m_ = std::make_shared<dict_data>(dict_data{std::move(entries), false});
  return v;
}

value value::namespace_of(std::vector<std::pair<std::string, value>> entries) {
  value v = dict(std::move(entries));
  v.m_->is_namespace = true;
  return v;
}

value value::callable(std::string name, std::function<value(evaluator&, call_args&)> fn) {
  value v;
  v.kind_ = kind::callable;
  v.f_ = std::make_shared<const function>(function{std::move(name), std::move(fn)});
  return v;
}

value value::from_json(const rapidjson::Value& j) {
  if (j.IsNull()) return none();
  if (j.IsBool()) return value(j.GetBool());
  if (j.IsInt64()) return value(std::int64_t(j.GetInt64()));
  if (j.IsNumber()) return value(j.GetDouble());
  if (j.IsString()) return value(std::string(j.GetString(), j.GetStringLength()));
  if (j.IsArray()) {
    std::vector<value> items;
    items.reserve(j.Size());
    for (const auto& e : j.GetArray()) items.push_back(from_json(e));
    return list(std::move(items));
  }
  std::vector<std::pair<std::string, value>> entries;
  for (auto it = j.MemberBegin(); it != j.MemberEnd(); ++it) {
    std::string key(it->name.GetString(), it->name.GetStringLength());
    // A key given twice keeps its first place and its last value, as json.loads does.
    auto found = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first == key; });
    if (found != entries.end())
      found->second = from_json(it->value);
    else
      entries.emplace_back(std::move(key), from_json(it->value));
  }
  return dict(std::move(entries));
}

value value::generator(std::vector<value> items) {
  value v = list(std::move(items));
  v.l_->generator = true;
  return v;
}

bool value::is_tuple() const { return kind_ == kind::list && l_->tuple; }
bool value::is_generator() const { return kind_ == kind::list && l_->generator; }

bool dict_key(const value& key, std::string& out) {
  switch (key.type()) {
    case value::kind::string: out = key.as_string(); return true;
    case value::kind::none: out = std::string("\0none", 5); return true;
    case value::kind::boolean:
    case value::kind::integer: out = std::string(1, '\0') + "i" + std::to_string(key.is_bool() ? std::int64_t(key.as_bool()) : key.as_int()); return true;
    case value::kind::number: {
      const double d = key.as_double();
      if (d == std::floor(d) && std::fabs(d) < 9e18) out = std::string(1, '\0') + "i" + std::to_string(std::int64_t(d));
      else out = std::string(1, '\0') + "f" + float_repr(d);
      return true;
    }
    default: return false;
  }
}

value key_value(const std::string& key) {
  if (key.empty() || key[0] != '\0') return value(key);
  if (key.compare(1, 4, "none") == 0) return value::none();
  if (key.size() > 2 && key[1] == 'i') return value(std::int64_t(std::strtoll(key.c_str() + 2, nullptr, 10)));
  if (key.size() > 2) return value(std::strtod(key.c_str() + 2, nullptr));
  return value(key);
}
bool value::is_namespace() const { return kind_ == kind::dict && m_->is_namespace; }
const std::vector<value>& value::items() const { return kind_ == kind::list ? l_->items : no_items; }
const std::vector<std::pair<std::string, value>>& value::entries() const {
  return kind_ == kind::dict ? m_->entries : no_entries;
}

const value* value::find(std::string_view key) const {
  if (kind_ != kind::dict) return nullptr;
  for (const auto& [k, v] : m_->entries)
    if (k == key) return &v;
  return nullptr;
}

void value::set_attribute(const std::string& key, value v) const {
  for (auto& [k, old] : m_->entries)
    if (k == key) {
      old = std::move(v);
      return;
    }
  m_->entries.emplace_back(key, std::move(v));
}

void value::clear_attributes() const {
  if (kind_ == kind::dict) m_->entries.clear();
}

bool value::truthy() const {
  switch (kind_) {
    case kind::undefined: case kind::none: return false;
    case kind::boolean: return b_;
    case kind::integer: return i_ != 0;
    case kind::number: return d_ != 0;
    case kind::string: return !s_.empty();
    case kind::list: return l_->generator || !l_->items.empty();
    case kind::dict: return m_->is_namespace || !m_->entries.empty();
    case kind::callable: return true;
  }
  return false;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest digits that round-trip, laid out as Python's repr does: positional for
  // exponents -4..15, else d.ddde±XX.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const std::size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(std::size_t(-exp - 1), '0') + digits;
    } else if (std::size_t(exp) + 1 >= digits.size()) {
      out += digits + std::string(std::size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, std::size_t(exp) + 1) + "." + digits.substr(std::size_t(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + ebuf;
}

namespace {

bool printable(std::uint32_t cp) {
  // Python's str.isprintable, approximated: controls, separators other than space, surrogates
  // and a few format characters are escaped by repr.
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp >= 0x80 && cp < 0xA0) return false;
  if (cp == 0xAD) return false;
  if (cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF || (cp >= 0x200B && cp <= 0x200F)) return false;
  if (cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x202F || cp == 0x205F || cp == 0x3000)
    return false;
  if (cp >= 0xD800 && cp <= 0xDFFF) return false;
  return true;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 1;
    const std::uint32_t cp = utf8_decode(s, i, len);
    const char c = s[i];
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (cp == 0xFFFFFFFF) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(static_cast<unsigned char>(c)));
      out += buf;
    } else if (!printable(cp)) {
      char buf[16];
      if (cp < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(cp));
      else if (cp < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(cp));
      out += buf;
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  out += quote;
  return out;
}

}  // namespace

std::string value::str() const {
  switch (kind_) {
    case kind::undefined: return "";
    case kind::string: return s_;
    default: return repr();
  }
}

std::string value::repr() const {
  switch (kind_) {
    case kind::undefined: return "";
    case kind::none: return "None";
    case kind::boolean: return b_ ? "True" : "False";
    case kind::integer: return std::to_string(i_);
    case kind::number: return float_repr(d_);
    case kind::string: return string_repr(s_);
    case kind::list: {
      std::string out = l_->tuple ? "(" : "[";
      for (std::size_t i = 0; i < l_->items.size(); ++i) {
        if (i) out += ", ";
        out += l_->items[i].repr();
      }
      if (l_->tuple && l_->items.size() == 1) out += ",";
      return out + (l_->tuple ? ")" : "]");
    }
    case kind::dict: {
      std::string out = m_->is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : m_->entries) {
        if (!first) out += ", ";
        first = false;
        out += key_value(k).repr() + ": " + v.repr();
      }
      return out + (m_->is_namespace ? "}>" : "}");
    }
    case kind::callable: return "<function " + f_->name + ">";
  }
  return "";
}

std::string_view value::type_name() const {
  switch (kind_) {
    case kind::undefined: return "undefined";
    case kind::none: return "none";
    case kind::boolean: return "boolean";
    case kind::integer: return "integer";
    case kind::number: return "float";
    case kind::string: return "string";
    case kind::list: return l_->generator ? "generator" : l_->tuple ? "tuple" : "list";
    case kind::dict: return m_->is_namespace ? "namespace" : "dict";
    case kind::callable: return "callable";
  }
  return "value";
}

bool equal(const value& a, const value& b) {
  using k = value::kind;
  const bool an = a.is_number() || a.is_bool(), bn = b.is_number() || b.is_bool();
  if (an && bn) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    const std::int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    const std::int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x == y;
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case k::undefined: case k::none: return true;
    case k::string: return a.as_string() == b.as_string();
    case k::list: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equal(x[i], y[i])) return false;
      return true;
    }
    case k::dict: {
      if (a.is_namespace() || b.is_namespace()) return &a.entries() == &b.entries();
      if (a.entries().size() != b.entries().size()) return false;
      for (const auto& [key, v] : a.entries()) {
        const value* other = b.find(key);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    }
    case k::callable: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

namespace {

void json_string(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 1;
    const std::uint32_t cp = utf8_decode(s, i, len);
    const char c = s[i];
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        char buf[16];
        if (cp < 0x20) {
          std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
          out += buf;
        } else if (ensure_ascii && cp >= 0x80) {
          if (cp == 0xFFFFFFFF) {
            std::snprintf(buf, sizeof buf, "\\u%04x", 0xFFFDu);
          } else if (cp >= 0x10000) {
            const std::uint32_t v = cp - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", unsigned(0xD800 + (v >> 10)), unsigned(0xDC00 + (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
          }
          out += buf;
        } else {
          out.append(s.substr(i, len));
        }
      }
    }
    i += len;
  }
  out += '"';
}

void newline_indent(const json_options& o, int depth, std::string& out) {
  out += '\n';
  for (int i = 0; i < depth; ++i) out += o.indent;
}

}  // namespace

bool to_json(const value& v, const json_options& o, std::string& out, std::string& why, int depth) {
  if (depth > 200) {
    why = "tojson: the value is nested too deeply";
    return false;
  }
  const std::string item_sep = o.has_separators ? o.item_separator : o.has_indent ? "," : ", ";
  const std::string key_sep = o.has_separators ? o.key_separator : ": ";
  switch (v.type()) {
    case value::kind::none: out += "null"; return true;
    case value::kind::boolean: out += v.as_bool() ? "true" : "false"; return true;
    case value::kind::integer: out += std::to_string(v.as_int()); return true;
    case value::kind::number: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : float_repr(d);
      return true;
    }
    case value::kind::string: json_string(v.as_string(), o.ensure_ascii, out); return true;
    case value::kind::list: {
      if (v.is_generator()) break;
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return true;
      }
      out += '[';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        if (o.has_indent) newline_indent(o, depth + 1, out);
        if (!to_json(items[i], o, out, why, depth + 1)) return false;
      }
      if (o.has_indent) newline_indent(o, depth, out);
      out += ']';
      return true;
    }
    case value::kind::dict: {
      if (v.is_namespace()) break;
      std::vector<const std::pair<std::string, value>*> entries;
      for (const auto& e : v.entries()) entries.push_back(&e);
      if (entries.empty()) {
        out += "{}";
        return true;
      }
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (std::size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        if (o.has_indent) newline_indent(o, depth + 1, out);
        const value key = key_value(entries[i]->first);
        if (key.is_string()) {
          json_string(key.as_string(), o.ensure_ascii, out);
        } else {
          out += '"';
          if (!to_json(key, o, out, why, depth + 1)) return false;
          out += '"';
        }
        out += key_sep;
        if (!to_json(entries[i]->second, o, out, why, depth + 1)) return false;
      }
      if (o.has_indent) newline_indent(o, depth, out);
      out += '}';
      return true;
    }
    default: break;
  }
  why = "tojson: a value of type " + std::string(v.type_name()) + " is not JSON serializable";
  return false;
}

std::size_t utf8_length(std::string_view s) {
  std::size_t n = 0;
  for (const char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

std::uint32_t utf8_decode(std::string_view s, std::size_t i, std::size_t& len) {
  const auto b = static_cast<unsigned char>(s[i]);
  len = 1;
  if (b < 0x80) return b;
  const std::size_t n = b >= 0xF0 && b < 0xF5 ? 4 : b >= 0xE0 && b < 0xF0 ? 3 : b >= 0xC2 && b < 0xE0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) return 0xFFFFFFFF;
  std::uint32_t cp = b & (0xFF >> (n + 1));
  for (std::size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0xFFFFFFFF;
    cp = (cp << 6) | (c & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0xFFFFFFFF;
  len = n;
  return cp;
}

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 1;
    (void)utf8_decode(s, i, len);
    out.emplace_back(s.substr(i, len));
    i += len;
  }
  return out;
}

bool python_space(std::uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

void utf8_append(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace mpakt::models::jinja
