// The lexer and parser of runtime/models/jinja.hpp: template text to a program.
//
// Whitespace handling follows Jinja's lexer under transformers' settings: newlines are
// normalised to \n, one trailing newline is dropped (keep_trailing_newline=False), `{%-`
// / `-%}` (and the same on {{ }} and {# #}) strip whitespace, trim_blocks removes the newline
// after a block or comment tag, and lstrip_blocks removes spaces and tabs before a block or
// comment tag that starts its line (unless the tag opens with `{%+`).

#include <cctype>
#include <cstdint>
#include <optional>
#include <stdexcept>

#include "runtime/models/jinja_ast.hpp"

namespace mpakt::models::jinja {

bool known_filter(std::string_view name);
bool known_test(std::string_view name);

namespace {

/// Jinja 3.1's own filters and tests. One of these that mpakt does not implement is refused
/// when the template is parsed; a name Jinja does not have either is refused there too,
/// except inside a conditional, where Jinja only fails when it is reached.
bool jinja_has_filter(std::string_view name) {
  static const char* const names[] = {"batch", "center", "filesizeformat", "forceescape", "groupby", "pprint",
                                      "random", "slice", "striptags", "truncate", "urlencode", "urlize",
                                      "wordwrap", "xmlattr"};
  for (const char* n : names)
    if (name == n) return true;
  return known_filter(name);
}

bool jinja_has_test(std::string_view name) { return name == "filter" || name == "test" || known_test(name); }

/// A refusal while parsing; caught in parse() and turned into an error value.
struct parse_failure {
  int line;
  std::string message;
};

enum class tok { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct token {
  tok type;
  std::string text;  // text, name, operator, decoded string, number spelling
  int line;
};

bool is_space(std::uint32_t cp) { return python_space(cp); }

/// Python's str.rstrip() of whitespace.
std::string_view rstrip_space(std::string_view s) {
  std::size_t end = s.size();
  while (end > 0) {
    std::size_t start = end - 1;
    while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    std::size_t len = 1;
    const std::uint32_t cp = utf8_decode(s, start, len);
    if (start + len != end || !is_space(cp)) break;
    end = start;
  }
  return s.substr(0, end);
}

/// Length of the whitespace run at s[i].
std::size_t space_run(std::string_view s, std::size_t i) {
  std::size_t at = i;
  while (at < s.size()) {
    std::size_t len = 1;
    const std::uint32_t cp = utf8_decode(s, at, len);
    if (!is_space(cp)) break;
    at += len;
  }
  return at - i;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// Decodes the body of a string literal with Python's unicode-escape rules, as Jinja does.
std::string decode_string(std::string_view body, int line) {
  std::string out;
  for (std::size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out += c;
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n': break;
      case '\\': case '\'': case '"': out += e; break;
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case 'x': case 'u': case 'U': {
        const std::size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        std::uint32_t cp = 0;
        for (std::size_t k = 1; k <= digits; ++k) {
          const int h = i + k < body.size() ? hex_value(body[i + k]) : -1;
          if (h < 0) throw parse_failure{line, "a string literal has a truncated \\" + std::string(1, e) + " escape"};
          cp = cp * 16 + std::uint32_t(h);
        }
        if (cp > 0x10FFFF) throw parse_failure{line, "a string literal escapes a code point out of range"};
        utf8_append(out, cp);
        i += digits;
        break;
      }
      case 'N': throw parse_failure{line, "a string literal uses a \\N{…} escape, which is not supported"};
      default:
        if (e >= '0' && e <= '7') {
          std::uint32_t cp = 0;
          std::size_t k = 0;
          for (; k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7'; ++k)
            cp = cp * 8 + std::uint32_t(body[i + k] - '0');
          utf8_append(out, cp);
          i += k - 1;
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class lexer {
 public:
  explicit lexer(std::string_view source) {
    // Newlines normalised, one trailing newline dropped.
    src_.reserve(source.size());
    for (std::size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      std::size_t start = src_.size();
      for (std::size_t at = src_.find('{', pos_); at != std::string::npos; at = src_.find('{', at + 1)) {
        if (at + 1 < src_.size() && (src_[at + 1] == '{' || src_[at + 1] == '%' || src_[at + 1] == '#')) {
          start = at;
          break;
        }
      }
      std::string text = src_.substr(pos_, start - pos_);
      if (start == src_.size()) {
        emit_text(std::move(text));
        break;
      }
      const char kind = src_[start + 1];
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (sign == '-') {
        text = std::string(rstrip_space(text));
      } else if (sign != '+' && kind != '{') {
        const std::size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() && space_run(text, l_pos) == text.size() - l_pos)
          text.resize(l_pos);
      }
      emit_text(std::move(text));
      line_ += count_newlines(pos_, start);
      pos_ = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        line_starting = comment();
      } else if (kind == '%' && raw_block(start)) {
        line_starting = last_end_newline_;
      } else {
        out_.push_back({kind == '{' ? tok::var_begin : tok::block_begin, "", line_});
        line_starting = tag_body(kind == '{');
      }
    }
    out_.push_back({tok::eof, "", line_});
    return std::move(out_);
  }

 private:
  std::size_t count_newlines(std::size_t from, std::size_t to) const {
    std::size_t n = 0;
    for (std::size_t i = from; i < to && i < src_.size(); ++i) n += src_[i] == '\n';
    return n;
  }

  void emit_text(std::string text) {
    if (!text.empty()) out_.push_back({tok::text, std::move(text), line_});
  }

  /// After a tag's closing `-X}` / `X}` (X is %, } or #): strips or trims what follows.
  /// Returns whether what was consumed ends with a newline (the next text starts a line).
  bool after_close(bool minus, bool plus, bool trims) {
    if (minus) {
      const std::size_t n = space_run(src_, pos_);
      line_ += count_newlines(pos_, pos_ + n);
      pos_ += n;
      return n > 0 && src_[pos_ - 1] == '\n';
    }
    if (!plus && trims && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
      return true;
    }
    return false;
  }

  bool comment() {
    const int open_line = line_;
    const std::size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) throw parse_failure{open_line, "a comment is not closed with #}"};
    const bool minus = end > pos_ && src_[end - 1] == '-';
    const bool plus = end > pos_ && src_[end - 1] == '+';
    line_ += count_newlines(pos_, end);
    pos_ = end + 2;
    return after_close(minus, plus, true);
  }

  /// {% raw %}…{% endraw %}: the text in between is output as it is.
  bool raw_block(std::size_t tag_start) {
    std::size_t at = pos_ + space_run(src_, pos_);
    if (src_.compare(at, 3, "raw") != 0) return false;
    at += 3;
    at += space_run(src_, at);
    bool minus = false;
    if (at < src_.size() && src_[at] == '-') minus = true, ++at;
    if (src_.compare(at, 2, "%}") != 0) return false;
    (void)tag_start;
    pos_ = at + 2;
    after_close(minus, false, true);
    for (std::size_t e = src_.find("{%", pos_); e != std::string::npos; e = src_.find("{%", e + 2)) {
      std::size_t k = e + 2;
      const bool strip_before = k < src_.size() && src_[k] == '-';
      if (k < src_.size() && (src_[k] == '-' || src_[k] == '+')) ++k;
      k += space_run(src_, k);
      if (src_.compare(k, 6, "endraw") != 0) continue;
      k += 6;
      k += space_run(src_, k);
      bool end_minus = false;
      if (k < src_.size() && src_[k] == '-') end_minus = true, ++k;
      if (src_.compare(k, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos_, e - pos_);
      if (strip_before) text = std::string(rstrip_space(text));
      emit_text(std::move(text));
      line_ += count_newlines(pos_, k + 2);
      pos_ = k + 2;
      last_end_newline_ = after_close(end_minus, false, true);
      return true;
    }
    throw parse_failure{line_, "a raw block is not closed with {% endraw %}"};
  }

  /// Tokens of one {{ … }} or {% … %} up to and including its end.
  bool tag_body(bool variable) {
    const int open_line = line_;
    std::vector<char> balance;
    for (;;) {
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size()) throw parse_failure{open_line, std::string("a tag is not closed with ") + (variable ? "}}" : "%}")};
      const std::string_view rest(src_.data() + pos_, src_.size() - pos_);
      const std::string_view close = variable ? "}}" : "%}";
      if (balance.empty()) {
        for (const char sign : {'-', '+', '\0'}) {
          const std::size_t skip = sign ? 1 : 0;
          if (sign && (rest.empty() || rest[0] != sign)) continue;
          if (rest.substr(skip, 2) != close) continue;
          if (sign == '+' && variable) continue;
          pos_ += skip + 2;
          out_.push_back({variable ? tok::var_end : tok::block_end, "", line_});
          return after_close(sign == '-', sign == '+', !variable);
        }
      }
      const char c = rest[0];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t n = 1;
        while (n < rest.size() && (std::isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_')) ++n;
        out_.push_back({tok::name, std::string(rest.substr(0, n)), line_});
        pos_ += n;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number(rest);
      } else if (c == '\'' || c == '"') {
        std::size_t n = 1;
        while (n < rest.size() && rest[n] != c) n += rest[n] == '\\' ? 2 : 1;
        if (n >= rest.size()) throw parse_failure{line_, "a string literal is not closed"};
        const int at_line = line_;
        std::string decoded = decode_string(rest.substr(1, n - 1), at_line);
        line_ += count_newlines(pos_, pos_ + n);
        out_.push_back({tok::string, std::move(decoded), at_line});
        pos_ += n + 1;
      } else {
        static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~", "<",
                                          ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
        const char* found = nullptr;
        for (const char* op : ops)
          if (rest.substr(0, std::char_traits<char>::length(op)) == op) {
            found = op;
            break;
          }
        if (!found) throw parse_failure{line_, "unexpected character '" + std::string(1, c) + "' in a tag"};
        const std::string op(found);
        if (op == "(" || op == "[" || op == "{") balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        if (op == ")" || op == "]" || op == "}") {
          if (balance.empty() || balance.back() != op[0]) throw parse_failure{line_, "unexpected '" + op + "'"};
          balance.pop_back();
        }
        out_.push_back({tok::op, op, line_});
        pos_ += op.size();
      }
    }
  }

  void number(std::string_view rest) {
    std::size_t n = 0;
    auto digits = [&] {
      while (n < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[n])) ||
                                 (rest[n] == '_' && n + 1 < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n + 1])))))
        ++n;
    };
    digits();
    bool is_float = false;
    if (n + 1 < rest.size() && rest[n] == '.' && std::isdigit(static_cast<unsigned char>(rest[n + 1]))) {
      ++n;
      digits();
      is_float = true;
    }
    if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
      std::size_t k = n + 1;
      if (k < rest.size() && (rest[k] == '+' || rest[k] == '-')) ++k;
      if (k < rest.size() && std::isdigit(static_cast<unsigned char>(rest[k]))) {
        n = k;
        digits();
        is_float = true;
      }
    }
    std::string spelling;
    for (const char c : rest.substr(0, n))
      if (c != '_') spelling += c;
    out_.push_back({is_float ? tok::floating : tok::integer, spelling, line_});
    pos_ += n;
  }

  std::string src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  bool last_end_newline_ = false;
  std::vector<token> out_;
};

class parser {
 public:
  parser(std::vector<token> tokens, program& p) : t_(std::move(tokens)), p_(p) {}

  body parse_template() {
    body b = parse_body({});
    if (cur().type != tok::eof) fail("unexpected '" + cur().text + "'");
    return b;
  }

 private:
  const token& cur() const { return t_[i_]; }
  const token& peek(std::size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  [[noreturn]] void fail(const std::string& message) const { throw parse_failure{cur().line, message}; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().type == tok::op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == tok::name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }
  std::string describe(const token& t) const {
    switch (t.type) {
      case tok::eof: return "the end of the template";
      case tok::block_end: return "the end of the tag";
      case tok::var_end: return "'}}'";
      case tok::text: return "text";
      case tok::string: return "a string";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail("expected '" + std::string(op) + "', found " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != tok::name) fail("expected a name, found " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().type != tok::block_end) fail("expected the end of the tag, found " + describe(cur()));
    advance();
  }

  struct depth_guard {
    parser& p;
    explicit depth_guard(parser& owner) : p(owner) {
      if (++p.depth_ > p.p_.lim.max_nesting) p.fail("the template nests deeper than " + std::to_string(p.p_.lim.max_nesting) + " levels");
    }
    ~depth_guard() { --p.depth_; }
  };

  // ---- statements ---------------------------------------------------------------------------

  /// Statements up to a block tag whose name is in `ends` (left current, after {%).
  body parse_body(std::initializer_list<std::string_view> ends) {
    depth_guard guard(*this);
    body out;
    for (;;) {
      const token& t = cur();
      if (t.type == tok::eof) {
        if (ends.size() == 0) return out;
        std::string_view closing = *ends.begin();
        for (auto e : ends)
          if (e.substr(0, 3) == "end") closing = e;
        fail("the template ends before {% " + std::string(closing) + " %}");
      }
      if (t.type == tok::text) {
        p_.literals.push_back(t.text);
        auto s = std::make_unique<stmt>();
        s->kind = stmt_kind::text;
        s->line = t.line;
        s->text = t.text;
        out.push_back(std::move(s));
        advance();
        continue;
      }
      if (t.type == tok::var_begin) {
        advance();
        auto s = std::make_unique<stmt>();
        s->kind = stmt_kind::output;
        s->line = t.line;
        s->value = parse_tuple(true);
        if (cur().type != tok::var_end) fail("expected '}}', found " + describe(cur()));
        advance();
        out.push_back(std::move(s));
        continue;
      }
      if (t.type != tok::block_begin) fail("unexpected " + describe(t));
      advance();
      if (cur().type != tok::name) fail("expected a statement name, found " + describe(cur()));
      for (auto e : ends)
        if (cur().text == e) return out;
      out.push_back(parse_statement());
    }
  }

  stmt_ptr make(stmt_kind k) {
    auto s = std::make_unique<stmt>();
    s->kind = k;
    s->line = cur().line;
    return s;
  }

  stmt_ptr parse_statement() {
    const std::string name = cur().text;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "call") return parse_call_block();
    if (name == "filter") return parse_filter_block();
    if (name == "generation") {
      auto s = make(stmt_kind::generation);
      advance();
      expect_block_end();
      s->then_body = parse_body({"endgeneration"});
      advance();
      expect_block_end();
      return s;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail("'" + name + "' is outside a for loop");
      auto s = make(name == "break" ? stmt_kind::break_ : stmt_kind::continue_);
      advance();
      expect_block_end();
      return s;
    }
    static const char* const unsupported[] = {"include", "import", "from", "extends", "block", "with",
                                              "autoescape", "do", "trans", "pluralize", "debug", "print"};
    for (const char* u : unsupported)
      if (name == u) fail("the '" + name + "' statement is not supported");
    if (name.rfind("end", 0) == 0 || name == "else" || name == "elif") fail("unexpected '" + name + "'");
    fail("unknown statement '" + name + "'");
  }

  /// Sets whether what is parsed next is directly inside a conditional (Jinja's soft frame).
  struct soft_scope {
    parser& p;
    bool saved;
    soft_scope(parser& owner, bool soft) : p(owner), saved(owner.soft_) { p.soft_ = soft; }
    ~soft_scope() { p.soft_ = saved; }
  };

  stmt_ptr parse_if() {
    soft_scope soft(*this, true);
    auto s = make(stmt_kind::if_);
    advance();  // if / elif
    s->value = parse_tuple(false);
    expect_block_end();
    s->then_body = parse_body({"elif", "else", "endif"});
    if (is_name("elif")) {
      s->else_body.push_back(parse_if());
      return s;  // the nested if consumed endif
    }
    if (skip_name("else")) {
      expect_block_end();
      s->else_body = parse_body({"endif"});
    }
    advance();  // endif
    expect_block_end();
    return s;
  }

  /// Names to assign: `x`, `a, b` or `(a, b)`.
  void parse_targets(stmt& s) {
    const bool paren = skip_op("(");
    s.targets.push_back(expect_name());
    while (skip_op(",")) {
      s.target_tuple = true;
      if (cur().type != tok::name) break;
      s.targets.push_back(expect_name());
    }
    if (paren) {
      s.target_tuple = true;
      expect_op(")");
    }
  }

  stmt_ptr parse_for() {
    auto s = make(stmt_kind::for_);
    advance();
    parse_targets(*s);
    if (!skip_name("in")) fail("expected 'in' in a for statement, found " + describe(cur()));
    s->value = parse_tuple(false, true);
    if (skip_name("if")) s->condition = parse_expression(true);
    if (is_name("recursive")) fail("the 'recursive' for loop is not supported");
    expect_block_end();
    soft_scope hard(*this, false);
    ++loop_depth_;
    s->then_body = parse_body({"endfor", "else"});
    --loop_depth_;
    if (skip_name("else")) {
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    advance();
    expect_block_end();
    return s;
  }

  stmt_ptr parse_set() {
    auto s = make(stmt_kind::set);
    advance();
    if (cur().type == tok::name && peek().type == tok::op && peek().text == "." && peek(2).type == tok::name) {
      s->targets.push_back(expect_name());
      advance();
      s->attribute = expect_name();
    } else {
      parse_targets(*s);
    }
    if (skip_op("=")) {
      s->value = parse_tuple(true);
      expect_block_end();
      return s;
    }
    if (!s->attribute.empty() || s->target_tuple) fail("a block set assigns one name");
    s->kind = stmt_kind::set_block;
    soft_scope hard(*this, false);
    if (is_op("|")) {
      auto input = std::make_unique<expr>();
      input->kind = expr_kind::name;
      input->name = filter_block_input;
      input->line = cur().line;
      s->value = parse_filters(std::move(input));
    }
    expect_block_end();
    s->then_body = parse_body({"endset"});
    advance();
    expect_block_end();
    return s;
  }

  void parse_params(stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      param p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      s.params.push_back(std::move(p));
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }

  stmt_ptr parse_macro() {
    auto s = make(stmt_kind::macro);
    advance();
    s->text = expect_name();
    parse_params(*s);
    expect_block_end();
    soft_scope hard(*this, false);
    const int loops = loop_depth_;
    loop_depth_ = 0;
    s->then_body = parse_body({"endmacro"});
    loop_depth_ = loops;
    advance();
    if (cur().type == tok::name) advance();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  stmt_ptr parse_call_block() {
    auto s = make(stmt_kind::call_block);
    advance();
    if (is_op("(")) parse_params(*s);
    s->value = parse_expression(true);
    if (s->value->kind != expr_kind::call) fail("a call block needs a call, as in {% call macro() %}");
    expect_block_end();
    soft_scope hard(*this, false);
    const int loops = loop_depth_;
    loop_depth_ = 0;
    s->then_body = parse_body({"endcall"});
    loop_depth_ = loops;
    advance();
    expect_block_end();
    return s;
  }

  stmt_ptr parse_filter_block() {
    auto s = make(stmt_kind::filter_block);
    advance();  // filter
    auto input = std::make_unique<expr>();
    input->kind = expr_kind::name;
    input->name = filter_block_input;
    input->line = cur().line;
    // `{% filter a | b %}`: the first filter has no leading pipe.
    s->value = parse_filters(std::move(input), true);
    expect_block_end();
    soft_scope hard(*this, false);
    s->then_body = parse_body({"endfilter"});
    advance();
    expect_block_end();
    return s;
  }

  // ---- expressions --------------------------------------------------------------------------

  expr_ptr node(expr_kind k, int line) {
    auto e = std::make_unique<expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  /// An expression, or several separated by commas (a tuple). `for_iterable`: `if` and
  /// `recursive` end it.
  expr_ptr parse_tuple(bool with_condexpr, bool for_iterable = false) {
    const int line = cur().line;
    auto first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto t = node(expr_kind::tuple, line);
    t->kids.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == tok::block_end || cur().type == tok::var_end || is_op(")") ||
          (for_iterable && (is_name("if") || is_name("recursive"))))
        break;
      t->kids.push_back(parse_expression(with_condexpr));
    }
    return t;
  }

  expr_ptr parse_expression(bool with_condexpr) {
    depth_guard guard(*this);
    if (!with_condexpr) return parse_or();
    const int line = cur().line;
    auto e = parse_or();
    while (skip_name("if")) {
      soft_scope soft(*this, true);
      auto c = node(expr_kind::condition, line);
      auto cond = parse_or();
      expr_ptr otherwise;
      if (skip_name("else")) otherwise = parse_expression(true);
      c->kids.push_back(std::move(e));
      c->kids.push_back(std::move(cond));
      c->kids.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  expr_ptr binary(std::string op, expr_ptr a, expr_ptr b, int line) {
    auto e = node(expr_kind::binary, line);
    e->name = std::move(op);
    e->kids.push_back(std::move(a));
    e->kids.push_back(std::move(b));
    return e;
  }

  expr_ptr parse_or() {
    auto e = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      advance();
      e = binary("or", std::move(e), parse_and(), line);
    }
    return e;
  }

  expr_ptr parse_and() {
    auto e = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      advance();
      e = binary("and", std::move(e), parse_not(), line);
    }
    return e;
  }

  expr_ptr parse_not() {
    depth_guard guard(*this);
    if (is_name("not")) {
      auto e = node(expr_kind::unary, cur().line);
      advance();
      e->name = "not";
      e->kids.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  expr_ptr parse_compare() {
    const int line = cur().line;
    auto first = parse_math1();
    expr_ptr cmp;
    for (;;) {
      std::string op;
      if (cur().type == tok::op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().type == tok::name && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(expr_kind::compare, line);
        cmp->kids.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->kids.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  expr_ptr parse_math1() {
    auto e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().text;
      const int line = cur().line;
      advance();
      e = binary(op, std::move(e), parse_concat(), line);
    }
    return e;
  }

  expr_ptr parse_concat() {
    auto e = parse_math2();
    while (is_op("~")) {
      const int line = cur().line;
      advance();
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }

  expr_ptr parse_math2() {
    auto e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().text;
      const int line = cur().line;
      advance();
      e = binary(op, std::move(e), parse_pow(), line);
    }
    return e;
  }

  expr_ptr parse_pow() {
    auto e = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      advance();
      e = binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }

  expr_ptr parse_unary(bool with_filter) {
    depth_guard guard(*this);
    expr_ptr e;
    if (is_op("-") || is_op("+")) {
      e = node(expr_kind::unary, cur().line);
      e->name = cur().text;
      advance();
      e->kids.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_tail(std::move(e));
    return e;
  }

  expr_ptr parse_primary() {
    const token& t = cur();
    const int line = t.line;
    if (t.type == tok::name) {
      auto e = node(expr_kind::literal, line);
      if (t.text == "true" || t.text == "True") e->literal = value(true);
      else if (t.text == "false" || t.text == "False") e->literal = value(false);
      else if (t.text == "none" || t.text == "None") e->literal = value::none();
      else {
        e->kind = expr_kind::name;
        e->name = t.text;
      }
      advance();
      return e;
    }
    if (t.type == tok::string) {
      std::string s;
      while (cur().type == tok::string) {
        s += cur().text;
        advance();
      }
      p_.literals.push_back(s);
      auto e = node(expr_kind::literal, line);
      e->literal = value(std::move(s));
      return e;
    }
    if (t.type == tok::integer || t.type == tok::floating) {
      auto e = node(expr_kind::literal, line);
      try {
        if (t.type == tok::integer) e->literal = value(std::int64_t(std::stoll(t.text)));
        else e->literal = value(std::stod(t.text));
      } catch (const std::exception&) {
        fail("the number " + t.text + " is out of range");
      }
      advance();
      return e;
    }
    if (is_op("(")) {
      advance();
      if (skip_op(")")) return node(expr_kind::tuple, line);
      auto inner = parse_expression(true);
      if (is_op(",")) {
        auto tup = node(expr_kind::tuple, line);
        tup->kids.push_back(std::move(inner));
        while (skip_op(",")) {
          if (is_op(")")) break;
          tup->kids.push_back(parse_expression(true));
        }
        inner = std::move(tup);
      }
      expect_op(")");
      return inner;
    }
    if (is_op("[")) {
      advance();
      auto e = node(expr_kind::list, line);
      while (!is_op("]")) {
        e->kids.push_back(parse_expression(true));
        if (!skip_op(",")) break;
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      advance();
      auto e = node(expr_kind::dict, line);
      while (!is_op("}")) {
        e->kids.push_back(parse_expression(true));
        expect_op(":");
        e->kids.push_back(parse_expression(true));
        if (!skip_op(",")) break;
      }
      expect_op("}");
      return e;
    }
    fail("unexpected " + describe(t) + " in an expression");
  }

  void parse_call_args(expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == tok::name && peek().type == tok::op && peek().text == "=") {
        std::string key = expect_name();
        advance();
        call.named.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!call.named.empty()) fail("a positional argument follows a keyword argument");
        call.kids.push_back(parse_expression(true));
      }
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }

  expr_ptr parse_postfix(expr_ptr e) {
    for (;;) {
      const int line = cur().line;
      if (is_op(".")) {
        advance();
        if (cur().type == tok::name) {
          auto a = node(expr_kind::attribute, line);
          a->name = expect_name();
          a->kids.push_back(std::move(e));
          e = std::move(a);
        } else if (cur().type == tok::integer) {
          auto a = node(expr_kind::item, line);
          auto index = node(expr_kind::literal, line);
          index->literal = value(std::int64_t(std::stoll(cur().text)));
          advance();
          a->kids.push_back(std::move(e));
          a->kids.push_back(std::move(index));
          e = std::move(a);
        } else {
          fail("expected an attribute name after '.', found " + describe(cur()));
        }
      } else if (is_op("[")) {
        advance();
        e = parse_subscript(std::move(e), line);
        expect_op("]");
      } else if (is_op("(")) {
        auto c = node(expr_kind::call, line);
        c->kids.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  expr_ptr parse_subscript(expr_ptr target, int line) {
    expr_ptr parts[3];
    bool is_slice = false;
    if (!is_op(":")) parts[0] = parse_expression(true);
    if (skip_op(":")) {
      is_slice = true;
      if (!is_op("]") && !is_op(":")) parts[1] = parse_expression(true);
      if (skip_op(":") && !is_op("]")) parts[2] = parse_expression(true);
    }
    auto e = node(is_slice ? expr_kind::slice : expr_kind::item, line);
    e->kids.push_back(std::move(target));
    if (!is_slice) {
      e->kids.push_back(std::move(parts[0]));
      return e;
    }
    for (auto& p : parts) e->kids.push_back(std::move(p));
    return e;
  }

  /// `| name(args)` filters and `is [not] name args` tests after a value; calls too.
  expr_ptr parse_filter_tail(expr_ptr e) {
    for (;;) {
      if (is_op("|")) {
        e = parse_filters(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        auto c = node(expr_kind::call, cur().line);
        c->kids.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  /// One or more `| filter` after `input` (`first_without_pipe`: a filter block's chain).
  expr_ptr parse_filters(expr_ptr input, bool first_without_pipe = false) {
    bool first = true;
    while ((first && first_without_pipe) || is_op("|")) {
      if (!(first && first_without_pipe)) advance();
      first = false;
      auto f = node(expr_kind::filter, cur().line);
      f->name = expect_name();
      while (is_op(".")) {
        advance();
        f->name += "." + expect_name();
      }
      if (!known_filter(f->name)) {
        if (jinja_has_filter(f->name) || !soft_) fail("the filter '" + f->name + "' is not supported");
        f->unknown = true;
      }
      f->kids.push_back(std::move(input));
      if (is_op("(")) parse_call_args(*f);
      input = std::move(f);
    }
    return input;
  }

  expr_ptr parse_test(expr_ptr subject) {
    auto t = node(expr_kind::test, cur().line);
    advance();  // is
    if (skip_name("not")) t->negated = true;
    t->name = expect_name();
    if (!known_test(t->name)) {
      if (jinja_has_test(t->name) || !soft_) fail("the test '" + t->name + "' is not supported");
      t->unknown = true;
    }
    t->kids.push_back(std::move(subject));
    if (is_op("(")) {
      parse_call_args(*t);
    } else if ((cur().type == tok::name || cur().type == tok::string || cur().type == tok::integer ||
                cur().type == tok::floating || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("tests cannot be chained with 'is'");
      t->kids.push_back(parse_postfix(parse_primary()));
    }
    return t;
  }

  std::vector<token> t_;
  std::size_t i_ = 0;
  program& p_;
  int depth_ = 0;
  int loop_depth_ = 0;
  bool soft_ = false;
};

}  // namespace

result<std::shared_ptr<const program>> parse(std::string_view source, std::string_view origin, const limits& lim) {
  auto p = std::make_shared<program>();
  p->origin = std::string(origin);
  p->lim = lim;
  if (source.size() > lim.max_source_bytes)
    return invalid(p->origin + " is " + std::to_string(source.size()) + " bytes, more than the " +
                   std::to_string(lim.max_source_bytes) + " a chat template may have");
  try {
    lexer lx(source);
    parser ps(lx.run(), *p);
    p->root = ps.parse_template();
  } catch (const parse_failure& f) {
    return invalid(p->origin + " line " + std::to_string(f.line) + ": " + f.message);
  }
  return std::shared_ptr<const program>(std::move(p));
}

std::vector<std::string> literal_texts(const program& p) { return p.literals; }

}  // namespace mpakt::models::jinja
