// Chat templates run by mpakt's Jinja interpreter against transformers' apply_chat_template.
// test/fixtures/chat_templates (tools/goldens/gen_chat_templates.py) holds:
//   hub/*.json      real templates of current model families (from the llama-cpp-python sdist),
//                   each with what transformers rendered or raised for hub/conversations.json;
//   *.json          small templates stating four layouts, with about 60 edge-case conversations.

#include "runtime/models/chat_template.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <filesystem>
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "test/support/files.hpp"

namespace mpakt::models {
namespace {

const std::string fixture_dir = std::string(MPAKT_FIXTURES_DIR) + "/chat_templates/";

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

chat_template parsed(const std::string& config) {
  auto t = parse_chat_template(config);
  EXPECT_TRUE(t.ok()) << t.err().message;
  return t.ok() ? *t : chat_template{};
}

rapidjson::Document load(const std::string& path) {
  rapidjson::Document d;
  const std::string text = test::read_file(path);
  d.Parse(text.data(), text.size());
  EXPECT_FALSE(d.HasParseError()) << path;
  return d;
}

// ---- the hub templates ---------------------------------------------------------------------

struct hub_counts {
  int files = 0, rendered = 0, refused = 0, compile_refused = 0;
  std::set<std::string> families;
};

/// Every case of one hub fixture: the same text as transformers, or a refusal where it raised.
void check_hub_fixture(const std::string& path, const rapidjson::Document& corpus, hub_counts& n) {
  const rapidjson::Document fx = load(path);
  ASSERT_TRUE(fx.IsObject()) << path;
  const std::string name = str(fx["template"]);
  auto t = parse_chat_template(to_json(fx["tokenizer_config"]));
  if (fx.HasMember("compile_error")) {
    // transformers could not compile it either: refused when the model is loaded.
    EXPECT_FALSE(t.ok()) << name << " compiles here but not in transformers: " << str(fx["compile_error"]);
    ++n.compile_refused;
    return;
  }
  ASSERT_TRUE(t.ok()) << name << ": " << t.err().message;
  ++n.files;
  n.families.insert(str(fx["family"]));
  std::map<std::string, const rapidjson::Value*> conversations;
  for (const auto& c : corpus.GetArray()) conversations[str(c["name"])] = &c;
  for (const auto& c : fx["cases"].GetArray()) {
    const std::string case_name = str(c["name"]);
    ASSERT_TRUE(conversations.count(case_name)) << name << "/" << case_name;
    const rapidjson::Value& conv = *conversations[case_name];
    chat_render_options o;
    o.add_generation_prompt = conv["add_generation_prompt"].GetBool();
    o.now_utc_seconds = fx["now_utc_seconds"].GetInt64();
    for (auto it = conv.MemberBegin(); it != conv.MemberEnd(); ++it) {
      const std::string key = str(it->name);
      if (key == "tools") o.tools = jinja::value::from_json(it->value);
      else if (key != "name" && key != "messages" && key != "add_generation_prompt")
        o.variables.emplace_back(key, jinja::value::from_json(it->value));
    }
    auto r = render_chat(*t, jinja::value::from_json(conv["messages"]), o);
    if (c.HasMember("expected")) {
      ASSERT_TRUE(r.ok()) << name << "/" << case_name << ": " << r.err().message;
      EXPECT_EQ(*r, str(c["expected"])) << name << "/" << case_name;
      if (*r == str(c["expected"])) ++n.rendered;
    } else {
      EXPECT_FALSE(r.ok()) << name << "/" << case_name << " rendered, transformers raised " << str(c["raises"]);
      if (!r.ok()) ++n.refused;
    }
  }
}

TEST(ChatTemplateHub, every_fixture_renders_as_transformers_does) {
  const rapidjson::Document corpus = load(fixture_dir + "hub/conversations.json");
  ASSERT_TRUE(corpus.IsArray());
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::directory_iterator(fixture_dir + "hub"))
    if (e.path().filename() != "conversations.json") paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  hub_counts n;
  for (const auto& p : paths) check_hub_fixture(p, corpus, n);
  std::printf("hub templates: %d files of %zu families, %d cases rendered identically, %d refused as transformers "
              "raised, %d templates refused as transformers could not compile them\n",
              n.files, n.families.size(), n.rendered, n.refused, n.compile_refused);
  EXPECT_GE(n.families.size(), 25u);
  EXPECT_GE(n.rendered, 700);
}

/// One hub fixture's template, parsed.
chat_template hub_template(const std::string& file) {
  const rapidjson::Document fx = load(fixture_dir + "hub/" + file + ".json");
  return parsed(to_json(fx["tokenizer_config"]));
}

TEST(ChatTemplateHub, stop_tokens_derived_from_the_template) {
  EXPECT_EQ(hub_template("meta-llama-Llama-3.1-8B-Instruct").stop_tokens,
            (std::vector<std::string>{"<|eot_id|>", "<|eom_id|>"}));
  EXPECT_EQ(hub_template("Qwen-Qwen3-0.6B").stop_tokens, std::vector<std::string>{"<|im_end|>"});
  EXPECT_EQ(hub_template("google-gemma-2-2b-it").stop_tokens, (std::vector<std::string>{"<end_of_turn>", "<eos>"}));
  EXPECT_EQ(hub_template("mistralai-Mistral-Nemo-Instruct-2407").stop_tokens, std::vector<std::string>{"</s>"});
  EXPECT_EQ(hub_template("microsoft-Phi-3.5-mini-instruct").stop_tokens, (std::vector<std::string>{"<|end|>", "<|endoftext|>"}));
  EXPECT_EQ(hub_template("CohereForAI-c4ai-command-r7b-12-2024-tool_use").stop_tokens,
            (std::vector<std::string>{"<|END_RESPONSE|>", "<|END_OF_TURN_TOKEN|>"}));
}

TEST(ChatTemplateHub, bos_in_the_text_decides_add_special_tokens) {
  const std::vector<chat_message> msgs{{"user", "hi"}};
  auto llama = hub_template("meta-llama-Llama-3.2-3B-Instruct");
  EXPECT_TRUE(template_adds_bos(llama, render_chat(llama, msgs).value()));
  auto qwen = hub_template("Qwen-Qwen2.5-7B-Instruct");
  EXPECT_FALSE(template_adds_bos(qwen, render_chat(qwen, msgs).value()));
  EXPECT_FALSE(template_adds_bos(chat_template{}, "<s>hi"));
}

TEST(ChatTemplateHub, llama32_date_follows_the_clock_given) {
  auto t = hub_template("meta-llama-Llama-3.2-3B-Instruct");
  chat_render_options o;
  o.now_utc_seconds = 0;  // 1970-01-01
  auto r = render_chat(t, jinja::value::list({jinja::value::dict({{"role", "user"}, {"content", "hi"}})}), o);
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_NE(r->find("Today Date: 01 Jan 1970"), std::string::npos) << *r;
}

TEST(ChatTemplateHub, qwen3_thinking_flag_passed_through) {
  auto t = hub_template("Qwen-Qwen3-0.6B");
  chat_render_options o;
  o.variables.emplace_back("enable_thinking", jinja::value(false));
  const auto msgs = jinja::value::list({jinja::value::dict({{"role", "user"}, {"content", "hi"}})});
  EXPECT_EQ(render_chat(t, msgs, o).value(),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(render_chat(t, msgs, chat_render_options{}).value(), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

// ---- the layout fixtures -----------------------------------------------------------------------

/// Every case of one layout fixture. Returns the number of rendered cases.
int check_layout_fixture(const std::string& variant) {
  const rapidjson::Document fx = load(fixture_dir + variant + ".json");
  if (!fx.IsObject()) return 0;
  auto t = parse_chat_template(to_json(fx["tokenizer_config"]));
  EXPECT_TRUE(t.ok()) << variant << ": " << t.err().message;
  if (!t.ok()) return 0;
  const auto& expect = fx["expect"];
  std::vector<std::string> stops;
  for (const auto& s : expect["stop_tokens"].GetArray()) stops.push_back(str(s));
  EXPECT_EQ(t->stop_tokens, stops) << variant;
  int rendered = 0;
  for (const auto& c : fx["cases"].GetArray()) {
    const std::string name = str(c["name"]);
    chat_render_options o;
    o.add_generation_prompt = c["add_generation_prompt"].GetBool();
    auto r = render_chat(*t, jinja::value::from_json(c["messages"]), o);
    if (c.HasMember("expected")) {
      EXPECT_TRUE(r.ok()) << variant << "/" << name << ": " << r.err().message;
      if (!r.ok()) continue;
      EXPECT_EQ(*r, str(c["expected"])) << variant << "/" << name;
      EXPECT_EQ(template_adds_bos(*t, *r), expect["adds_bos"].GetBool()) << variant << "/" << name;
      ++rendered;
    } else {
      EXPECT_FALSE(r.ok()) << variant << "/" << name << " rendered, transformers raised " << str(c["raises"]);
      if (r.ok()) continue;
      // The template's own message, naming the message it refused.
      EXPECT_NE(r.err().message.find(str(c["raises"])), std::string::npos) << r.err().message;
    }
  }
  return rendered;
}

TEST(ChatTemplateLayouts, chatml) { EXPECT_GE(check_layout_fixture("chatml"), 40); }
TEST(ChatTemplateLayouts, chatml_default_system) { EXPECT_GE(check_layout_fixture("chatml_default_system"), 40); }
TEST(ChatTemplateLayouts, llama3) { EXPECT_GE(check_layout_fixture("llama3"), 40); }
TEST(ChatTemplateLayouts, gemma) { EXPECT_GE(check_layout_fixture("gemma"), 40); }
TEST(ChatTemplateLayouts, gemma_no_system) { EXPECT_GE(check_layout_fixture("gemma_no_system"), 30); }
TEST(ChatTemplateLayouts, mistral) { EXPECT_GE(check_layout_fixture("mistral"), 40); }

// ---- parsing tokenizer_config.json --------------------------------------------------------

TEST(ChatTemplateParse, stories260k_has_no_template_so_plain) {
  auto t = parse_chat_template(test::read_file(std::string(MPAKT_SHARED_DIR) + "/models/stories260K/tokenizer_config.json"));
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_TRUE(t->is_plain());
  EXPECT_EQ(t->format_name(), "plain");
  EXPECT_EQ(t->bos_token, "<s>");
  EXPECT_EQ(t->eos_token, "</s>");
  EXPECT_EQ(t->stop_tokens, std::vector<std::string>{"</s>"});

  // A story prompt renders to exactly its text, so a base model continues it as a story.
  const std::string prompt = "Once upon a time, there was a little girl named Lily.";
  const std::vector<chat_message> one{{"user", prompt}};
  auto r = render_chat(*t, one);
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(*r, prompt);
  EXPECT_FALSE(template_adds_bos(*t, *r));
  // Later turns continue the same text: the model's reply follows the prompt as generated.
  const std::vector<chat_message> three{{"user", "Once upon a time"}, {"assistant", ", there was a girl."}, {"user", " She"}};
  EXPECT_EQ(render_chat(*t, three).value(), "Once upon a time, there was a girl. She");
  EXPECT_EQ(render_chat(*t, three, false).value(), "Once upon a time, there was a girl. She");
}

TEST(ChatTemplateParse, null_template_is_plain) { EXPECT_TRUE(parsed(config_with("null")).is_plain()); }

TEST(ChatTemplateParse, unsupported_construct_refused_naming_field_line_and_construct) {
  auto t = parse_chat_template(config_with(quoted("{{ bos_token }}\n{% for m in messages %}\n{% include 'x' %}{% endfor %}")));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.err().message, "tokenizer_config.json: chat_template line 3: the 'include' statement is not supported");
  auto f = parse_chat_template(config_with("null"), "{{ messages | from_json }}");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.err().message, "chat_template.jinja line 1: the filter 'from_json' is not supported");
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
  auto t = parsed(config_with(quoted("{{ bos_token }}|{{ eos_token is none }}|{{ unk_token }}"),
                              R"({"content": "<bos>", "special": true})", "null"));
  EXPECT_EQ(t.bos_token, "<bos>");
  EXPECT_EQ(t.eos_token, "");
  EXPECT_TRUE(t.stop_tokens.empty());
  // eos_token null is not passed at all (transformers' special_tokens_map leaves it out).
  const std::vector<chat_message> msgs{{"user", "x"}};
  EXPECT_EQ(render_chat(t, msgs).value(), "<bos>|False|");
}

TEST(ChatTemplateParse, list_form_uses_default) {
  auto t = parsed(config_with(R"([{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ messages | length }}"}])"));
  const std::vector<chat_message> msgs{{"user", "x"}};
  EXPECT_EQ(render_chat(t, msgs).value(), "D1");
}

TEST(ChatTemplateParse, jinja_file_takes_precedence) {
  const std::string config = config_with(quoted("from config"));
  const std::vector<chat_message> msgs{{"user", "x"}};
  auto from_file = parse_chat_template(config, "{{ bos_token }}from file");
  ASSERT_TRUE(from_file.ok()) << from_file.err().message;
  EXPECT_EQ(render_chat(*from_file, msgs).value(), "<s>from file");
  EXPECT_EQ(render_chat(parse_chat_template(config, "").value(), msgs).value(), "from config");
}

// ---- rendering ---------------------------------------------------------------------------------

TEST(ChatTemplateRender, empty_conversation_refused) {
  for (const auto& t : {chat_template{}, parsed(config_with(quoted("x")))}) {
    auto r = render_chat(t, std::span<const chat_message>());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.err().message.find("messages is empty"), std::string::npos);
  }
}

TEST(ChatTemplateRender, plain_refuses_unknown_roles) {
  const std::vector<chat_message> msgs{{"user", "a"}, {"tool", "b"}};
  auto r = render_chat(chat_template{}, msgs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().message, "messages[1] has role \"tool\": plain renders system, user and assistant");
}

TEST(ChatTemplateRender, raise_exception_refused_with_the_templates_message) {
  auto t = parsed(config_with(quoted("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok")));
  const std::vector<chat_message> msgs{{"system", "s"}, {"user", "u"}};
  auto r = render_chat(t, msgs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().message, "tokenizer_config.json: chat_template line 1 raised an error: System role not supported");
}

TEST(ChatTemplateRender, messages_normalised_as_transformers_does) {
  // None-valued keys are dropped; reasoning is copied to thinking and reasoning_content.
  auto t = parsed(config_with(quoted("{% for m in messages %}{{ m | tojson }}{% endfor %}")));
  const auto msgs = jinja::value::list({jinja::value::dict(
      {{"role", "assistant"}, {"content", "4"}, {"tool_calls", jinja::value::none()}, {"reasoning", "r"}})});
  EXPECT_EQ(render_chat(t, msgs, chat_render_options{}).value(),
            R"({"thinking": "r", "role": "assistant", "content": "4", "reasoning": "r", "reasoning_content": "r"})");
}

TEST(ChatTemplateRender, tools_default_to_none) {
  auto t = parsed(config_with(quoted("{{ tools is none }} {{ documents is none }} {{ tools is defined }}")));
  const std::vector<chat_message> msgs{{"user", "x"}};
  EXPECT_EQ(render_chat(t, msgs).value(), "True True True");
  chat_render_options o;
  o.tools = jinja::value::list({jinja::value::dict({{"name", "f"}})});
  EXPECT_EQ(render_chat(t, jinja::value::list({jinja::value::dict({{"role", "user"}})}), o).value(), "False True True");
}

}  // namespace
}  // namespace mpakt::models
