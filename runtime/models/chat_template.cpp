#include "runtime/models/chat_template.hpp"

#include <rapidjson/document.h>

#include <algorithm>
#include <cstdint>

#include "runtime/json.hpp"

namespace mpakt::models {

namespace {

constexpr std::string_view config_file = "tokenizer_config.json";

// ---- tokenizer_config.json ------------------------------------------------------------

std::string json_string(const rapidjson::Value& v) { return std::string(v.GetString(), v.GetStringLength()); }

/// A special token as tokenizer_config.json writes it: a string, an AddedToken object
/// ({"content": …, "lstrip": …}), or null/absent for none.
result<std::string> read_token(const rapidjson::Document& d, const char* key) {
  auto it = d.FindMember(key);
  if (it == d.MemberEnd() || it->value.IsNull()) return std::string();
  if (it->value.IsString()) return json_string(it->value);
  if (it->value.IsObject()) {
    auto content = it->value.FindMember("content");
    if (content != it->value.MemberEnd() && content->value.IsString()) return json_string(content->value);
  }
  return invalid(std::string(config_file) + ": " + key + " must be a string or an object with a string content");
}

/// The default template's text; nullopt when the config has no chat_template.
result<std::optional<std::string>> read_template_text(const rapidjson::Document& d) {
  const std::string field = std::string(config_file) + ": chat_template";
  auto it = d.FindMember("chat_template");
  if (it == d.MemberEnd() || it->value.IsNull()) return std::optional<std::string>();
  if (it->value.IsString()) return std::optional<std::string>(json_string(it->value));
  if (!it->value.IsArray()) return invalid(field + " must be a string or a list of {name, template} objects");
  for (const auto& entry : it->value.GetArray()) {
    if (!entry.IsObject()) return invalid(field + " must be a string or a list of {name, template} objects");
    auto name = entry.FindMember("name");
    auto text = entry.FindMember("template");
    if (name == entry.MemberEnd() || !name->value.IsString() || text == entry.MemberEnd() || !text->value.IsString())
      return invalid(field + " entries must each have a string name and a string template");
    if (json_string(name->value) == "default") return std::optional<std::string>(json_string(text->value));
  }
  return invalid(field + " is a list with no template named default");
}

// ---- reading the template text --------------------------------------------------------

bool contains(std::string_view text, std::string_view piece) { return text.find(piece) != std::string_view::npos; }

void append_utf8(std::string& out, std::uint32_t cp) {
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

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// Decodes the Jinja string literal whose opening quote is at text[open]. Jinja reads
/// literals with Python's escapes; the ones templates use are handled, and an escape Python
/// would keep verbatim (`\q`) is kept. nullopt when the literal is unterminated or uses an
/// escape not handled here (`\N{…}`, a code point out of range).
std::optional<std::string> decode_literal(std::string_view text, std::size_t open) {
  const char quote = text[open];
  std::string out;
  for (std::size_t i = open + 1; i < text.size(); ++i) {
    const char c = text[i];
    if (c == quote) return out;
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i == text.size()) return std::nullopt;
    const char e = text[i];
    switch (e) {
      case '\n': break;  // a backslash-newline continues the line
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
        if (i + digits >= text.size()) return std::nullopt;
        std::uint32_t cp = 0;
        for (std::size_t k = 1; k <= digits; ++k) {
          const int h = hex_value(text[i + k]);
          if (h < 0) return std::nullopt;
          cp = cp * 16 + std::uint32_t(h);
        }
        if (cp > 0x10FFFF) return std::nullopt;
        append_utf8(out, cp);
        i += digits;
        break;
      }
      case 'N': return std::nullopt;
      default:
        if (e >= '0' && e <= '7') {  // up to three octal digits
          std::uint32_t cp = 0;
          std::size_t k = 0;
          for (; k < 3 && i + k < text.size() && text[i + k] >= '0' && text[i + k] <= '7'; ++k)
            cp = cp * 8 + std::uint32_t(text[i + k] - '0');
          append_utf8(out, cp);
          i += k - 1;
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return std::nullopt;
}

/// A Qwen-style ChatML template writes a fixed system turn when the conversation has none,
/// as one literal: '<|im_start|>system\n<default text><|im_end|>\n'. Literals that start a
/// system turn and then end (the real system message is concatenated after them) are not
/// it. nullopt when the template has no such literal.
result<std::optional<std::string>> find_default_system(std::string_view text, const std::string& field) {
  constexpr std::string_view head = "<|im_start|>system\n";
  constexpr std::string_view tail = "<|im_end|>";
  for (std::size_t at = text.find("<|im_start|>system"); at != std::string_view::npos;
       at = text.find("<|im_start|>system", at + 1)) {
    if (at == 0 || (text[at - 1] != '\'' && text[at - 1] != '"')) continue;
    auto literal = decode_literal(text, at - 1);
    if (!literal) return invalid(field + " has a system-turn string literal mpakt cannot read");
    if (literal->rfind(head, 0) != 0) continue;
    const std::size_t end = literal->find(tail, head.size());
    if (end == std::string::npos) continue;
    return std::optional<std::string>(literal->substr(head.size(), end - head.size()));
  }
  return std::optional<std::string>();
}

/// Mistral's v0.1 layout writes '[INST] ' and ' [/INST]'; later layouts differ in the spaces
/// around the markers (v0.2's ' [INST] ', v0.3's '[/INST]') and render differently.
bool mistral_v01_spacing(std::string_view text) {
  for (std::size_t at = text.find("[INST]"); at != std::string_view::npos; at = text.find("[INST]", at + 1)) {
    const std::size_t after = at + 6;
    if (after >= text.size() || text[after] != ' ') return false;
    if (at > 0 && text[at - 1] == ' ') return false;
  }
  for (std::size_t at = text.find("[/INST]"); at != std::string_view::npos; at = text.find("[/INST]", at + 1))
    if (at == 0 || text[at - 1] != ' ') return false;
  return true;
}

/// Classifies a template's text. `field` names where it came from, for messages.
result<chat_template> classify(std::string_view text, const std::string& field) {
  const error unknown =
      invalid(field + " is not a format mpakt renders (ChatML, Llama 3, Gemma, Mistral)");
  const bool is_chatml = contains(text, "<|im_start|>");
  const bool is_llama3 = contains(text, "<|start_header_id|>");
  const bool is_gemma = contains(text, "<start_of_turn>");
  const bool is_mistral = contains(text, "[INST]");
  // Markers of two families in one template: nothing tells which one a conversation gets.
  if (int(is_chatml) + int(is_llama3) + int(is_gemma) + int(is_mistral) != 1) return unknown;

  chat_template t;
  if (is_chatml) {
    t.format = chat_format::chatml;
    auto def = find_default_system(text, field);
    if (!def) return std::move(def).err();
    t.default_system = std::move(*def);
  } else if (is_llama3) {
    // Llama 3.1 and later templates always open with a system turn stating a knowledge
    // cutoff and today's date; rendered as Llama 3 it would silently differ.
    if (contains(text, "Cutting Knowledge Date"))
      return invalid(field + " is a Llama 3.1+ template (it writes a dated system preamble), which mpakt does not render");
    t.format = chat_format::llama3;
  } else if (is_gemma) {
    t.format = chat_format::gemma;
    // Gemma 3 reads the leading system message's content to fold it into the first user
    // turn; Gemma 1 and 2 only test its role, to refuse it.
    t.folds_system = contains(text, "messages[0]['content']") || contains(text, "messages[0][\"content\"]") ||
                     contains(text, "messages[0].content");
  } else {
    if (contains(text, "<<SYS>>")) return unknown;  // Llama 2, not Mistral
    if (contains(text, "[SYSTEM_PROMPT]") || contains(text, "[AVAILABLE_TOOLS]") || !mistral_v01_spacing(text))
      return invalid(field + " is a Mistral layout other than v0.1's '[INST] … [/INST]', which mpakt does not render");
    t.format = chat_format::mistral;
  }
  return t;
}

void add_stop(chat_template& t, std::string token) {
  if (token.empty() || std::find(t.stop_tokens.begin(), t.stop_tokens.end(), token) != t.stop_tokens.end()) return;
  t.stop_tokens.push_back(std::move(token));
}

result<chat_template> parse(std::string_view config_json, std::optional<std::string_view> jinja) {
  auto parsed = parse_json(config_json, config_file);
  if (!parsed) return std::move(parsed).err();
  const rapidjson::Document& d = *parsed;
  if (!d.IsObject()) return invalid(std::string(config_file) + " is not a JSON object");
  auto bos = read_token(d, "bos_token");
  if (!bos) return std::move(bos).err();
  auto eos = read_token(d, "eos_token");
  if (!eos) return std::move(eos).err();

  chat_template t;
  if (jinja) {
    auto c = classify(*jinja, "chat_template.jinja");
    if (!c) return std::move(c).err();
    t = std::move(*c);
  } else {
    auto text = read_template_text(d);
    if (!text) return std::move(text).err();
    if (text->has_value()) {
      auto c = classify(**text, std::string(config_file) + ": chat_template");
      if (!c) return std::move(c).err();
      t = std::move(*c);
    }
  }
  t.bos_token = std::move(*bos);
  t.eos_token = std::move(*eos);
  switch (t.format) {
    case chat_format::chatml: add_stop(t, "<|im_end|>"); break;
    case chat_format::llama3: add_stop(t, "<|eot_id|>"); break;
    case chat_format::gemma: add_stop(t, "<end_of_turn>"); break;
    case chat_format::mistral: case chat_format::plain: break;
  }
  add_stop(t, t.eos_token);
  return t;
}

// ---- rendering ------------------------------------------------------------------------

bool known_role(std::string_view role) { return role == "system" || role == "user" || role == "assistant"; }

std::string at(std::size_t i, std::string_view role) {
  return "messages[" + std::to_string(i) + "] has role \"" + std::string(role) + "\"";
}

error unknown_role(std::size_t i, std::string_view role, chat_format f) {
  return invalid(at(i, role) + ": " + std::string(chat_format_name(f)) + " renders system, user and assistant");
}

/// Decodes the UTF-8 code point starting at s[i]; sets `len`. Returns -1 (len 1) for a byte
/// that does not start a well-formed sequence.
long decode_at(std::string_view s, std::size_t i, std::size_t& len) {
  const auto b = static_cast<unsigned char>(s[i]);
  len = 1;
  if (b < 0x80) return b;
  std::size_t n = b >= 0xF0 && b < 0xF5 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 && b < 0xE0 ? 2 : 0;
  if (n == 0 || (b >= 0xF5) || i + n > s.size()) return -1;
  long cp = b & (0xFF >> (n + 1));
  for (std::size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (c & 0x3F);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return -1;  // overlong or too large
  len = n;
  return cp;
}

/// Python's str.isspace, which Jinja's `trim` filter (str.strip) uses: ASCII whitespace,
/// the separators U+001C..U+001F, NEL, and Unicode's space separators and line/paragraph
/// separators (not U+200B or U+FEFF).
bool python_space(long cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

/// Jinja's `| trim`: strips leading and trailing whitespace as Python defines it.
std::string_view jinja_trim(std::string_view s) {
  std::size_t begin = 0, len = 0;
  while (begin < s.size() && python_space(decode_at(s, begin, len))) begin += len;
  std::size_t end = s.size();
  while (end > begin) {
    std::size_t start = end - 1;  // back up to the lead byte of the last code point
    while (start > begin && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    const long cp = decode_at(s, start, len);
    if (start + len != end || !python_space(cp)) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

std::string render_chatml(const chat_template& t, std::span<const chat_message> msgs, bool gen) {
  std::string out;
  const auto turn = [&](std::string_view role, std::string_view content) {
    out.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
  };
  if (t.default_system && msgs.front().role != "system") turn("system", *t.default_system);
  for (const auto& m : msgs) turn(m.role, m.content);
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_llama3(const chat_template& t, std::span<const chat_message> msgs, bool gen) {
  std::string out = t.bos_token;
  for (const auto& m : msgs)
    out.append("<|start_header_id|>").append(m.role).append("<|end_header_id|>\n\n").append(jinja_trim(m.content)).append("<|eot_id|>");
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

/// Gemma and Mistral: an optional leading system message (folded into the first user turn
/// as "<system>\n\n<user>"), then turns alternating user, assistant, user, …
/// Returns the index of the first turn after the system message.
result<std::size_t> check_alternation(const chat_template& t, std::span<const chat_message> msgs) {
  const std::string name(chat_format_name(t.format));
  std::size_t first = 0;
  if (msgs.front().role == "system") {
    if (t.format == chat_format::gemma && !t.folds_system)
      return invalid(at(0, "system") + ": this Gemma template has no system role");
    if (msgs.size() == 1) return invalid(at(0, "system") + " but no user turn follows for " + name + " to fold it into");
    first = 1;
  }
  for (std::size_t i = first; i < msgs.size(); ++i) {
    const std::string_view role = msgs[i].role;
    if (!known_role(role)) return unknown_role(i, role, t.format);
    const std::string_view due = (i - first) % 2 == 0 ? "user" : "assistant";
    if (role == due) continue;
    if (role == "system" && t.format == chat_format::gemma && !t.folds_system)
      return invalid(at(i, role) + ": this Gemma template has no system role");
    return invalid(at(i, role) + " where " + name + " expects \"" + std::string(due) +
                   "\": after an optional leading system message, roles alternate user/assistant");
  }
  return first;
}

std::string render_gemma(const chat_template& t, std::span<const chat_message> msgs, std::size_t first, bool gen) {
  std::string out = t.bos_token;
  for (std::size_t i = first; i < msgs.size(); ++i) {
    out.append("<start_of_turn>").append(msgs[i].role == "assistant" ? "model" : "user").append("\n");
    if (first == 1 && i == 1) out.append(msgs[0].content).append("\n\n");
    out.append(jinja_trim(msgs[i].content)).append("<end_of_turn>\n");
  }
  if (gen) out += "<start_of_turn>model\n";
  return out;
}

std::string render_mistral(const chat_template& t, std::span<const chat_message> msgs, std::size_t first) {
  std::string out = t.bos_token;
  for (std::size_t i = first; i < msgs.size(); ++i) {
    if (msgs[i].role == "assistant") {
      out.append(msgs[i].content).append(t.eos_token);
      continue;
    }
    out += "[INST] ";
    if (first == 1 && i == 1) out.append(msgs[0].content).append("\n\n");
    out.append(msgs[i].content).append(" [/INST]");
  }
  return out;  // "[/INST]" is itself the cue for the assistant: no generation prompt
}

/// A base model continues text: the turns are concatenated as they are, so a reply the model
/// wrote (", there was …") follows its prompt exactly as it did when it was generated.
std::string render_plain(std::span<const chat_message> msgs) {
  std::string out;
  for (const auto& m : msgs) out += m.content;
  return out;
}

}  // namespace

std::string_view chat_format_name(chat_format f) {
  switch (f) {
    case chat_format::chatml: return "ChatML";
    case chat_format::llama3: return "Llama 3";
    case chat_format::gemma: return "Gemma";
    case chat_format::mistral: return "Mistral";
    case chat_format::plain: return "plain";
  }
  return "plain";
}

result<chat_template> parse_chat_template(std::string_view tokenizer_config_json) {
  return parse(tokenizer_config_json, std::nullopt);
}

result<chat_template> parse_chat_template(std::string_view tokenizer_config_json, std::string_view chat_template_jinja) {
  if (chat_template_jinja.empty()) return parse(tokenizer_config_json, std::nullopt);
  return parse(tokenizer_config_json, chat_template_jinja);
}

result<std::string> render_chat(const chat_template& t, std::span<const chat_message> messages,
                                bool add_generation_prompt) {
  if (messages.empty()) return invalid("messages is empty: a conversation needs at least one message");
  switch (t.format) {
    case chat_format::gemma:
    case chat_format::mistral: {
      auto first = check_alternation(t, messages);
      if (!first) return std::move(first).err();
      if (t.format == chat_format::gemma) return render_gemma(t, messages, *first, add_generation_prompt);
      return render_mistral(t, messages, *first);
    }
    case chat_format::chatml:
    case chat_format::llama3:
    case chat_format::plain:
      for (std::size_t i = 0; i < messages.size(); ++i)
        if (!known_role(messages[i].role)) return unknown_role(i, messages[i].role, t.format);
      if (t.format == chat_format::chatml) return render_chatml(t, messages, add_generation_prompt);
      if (t.format == chat_format::llama3) return render_llama3(t, messages, add_generation_prompt);
      return render_plain(messages);
  }
  return invalid("chat template format is not one render_chat knows");
}

bool template_adds_bos(const chat_template& t) {
  return t.format == chat_format::llama3 || t.format == chat_format::gemma || t.format == chat_format::mistral;
}

}  // namespace mpakt::models
