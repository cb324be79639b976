#pragma once
/// A Jinja2 interpreter for the subset Hugging Face chat templates use, behaving as the
/// environment transformers' `apply_chat_template` builds: ImmutableSandboxedEnvironment with
/// trim_blocks and lstrip_blocks, the loopcontrols extension (break/continue), the
/// `{% generation %}` tag, transformers' `tojson`, `raise_exception`, `strftime_now`,
/// `namespace` and `dict` globals. docs/chat-templates.md lists the statements, filters,
/// tests and methods supported.
///
/// parse() turns a template's text into a program once; a construct outside the subset is
/// refused there, naming it and its line ("chat_template line 3: the 'include' statement is
/// not supported"). render() runs a program over variables; it never throws and refuses,
/// rather than crash or run away, templates or inputs that pass the limits below.
///
/// A program is immutable after parse() and may be rendered from any number of threads at
/// once; each render owns its values.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/models/jinja_value.hpp"
#include "runtime/status.hpp"

namespace mpakt::models::jinja {

/// Bounds against hostile templates and inputs. Real chat templates stay far below them.
struct limits {
  std::size_t max_source_bytes = std::size_t(1) << 20;   ///< template text
  int max_nesting = 128;                                 ///< blocks and expressions inside each other
  std::size_t max_output_bytes = std::size_t(32) << 20;  ///< rendered text, and any string built
  std::uint64_t max_steps = std::uint64_t(1) << 22;      ///< loop iterations and calls, all together
  int max_call_depth = 64;                               ///< macros calling macros
};

struct program;

/// Parses a template. `origin` names it in messages ("tokenizer_config.json: chat_template").
result<std::shared_ptr<const program>> parse(std::string_view source, std::string_view origin,
                                             const limits& lim = {});

/// What a render may read besides its variables.
struct render_options {
  limits lim;
  /// The local time strftime_now() formats, as seconds since 1970 in UTC; nullopt reads the
  /// clock. Tests fix it so that dated templates (Llama 3.1) render the same every day.
  std::optional<std::int64_t> now_utc_seconds;
};

/// Renders `p` with the given top-level variables (messages, add_generation_prompt, …).
/// Errors name the origin and line; a template's own raise_exception('…') is refused as
/// "<origin> line N raised an error: …" with its text.
result<std::string> render(const program& p, const std::vector<std::pair<std::string, value>>& variables,
                           const render_options& options = {});

/// Every piece of literal text the template may write: its text between tags and its string
/// literals. Callers look there for the special tokens a template uses.
std::vector<std::string> literal_texts(const program& p);

}  // namespace mpakt::models::jinja
