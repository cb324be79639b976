// Chat templates rendered in C++ against transformers' apply_chat_template: the fixtures in
// test/fixtures/chat_templates (tools/goldens/gen_chat_templates.py) hold, per format family,
// a tokenizer_config.json and what transformers rendered or refused for each conversation.

#include "runtime/models/chat_template.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <string>
#include <vector>

#include "test/support/files.hpp"

namespace mpakt::models {
namespace {

const std::string fixture_dir = std::string(MPAKT_FIXTURES_DIR) + "/chat_templates/";
const std::string unknown_message =
    "tokenizer_config.json: chat_template is not a format mpakt renders (ChatML, Llama 3, Gemma, Mistral)";

std::string str(const rapidjson::Value& v) { return std::string(v.GetString(), v.GetStringLength()); }

std::string to_json(const rapidjson::Value& v) {
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  v.Accept(w);
  return std::string(b.GetString(), b.GetSize());
}

/// A tokenizer_config.json with the given chat_template (already JSON: a string or a list).
std::string config_with(const std::string& template_json, const std::string& bos = "\"<s>\"",
                        const std::string& eos = "\"</s>\"") {
  return "{\"bos_token\": " + bos + ", \"eos_token\": " + eos + ", \"chat_template\": " + template_json + "}";
}

/// A JSON string literal of `text`.
std::string quoted(const std::string& text) {
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  w.String(text.c_str(), rapidjson::SizeType(text.size()));
  return std::string(b.GetString(), b.GetSize());
}

/// The fixtures' name for a format.
std::string format_key(chat_format f) {
  switch (f) {
    case chat_format::chatml: return "chatml";
    case chat_format::llama3: return "llama3";
    case chat_format::gemma: return "gemma";
    case chat_format::mistral: return "mistral";
    case chat_format::plain: return "plain";
  }
  return "";
}

chat_template parsed(const std::string& config) {
  auto t = parse_chat_template(config);
  EXPECT_TRUE(t.ok()) << t.err().message;
  return t.ok() ? *t : chat_template{};
}

/// Every case of one fixture file: byte-identical rendering, or a refusal naming the
/// message transformers' template refused. Returns the number of rendered cases.
int check_fixture(const std::string& variant) {
  rapidjson::Document fx;
  const std::string text = test::read_file(fixture_dir + variant + ".json");
  fx.Parse(text.data(), text.size());
  EXPECT_FALSE(fx.HasParseError()) << variant;
  if (fx.HasParseError() || !fx.IsObject()) return 0;

  auto t = parse_chat_template(to_json(fx["tokenizer_config"]));
  EXPECT_TRUE(t.ok()) << variant << ": " << t.err().message;
  if (!t.ok()) return 0;
  EXPECT_EQ(format_key(t->format), str(fx["format"])) << variant;
  const auto& expect = fx["expect"];
  std::vector<std::string> stops;
  for (const auto& s : expect["stop_tokens"].GetArray()) stops.push_back(str(s));
  EXPECT_EQ(t->stop_tokens, stops) << variant;
  EXPECT_EQ(template_adds_bos(*t), expect["adds_bos"].GetBool()) << variant;
  if (expect.HasMember("default_system")) {
    EXPECT_EQ(t->default_system.value_or("<none>"), str(expect["default_system"])) << variant;
  } else {
    EXPECT_FALSE(t->default_system.has_value()) << variant;
  }
  if (expect.HasMember("folds_system")) {
    EXPECT_EQ(t->folds_system, expect["folds_system"].GetBool()) << variant;
  }

  int rendered = 0;
  for (const auto& c : fx["cases"].GetArray()) {
    const std::string name = variant + "/" + str(c["name"]);
    std::vector<chat_message> msgs;
    for (const auto& m : c["messages"].GetArray()) msgs.push_back({str(m["role"]), str(m["content"])});
    auto got = render_chat(*t, msgs, c["add_generation_prompt"].GetBool());
    if (c.HasMember("expected")) {
      EXPECT_TRUE(got.ok()) << name << ": " << got.err().message;
      if (!got.ok()) continue;
      EXPECT_EQ(*got, str(c["expected"])) << name;
      ++rendered;
    } else {
      EXPECT_FALSE(got.ok()) << name << ": transformers raised \"" << str(c["raises"]) << "\" but this rendered";
      if (got.ok()) continue;
      const auto i = std::size_t(c["refused_index"].GetInt());
      const std::string named = "messages[" + std::to_string(i) + "] has role \"" + msgs[i].role + "\"";
      EXPECT_NE(got.err().message.find(named), std::string::npos) << name << ": " << got.err().message;
    }
  }
  return rendered;
}

TEST(ChatTemplateFixtures, chatml) { EXPECT_GE(check_fixture("chatml"), 40); }
TEST(ChatTemplateFixtures, chatml_default_system) { EXPECT_GE(check_fixture("chatml_default_system"), 40); }
TEST(ChatTemplateFixtures, llama3) { EXPECT_GE(check_fixture("llama3"), 40); }
TEST(ChatTemplateFixtures, gemma) { EXPECT_GE(check_fixture("gemma"), 40); }
TEST(ChatTemplateFixtures, gemma_no_system) { EXPECT_GE(check_fixture("gemma_no_system"), 30); }
TEST(ChatTemplateFixtures, mistral) { EXPECT_GE(check_fixture("mistral"), 40); }

// ---- parsing tokenizer_config.json --------------------------------------------------------

TEST(ChatTemplateParse, stories260k_has_no_template_so_plain) {
  auto t = parse_chat_template(test::read_file(std::string(MPAKT_SHARED_DIR) + "/models/stories260K/tokenizer_config.json"));
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_EQ(t->format, chat_format::plain);
  EXPECT_EQ(t->bos_token, "<s>");
  EXPECT_EQ(t->eos_token, "</s>");
  EXPECT_EQ(t->stop_tokens, std::vector<std::string>{"</s>"});
  EXPECT_FALSE(template_adds_bos(*t));

  // A story prompt renders to exactly its text, so a base model continues it as a story.
  const std::string prompt = "Once upon a time, there was a little girl named Lily.";
  const std::vector<chat_message> one{{"user", prompt}};
  auto r = render_chat(*t, one);
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(*r, prompt);
  // Later turns continue the same text: the model's reply follows the prompt as generated.
  const std::vector<chat_message> three{{"user", "Once upon a time"}, {"assistant", ", there was a girl."}, {"user", " She"}};
  EXPECT_EQ(render_chat(*t, three).value(), "Once upon a time, there was a girl. She");
  EXPECT_EQ(render_chat(*t, three, false).value(), "Once upon a time, there was a girl. She");
}

TEST(ChatTemplateParse, null_template_is_plain) {
  EXPECT_EQ(parsed(config_with("null")).format, chat_format::plain);
}

TEST(ChatTemplateParse, unknown_template_refused_naming_the_field) {
  for (const std::string tmpl : {"{% for m in messages %}### {{ m.role }}: {{ m.content }}\n{% endfor %}",
                                 "",
                                 // Llama 2: [INST] with <<SYS>> blocks is not Mistral.
                                 "{{ bos_token }}[INST] <<SYS>>\\n{{ messages[0]['content'] }}\\n<</SYS>>\\n\\n [/INST]",
                                 // markers of two families: nothing says which one applies
                                 "{{ '<|im_start|>' }}{{ '<start_of_turn>' }}"}) {
    auto t = parse_chat_template(config_with(quoted(tmpl)));
    ASSERT_FALSE(t.ok()) << tmpl;
    EXPECT_EQ(t.err().code, errc::invalid);
    EXPECT_EQ(t.err().message, unknown_message) << tmpl;
  }
}

TEST(ChatTemplateParse, malformed_json_refused) {
  for (const std::string text : {"{\"chat_template\": ", "not json", ""}) {
    auto t = parse_chat_template(text);
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.err().message.rfind("tokenizer_config.json is not valid JSON (error at byte ", 0), 0u) << t.err().message;
  }
  auto t = parse_chat_template("[]");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.err().message, "tokenizer_config.json is not a JSON object");
}

TEST(ChatTemplateParse, bad_fields_refused_naming_them) {
  auto wrong_type = parse_chat_template(config_with("42"));
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.err().message.find("chat_template must be a string or a list"), std::string::npos);

  auto no_default = parse_chat_template(config_with(R"([{"name": "tool_use", "template": "<|im_start|>"}])"));
  ASSERT_FALSE(no_default.ok());
  EXPECT_NE(no_default.err().message.find("no template named default"), std::string::npos);

  auto bad_entry = parse_chat_template(config_with(R"([{"name": "default"}])"));
  ASSERT_FALSE(bad_entry.ok());
  EXPECT_NE(bad_entry.err().message.find("chat_template entries"), std::string::npos);

  auto bad_bos = parse_chat_template(config_with("null", "7"));
  ASSERT_FALSE(bad_bos.ok());
  EXPECT_NE(bad_bos.err().message.find("bos_token"), std::string::npos);
}

TEST(ChatTemplateParse, special_tokens_as_strings_objects_or_null) {
  auto t = parsed(config_with(quoted("<start_of_turn>"), R"({"content": "<bos>", "special": true})", "null"));
  EXPECT_EQ(t.format, chat_format::gemma);
  EXPECT_EQ(t.bos_token, "<bos>");
  EXPECT_EQ(t.eos_token, "");
  EXPECT_EQ(t.stop_tokens, std::vector<std::string>{"<end_of_turn>"});
}

TEST(ChatTemplateParse, stop_tokens_not_duplicated) {
  auto t = parsed(config_with(quoted("<|start_header_id|>"), "\"<|begin_of_text|>\"", "\"<|eot_id|>\""));
  EXPECT_EQ(t.stop_tokens, std::vector<std::string>{"<|eot_id|>"});
}

// Templates written the way published ones are (one-line Jinja with set/if blocks, dot
// access, double-quoted literals) are still recognised by their markers.
TEST(ChatTemplateParse, realistic_templates_detected) {
  const std::string llama3 =
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
      "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
  EXPECT_EQ(parsed(config_with(quoted(llama3))).format, chat_format::llama3);

  const std::string chatml =
      "{% for message in messages %}{{\"<|im_start|>\" + message.role + \"\\n\" + message.content + \"<|im_end|>\\n\"}}"
      "{% endfor %}{% if add_generation_prompt %}{{ \"<|im_start|>assistant\\n\" }}{% endif %}";
  auto c = parsed(config_with(quoted(chatml)));
  EXPECT_EQ(c.format, chat_format::chatml);
  EXPECT_FALSE(c.default_system.has_value());

  const std::string gemma3 =
      "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- set first_user_prefix = "
      "messages[0]['content'] + '\\n\\n' -%}\n{%- endif -%}\n{{ '<start_of_turn>' + role + '\\n' }}";
  EXPECT_TRUE(parsed(config_with(quoted(gemma3))).folds_system);

  const std::string gemma1 =
      "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
      "{% endif %}{% for message in messages %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
      "'<end_of_turn>\\n' }}{% endfor %}";
  auto g1 = parsed(config_with(quoted(gemma1)));
  EXPECT_EQ(g1.format, chat_format::gemma);
  EXPECT_FALSE(g1.folds_system);

  const std::string mistral =
      "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
      "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
      "{% endif %}{% endfor %}";
  EXPECT_EQ(parsed(config_with(quoted(mistral))).format, chat_format::mistral);
}

TEST(ChatTemplateParse, variants_that_render_differently_refused) {
  auto llama31 = parse_chat_template(config_with(quoted(
      "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Cutting Knowledge Date: December 2023\\n' }}")));
  ASSERT_FALSE(llama31.ok());
  EXPECT_NE(llama31.err().message.find("tokenizer_config.json: chat_template is a Llama 3.1+"), std::string::npos);

  for (const std::string tmpl : {"{{ ' [INST] ' + message['content'] + ' [/INST]' }}",      // v0.2 update
                                 "{{ '[INST] ' + message['content'] + '[/INST]' }}",        // v0.3
                                 "{{ '[SYSTEM_PROMPT]' }}{{ '[INST] ' + m + ' [/INST]' }}"}) {
    auto t = parse_chat_template(config_with(quoted(tmpl)));
    ASSERT_FALSE(t.ok()) << tmpl;
    EXPECT_NE(t.err().message.find("tokenizer_config.json: chat_template is a Mistral layout"), std::string::npos);
  }
}

TEST(ChatTemplateParse, default_system_found_in_any_quoting) {
  // Qwen-2.5-like: a system turn opened in one literal and continued by concatenation comes
  // first and is not the default; the default is the later single literal.
  const std::string qwen =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
      "'<|im_end|>\\n' }}{%- else %}{{- \"<|im_start|>system\\nYou\\'re \\\"Q\\\", caf\\u00e9\\tbot.<|im_end|>\\n\" }}"
      "{%- endif %}{% for message in messages %}{{ '<|im_start|>' + message.role + '\\n' }}{% endfor %}";
  auto t = parsed(config_with(quoted(qwen)));
  EXPECT_EQ(t.format, chat_format::chatml);
  ASSERT_TRUE(t.default_system.has_value());
  EXPECT_EQ(*t.default_system, "You're \"Q\", caf\xc3\xa9\tbot.");

  const std::vector<chat_message> msgs{{"user", "hi"}};
  EXPECT_EQ(render_chat(t, msgs).value(),
            "<|im_start|>system\nYou're \"Q\", caf\xc3\xa9\tbot.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateParse, jinja_file_takes_precedence) {
  const std::string config = config_with(quoted("<|im_start|>"));
  auto from_file = parse_chat_template(config, "{{ bos_token }}{{ '<start_of_turn>' }}");
  ASSERT_TRUE(from_file.ok()) << from_file.err().message;
  EXPECT_EQ(from_file->format, chat_format::gemma);
  EXPECT_EQ(from_file->bos_token, "<s>");
  EXPECT_EQ(parse_chat_template(config, "").value().format, chat_format::chatml);

  auto unknown = parse_chat_template(config, "{{ messages }}");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.err().message, "chat_template.jinja is not a format mpakt renders (ChatML, Llama 3, Gemma, Mistral)");
}

// ---- rendering edge cases not in the fixtures -------------------------------------------------

TEST(ChatTemplateRender, empty_conversation_refused_for_every_format) {
  for (auto f : {chat_format::chatml, chat_format::llama3, chat_format::gemma, chat_format::mistral, chat_format::plain}) {
    chat_template t;
    t.format = f;
    auto r = render_chat(t, std::span<const chat_message>());
    ASSERT_FALSE(r.ok()) << chat_format_name(f);
    EXPECT_NE(r.err().message.find("messages is empty"), std::string::npos);
  }
}

TEST(ChatTemplateRender, plain_refuses_unknown_roles) {
  const std::vector<chat_message> msgs{{"user", "a"}, {"tool", "b"}};
  auto r = render_chat(chat_template{}, msgs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().message, "messages[1] has role \"tool\": plain renders system, user and assistant");
}

TEST(ChatTemplateRender, trim_leaves_malformed_utf8_alone) {
  chat_template t;
  t.format = chat_format::llama3;
  // A lone continuation byte and a truncated sequence are not whitespace; the spaces around go.
  const std::vector<chat_message> msgs{{"user", " \x80 x \xe3\x80"}, {"assistant", "\xe3\x80\x80"}};
  EXPECT_EQ(render_chat(t, msgs, false).value(),
            "<|start_header_id|>user<|end_header_id|>\n\n\x80 x \xe3\x80<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n<|eot_id|>");
}

TEST(ChatTemplateRender, bos_placement_by_format) {
  for (auto [f, adds] : {std::pair{chat_format::chatml, false}, std::pair{chat_format::llama3, true},
                         std::pair{chat_format::gemma, true}, std::pair{chat_format::mistral, true},
                         std::pair{chat_format::plain, false}}) {
    chat_template t;
    t.format = f;
    t.bos_token = "<BOS>";
    EXPECT_EQ(template_adds_bos(t), adds) << chat_format_name(f);
    const std::vector<chat_message> msgs{{"user", "hi"}};
    const std::string text = render_chat(t, msgs).value();
    EXPECT_EQ(text.rfind("<BOS>", 0) == 0, adds) << chat_format_name(f) << ": " << text;
  }
}

}  // namespace
}  // namespace mpakt::models
