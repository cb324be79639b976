#pragma once
/// The Unicode data behind the tokenizer, generated into tokenizer_unicode_tables.cpp by
/// tools/goldens/gen_unicode_tables.py. It describes what the Hugging Face `tokenizers` library
/// does (its regex engine's classes, its NFC), measured from the library, so that ids match it.
/// Read through runtime/models/tokenizer_unicode.hpp, not directly.

#include <cstddef>
#include <cstdint>

namespace mpakt::models::unicode_tables {

/// An inclusive code point range; tables are sorted and disjoint.
struct code_range {
  char32_t lo;
  char32_t hi;
};

/// A range of marks sharing one canonical combining class.
struct ccc_range {
  char32_t lo;
  char32_t hi;
  std::uint8_t ccc;
};

/// A full canonical decomposition: `length` code points at `offset` of decomposition_pool.
struct decomposition {
  char32_t cp;
  std::uint16_t offset;
  std::uint8_t length;
};

/// A primary composition `first + second -> composite`; sorted by (first, second).
struct composition {
  char32_t first;
  char32_t second;
  char32_t composite;
};

extern const code_range letter_ranges[];         ///< regex \p{L}
extern const std::size_t letter_ranges_size;
extern const code_range number_ranges[];         ///< regex \p{N}
extern const std::size_t number_ranges_size;
extern const code_range pattern_space_ranges[];  ///< regex \s
extern const std::size_t pattern_space_ranges_size;
extern const code_range word_ranges[];           ///< added tokens' single_word test (\w)
extern const std::size_t word_ranges_size;
extern const code_range strip_space_ranges[];    ///< added tokens' lstrip/rstrip whitespace
extern const std::size_t strip_space_ranges_size;

extern const ccc_range ccc_ranges[];
extern const std::size_t ccc_ranges_size;
extern const char32_t decomposition_pool[];
extern const decomposition decompositions[];
extern const std::size_t decompositions_size;
extern const composition compositions[];
extern const std::size_t compositions_size;

}  // namespace mpakt::models::unicode_tables
