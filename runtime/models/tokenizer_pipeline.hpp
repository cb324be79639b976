#pragma once
/// The inside of a tokenizer (runtime/models/tokenizer.hpp): its parsed tokenizer.json and the
/// stages text goes through, in the `tokenizers` library's order:
///   added tokens (raw) -> normalizers -> added tokens (normalized) -> pre-tokenizers -> BPE
///   -> post-processors;  and for ids: tokens -> decoders -> text.
/// Sequence steps of tokenizer.json are flattened into these lists, which the library's
/// Sequence types apply one after the other in the same way. Everything here is immutable once
/// parsed and free of shared state, so one tokenizer_data serves any number of threads.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/models/tokenizer_added.hpp"
#include "runtime/models/tokenizer_bpe.hpp"
#include "runtime/models/tokenizer_split.hpp"
#include "runtime/status.hpp"

namespace mpakt::models::detail {

struct normalizer_step {
  enum class kind { prepend, replace, nfc };
  kind what = kind::nfc;
  std::string text;     ///< prepend: the prefix; replace: the string replaced
  std::string content;  ///< replace: what replaces it
};

/// Metaspace's prepend_scheme: add the replacement before every piece, only before the piece
/// at the very start of the text, or never.
enum class prepend_scheme { always, first, never };

struct pre_tokenizer_step {
  enum class kind { byte_level, split, metaspace };
  kind what = kind::byte_level;
  bool add_prefix_space = false;                ///< byte_level
  bool use_regex = true;                        ///< byte_level: split with the GPT-2 regex
  split_pattern pattern = split_pattern::gpt2;  ///< split
  std::string replacement;                      ///< metaspace: one character, usually ▁
  prepend_scheme scheme = prepend_scheme::always;
  bool split = true;  ///< metaspace: cut before each replacement character
};

struct decoder_step {
  enum class kind { byte_level, replace, byte_fallback, fuse, strip, metaspace };
  kind what = kind::fuse;
  std::string pattern;  ///< replace: the string replaced; metaspace: the replacement character
  std::string content;  ///< replace: what replaces it; strip: the character stripped
  std::size_t start = 0;  ///< strip: at most this many leading `content` characters
  std::size_t stop = 0;   ///< strip: at most this many trailing ones
  bool prepend = true;    ///< metaspace: prepend_scheme is not never (drop the first token's ▁)
};

/// One item of a TemplateProcessing "single" template: the encoded text, or special ids.
struct template_item {
  bool sequence = false;
  std::vector<std::int32_t> ids;
};

struct tokenizer_data {
  explicit tokenizer_data(bpe_model m) : model(std::move(m)) {}

  bpe_model model;
  added_vocabulary added;
  std::vector<normalizer_step> normalizers;
  std::vector<pre_tokenizer_step> pre_tokenizers;
  std::vector<decoder_step> decoders;  ///< empty: join tokens with spaces, as with no decoder
  std::vector<std::vector<template_item>> templates;  ///< TemplateProcessing steps, in order
  std::int32_t vocab_size = 0;
};

/// Text between added tokens on its way to the model, or an added token already found.
struct piece {
  std::string text;
  std::int32_t id = -1;    ///< the added token's id, or -1
  bool at_origin = false;  ///< starts at the beginning of the original text (Metaspace "first")
};

/// Parses tokenizer.json; see tokenizer::from_json for what is refused.
result<std::shared_ptr<const tokenizer_data>> parse_tokenizer_json(std::string_view json);

/// Applies the normalizer chain to one piece of text.
std::string normalize(const std::vector<normalizer_step>& steps, std::string text);

/// Applies the pre-tokenizer chain; pieces that are added tokens pass through untouched.
void pre_tokenize(const std::vector<pre_tokenizer_step>& steps, std::vector<piece>& pieces);

/// Runs the decoder chain over token strings and joins the result. With `hold_incomplete`, a
/// trailing byte sequence that is valid UTF-8 so far but incomplete is left out (and *held set)
/// instead of becoming U+FFFD, so that a stream can wait for the rest of the character.
std::string run_decoders(const std::vector<decoder_step>& steps, std::vector<std::string> tokens,
                         bool hold_incomplete, bool* held);

}  // namespace mpakt::models::detail
