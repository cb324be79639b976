#pragma once
/// The word-splitting regexes of byte-level BPE tokenizers, as hand-written matchers.
///
/// tokenizer.json names its split regex as text. The library runs it through a backtracking
/// regex engine; here each supported pattern is recognised by its exact text and run by a
/// matcher that reproduces that engine's leftmost-first alternation (including the `\s+(?!\S)`
/// backtracking), with the engine's own \p{L}, \p{N} and \s tables. Unknown patterns are
/// refused by the caller, naming them. Pure functions; thread-safe.

#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace mpakt::models {

/// The split regexes this runtime can reproduce.
enum class split_pattern {
  gpt2,    ///< 's|'t|… | ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (GPT-2, ByteLevel's own)
  llama3,  ///< (?i:'s|…)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|… (Llama 3)
  qwen2,   ///< as llama3 but one digit per piece: \p{N} (Qwen2, Qwen2.5, Qwen3)
};

/// The pattern whose regex text is exactly `regex`, if it is one of those above.
std::optional<split_pattern> identify_split_pattern(std::string_view regex);

/// Byte spans [begin, end) of the pattern's successive matches over valid UTF-8 `text`. These
/// patterns match every character, so the spans cover the text without gaps.
std::vector<std::pair<std::size_t, std::size_t>> split_matches(split_pattern pattern, std::string_view text);

}  // namespace mpakt::models
