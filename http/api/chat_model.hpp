#pragma once
/// What POST /api/v3/chat needs besides the actors: the request, parsed and checked, and a
/// model's chat side (tokenizer, conversation format, stop ids, graphs), built once from the
/// files beside its checkpoint. Pure functions; no actors, no I/O.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/models/chat_template.hpp"
#include "runtime/models/arch.hpp"
#include "runtime/models/tokenizer.hpp"
#include "runtime/status.hpp"

namespace mpakt::http {

/// Longest context chat allocates per conversation (rows of every KV cache), whatever the
/// model's max_position_embeddings says.
constexpr int chat_max_context = 4096;

/// Largest chat request body read at all (413 above it): ample for any conversation that fits
/// chat_max_context tokens, and a bound on what one request makes the coordinator parse.
constexpr std::size_t chat_max_body_bytes = std::size_t(16) << 20;

/// Bytes of message text one token may stand for, per byte of its longest vocabulary piece:
/// normalisers (NFC composing Hangul jamo, Replace) may shrink text up to about 3 to 1.
constexpr std::size_t chat_bytes_per_piece_byte = 4;

/// A POST /api/v3/chat body (decisions.md, "Chat").
struct chat_request {
  std::string model_id;  ///< "m_…": a model this account loaded
  std::string source;    ///< or a source to load (reused when this account already loaded it)
  std::vector<models::chat_message> messages;
  std::uint32_t max_tokens = 256;
  double temperature = 0.7;
  std::optional<double> top_k, top_p;
  std::optional<std::int64_t> seed;
  double repetition_penalty = 1.1;
  bool speculative = true;
  bool stream = true;
};

/// Parses and checks the body; errors name the field. A body over chat_max_body_bytes is
/// refused (413) before it is parsed.
result<chat_request> parse_chat_request(std::string_view body);

/// A model's chat side, built once per model and shared by its conversations (immutable).
struct chat_model {
  models::arch_config config;
  models::tokenizer tokenizer;
  models::chat_template format;
  std::vector<std::int64_t> stop_ids;  ///< eos and the format's end-of-turn tokens
  int context = 0;                     ///< cache rows per conversation
  /// Messages holding more bytes of text than this (all together) cannot fit `context`
  /// tokens: context × the longest vocabulary piece × chat_bytes_per_piece_byte. Checked
  /// before anything is rendered or tokenized.
  std::size_t max_message_bytes = 0;
  /// Speculative decoding is off for models whose session state a rejected draft would
  /// corrupt (LFM2's convolution states).
  bool can_speculate = true;

  /// Prompt ids for a conversation (the format's text, with BOS as the model expects).
  result<std::vector<std::int32_t>> prompt(const std::vector<models::chat_message>& messages) const;
};

/// Builds the chat side from config.json, tokenizer.json, tokenizer_config.json and
/// chat_template.jinja (which wins over tokenizer_config.json's template when present). Refuses,
/// naming the field or file, a model chat cannot serve exactly (an architecture the graph
/// builder does not map, no tokenizer.json, a chat template using Jinja the interpreter does not
/// support).
result<std::shared_ptr<const chat_model>> make_chat_model(std::string_view config_json, std::string_view tokenizer_json,
                                                           std::string_view tokenizer_config_json,
                                                           std::string_view chat_template_jinja = {});

}  // namespace mpakt::http
