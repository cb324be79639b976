#pragma once
/// Added tokens of a tokenizer.json (<s>, <|im_start|>, …) and how they are found in text.
///
/// As in the `tokenizers` library, tokens are looked for twice: tokens with normalized=false in
/// the raw text, then tokens with normalized=true in each remaining piece after normalization
/// (their content normalized the same way). Matching is leftmost-longest without overlaps, then
/// each match is checked against its flags: single_word drops a match touching a word character,
/// lstrip/rstrip widen it over the whitespace beside it. Immutable after finish(); thread-safe.

#include <bitset>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/models/tokenizer_bpe.hpp"

namespace mpakt::models {

/// One entry of tokenizer.json's "added_tokens".
struct added_token {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;

  bool operator==(const added_token&) const = default;
};

/// A span of text and, when it is an added token, that token's id.
struct text_match {
  std::size_t begin;
  std::size_t end;
  std::int32_t id;  ///< -1 for text between tokens
};

class added_vocabulary {
 public:
  /// Adds a token as the library does: it keeps the id the vocabulary already gives its content,
  /// or gets the next free id after the model's vocabulary. Returns that id.
  std::int32_t add(const added_token& token, const bpe_model& model);

  /// Builds the two matchers; `normalize` is the tokenizer's normalizer chain, applied to the
  /// content of tokens with normalized=true.
  void finish(const std::function<std::string(std::string_view)>& normalize);

  /// Splits `text` at the added tokens of one matcher (`normalized` picks which), covering it.
  std::vector<text_match> split(std::string_view text, bool normalized) const;

  std::optional<std::int32_t> id_of(std::string_view content) const;
  /// The string the added token `id` decodes from, or nullptr: its content, normalized when the
  /// token has normalized=true (the library decodes what it matched, e.g. NFC's Å for U+212B).
  const std::string* token_of(std::int32_t id) const;
  bool is_special(std::string_view content) const;
  /// Contents not already in the model's vocabulary (for the vocabulary size).
  std::size_t count_outside(const bpe_model& model) const;

 private:
  /// A byte trie over token contents, searched leftmost-longest.
  struct trie {
    struct node {
      std::vector<std::pair<unsigned char, std::int32_t>> next;  ///< sorted by byte
      std::int32_t id = -1;
    };
    std::vector<node> nodes{1};
    std::bitset<256> first_bytes;

    void insert(std::string_view content, std::int32_t id);
    /// The longest token starting at `pos`: its end and id; end == pos when there is none.
    std::pair<std::size_t, std::int32_t> longest_at(std::string_view text, std::size_t pos) const;
  };

  /// The id a token new to both vocabularies gets: after the model's vocabulary, or after the
  /// highest added id once that is past it.
  std::int32_t next_id(const bpe_model& model) const;

  /// Applies single_word/lstrip/rstrip to the raw matches, as the library's find_matches does.
  std::vector<text_match> apply_flags(std::string_view text, const std::vector<text_match>& raw) const;

  std::unordered_map<std::string, std::int32_t, string_hash, std::equal_to<>> ids_;
  std::unordered_map<std::int32_t, added_token> tokens_;  ///< by id, latest flags win
  std::unordered_map<std::int32_t, std::string> normalized_content_;  ///< where it differs
  std::unordered_set<std::string, string_hash, std::equal_to<>> special_;
  std::vector<std::string> special_order_;  ///< special contents in the order first added
  std::vector<std::string> other_order_;    ///< then the others: the matchers' insertion order
  std::int32_t max_id_ = -1;                ///< highest id given to an added token
  trie raw_, normalized_;
};

}  // namespace mpakt::models
