#include "http/api/openai.hpp"

#include <rapidjson/document.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "actors/errors.hpp"
#include "actors/json_text.hpp"
#include "actors/protocol.hpp"
#include "runtime/json.hpp"

namespace mpakt::http {

namespace {

/// The same bounds as chat's settings (chat_model.cpp).
constexpr std::int64_t max_top_k = std::int64_t(1) << 30;
constexpr std::int64_t max_seed = std::int64_t(1) << 53;
/// OpenAI's own bounds.
constexpr std::size_t max_stops = 4;
constexpr std::int64_t max_reply_tokens = std::int64_t(1) << 20;

/// Reads one request body; every reader records the field it refuses.
class body_reader {
 public:
  explicit body_reader(openai_refusal* why) : why_(why) {}

  bool fail(std::string param, std::string message, errc code = errc::invalid) {
    if (why_) *why_ = openai_refusal{error{code, std::move(message)}, std::move(param)};
    return false;
  }

  /// The member `k`, or nullptr when absent or null.
  static const rapidjson::Value* get(const rapidjson::Value& o, const char* k) {
    auto it = o.FindMember(k);
    return it == o.MemberEnd() || it->value.IsNull() ? nullptr : &it->value;
  }

  bool number(const rapidjson::Value& o, const char* k, double lo, double hi, double& out) {
    const auto* v = get(o, k);
    if (!v) return true;
    if (!v->IsNumber()) return fail(k, std::string(k) + " must be a number");
    const double x = v->GetDouble();
    if (!std::isfinite(x) || x < lo || x > hi)
      return fail(k, std::string(k) + " must be between " + json_number(lo) + " and " + json_number(hi) + ", not " +
                         json_number_text(*v));
    out = x;
    return true;
  }

  bool integer(const rapidjson::Value& o, const char* k, std::int64_t lo, std::int64_t hi, std::optional<std::int64_t>& out) {
    const auto* v = get(o, k);
    if (!v) return true;
    auto n = json_integer(*v, k, lo, hi);
    if (!n) return fail(k, n.err().message);
    out = *n;
    return true;
  }

  bool boolean(const rapidjson::Value& o, const char* k, bool& out) {
    const auto* v = get(o, k);
    if (!v) return true;
    if (!v->IsBool()) return fail(k, std::string(k) + " must be true or false");
    out = v->GetBool();
    return true;
  }

  static std::string json_number(double x) {
    std::string s = std::to_string(x);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }

 private:
  openai_refusal* why_;
};

/// The fields both endpoints share: model, sampling, stop, n, stream, penalties, user.
bool read_common(body_reader& r, const rapidjson::Document& d, chat_request& out, bool chat) {
  const auto* model = body_reader::get(d, "model");
  if (!model || !model->IsString() || model->GetStringLength() == 0)
    return r.fail("model", "model must name a loaded model (its modelId, m_…) or a source to load, such as \"hf:Org/Name\"");
  out.model_name.assign(model->GetString(), model->GetStringLength());
  (out.model_name.rfind("m_", 0) == 0 ? out.model_id : out.source) = out.model_name;

  out.temperature = 1;  // OpenAI's defaults: no penalty, temperature 1
  out.repetition_penalty = 1;
  out.penalize_prompt = false;
  if (!r.number(d, "temperature", 0, 2, out.temperature)) return false;
  double top_p = 1;
  if (!r.number(d, "top_p", 0, 1, top_p)) return false;
  if (const auto* v = body_reader::get(d, "top_p"); v && top_p <= 0) return r.fail("top_p", "top_p must be greater than 0");
  if (top_p < 1) out.top_p = top_p;
  std::optional<std::int64_t> n;
  if (!r.integer(d, "top_k", 0, max_top_k, n)) return false;
  if (n && *n > 0) out.top_k = double(*n);
  n.reset();
  if (!r.integer(d, "seed", 0, max_seed, n)) return false;
  if (n) out.seed = *n;
  if (!r.number(d, "presence_penalty", -2, 2, out.presence_penalty)) return false;
  if (!r.number(d, "frequency_penalty", -2, 2, out.frequency_penalty)) return false;
  if (!r.number(d, "repetition_penalty", 0.01, 10, out.repetition_penalty)) return false;
  if (!r.boolean(d, "speculative", out.speculative)) return false;

  n.reset();
  if (!r.integer(d, "n", 1, max_seed, n)) return false;
  if (n && *n != 1) return r.fail("n", "n must be 1: one choice per request (send more requests for more choices)");
  if (!chat) {
    n.reset();
    if (!r.integer(d, "best_of", 1, max_seed, n)) return false;
    if (n && *n != 1) return r.fail("best_of", "best_of must be 1: one choice per request");
  }

  if (const auto* v = body_reader::get(d, "stop")) {
    if (v->IsString()) {
      out.stop.emplace_back(v->GetString(), v->GetStringLength());
    } else if (v->IsArray()) {
      if (v->Size() > max_stops) return r.fail("stop", "stop holds " + std::to_string(v->Size()) + " strings, more than 4");
      for (rapidjson::SizeType i = 0; i < v->Size(); ++i) {
        if (!(*v)[i].IsString()) return r.fail("stop", "stop[" + std::to_string(i) + "] must be a string");
        out.stop.emplace_back((*v)[i].GetString(), (*v)[i].GetStringLength());
      }
    } else {
      return r.fail("stop", "stop must be a string or an array of up to 4 strings");
    }
    for (std::size_t i = 0; i < out.stop.size(); ++i)
      if (out.stop[i].empty()) return r.fail("stop", "stop strings must not be empty");
  }

  out.stream = false;
  if (!r.boolean(d, "stream", out.stream)) return false;
  if (const auto* v = body_reader::get(d, "stream_options")) {
    if (!out.stream) return r.fail("stream_options", "stream_options is only allowed with stream: true");
    if (!v->IsObject()) return r.fail("stream_options", "stream_options must be an object");
    for (auto it = v->MemberBegin(); it != v->MemberEnd(); ++it)
      if (std::string_view(it->name.GetString()) != "include_usage")
        return r.fail("stream_options", std::string("stream_options has an unknown field \"") + it->name.GetString() + "\"");
    if (!r.boolean(*v, "include_usage", out.include_usage)) return false;
  }

  if (const auto* v = body_reader::get(d, "user"); v && !v->IsString()) return r.fail("user", "user must be a string");
  if (const auto* v = body_reader::get(d, "logit_bias")) {
    if (!v->IsObject()) return r.fail("logit_bias", "logit_bias must be an object");
    if (v->MemberCount() > 0) return r.fail("logit_bias", "logit_bias is not supported");
  }
  return true;
}

/// The text of a chat message's content: a string, or an array of text parts.
bool content_text(body_reader& r, const rapidjson::Value& v, const std::string& at, std::string& out) {
  if (v.IsString()) {
    out.assign(v.GetString(), v.GetStringLength());
    return true;
  }
  if (!v.IsArray()) return r.fail(at, at + " must be a string or an array of text parts");
  for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
    const std::string part = at + "[" + std::to_string(i) + "]";
    const auto& p = v[i];
    const auto* type = p.IsObject() ? body_reader::get(p, "type") : nullptr;
    if (!type || !type->IsString()) return r.fail(at, part + " must be an object with a type");
    if (std::string_view(type->GetString()) != "text")
      return r.fail(at, part + " is of type \"" + std::string(type->GetString()) + "\"; only text parts are supported");
    const auto* text = body_reader::get(p, "text");
    if (!text || !text->IsString()) return r.fail(at, part + ".text must be a string");
    out.append(text->GetString(), text->GetStringLength());
  }
  return true;
}

bool read_messages(body_reader& r, const rapidjson::Document& d, chat_request& out) {
  const auto* v = body_reader::get(d, "messages");
  if (!v || !v->IsArray() || v->Empty()) return r.fail("messages", "messages must be a non-empty array of {role, content}");
  if (v->Size() > 1024) return r.fail("messages", "messages holds " + std::to_string(v->Size()) + " messages, more than 1024");
  for (rapidjson::SizeType i = 0; i < v->Size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const auto& m = (*v)[i];
    if (!m.IsObject()) return r.fail(at, at + " must be an object {role, content}");
    for (auto it = m.MemberBegin(); it != m.MemberEnd(); ++it) {
      const std::string_view k = it->name.GetString();
      if (k != "role" && k != "content" && k != "name")
        return r.fail(at + "." + std::string(k), at + " has a field \"" + std::string(k) +
                                                     "\" that is not supported (tool calls are not)");
    }
    const auto* role = body_reader::get(m, "role");
    if (!role || !role->IsString()) return r.fail(at + ".role", at + ".role must be a string");
    std::string name(role->GetString(), role->GetStringLength());
    if (name == "developer") name = "system";  // OpenAI's newer name for the system role
    if (name != "system" && name != "user" && name != "assistant")
      return r.fail(at + ".role", at + ".role must be system, developer, user or assistant, not \"" + name + "\"");
    const auto* content = body_reader::get(m, "content");
    if (!content) return r.fail(at + ".content", at + ".content is missing");
    std::string text;
    if (!content_text(r, *content, at + ".content", text)) return false;
    out.messages.push_back({name, std::move(text)});
  }
  return true;
}

bool known_fields(body_reader& r, const rapidjson::Document& d, const std::set<std::string_view>& known,
                  const std::set<std::string_view>& unsupported) {
  for (auto it = d.MemberBegin(); it != d.MemberEnd(); ++it) {
    const std::string_view k(it->name.GetString(), it->name.GetStringLength());
    if (known.count(k)) continue;
    if (unsupported.count(k) && it->value.IsNull()) continue;
    if (unsupported.count(k)) return r.fail(std::string(k), std::string(k) + " is not supported");
    return r.fail(std::string(k), "Unrecognized request argument supplied: " + std::string(k));
  }
  return true;
}

std::optional<rapidjson::Document> parse_body(std::string_view body, body_reader& r) {
  if (body.size() > chat_max_body_bytes) {
    r.fail("", "the request body is " + std::to_string(body.size()) + " bytes, more than the " +
                   std::to_string(chat_max_body_bytes) + " any prompt that fits a context needs",
           errc::too_large);
    return std::nullopt;
  }
  auto parsed = parse_json_object(body, "request body");
  if (!parsed) {
    r.fail("", parsed.err().message, parsed.err().code);
    return std::nullopt;
  }
  return std::move(*parsed);
}

const char* type_of(int status) {
  switch (status) {
    case 400: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 409: return "conflict_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable_error";
    case 504: return "timeout_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

const char* code_of(int status) {
  switch (status) {
    case 401: return "invalid_api_key";
    case 404: return "not_found";
    case 413: return "request_too_large";
    case 429: return "rate_limit_exceeded";
    default: return nullptr;
  }
}

}  // namespace

std::optional<chat_request> parse_openai_chat(std::string_view body, openai_refusal* why) {
  body_reader r(why);
  auto d = parse_body(body, r);
  if (!d) return std::nullopt;
  if (!known_fields(r, *d,
                    {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed",
                     "stop", "n", "stream", "stream_options", "logprobs", "top_logprobs", "presence_penalty",
                     "frequency_penalty", "repetition_penalty", "user", "logit_bias", "speculative", "tools",
                     "tool_choice", "parallel_tool_calls"},
                    {"functions", "function_call", "response_format", "audio", "modalities", "prediction",
                     "reasoning_effort", "service_tier", "store", "metadata"}))
    return std::nullopt;
  chat_request out;
  out.api = chat_api::openai_chat;
  out.max_tokens = std::uint32_t(max_reply_tokens);  // OpenAI's default: up to the context's end
  if (!read_common(r, *d, out, true) || !read_messages(r, *d, out)) return std::nullopt;
  for (const char* k : {"max_completion_tokens", "max_tokens"}) {
    std::optional<std::int64_t> n;
    if (!r.integer(*d, k, 1, max_reply_tokens, n)) return std::nullopt;
    if (n) {
      out.max_tokens = std::uint32_t(*n);
      break;
    }
  }
  bool logprobs = false;
  if (!r.boolean(*d, "logprobs", logprobs)) return std::nullopt;
  std::optional<std::int64_t> top;
  if (!r.integer(*d, "top_logprobs", 0, max_top_logprobs, top)) return std::nullopt;
  if (top && !logprobs) return r.fail("top_logprobs", "top_logprobs needs logprobs: true"), std::nullopt;
  if (logprobs) out.logprobs = std::int32_t(top.value_or(0));
  // Tools reach the chat template as transformers passes them; the reply is text (tool calls
  // in it are not parsed yet), so a choice that forces a call cannot be honoured.
  std::string choice = "auto";
  if (const auto* c = body_reader::get(*d, "tool_choice")) {
    if (!c->IsString() || (std::string_view(c->GetString()) != "auto" && std::string_view(c->GetString()) != "none"))
      return r.fail("tool_choice", "tool_choice must be \"auto\" or \"none\": a call cannot be forced"), std::nullopt;
    choice = c->GetString();
  }
  bool parallel = true;
  if (!r.boolean(*d, "parallel_tool_calls", parallel)) return std::nullopt;
  if (const auto* t = body_reader::get(*d, "tools"); t && choice != "none") {
    auto tools = tools_text(*t, "tools");
    if (!tools) return r.fail("tools", tools.err().message), std::nullopt;
    out.tools_json = std::move(*tools);
  }
  return out;
}

std::optional<chat_request> parse_openai_completion(std::string_view body, openai_refusal* why) {
  body_reader r(why);
  auto d = parse_body(body, r);
  if (!d) return std::nullopt;
  if (!known_fields(r, *d,
                    {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n", "best_of",
                     "stream", "stream_options", "logprobs", "echo", "presence_penalty", "frequency_penalty",
                     "repetition_penalty", "user", "logit_bias", "suffix", "speculative"},
                    {}))
    return std::nullopt;
  chat_request out;
  out.api = chat_api::openai_completion;
  out.has_prompt = true;
  out.max_tokens = 16;  // OpenAI's default for completions
  if (!read_common(r, *d, out, false)) return std::nullopt;
  const auto* p = body_reader::get(*d, "prompt");
  auto ids_of = [&](const rapidjson::Value& a) {
    for (rapidjson::SizeType i = 0; i < a.Size(); ++i) {
      auto id = json_integer(a[i], "prompt[" + std::to_string(i) + "]", 0, std::numeric_limits<std::int32_t>::max());
      if (!id) return r.fail("prompt", id.err().message);
      out.prompt_ids.push_back(std::int32_t(*id));
    }
    return true;
  };
  if (!p) return r.fail("prompt", "prompt must be a string or an array of token ids"), std::nullopt;
  if (p->IsString()) {
    out.prompt_text.assign(p->GetString(), p->GetStringLength());
  } else if (p->IsArray() && p->Size() == 1 && (*p)[0].IsString()) {
    out.prompt_text.assign((*p)[0].GetString(), (*p)[0].GetStringLength());
  } else if (p->IsArray() && p->Size() == 1 && (*p)[0].IsArray()) {
    if (!ids_of((*p)[0])) return std::nullopt;
  } else if (p->IsArray() && !p->Empty() && (*p)[0].IsNumber()) {
    if (!ids_of(*p)) return std::nullopt;
  } else if (p->IsArray() && p->Size() > 1) {
    return r.fail("prompt", "prompt holds " + std::to_string(p->Size()) + " prompts; give one per request"), std::nullopt;
  } else {
    return r.fail("prompt", "prompt must be a string or an array of token ids"), std::nullopt;
  }
  if (out.prompt_text.empty() && out.prompt_ids.empty()) return r.fail("prompt", "prompt is empty"), std::nullopt;
  std::optional<std::int64_t> n;
  if (!r.integer(*d, "max_tokens", 1, max_reply_tokens, n)) return std::nullopt;
  if (n) out.max_tokens = std::uint32_t(*n);
  n.reset();
  if (!r.integer(*d, "logprobs", 0, max_top_logprobs, n)) return std::nullopt;
  if (n) out.logprobs = std::int32_t(*n);
  if (!r.boolean(*d, "echo", out.echo)) return std::nullopt;
  if (out.echo && out.logprobs >= 0)
    return r.fail("echo", "echo with logprobs is not supported (the prompt's tokens would need theirs)"), std::nullopt;
  if (const auto* s = body_reader::get(*d, "suffix"); s && !(s->IsString() && s->GetStringLength() == 0))
    return r.fail("suffix", "suffix is not supported"), std::nullopt;
  return out;
}

std::string openai_error_json(int status, std::string_view message, std::string_view param) {
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "error");
    w.StartObject();
    kv(w, "message", std::string(message));
    kv(w, "type", type_of(status));
    key(w, "param");
    if (param.empty()) w.Null();
    else str(w, std::string(param));
    key(w, "code");
    if (const char* c = code_of(status)) str(w, c);
    else w.Null();
    w.EndObject();
    w.EndObject();
  });
}

std::string openai_error_body(int status, const std::string& body) {
  rapidjson::Document d;
  d.Parse(body.c_str(), body.size());
  if (d.HasParseError() || !d.IsObject()) return body;
  auto it = d.FindMember("error");
  if (it == d.MemberEnd() || !it->value.IsString()) return body;
  return openai_error_json(status, std::string_view(it->value.GetString(), it->value.GetStringLength()));
}

// ---- the reply's text

void reply_text::add(std::string_view piece, std::optional<openai_token> token) {
  if (stopped_) return;
  const std::size_t before = text_.size();
  text_.append(piece);
  if (token) {
    pending_.push_back(std::move(*token));
    ends_.push_back(text_.size());
  }
  // The earliest stop string that now appears: it ends in the new text and begins in text
  // not handed out (take() held back every end that could begin one).
  std::size_t longest = 0;
  for (const auto& s : stops_) longest = std::max(longest, s.size());
  const std::size_t from = std::max(before >= longest ? before - longest + 1 : 0, given_);
  std::size_t cut = std::string::npos;
  for (const auto& s : stops_) cut = std::min(cut, text_.find(s, from));
  if (cut == std::string::npos) return;
  stopped_ = true;
  text_.resize(cut);
}

reply_text::part reply_text::take_until(std::size_t end, bool last) {
  part out;
  out.text = text_.substr(given_, end - given_);
  given_ = end;
  // A token goes out with the text that ends it; at the end, every token that began before
  // the reply's end (a token the cut went through included).
  std::size_t n = 0;
  std::size_t start = 0;
  while (n < pending_.size()) {
    const std::size_t token_end = ends_[n];
    if (token_end <= end) {
      ++n;
      start = token_end;
      continue;
    }
    if (last && start < end) ++n;
    break;
  }
  out.tokens.assign(std::make_move_iterator(pending_.begin()), std::make_move_iterator(pending_.begin() + std::ptrdiff_t(n)));
  pending_.erase(pending_.begin(), pending_.begin() + std::ptrdiff_t(n));
  ends_.erase(ends_.begin(), ends_.begin() + std::ptrdiff_t(n));
  return out;
}

reply_text::part reply_text::take() {
  if (stopped_) return take_until(text_.size(), false);
  // Hold back the longest end of the text that could begin a stop string.
  std::size_t hold = 0;
  for (const auto& s : stops_)
    for (std::size_t k = std::min(s.size() - 1, text_.size() - given_); k > hold; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return take_until(text_.size() - hold, false);
}

reply_text::part reply_text::finish() { return take_until(text_.size(), true); }

// ---- answers

namespace {

void write_chat_logprobs(json_writer& w, const std::vector<openai_token>& tokens) {
  auto entry = [&](const std::string& text, float lp) {
    kv(w, "token", text);
    key(w, "logprob");
    if (std::isnan(lp)) w.Null();
    else w.Double(double(lp));
    key(w, "bytes");
    w.StartArray();
    for (unsigned char c : text) w.Uint(c);
    w.EndArray();
  };
  w.StartObject();
  key(w, "content");
  w.StartArray();
  for (const auto& t : tokens) {
    w.StartObject();
    entry(t.text, t.logprob);
    key(w, "top_logprobs");
    w.StartArray();
    for (const auto& [text, lp] : t.top) {
      w.StartObject();
      entry(text, lp);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  key(w, "refusal");
  w.Null();
  w.EndObject();
}

void write_completion_logprobs(json_writer& w, const std::vector<openai_token>& tokens, std::size_t offset) {
  auto number = [&](float lp) {
    if (std::isnan(lp)) w.Null();
    else w.Double(double(lp));
  };
  w.StartObject();
  key(w, "tokens");
  w.StartArray();
  for (const auto& t : tokens) str(w, t.text);
  w.EndArray();
  key(w, "token_logprobs");
  w.StartArray();
  for (const auto& t : tokens) number(t.logprob);
  w.EndArray();
  key(w, "top_logprobs");
  w.StartArray();
  for (const auto& t : tokens) {
    w.StartObject();
    std::set<std::string> seen;  // (an object: two ids spelled alike keep the likelier)
    for (const auto& [text, lp] : t.top)
      if (seen.insert(text).second) {
        key(w, text.c_str());
        number(lp);
      }
    w.EndObject();
  }
  w.EndArray();
  key(w, "text_offset");
  w.StartArray();
  for (const auto& t : tokens) {
    w.Uint64(offset);
    offset += t.text.size();
  }
  w.EndArray();
  w.EndObject();
}

void write_head(json_writer& w, const openai_meta& m, bool chunk) {
  kv(w, "id", m.id);
  kv(w, "object", m.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
  key(w, "created");
  w.Int64(m.created);
  kv(w, "model", m.model);
  key(w, "system_fingerprint");
  w.Null();
}

/// Opens an answer or chunk up to its one choice's index: {"id", "object", …, "choices":
/// [{"index": 0 — the choice's own fields follow.
void open_answer(json_writer& w, const openai_meta& m, bool chunk) {
  w.StartObject();
  write_head(w, m, chunk);
  key(w, "choices");
  w.StartArray();
  w.StartObject();
  key(w, "index");
  w.Int(0);
}

/// The choice's "logprobs": its tokens' in the endpoint's shape, or null (when not asked
/// for, or — a chunk — when the chunk carries no token).
void write_logprobs(json_writer& w, const openai_meta& m, const std::vector<openai_token>& tokens, bool null_when_none) {
  key(w, "logprobs");
  if (!m.logprobs || (null_when_none && tokens.empty())) return void(w.Null());
  if (m.chat) write_chat_logprobs(w, tokens);
  else write_completion_logprobs(w, tokens, 0);
}

void write_usage(json_writer& w, const openai_usage& u) {
  w.StartObject();
  key(w, "prompt_tokens");
  w.Uint64(u.prompt);
  key(w, "completion_tokens");
  w.Uint64(u.completion);
  key(w, "total_tokens");
  w.Uint64(u.prompt + u.completion);
  key(w, "prompt_tokens_details");
  w.StartObject();
  key(w, "cached_tokens");
  w.Uint64(u.cached);
  w.EndObject();
  w.EndObject();
}

}  // namespace

std::string openai_chunk(const openai_meta& m, const std::string& text, const std::vector<openai_token>& tokens, bool first,
                         const char* finish) {
  return json([&](json_writer& w) {
    open_answer(w, m, true);
    if (m.chat) {
      key(w, "delta");
      w.StartObject();
      if (first) kv(w, "role", "assistant");
      if (first || !text.empty()) kv(w, "content", text);
      w.EndObject();
    } else {
      kv(w, "text", text);
    }
    write_logprobs(w, m, tokens, true);
    key(w, "finish_reason");
    if (finish) str(w, finish);
    else w.Null();
    w.EndObject();
    w.EndArray();
    if (m.include_usage) {
      key(w, "usage");
      w.Null();
    }
    w.EndObject();
  });
}

std::string openai_usage_chunk(const openai_meta& m, const openai_usage& u) {
  return json([&](json_writer& w) {
    w.StartObject();
    write_head(w, m, true);
    key(w, "choices");
    w.StartArray();
    w.EndArray();
    key(w, "usage");
    write_usage(w, u);
    w.EndObject();
  });
}

std::string openai_response(const openai_meta& m, const std::string& text, const std::vector<openai_token>& tokens,
                            const char* finish, const openai_usage& u) {
  return json([&](json_writer& w) {
    open_answer(w, m, false);
    if (m.chat) {
      key(w, "message");
      w.StartObject();
      kv(w, "role", "assistant");
      kv(w, "content", text);
      key(w, "refusal");
      w.Null();
      w.EndObject();
    } else {
      kv(w, "text", text);
    }
    write_logprobs(w, m, tokens, false);
    kv(w, "finish_reason", finish ? finish : "stop");
    w.EndObject();
    w.EndArray();
    key(w, "usage");
    write_usage(w, u);
    w.EndObject();
  });
}

}  // namespace mpakt::http
