#include "http/api/chat_model.hpp"

#include <rapidjson/document.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "runtime/json.hpp"

namespace mpakt::http {

namespace {

std::string field(const char* name) { return std::string("chat request ") + name; }

/// The same bounds as POST /api/v3/generate, which a chat's settings reach.
constexpr std::int64_t max_top_k = std::int64_t(1) << 30;
constexpr std::int64_t max_seed = std::int64_t(1) << 53;

result<double> number_in(const rapidjson::Value& v, const char* name, double lo, double hi) {
  if (!v.IsNumber()) return invalid(field(name) + " must be a number");
  const double x = v.GetDouble();
  if (!std::isfinite(x) || x < lo || x > hi)
    return invalid(field(name) + " must be between " + std::to_string(lo).substr(0, 6) + " and " + std::to_string(hi).substr(0, 6));
  return x;
}

result<std::vector<models::chat_message>> messages_of(const rapidjson::Value& v) {
  if (!v.IsArray() || v.Empty()) return invalid("chat request messages must be a non-empty array of {role, content}");
  if (v.Size() > 1024) return invalid("chat request messages holds " + std::to_string(v.Size()) + " messages, more than 1024");
  std::vector<models::chat_message> out;
  for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
    const std::string at = "chat request messages[" + std::to_string(i) + "]";
    const auto& m = v[i];
    if (!m.IsObject()) return invalid(at + " must be an object {role, content}");
    for (auto it = m.MemberBegin(); it != m.MemberEnd(); ++it) {
      const std::string k = it->name.GetString();
      if (k != "role" && k != "content") return invalid(at + " has an unknown field \"" + k + "\"");
    }
    auto role = m.FindMember("role");
    auto content = m.FindMember("content");
    if (role == m.MemberEnd() || !role->value.IsString()) return invalid(at + ".role must be a string");
    if (content == m.MemberEnd() || !content->value.IsString()) return invalid(at + ".content must be a string");
    const std::string r(role->value.GetString(), role->value.GetStringLength());
    if (r != "system" && r != "user" && r != "assistant")
      return invalid(at + ".role must be system, user or assistant, not \"" + r + "\"");
    out.push_back({r, std::string(content->value.GetString(), content->value.GetStringLength())});
  }
  return out;
}

}  // namespace

result<std::string> tools_text(const rapidjson::Value& v, const std::string& what) {
  if (!v.IsArray()) return invalid(what + " must be an array of tools, {\"type\": \"function\", \"function\": {…}}");
  if (v.Size() > 128) return invalid(what + " holds " + std::to_string(v.Size()) + " tools, more than 128");
  for (rapidjson::SizeType i = 0; i < v.Size(); ++i)
    if (!v[i].IsObject()) return invalid(what + "[" + std::to_string(i) + "] must be an object");
  return v.Size() ? text_of(v) : std::string();
}

result<chat_request> parse_chat_request(std::string_view body) {
  if (body.size() > chat_max_body_bytes)
    return error{errc::too_large, "chat request body is " + std::to_string(body.size()) + " bytes, more than the " +
                                      std::to_string(chat_max_body_bytes) + " any conversation that fits a context needs"};
  auto parsed = parse_json_object(body, "request body");
  if (!parsed) return std::move(parsed).err();
  const rapidjson::Document& d = *parsed;
  static const std::set<std::string> known = {"model", "messages", "maxTokens", "temperature", "topK", "topP", "seed",
                                              "repetitionPenalty", "speculative", "stream", "cache", "tools"};
  for (auto it = d.MemberBegin(); it != d.MemberEnd(); ++it)
    if (!known.count(it->name.GetString())) return invalid(std::string("chat request has an unknown field \"") + it->name.GetString() + "\"");
  chat_request r;
  auto model = d.FindMember("model");
  if (model == d.MemberEnd() || !model->value.IsString() || model->value.GetStringLength() == 0)
    return invalid("chat request model must be a modelId (m_…) or a source to load, e.g. \"hf:Org/Model\"");
  const std::string m(model->value.GetString(), model->value.GetStringLength());
  (m.rfind("m_", 0) == 0 ? r.model_id : r.source) = m;
  auto msgs = d.FindMember("messages");
  if (msgs == d.MemberEnd()) return invalid("chat request lacks messages");
  auto messages = messages_of(msgs->value);
  if (!messages) return std::move(messages).err();
  r.messages = std::move(*messages);
  if (auto it = d.FindMember("maxTokens"); it != d.MemberEnd()) {
    auto n = json_integer(it->value, field("maxTokens"), 1, 4096);
    if (!n) return std::move(n).err();
    r.max_tokens = std::uint32_t(*n);
  }
  if (auto it = d.FindMember("temperature"); it != d.MemberEnd()) {
    auto v = number_in(it->value, "temperature", 0, 100);
    if (!v) return std::move(v).err();
    r.temperature = *v;
  }
  if (auto it = d.FindMember("topK"); it != d.MemberEnd()) {
    auto k = json_integer(it->value, field("topK"), 0, max_top_k);
    if (!k) return std::move(k).err();
    r.top_k = double(*k);
  }
  if (auto it = d.FindMember("topP"); it != d.MemberEnd()) {
    auto v = number_in(it->value, "topP", 0, 1);
    if (!v) return std::move(v).err();
    if (*v <= 0) return invalid("chat request topP must be greater than 0");
    r.top_p = *v;
  }
  if (auto it = d.FindMember("seed"); it != d.MemberEnd()) {
    auto seed = json_integer(it->value, field("seed"), 0, max_seed);
    if (!seed) return std::move(seed).err();
    r.seed = *seed;
  }
  if (auto it = d.FindMember("repetitionPenalty"); it != d.MemberEnd()) {
    auto v = number_in(it->value, "repetitionPenalty", 1, 10);
    if (!v) return std::move(v).err();
    r.repetition_penalty = *v;
  }
  if (auto it = d.FindMember("tools"); it != d.MemberEnd() && !it->value.IsNull()) {
    auto tools = tools_text(it->value, "chat request tools");
    if (!tools) return std::move(tools).err();
    r.tools_json = std::move(*tools);
  }
  for (auto [name, out] : {std::pair{"speculative", &r.speculative}, {"stream", &r.stream}, {"cache", &r.cache}}) {
    auto it = d.FindMember(name);
    if (it == d.MemberEnd()) continue;
    if (!it->value.IsBool()) return invalid(field(name) + " must be true or false");
    *out = it->value.GetBool();
  }
  return r;
}

result<std::vector<std::int32_t>> chat_model::prompt(const std::vector<models::chat_message>& messages,
                                                     const std::string& tools_json) const {
  models::chat_render_options o;
  if (!tools_json.empty()) {
    auto tools = parse_json(tools_json, "tools");
    if (!tools) return std::move(tools).err();
    o.tools = models::jinja::value::from_json(*tools);
  }
  std::vector<models::jinja::value> list;
  list.reserve(messages.size());
  for (const auto& m : messages)
    list.push_back(models::jinja::value::dict({{"role", models::jinja::value(m.role)}, {"content", models::jinja::value(m.content)}}));
  auto text = models::render_chat(format, models::jinja::value::list(std::move(list)), o);
  if (!text) return std::move(text).err();
  auto ids = tokenizer.encode(*text, !models::template_adds_bos(format, *text));
  if (ids.empty()) return invalid("the conversation renders to no tokens; give a message with some text");
  return ids;
}

result<std::vector<std::int32_t>> chat_model::raw_prompt(const chat_request& r) const {
  if (r.prompt_ids.empty() && r.prompt_text.empty()) return invalid("the prompt is empty; give some text or token ids");
  if (!r.prompt_text.empty()) {
    auto ids = tokenizer.encode(r.prompt_text, true);
    if (ids.empty()) return invalid("the prompt tokenizes to no tokens");
    return ids;
  }
  const std::int64_t vocab = std::max<std::int64_t>(tokenizer.vocab_size(), config.vocab);
  for (std::size_t i = 0; i < r.prompt_ids.size(); ++i)
    if (r.prompt_ids[i] < 0 || r.prompt_ids[i] >= vocab)
      return invalid("prompt[" + std::to_string(i) + "] is token " + std::to_string(r.prompt_ids[i]) +
                     ", outside the model's vocabulary of " + std::to_string(vocab));
  return r.prompt_ids;
}

std::string chat_model::piece(std::int32_t id) const {
  // Decoders strip a leading space of the text's first token only (SentencePiece): the text
  // of the token twice, less the text of the token once, is the token as it reads mid-text.
  const std::int32_t one[] = {id}, two[] = {id, id};
  const std::string once = tokenizer.decode(one), twice = tokenizer.decode(two);
  return twice.size() >= once.size() ? twice.substr(once.size()) : once;
}

result<std::shared_ptr<const chat_model>> make_chat_model(std::string_view config_json, std::string_view tokenizer_json,
                                                           std::string_view tokenizer_config_json,
                                                           std::string_view chat_template_jinja) {
  auto config = models::parse_arch_config(config_json);
  if (!config) return std::move(config).err();
  if (tokenizer_json.empty()) return invalid("the model has no tokenizer.json beside its checkpoint, and chat needs one");
  auto tok = models::tokenizer::from_json(tokenizer_json);
  if (!tok) return std::move(tok).err();
  auto format = models::parse_chat_template(tokenizer_config_json.empty() ? std::string_view("{}") : tokenizer_config_json,
                                            chat_template_jinja);
  if (!format) return std::move(format).err();
  auto m = std::make_shared<chat_model>(chat_model{std::move(*config), std::move(*tok), std::move(*format), {}, 0, true});
  std::vector<std::string> stops = m->format.stop_tokens;
  if (!m->format.eos_token.empty()) stops.push_back(m->format.eos_token);
  for (const auto& s : stops)
    if (auto id = m->tokenizer.token_to_id(s); id && std::find(m->stop_ids.begin(), m->stop_ids.end(), *id) == m->stop_ids.end())
      m->stop_ids.push_back(*id);
  // Context: max_position_embeddings, capped (every conversation allocates it whole).
  // parse_arch_config above read the same text, so it parses.
  auto parsed = parse_json(config_json, "config.json");
  if (!parsed) return std::move(parsed).err();
  int context = 2048;
  if (auto it = parsed->FindMember("max_position_embeddings"); it != parsed->MemberEnd())
    if (auto n = json_integer(it->value, "config.json max_position_embeddings", 1, std::int64_t(1) << 30)) context = int(*n);
  m->context = std::min(context, chat_max_context);
  if (m->config.max_positions > 0) m->context = std::min(m->context, m->config.max_positions);
  // longrope switches factors past this position, and transformers then prefills again;
  // chat conversations stay below it rather than decode with the wrong factors.
  if (m->config.rope_regime_limit > 0) m->context = std::min(m->context, m->config.rope_regime_limit);
  m->can_speculate = !m->config.recurrent_state && !m->config.rope_follows_length;
  std::size_t longest = 1;
  for (std::int32_t id = 0; id < m->tokenizer.vocab_size(); ++id)
    if (auto t = m->tokenizer.id_to_token(id)) longest = std::max(longest, t->size());
  m->max_message_bytes = std::size_t(m->context) * longest * chat_bytes_per_piece_byte;
  return std::shared_ptr<const chat_model>(std::move(m));
}

}  // namespace mpakt::http
