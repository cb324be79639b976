#include "runtime/models/chat_template.hpp"

#include <rapidjson/document.h>

#include <algorithm>

#include "runtime/json.hpp"

namespace mpakt::models {

namespace {

constexpr std::string_view config_file = "tokenizer_config.json";

std::string json_string(const rapidjson::Value& v) { return std::string(v.GetString(), v.GetStringLength()); }

/// A special token as tokenizer_config.json writes it: a string, an AddedToken object
/// ({"content": …, "lstrip": …}), or null/absent for none.
result<std::string> read_token(const rapidjson::Document& d, const char* key) {
  auto it = d.FindMember(key);
  if (it == d.MemberEnd() || it->value.IsNull()) return std::string();
  if (it->value.IsString()) return json_string(it->value);
  if (it->value.IsObject()) {
    auto content = it->value.FindMember("content");
    if (content != it->value.MemberEnd() && content->value.IsString()) return json_string(content->value);
  }
  return invalid(std::string(config_file) + ": " + key + " must be a string or an object with a string content");
}

/// The default template's text; nullopt when the config has no chat_template.
result<std::optional<std::string>> read_template_text(const rapidjson::Document& d) {
  const std::string field = std::string(config_file) + ": chat_template";
  auto it = d.FindMember("chat_template");
  if (it == d.MemberEnd() || it->value.IsNull()) return std::optional<std::string>();
  if (it->value.IsString()) return std::optional<std::string>(json_string(it->value));
  if (!it->value.IsArray()) return invalid(field + " must be a string or a list of {name, template} objects");
  for (const auto& entry : it->value.GetArray()) {
    if (!entry.IsObject()) return invalid(field + " must be a string or a list of {name, template} objects");
    auto name = entry.FindMember("name");
    auto text = entry.FindMember("template");
    if (name == entry.MemberEnd() || !name->value.IsString() || text == entry.MemberEnd() || !text->value.IsString())
      return invalid(field + " entries must each have a string name and a string template");
    if (json_string(name->value) == "default") return std::optional<std::string>(json_string(text->value));
  }
  return invalid(field + " is a list with no template named default");
}

void add_stop(chat_template& t, std::string token) {
  if (token.empty() || std::find(t.stop_tokens.begin(), t.stop_tokens.end(), token) != t.stop_tokens.end()) return;
  t.stop_tokens.push_back(std::move(token));
}

/// The special token the template writes right after an assistant message's content: the
/// `<…>` or `[…]` at the start of what follows it. Found by rendering a probe conversation;
/// nothing when every probe is refused or nothing token-like follows.
std::string end_of_turn_marker(const chat_template& t) {
  constexpr std::string_view answer = "mpakt probe answer";
  const std::vector<std::vector<chat_message>> probes = {
      {{"user", "mpakt probe question"}, {"assistant", std::string(answer)}, {"user", "mpakt probe again"}},
      {{"system", "mpakt probe system"}, {"user", "mpakt probe question"}, {"assistant", std::string(answer)},
       {"user", "mpakt probe again"}},
  };
  for (const auto& probe : probes) {
    auto text = render_chat(t, probe, false);
    if (!text) continue;
    const std::size_t at = text->find(answer);
    if (at == std::string::npos) continue;
    std::size_t i = at + answer.size();
    while (i < text->size() && ((*text)[i] == ' ' || (*text)[i] == '\n')) ++i;
    if (i >= text->size()) continue;
    const char open = (*text)[i];
    if (open != '<' && open != '[') continue;
    const std::size_t close = text->find(open == '<' ? '>' : ']', i);
    if (close == std::string::npos || close - i > 64) continue;
    return text->substr(i, close - i + 1);
  }
  return {};
}

/// End-of-turn and end-of-message tokens of well-known families. One that the template's text
/// contains is a stop token (Llama 3.1's <|eom_id|> ends a turn that calls a tool).
constexpr std::string_view known_turn_ends[] = {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<end_of_turn>",
                                                "<|end|>", "<|END_OF_TURN_TOKEN|>", "<|return|>", "<|call|>",
                                                "<|end_of_text|>", "<|endoftext|>"};

result<chat_template> parse(std::string_view config_json, std::optional<std::string_view> jinja_text) {
  auto parsed = parse_json(config_json, config_file);
  if (!parsed) return std::move(parsed).err();
  const rapidjson::Document& d = *parsed;
  if (!d.IsObject()) return invalid(std::string(config_file) + " is not a JSON object");

  chat_template t;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    auto token = read_token(d, key);
    if (!token) return std::move(token).err();
    if (std::string_view(key) == "bos_token") t.bos_token = *token;
    if (std::string_view(key) == "eos_token") t.eos_token = *token;
    if (d.HasMember(key) && !d[key].IsNull()) t.special_tokens.emplace_back(key, std::move(*token));
  }

  std::optional<std::string> text;
  std::string origin;
  if (jinja_text) {
    text = std::string(*jinja_text);
    origin = "chat_template.jinja";
  } else {
    auto from_config = read_template_text(d);
    if (!from_config) return std::move(from_config).err();
    text = std::move(*from_config);
    origin = std::string(config_file) + ": chat_template";
  }
  if (text) {
    auto program = jinja::parse(*text, origin);
    if (!program) return std::move(program).err();
    t.program = std::move(*program);
    add_stop(t, end_of_turn_marker(t));
    const std::vector<std::string> literals = jinja::literal_texts(*t.program);
    for (const auto token : known_turn_ends)
      if (std::any_of(literals.begin(), literals.end(), [&](const std::string& l) { return l.find(token) != std::string::npos; }))
        add_stop(t, std::string(token));
  }
  add_stop(t, t.eos_token);
  return t;
}

/// A message as transformers hands it to the template: keys whose value is None dropped,
/// and a reasoning text under reasoning_content, thinking or reasoning copied to
/// `thinking` (first) and `reasoning_content`.
jinja::value normalise_message(const jinja::value& m) {
  if (!m.is_dict()) return m;
  std::vector<std::pair<std::string, jinja::value>> entries;
  for (const auto& e : m.entries())
    if (!e.second.is_none()) entries.push_back(e);
  const jinja::value* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    for (const auto& e : entries)
      if (e.first == key) {
        reasoning = &e.second;
        break;
      }
    if (reasoning) break;
  }
  if (!reasoning) return jinja::value::dict(std::move(entries));
  const jinja::value r = *reasoning;
  std::vector<std::pair<std::string, jinja::value>> out{{"thinking", r}};
  for (const auto& e : entries) {
    if (e.first == "thinking") {
      out[0].second = e.second;
      continue;
    }
    out.push_back(e);
  }
  bool set = false;
  for (auto& e : out)
    if (e.first == "reasoning_content") e.second = r, set = true;
  if (!set) out.emplace_back("reasoning_content", r);
  return jinja::value::dict(std::move(out));
}

/// A base model continues text: the turns are concatenated as they are, so a reply the model
/// wrote (", there was …") follows its prompt exactly as it did when it was generated.
result<std::string> render_plain(const jinja::value& messages) {
  std::string out;
  for (std::size_t i = 0; i < messages.items().size(); ++i) {
    const jinja::value& m = messages.items()[i];
    const jinja::value* role = m.find("role");
    const jinja::value* content = m.find("content");
    const std::string r = role && role->is_string() ? role->as_string() : "";
    if (r != "system" && r != "user" && r != "assistant")
      return invalid("messages[" + std::to_string(i) + "] has role \"" + r + "\": plain renders system, user and assistant");
    if (content && content->is_string()) out += content->as_string();
  }
  return out;
}

}  // namespace

result<chat_template> parse_chat_template(std::string_view tokenizer_config_json) {
  return parse(tokenizer_config_json, std::nullopt);
}

result<chat_template> parse_chat_template(std::string_view tokenizer_config_json, std::string_view chat_template_jinja) {
  if (chat_template_jinja.empty()) return parse(tokenizer_config_json, std::nullopt);
  return parse(tokenizer_config_json, chat_template_jinja);
}

result<std::string> render_chat(const chat_template& t, const jinja::value& messages, const chat_render_options& options) {
  if (!messages.is_list() || messages.items().empty())
    return invalid("messages is empty: a conversation needs at least one message");
  if (t.is_plain()) return render_plain(messages);
  std::vector<jinja::value> normalised;
  normalised.reserve(messages.items().size());
  for (const auto& m : messages.items()) normalised.push_back(normalise_message(m));

  std::vector<std::pair<std::string, jinja::value>> vars;
  for (const auto& [k, v] : t.special_tokens) vars.emplace_back(k, jinja::value(v));
  for (const auto& [k, v] : options.variables) vars.emplace_back(k, v);
  vars.emplace_back("messages", jinja::value::list(std::move(normalised)));
  vars.emplace_back("tools", options.tools ? *options.tools : jinja::value::none());
  vars.emplace_back("documents", jinja::value::none());
  vars.emplace_back("add_generation_prompt", jinja::value(options.add_generation_prompt));
  jinja::render_options ro;
  ro.now_utc_seconds = options.now_utc_seconds;
  return jinja::render(*t.program, vars, ro);
}

result<std::string> render_chat(const chat_template& t, std::span<const chat_message> messages, bool add_generation_prompt) {
  std::vector<jinja::value> list;
  list.reserve(messages.size());
  for (const auto& m : messages)
    list.push_back(jinja::value::dict({{"role", jinja::value(m.role)}, {"content", jinja::value(m.content)}}));
  chat_render_options o;
  o.add_generation_prompt = add_generation_prompt;
  return render_chat(t, jinja::value::list(std::move(list)), o);
}

bool template_adds_bos(const chat_template& t, std::string_view rendered) {
  return !t.is_plain() && !t.bos_token.empty() && rendered.substr(0, t.bos_token.size()) == t.bos_token;
}

}  // namespace mpakt::models
