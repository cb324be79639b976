#pragma once
/// UTF-8 and Unicode helpers for the tokenizer (runtime/models/tokenizer.hpp).
///
/// Character classes and NFC follow what the Hugging Face `tokenizers` library does, from tables
/// measured on that library (tokenizer_unicode_tables.cpp, tools/goldens/gen_unicode_tables.py),
/// so that the tokenizer's ids match it. All functions are pure and thread-safe.

#include <cstddef>
#include <string>
#include <string_view>

namespace mpakt::models::unicode {

/// One step of a UTF-8 decoder: the code point, or `invalid` for a maximal ill-formed subpart,
/// and how many bytes it covers (at least 1).
struct utf8_step {
  char32_t cp;
  std::size_t length;
  bool invalid;
  bool truncated;  ///< invalid only because the bytes end before the sequence completes
};

/// Decodes the sequence starting at `pos` (< s.size()). Ill-formed input yields one `invalid`
/// step per maximal subpart, exactly as Rust's String::from_utf8_lossy replaces them.
utf8_step decode_utf8(std::string_view s, std::size_t pos);

/// Decodes the code point at `pos` of text known to be valid UTF-8 and advances `pos`.
char32_t next_code_point(std::string_view valid, std::size_t& pos);

/// Appends the UTF-8 encoding of `cp`.
void append_utf8(std::string& out, char32_t cp);

/// Whether `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);

/// `s` with every maximal ill-formed subpart replaced by U+FFFD (String::from_utf8_lossy).
std::string to_valid_utf8(std::string_view s);

/// Length of the part of `s` that may be converted now: everything except a trailing sequence
/// that is well-formed so far but incomplete (more bytes could still complete it).
std::size_t complete_prefix_length(std::string_view s);

/// The regex classes of the split patterns: \p{L}, \p{N}, \s.
bool is_letter(char32_t cp);
bool is_number(char32_t cp);
bool is_pattern_space(char32_t cp);

/// The added-token matcher's word characters (single_word) and whitespace (lstrip/rstrip).
bool is_word_char(char32_t cp);
bool is_strip_space(char32_t cp);

/// Canonical composition (NFC) of valid UTF-8 text, as the library's NFC normalizer does it.
std::string nfc(std::string_view valid);

}  // namespace mpakt::models::unicode
