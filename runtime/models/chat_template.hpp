#pragma once
/// Chat templates: a model's conversation format, as the model ships it.
///
/// tokenizer_config.json carries a Jinja `chat_template` (or a chat_template.jinja file beside
/// it does) that transformers runs in `apply_chat_template`. mpakt runs the same template with
/// its own interpreter of the Jinja subset chat templates use (runtime/models/jinja.hpp), in
/// the environment transformers gives it, so the text is byte for byte what
/// `apply_chat_template(messages, tokenize=False, …)` renders (checked against fixtures from
/// transformers for the templates of many model families, test/fixtures/chat_templates). A
/// template using a construct outside the subset is refused when the model is loaded, naming
/// the construct and its line; a model with no template at all (a base model) gets the
/// `plain` format. docs/chat-templates.md describes the subset and the choices made.
///
/// Everything here is a pure function of its arguments and safe to call from any thread; a
/// parsed chat_template is immutable and may be shared.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/models/jinja.hpp"
#include "runtime/status.hpp"

namespace mpakt::models {

/// One turn of a conversation, as the chat API takes it.
struct chat_message {
  std::string role;
  std::string content;
};

/// A model's chat template, read once from tokenizer_config.json by parse_chat_template.
struct chat_template {
  /// The parsed template; null for a model with none (the plain format).
  std::shared_ptr<const jinja::program> program;
  /// From tokenizer_config.json (a string or an {"content": …} object); may be empty.
  std::string bos_token;
  std::string eos_token;
  /// The special tokens the template sees as variables, as transformers passes them:
  /// bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token where the
  /// config sets them.
  std::vector<std::pair<std::string, std::string>> special_tokens;
  /// Token strings that end an assistant turn (derived as docs/chat-templates.md says: the
  /// marker the template writes after an assistant message, known end-of-turn tokens its text
  /// contains, and eos), without duplicates; the chat API turns them into stop ids.
  std::vector<std::string> stop_tokens;

  bool is_plain() const { return program == nullptr; }
  /// "plain" or "chat_template", as the chat API reports it.
  std::string_view format_name() const { return is_plain() ? "plain" : "chat_template"; }
};

/// Reads the chat template of a model from its tokenizer_config.json. `chat_template` may be
/// a string or a list of {"name", "template"} objects, of which "default" is used; absent or
/// null gives the plain format. A template the interpreter cannot run is refused naming the
/// field, the line and the construct ("tokenizer_config.json: chat_template line 3: the
/// 'include' statement is not supported").
result<chat_template> parse_chat_template(std::string_view tokenizer_config_json);

/// As above, for a model directory that also has a chat_template.jinja file: its text, when
/// not empty, takes precedence over tokenizer_config.json's chat_template, as in transformers.
/// bos_token and eos_token still come from tokenizer_config.json.
result<chat_template> parse_chat_template(std::string_view tokenizer_config_json,
                                          std::string_view chat_template_jinja);

/// What a render passes to the template besides the messages.
struct chat_render_options {
  bool add_generation_prompt = true;
  /// `tools`: a list of tool JSON schemas ({"type": "function", "function": {…}}), or
  /// nullopt for none (the template then sees tools=None, as in transformers).
  std::optional<jinja::value> tools;
  /// Further template variables (enable_thinking, date_string, …), as apply_chat_template's
  /// extra keyword arguments; they override the special tokens of the same name.
  std::vector<std::pair<std::string, jinja::value>> variables;
  /// The time strftime_now() reads, in seconds since 1970 (UTC); nullopt reads the clock.
  std::optional<std::int64_t> now_utc_seconds;
};

/// Renders a conversation as transformers' `apply_chat_template(messages, tokenize=False,
/// add_generation_prompt=…, tools=…, **variables)` does. `messages` is a list of message
/// dicts (role, content, and whatever else a template reads: tool_calls, reasoning_content,
/// content as a list of {type, text} parts…); keys whose value is None are dropped and
/// reasoning fields aliased, as transformers does before rendering. Refuses an empty
/// conversation, and whatever the template refuses (raise_exception, an error in the
/// template), with its message.
result<std::string> render_chat(const chat_template& t, const jinja::value& messages,
                                const chat_render_options& options);

/// The chat API's form: role/content messages.
result<std::string> render_chat(const chat_template& t, std::span<const chat_message> messages,
                                bool add_generation_prompt = true);

/// Whether `rendered` (what render_chat gave for this template) already begins with the BOS
/// token. When true the caller tokenizes with add_special_tokens=false so BOS is not doubled;
/// when false with add_special_tokens=true.
bool template_adds_bos(const chat_template& t, std::string_view rendered);

}  // namespace mpakt::models
