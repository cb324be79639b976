#include "runtime/models/tokenizer_pipeline.hpp"

#include <array>

#include "runtime/models/tokenizer_unicode.hpp"

namespace mpakt::models::detail {

namespace {

/// GPT-2's byte-level alphabet: every byte stands for a printable character, so that any
/// text becomes a string of vocabulary characters. Printable Latin-1 bytes stand for
/// themselves; the others, in byte order, for U+0100 onwards.
struct byte_alphabet {
  std::array<std::string, 256> char_of_byte;    ///< UTF-8 of the character standing for a byte
  std::array<std::int16_t, 0x144> byte_of_char;  ///< the byte a character stands for, or -1

  byte_alphabet() {
    byte_of_char.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      unicode::append_utf8(char_of_byte[static_cast<std::size_t>(b)], cp);
      byte_of_char[cp] = static_cast<std::int16_t>(b);
    }
  }
};

const byte_alphabet& alphabet() {
  static const byte_alphabet a;
  return a;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  for (std::size_t hit; !from.empty() && (hit = text.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(text.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(text.substr(pos));
  return out;
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out.append(separator);
    out.append(parts[i]);
  }
  return out;
}

// ---- pre-tokenizers ----

/// Appends the non-empty spans of `text` as pieces.
void emit_spans(const std::string& text, const std::vector<std::pair<std::size_t, std::size_t>>& spans,
                bool at_origin, std::vector<piece>& out) {
  for (const auto& [begin, end] : spans)
    if (end > begin) out.push_back({text.substr(begin, end - begin), -1, at_origin && begin == 0});
}

void byte_level(const pre_tokenizer_step& step, piece& p, std::vector<piece>& out) {
  std::string text = std::move(p.text);
  if (step.add_prefix_space && (text.empty() || text.front() != ' ')) text.insert(0, " ");
  const std::size_t first = out.size();
  if (step.use_regex)
    emit_spans(text, split_matches(split_pattern::gpt2, text), p.at_origin, out);
  else
    emit_spans(text, {{0, text.size()}}, p.at_origin, out);
  for (std::size_t i = first; i < out.size(); ++i) {
    std::string mapped;
    for (const char c : out[i].text) mapped += alphabet().char_of_byte[static_cast<unsigned char>(c)];
    out[i].text = std::move(mapped);
  }
}

void metaspace(const pre_tokenizer_step& step, piece& p, std::vector<piece>& out) {
  const std::string& rep = step.replacement;
  std::string text = replace_all(p.text, " ", rep);
  const bool starts_with_rep = text.compare(0, rep.size(), rep) == 0;
  if (!starts_with_rep && (step.scheme == prepend_scheme::always || (step.scheme == prepend_scheme::first && p.at_origin)))
    text.insert(0, rep);
  if (!step.split) {
    emit_spans(text, {{0, text.size()}}, p.at_origin, out);
    return;
  }
  // Each replacement character starts a new piece (the library's MergedWithNext).
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  std::size_t begin = 0;
  for (std::size_t hit = text.find(rep, 1); hit != std::string::npos; hit = text.find(rep, hit + rep.size())) {
    spans.emplace_back(begin, hit);
    begin = hit;
  }
  spans.emplace_back(begin, text.size());
  emit_spans(text, spans, p.at_origin, out);
}

// ---- decoders ----

/// The byte of a "<0xXX>" token, as the library parses it (Rust's u8::from_str_radix, which
/// also takes "+X").
std::optional<unsigned char> byte_token(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token.back() != '>') return std::nullopt;
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = token[3] == '+' ? 0 : hex(token[3]);
  const int lo = hex(token[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<unsigned char>(hi * 16 + lo);
}

/// Consecutive byte tokens become their UTF-8 text, or one U+FFFD per byte when invalid.
std::vector<std::string> byte_fallback(const std::vector<std::string>& tokens, bool hold, bool* held) {
  std::vector<std::string> out;
  std::string bytes;
  const auto flush = [&](bool at_end) {
    if (bytes.empty()) return;
    const std::size_t complete = unicode::complete_prefix_length(bytes);
    if (unicode::is_valid_utf8(bytes)) {
      out.push_back(bytes);
    } else if (at_end && hold && complete < bytes.size() && unicode::is_valid_utf8(std::string_view(bytes).substr(0, complete))) {
      if (complete > 0) out.push_back(bytes.substr(0, complete));
      *held = true;
    } else {
      for (std::size_t i = 0; i < bytes.size(); ++i) out.push_back("\xEF\xBF\xBD");
    }
    bytes.clear();
  };
  for (const auto& token : tokens) {
    if (const auto b = byte_token(token)) {
      bytes += static_cast<char>(*b);
      continue;
    }
    flush(false);
    out.push_back(token);
  }
  flush(true);
  return out;
}

/// Byte-level characters back to bytes (a token with any other character is taken as its own
/// UTF-8 bytes), then the bytes to text with U+FFFD for what is not valid UTF-8.
std::string byte_level_decode(const std::vector<std::string>& tokens, bool hold, bool* held) {
  std::string bytes;
  for (const auto& token : tokens) {
    std::string mapped;
    bool all_mapped = true;
    for (std::size_t pos = 0; pos < token.size() && all_mapped;) {
      const char32_t cp = unicode::next_code_point(token, pos);
      const auto b = cp < alphabet().byte_of_char.size() ? alphabet().byte_of_char[cp] : -1;
      if (b < 0)
        all_mapped = false;
      else
        mapped += static_cast<char>(b);
    }
    bytes += all_mapped ? mapped : token;
  }
  if (hold) {
    const std::size_t complete = unicode::complete_prefix_length(bytes);
    if (complete < bytes.size()) {
      bytes.resize(complete);
      *held = true;
    }
  }
  return unicode::to_valid_utf8(bytes);
}

/// Strips up to `start` leading and `stop` trailing copies of one character.
std::string strip(const std::string& token, const std::string& ch, std::size_t start, std::size_t stop) {
  std::size_t begin = 0, end = token.size();
  for (std::size_t i = 0; i < start && begin < end && token.compare(begin, ch.size(), ch) == 0; ++i) begin += ch.size();
  for (std::size_t i = 0; i < stop && end >= begin + ch.size() && token.compare(end - ch.size(), ch.size(), ch) == 0; ++i)
    end -= ch.size();
  return token.substr(begin, end - begin);
}

}  // namespace

std::string normalize(const std::vector<normalizer_step>& steps, std::string text) {
  for (const auto& step : steps) {
    switch (step.what) {
      case normalizer_step::kind::prepend:
        if (!text.empty()) text.insert(0, step.text);
        break;
      case normalizer_step::kind::replace:
        text = replace_all(text, step.text, step.content);
        break;
      case normalizer_step::kind::nfc:
        text = unicode::nfc(text);
        break;
    }
  }
  return text;
}

void pre_tokenize(const std::vector<pre_tokenizer_step>& steps, std::vector<piece>& pieces) {
  for (const auto& step : steps) {
    std::vector<piece> out;
    out.reserve(pieces.size());
    for (auto& p : pieces) {
      if (p.id >= 0) {
        out.push_back(std::move(p));
        continue;
      }
      switch (step.what) {
        case pre_tokenizer_step::kind::byte_level:
          byte_level(step, p, out);
          break;
        case pre_tokenizer_step::kind::split:
          emit_spans(p.text, split_matches(step.pattern, p.text), p.at_origin, out);
          break;
        case pre_tokenizer_step::kind::metaspace:
          metaspace(step, p, out);
          break;
      }
    }
    pieces = std::move(out);
  }
}

std::string run_decoders(const std::vector<decoder_step>& steps, std::vector<std::string> tokens, bool hold_incomplete,
                         bool* held) {
  bool held_here = false;
  if (held) *held = false;
  if (steps.empty()) return join(tokens, " ");
  for (const auto& step : steps) {
    switch (step.what) {
      case decoder_step::kind::replace:
        for (auto& t : tokens) t = replace_all(t, step.pattern, step.content);
        break;
      case decoder_step::kind::byte_fallback:
        tokens = byte_fallback(tokens, hold_incomplete, &held_here);
        break;
      case decoder_step::kind::fuse:
        tokens = {join(tokens, "")};
        break;
      case decoder_step::kind::strip:
        for (auto& t : tokens) t = strip(t, step.content, step.start, step.stop);
        break;
      case decoder_step::kind::byte_level:
        tokens = {byte_level_decode(tokens, hold_incomplete, &held_here)};
        break;
      case decoder_step::kind::metaspace:
        // The first token loses every replacement character when a prefix was prepended.
        for (std::size_t i = 0; i < tokens.size(); ++i)
          tokens[i] = replace_all(tokens[i], step.pattern, i == 0 && step.prepend ? "" : " ");
        break;
    }
  }
  if (held) *held = held_here;
  return join(tokens, "");
}

}  // namespace mpakt::models::detail
