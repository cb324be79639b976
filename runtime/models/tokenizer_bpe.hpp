#pragma once
/// The BPE model of a tokenizer.json: vocabulary, merge ranks, and the per-word merge loop.
///
/// Merges apply exactly as in the Hugging Face `tokenizers` library: the word starts as one
/// symbol per character (or per byte token with byte_fallback, or unk), then the pair of
/// adjacent symbols with the lowest merge rank is merged, the leftmost first among equal ranks,
/// until no adjacent pair has a rank. Immutable after build(); safe to share between threads.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/status.hpp"

namespace mpakt::models {

/// Hash and equality that let string maps be searched with a string_view, without a copy.
struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

using token_map = std::unordered_map<std::string, std::int32_t, string_hash, std::equal_to<>>;

/// What tokenizer.json's "model" object says, already checked for type.
struct bpe_config {
  token_map vocab;
  std::vector<std::pair<std::string, std::string>> merges;  ///< in rank order
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

/// Not copyable: its id table points into its own vocabulary. Moving keeps those pointers valid.
class bpe_model {
 public:
  bpe_model(bpe_model&&) = default;
  bpe_model& operator=(bpe_model&&) = default;
  bpe_model(const bpe_model&) = delete;
  bpe_model& operator=(const bpe_model&) = delete;

  /// Builds the merge table. Refuses merges whose parts or result are not in the vocabulary,
  /// and an unk_token missing from it (the library would fail at the first unknown character),
  /// naming the token.
  static result<bpe_model> build(bpe_config config);

  /// Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;

  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  /// The token of `id`, or nullptr when the vocabulary has no such id.
  const std::string* id_to_token(std::int32_t id) const;
  /// Entries in the vocabulary (what the library calls the model's vocab size).
  std::size_t size() const { return vocab_.size(); }
  const token_map& vocab() const { return vocab_; }

 private:
  bpe_model() = default;

  struct merge_rule {
    std::uint32_t rank;
    std::int32_t merged;
  };
  struct symbol {
    std::int32_t id;
    std::int32_t prev;
    std::int32_t next;
    bool removed;
  };

  /// The initial symbols of `word`: characters, byte tokens, unk (fused or not).
  void initial_symbols(std::string_view word, std::vector<symbol>& symbols) const;
  void merge_all(std::vector<symbol>& symbols) const;
  const merge_rule* find_merge(std::int32_t left, std::int32_t right) const;

  token_map vocab_;
  std::vector<const std::string*> by_id_;  ///< id -> its entry in vocab_, or nullptr
  std::unordered_map<std::uint64_t, merge_rule> merges_;
  std::array<std::int32_t, 256> byte_ids_{};  ///< id of "<0xXX>" per byte, -1 if absent
  std::int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
};

}  // namespace mpakt::models
