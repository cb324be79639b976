#pragma once
/// Text <-> token ids from a Hugging Face tokenizer.json, with the same ids as the `tokenizers`
/// library (checked by test/runtime/models/tokenizer_test.cpp against fixtures that library made).
///
/// Supported, because these are the families mpakt serves:
///  * byte-level BPE as GPT-2, Llama 3 and Qwen2 ship it: ByteLevel and/or Split pre-tokenizers
///    with the GPT-2 / Llama-3 / Qwen2 regexes, NFC normaliser, BPE with ignore_merges, ByteLevel
///    decoder and post-processor;
///  * SentencePiece-style BPE with byte fallback as Llama 2, Mistral and TinyStories ship it:
///    Prepend/Replace normalisers or a Metaspace pre-tokenizer, BPE with byte_fallback and
///    fuse_unk, Replace/ByteFallback/Fuse/Strip or Metaspace decoders;
///  * added tokens (special or not, with their single_word/lstrip/rstrip/normalized flags) and
///    TemplateProcessing post-processors.
/// Anything else is refused when loading, naming the field, rather than tokenized differently.
///
/// A tokenizer is immutable once built; copies share its tables, and one tokenizer may be used
/// from any number of threads at once.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.hpp"

namespace mpakt::models {

namespace detail {
struct tokenizer_data;
}

class tokenizer {
 public:
  /// Parses tokenizer.json text. Refuses what it cannot reproduce exactly (an unknown model,
  /// normalizer, pre-tokenizer, split regex, decoder or post-processor, truncation, fixed
  /// padding, BPE dropout), naming the field, e.g. "tokenizer.json: pre_tokenizer type
  /// 'Whitespace' is not supported".
  static result<tokenizer> from_json(std::string_view tokenizer_json);

  /// Text -> ids. Added tokens in the text become their ids as the library matches them;
  /// `add_special_tokens` applies the post-processor (e.g. Llama's leading <s>). Text that is
  /// not valid UTF-8 is first made valid by replacing each ill-formed part with U+FFFD.
  std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  /// Ids -> text through the decoder chain; ids the vocabulary lacks are skipped, and
  /// `skip_special_tokens` drops special added tokens. Always valid UTF-8.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;

  /// Added tokens first, then the model's vocabulary, as the library looks them up. Like the
  /// library, id_to_token gives an added token with normalized=true in its normalized form (the
  /// string decode() works from).
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(std::int32_t id) const;

  /// Distinct tokens of the vocabulary and the added tokens together (the library's
  /// get_vocab_size(with_added_tokens=True)).
  std::int32_t vocab_size() const;

  /// Whether `id` is a special added token (what decode's skip_special_tokens drops).
  bool is_special(std::int32_t id) const;

 private:
  friend class stream_decoder;
  explicit tokenizer(std::shared_ptr<const detail::tokenizer_data> data) : data_(std::move(data)) {}

  /// decode() that, when `hold_incomplete` is set, leaves out a trailing byte sequence that is
  /// valid UTF-8 so far but incomplete and reports it through `held` (for stream_decoder).
  std::string decode_impl(std::span<const std::int32_t> ids, bool skip_special_tokens, bool hold_incomplete,
                          bool* held) const;

  std::shared_ptr<const detail::tokenizer_data> data_;
};

/// Streaming detokenization for generation: push ids one at a time and get the text they
/// complete. Never emits part of a UTF-8 character: byte tokens (<0xE2>, byte-level pieces)
/// are held until their character is complete. Over a whole stream the emitted text equals
/// decode(all ids), because each push re-decodes a short window of recent ids (so that
/// decoders that look at the first token, like SentencePiece's strip of a leading space, see the
/// same context) and emits only what extends the text already emitted.
///
/// One exception, shared with the library's own DecodeStream: if byte tokens that already formed
/// complete characters are followed by bytes that make their run invalid, decode() turns the
/// whole run into U+FFFD while the stream has already emitted those characters; the stream then
/// emits U+FFFD only for the new bytes.
///
/// Keeps its own copy of the tokenizer (sharing its tables), so it may outlive the original.
/// Not thread-safe: one stream per generation. finish() ends a stream; the next push() starts a
/// new one.
class stream_decoder {
 public:
  explicit stream_decoder(const tokenizer& t, bool skip_special_tokens = true);

  /// Adds one id; returns the newly completed text (often empty), always valid UTF-8.
  std::string push(std::int32_t id);

  /// Flushes what is held back: a trailing incomplete character becomes U+FFFD, as decode()
  /// would render it. Resets the stream.
  std::string finish();

 private:
  /// The part of `text` beyond what was already emitted for the current window.
  std::string take_new_text(const std::string& text) const;

  tokenizer tokenizer_;
  bool skip_special_;
  std::vector<std::int32_t> window_;  ///< context ids (already emitted) then pending ids
  std::size_t context_ = 0;           ///< how many ids of window_ are context
  std::string emitted_;               ///< decode of window_ as far as it was emitted
};

}  // namespace mpakt::models
