#pragma once
/// The OpenAI-compatible API (docs/api-reference.md, "OpenAI-compatible API"): its request
/// bodies read into chat requests, and its answers, chunks and errors written in OpenAI's
/// shapes. Pure functions; the conversation itself runs on chat's machinery (chat.hpp).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/api/chat_model.hpp"
#include "runtime/status.hpp"

namespace mpakt::http {

/// A refusal of a request body: the error and the request field at fault ("" when none).
struct openai_refusal {
  error err;
  std::string param;
};

/// POST /v1/chat/completions and POST /v1/completions bodies. Fields OpenAI defines that
/// mpakt cannot honour (n > 1, tools, logit_bias, suffix, …) are refused naming the field,
/// as are fields OpenAI does not define; null counts as absent. On failure `*why` says why.
std::optional<chat_request> parse_openai_chat(std::string_view body, openai_refusal* why);
std::optional<chat_request> parse_openai_completion(std::string_view body, openai_refusal* why);

/// {"error": {"message", "type", "param", "code"}} for an HTTP status (type and code from it).
std::string openai_error_json(int status, std::string_view message, std::string_view param = {});

/// Rewrites an error body of mpakt's shape ({"error": "message"}) into OpenAI's; other
/// bodies are returned as they are.
std::string openai_error_body(int status, const std::string& body);

/// One generated token as the API shows it.
struct openai_token {
  std::int64_t id = 0;
  std::string text;  ///< its text, as the model's tokenizer spells it alone
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  ///< alternatives, most likely first
};

/// The reply's text so far, held back where it might be the start of a stop string, with the
/// tokens that spelled it. Text handed out never contains a stop string nor a byte past
/// one; once a stop string appears, the text ends just before it.
class reply_text {
 public:
  explicit reply_text(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  /// Adds the text a token completed (possibly empty) and the token (none for text that
  /// belongs to no token shown, such as the decoder's last flush). Ignored once stopped.
  void add(std::string_view piece, std::optional<openai_token> token);
  /// Whether a stop string appeared.
  bool stopped() const { return stopped_; }

  struct part {
    std::string text;
    std::vector<openai_token> tokens;
  };
  /// Text (and tokens) that can be handed out now.
  part take();
  /// Everything not handed out yet: the end of the reply (no more tokens will come).
  part finish();
  /// The whole text handed out or handable (up to a stop string).
  const std::string& text() const { return text_; }

 private:
  part take_until(std::size_t end, bool last);

  std::vector<std::string> stops_;
  std::string text_;               ///< the reply, cut before a stop string once one appeared
  std::size_t given_ = 0;          ///< bytes of text_ handed out
  std::vector<openai_token> pending_;
  std::vector<std::size_t> ends_;  ///< where each pending token's text ends in text_
  bool stopped_ = false;
};

/// What every answer of one request repeats.
struct openai_meta {
  bool chat = true;  ///< chat.completion(s) or text_completion
  std::string id;    ///< chatcmpl-… / cmpl-…
  std::int64_t created = 0;
  std::string model;  ///< as the request named it
  bool logprobs = false;
  bool include_usage = false;  ///< streaming: every chunk has "usage" (null), then a usage chunk
};

struct openai_usage {
  std::uint64_t prompt = 0, completion = 0, cached = 0;
};

/// A streamed chunk: `text` and `tokens` (its log-probabilities), the role on the first chunk
/// of a chat reply, `finish` ("stop", "length") on the last.
std::string openai_chunk(const openai_meta& m, const std::string& text, const std::vector<openai_token>& tokens, bool first,
                         const char* finish);
/// The usage chunk that ends a stream with include_usage (its choices are empty).
std::string openai_usage_chunk(const openai_meta& m, const openai_usage& u);
/// The whole answer of a request that did not stream.
std::string openai_response(const openai_meta& m, const std::string& text, const std::vector<openai_token>& tokens,
                            const char* finish, const openai_usage& u);

}  // namespace mpakt::http
