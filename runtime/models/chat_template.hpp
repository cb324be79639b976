#pragma once
/// Chat templates: a model's conversation format, rendered in C++ without a Jinja engine.
///
/// tokenizer_config.json carries a Jinja `chat_template` that transformers runs in
/// `apply_chat_template`. mpakt does not embed Jinja: it recognises which family a template
/// belongs to (ChatML, Llama 3, Gemma, Mistral) from markers in its text and renders that
/// family's format here, byte for byte what transformers renders for system/user/assistant
/// conversations (checked against fixtures from transformers, test/fixtures/chat_templates).
/// A template present but of no known family is refused rather than guessed at; a model with
/// no template at all (a base model) gets the `plain` format. docs/chat-templates.md explains
/// the detection rules and the choices made.
///
/// Everything here is a pure function of its arguments and safe to call from any thread.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.hpp"

namespace mpakt::models {

/// The conversation formats mpakt renders.
enum class chat_format {
  chatml,   ///< `<|im_start|>{role}\n{content}<|im_end|>\n` (Qwen and many fine-tunes)
  llama3,   ///< `<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>` after BOS
  gemma,    ///< `<start_of_turn>{user|model}\n{content}<end_of_turn>\n` after BOS
  mistral,  ///< `[INST] {user} [/INST]{assistant}</s>` after BOS (the v0.1 layout)
  plain,    ///< no template (base models): the contents concatenated, nothing added
};

/// The format's display name, as used in error messages ("ChatML", "Llama 3", …).
std::string_view chat_format_name(chat_format f);

/// One turn of a conversation. `role` is "system", "user" or "assistant".
struct chat_message {
  std::string role;
  std::string content;
};

/// What render_chat needs to know about a model's chat template, read once from
/// tokenizer_config.json by parse_chat_template.
struct chat_template {
  chat_format format = chat_format::plain;
  /// From tokenizer_config.json (a string or an {"content": …} object); may be empty.
  std::string bos_token;
  std::string eos_token;
  /// Token strings that end an assistant turn for this format (e.g. "<|im_end|>",
  /// "<|eot_id|>", "<end_of_turn>", eos), without duplicates; the chat API turns them into
  /// stop ids.
  std::vector<std::string> stop_tokens;
  /// ChatML only: the system text the template inserts when a conversation does not start
  /// with a system message (Qwen style), or nullopt when it inserts none.
  std::optional<std::string> default_system;
  /// Gemma only: true when the template folds a leading system message into the first user
  /// turn (Gemma 3); false when it refuses any system message (Gemma 1 and 2).
  bool folds_system = true;
};

/// Reads the chat template of a model from its tokenizer_config.json. `chat_template` may be
/// a string or a list of {"name", "template"} objects, of which "default" is used; absent or
/// null gives the plain format. A template present but of no family mpakt renders is refused
/// naming the field ("tokenizer_config.json: chat_template is not a format mpakt renders
/// (ChatML, Llama 3, Gemma, Mistral)"), as is a known family's variant that renders
/// differently (Llama 3.1's dated system preamble, Mistral's later [INST] layouts).
result<chat_template> parse_chat_template(std::string_view tokenizer_config_json);

/// As above, for a model directory that also has a chat_template.jinja file: its text, when
/// not empty, takes precedence over tokenizer_config.json's chat_template, as in transformers.
/// bos_token and eos_token still come from tokenizer_config.json.
result<chat_template> parse_chat_template(std::string_view tokenizer_config_json,
                                          std::string_view chat_template_jinja);

/// Renders a conversation exactly as the family's template does under transformers'
/// `apply_chat_template(messages, tokenize=False, add_generation_prompt=…)`. Refuses, with a
/// message naming the message's index and role, what the template refuses: roles other than
/// system/user/assistant; for Gemma and Mistral, a system message anywhere but first (or with
/// no user turn to fold into) and roles that do not alternate user/assistant; for Gemma 1/2
/// templates, any system message. An empty conversation is refused for every format.
result<std::string> render_chat(const chat_template& t, std::span<const chat_message> messages,
                                bool add_generation_prompt = true);

/// Whether the rendered text already begins with the BOS token (Llama 3, Gemma, Mistral put
/// bos_token in the text). When true the caller tokenizes with add_special_tokens=false so
/// BOS is not doubled; when false (ChatML, plain) with add_special_tokens=true.
bool template_adds_bos(const chat_template& t);

}  // namespace mpakt::models
