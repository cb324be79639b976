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

/// Which API a chat-style request came through: it decides how the reply is written.
enum class chat_api { mpakt, openai_chat, openai_completion };

/// A POST /api/v3/chat body (decisions.md, "Chat"), or an OpenAI-compatible one (openai.hpp).
struct chat_request {
  chat_api api = chat_api::mpakt;
  std::string model_name;  ///< the request's `model`, as given (echoed by the OpenAI API)
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
  bool cache = true;  ///< reuse and keep conversations' sessions (the prefix cache)
  /// Tool schemas (a JSON array of {"type": "function", "function": {…}}) for the chat
  /// template's `tools`, as transformers passes them; empty: none (tools=None).
  std::string tools_json;
  // The OpenAI-compatible API's settings besides those above.
  bool has_prompt = false;               ///< completions: a raw prompt instead of messages
  std::string prompt_text;               ///< … given as text (tokenized as the model's tokenizer does)
  std::vector<std::int32_t> prompt_ids;  ///< … or as token ids (when prompt_text is empty)
  bool echo = false;                     ///< completions: the reply's text begins with the prompt
  std::vector<std::string> stop;         ///< strings that end the reply, never part of it
  std::int32_t logprobs = -1;            ///< -1: none; n: each token's and n alternatives
  double presence_penalty = 0, frequency_penalty = 0;
  bool penalize_prompt = true;  ///< false: penalties count the reply's tokens only
  bool include_usage = false;   ///< streaming: a last chunk with the token counts
};

/// Parses and checks the body; errors name the field. A body over chat_max_body_bytes is
/// refused (413) before it is parsed.
result<chat_request> parse_chat_request(std::string_view body);

/// A request's `tools` (an array of objects, at most 128) as JSON text for chat_request's
/// tools_json ("" for an empty array); refused naming `what` otherwise.
result<std::string> tools_text(const rapidjson::Value& v, const std::string& what);

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

  /// Prompt ids for a conversation (the format's text, with BOS as the model expects), the
  /// template seeing `tools_json`'s tools (none when empty).
  result<std::vector<std::int32_t>> prompt(const std::vector<models::chat_message>& messages,
                                           const std::string& tools_json = {}) const;
  /// Prompt ids of a completion request: its text tokenized with the tokenizer's special
  /// tokens (BOS as the model expects), or its ids checked against the vocabulary.
  result<std::vector<std::int32_t>> raw_prompt(const chat_request& r) const;
  /// A token's text as it reads inside a text (a SentencePiece word start keeps its space).
  std::string piece(std::int32_t id) const;
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
