#include "runtime/models/tokenizer_split.hpp"

#include <algorithm>
#include <cstdint>

#include "runtime/models/tokenizer_unicode.hpp"

namespace mpakt::models {

namespace {

constexpr std::string_view gpt2_regex = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re";
constexpr std::string_view llama3_regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view qwen2_regex =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

enum class char_class : unsigned char { letter, number, space, other };

/// Runs one pattern over one text. Works on decoded code points; positions are code point
/// indices until the spans are converted back to bytes.
class pattern_matcher {
 public:
  pattern_matcher(split_pattern pattern, std::string_view text) : pattern_(pattern) {
    for (std::size_t pos = 0; pos < text.size();) {
      offsets_.push_back(pos);
      const char32_t cp = unicode::next_code_point(text, pos);
      cps_.push_back(cp);
      classes_.push_back(classify(cp));
    }
    offsets_.push_back(text.size());
  }

  std::vector<std::pair<std::size_t, std::size_t>> run() const {
    std::vector<std::pair<std::size_t, std::size_t>> spans;
    for (std::size_t i = 0; i < cps_.size();) {
      const std::size_t end = pattern_ == split_pattern::gpt2 ? match_gpt2(i) : match_llama3(i);
      spans.emplace_back(offsets_[i], offsets_[end]);
      i = end;
    }
    return spans;
  }

 private:
  static char_class classify(char32_t cp) {
    if (unicode::is_letter(cp)) return char_class::letter;
    if (unicode::is_number(cp)) return char_class::number;
    if (unicode::is_pattern_space(cp)) return char_class::space;
    return char_class::other;
  }

  bool is(std::size_t i, char_class c) const { return i < cps_.size() && classes_[i] == c; }
  bool is_crlf(std::size_t i) const { return i < cps_.size() && (cps_[i] == '\r' || cps_[i] == '\n'); }
  bool is_space_char(std::size_t i) const { return i < cps_.size() && cps_[i] == ' '; }

  /// End of the run of class c starting at i, at most `limit` characters long.
  std::size_t run_end(std::size_t i, char_class c, std::size_t limit = SIZE_MAX) const {
    const std::size_t start = i;
    while (i - start < limit && is(i, c)) ++i;
    return i;
  }
  std::size_t crlf_run_end(std::size_t i) const {
    while (is_crlf(i)) ++i;
    return i;
  }

  /// The letter after an apostrophe, folded as the pattern compares it.
  char32_t fold(std::size_t i, bool ignore_case) const {
    if (i >= cps_.size()) return 0;
    const char32_t c = cps_[i];
    if (!ignore_case) return c;
    if (c >= 'A' && c <= 'Z') return c + ('a' - 'A');
    if (c == 0x17F) return 's';  // LATIN SMALL LETTER LONG S folds to s
    return c;
  }

  /// Length of `'s|'t|'re|'ve|'m|'ll|'d` at i (case-insensitive for the Llama-3 family), or 0.
  std::size_t contraction(std::size_t i, bool ignore_case) const {
    if (cps_[i] != '\'') return 0;
    const char32_t a = fold(i + 1, ignore_case), b = fold(i + 2, ignore_case);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }

  /// ` ?X+` for the class X: the end of the match at i, or i when it does not match.
  std::size_t optional_space_run(std::size_t i, char_class c) const {
    if (is_space_char(i) && is(i + 1, c)) return run_end(i + 1, c);
    return is(i, c) ? run_end(i, c) : i;
  }

  /// `\s+(?!\S)|\s+` at a whitespace character: the run, less its last character when a
  /// non-space follows (that character then starts the next word), but never empty.
  std::size_t whitespace(std::size_t i) const {
    const std::size_t end = run_end(i, char_class::space);
    if (end == cps_.size() || end - 1 == i) return std::max(end, i + 1);
    return end - 1;
  }

  std::size_t match_gpt2(std::size_t i) const {
    if (const auto n = contraction(i, false)) return i + n;
    for (const auto c : {char_class::letter, char_class::number, char_class::other})
      if (const auto end = optional_space_run(i, c); end != i) return end;
    return whitespace(i);
  }

  std::size_t match_llama3(std::size_t i) const {
    if (const auto n = contraction(i, true)) return i + n;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!is_crlf(i) && !is(i, char_class::letter) && !is(i, char_class::number) && is(i + 1, char_class::letter))
      return run_end(i + 1, char_class::letter);
    if (is(i, char_class::letter)) return run_end(i, char_class::letter);
    // \p{N}{1,3} or \p{N}
    if (is(i, char_class::number)) {
      return run_end(i, char_class::number, pattern_ == split_pattern::llama3 ? 3 : 1);
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    if (const auto end = optional_space_run(i, char_class::other); end != i) return crlf_run_end(end);
    // \s*[\r\n]+ : the whitespace run up to and including its last line break
    const std::size_t end = run_end(i, char_class::space);
    for (std::size_t k = end; k > i; --k)
      if (is_crlf(k - 1)) return k;
    return whitespace(i);
  }

  split_pattern pattern_;
  std::vector<char32_t> cps_;
  std::vector<char_class> classes_;
  std::vector<std::size_t> offsets_;  ///< byte offset of each code point, then the text's size
};

}  // namespace

std::optional<split_pattern> identify_split_pattern(std::string_view regex) {
  if (regex == gpt2_regex) return split_pattern::gpt2;
  if (regex == llama3_regex) return split_pattern::llama3;
  if (regex == qwen2_regex) return split_pattern::qwen2;
  return std::nullopt;
}

std::vector<std::pair<std::size_t, std::size_t>> split_matches(split_pattern pattern, std::string_view text) {
  return pattern_matcher(pattern, text).run();
}

}  // namespace mpakt::models
