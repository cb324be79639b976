// The OpenAI-compatible API's pure parts (http/api/openai.hpp): request bodies read with
// OpenAI's defaults and refusals naming the field, the stop-string gate, and the answer shapes
// (their fields as OpenAI's API reference lists them).
#include "http/api/openai.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>

namespace mpakt::http {
namespace {

std::string param_of(std::optional<chat_request> (*parse)(std::string_view, openai_refusal*), const std::string& body) {
  openai_refusal why;
  auto r = parse(body, &why);
  return r ? "(accepted)" : why.param;
}

TEST(openai, ChatTakesOpenAIsDefaults) {
  openai_refusal why;
  auto r = parse_openai_chat(R"({"model": "m_1", "messages": [{"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}]})", &why);
  ASSERT_TRUE(r) << why.err.message;
  EXPECT_EQ(r->api, chat_api::openai_chat);
  EXPECT_EQ(r->model_id, "m_1");
  EXPECT_EQ(r->temperature, 1.0);
  EXPECT_EQ(r->repetition_penalty, 1.0);
  EXPECT_FALSE(r->penalize_prompt);
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->logprobs, -1);
  EXPECT_GT(r->max_tokens, 100000u);  // up to the context's end
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[1].content, "hi there");
}

TEST(openai, ChatReadsItsSettings) {
  openai_refusal why;
  auto r = parse_openai_chat(R"({"model": "hf:Org/M", "messages": [{"role": "user", "content": "x"}],
      "max_completion_tokens": 7, "max_tokens": 9, "temperature": 0, "top_p": 0.5, "seed": 3, "stop": "END",
      "n": 1, "stream": true, "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 4,
      "presence_penalty": 0.5, "frequency_penalty": -1, "user": "u", "logit_bias": {}})", &why);
  ASSERT_TRUE(r) << why.err.message;
  EXPECT_EQ(r->source, "hf:Org/M");
  EXPECT_EQ(r->max_tokens, 7u);  // max_completion_tokens wins
  EXPECT_EQ(*r->top_p, 0.5);
  EXPECT_EQ(r->stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->logprobs, 4);
  EXPECT_EQ(r->frequency_penalty, -1);
  // tools reach the template (as JSON text), unless tool_choice is "none"
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  r = parse_openai_chat(R"({"model": "m_1", "messages": [{"role": "user", "content": "x"}], )" + tools + "}", &why);
  ASSERT_TRUE(r) << why.err.message;
  EXPECT_NE(r->tools_json.find("\"name\":\"f\""), std::string::npos) << r->tools_json;
  r = parse_openai_chat(R"({"model": "m_1", "messages": [{"role": "user", "content": "x"}], "tool_choice": "none", )" + tools + "}",
                        &why);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->tools_json.empty());
}

TEST(openai, RefusalsNameTheField) {
  const std::string m = R"("model": "m_1", "messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "n": 2})"), "n");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "n": 1.0})"), "(accepted)");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "stop": ["a", "b", "c", "d", "e"]})"), "stop");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "stop": [""]})"), "stop");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "temperature": 2.5})"), "temperature");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "top_logprobs": 3})"), "top_logprobs");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "logprobs": true, "top_logprobs": 21})"), "top_logprobs");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "stream_options": {"include_usage": true}})"), "stream_options");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "tools": {}})"), "tools");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "tools": null})"), "(accepted)");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "response_format": {"type": "json_object"}})"), "response_format");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "colour": 1})"), "colour");
  EXPECT_EQ(param_of(parse_openai_chat, "{" + m + R"(, "logit_bias": {"5": 1}})"), "logit_bias");
  EXPECT_EQ(param_of(parse_openai_chat, R"({"model": "m_1", "messages": [{"role": "tool", "content": "x"}]})"),
            "messages[0].role");
  EXPECT_EQ(param_of(parse_openai_chat, R"({"model": "m_1", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
            "messages[0].content");
  EXPECT_EQ(param_of(parse_openai_chat, R"({"messages": [{"role": "user", "content": "x"}]})"), "model");
  EXPECT_EQ(param_of(parse_openai_completion, R"({"model": "m_1", "prompt": ["a", "b"]})"), "prompt");
  EXPECT_EQ(param_of(parse_openai_completion, R"({"model": "m_1", "prompt": "a", "best_of": 2})"), "best_of");
  EXPECT_EQ(param_of(parse_openai_completion, R"({"model": "m_1", "prompt": "a", "suffix": "z"})"), "suffix");
  EXPECT_EQ(param_of(parse_openai_completion, R"({"model": "m_1", "prompt": "a", "echo": true, "logprobs": 1})"), "echo");
  EXPECT_EQ(param_of(parse_openai_completion, R"({"model": "m_1", "prompt": [1, -2]})"), "prompt");
}

TEST(openai, CompletionsTakeTextOrIds) {
  openai_refusal why;
  auto r = parse_openai_completion(R"({"model": "m_1", "prompt": [[1, 403, 407]], "logprobs": 0})", &why);
  ASSERT_TRUE(r) << why.err.message;
  EXPECT_EQ(r->prompt_ids, (std::vector<std::int32_t>{1, 403, 407}));
  EXPECT_EQ(r->max_tokens, 16u);  // OpenAI's default for completions
  EXPECT_EQ(r->logprobs, 0);
  r = parse_openai_completion(R"({"model": "m_1", "prompt": "Once upon"})", &why);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->prompt_text, "Once upon");
  EXPECT_TRUE(r->has_prompt);
}

openai_token tok(std::int64_t id) { return openai_token{id, "", 0, {}}; }

TEST(openai, StopStringsCutExactlyAcrossPieces) {
  reply_text t({"END", "x!"});
  t.add("Hello E", tok(1));
  auto p = t.take();
  EXPECT_EQ(p.text, "Hello ");  // "E" may begin END: held back
  EXPECT_EQ(p.tokens.size(), 0u);  // the token ends in held text
  t.add("N", tok(2));
  EXPECT_EQ(t.take().text, "");
  t.add("Dless", tok(3));
  EXPECT_TRUE(t.stopped());
  auto rest = t.finish();
  EXPECT_EQ(rest.text, "");          // the held "E" began END: nothing of it goes out
  EXPECT_EQ(rest.tokens.size(), 1u);  // the token the cut went through does; those after do not
  EXPECT_EQ(t.text(), "Hello ");
}

TEST(openai, HeldTextIsReleasedWhenNoStopFollows) {
  reply_text t({"END"});
  t.add("abc E", tok(1));
  EXPECT_EQ(t.take().text, "abc ");
  t.add("Nx", tok(2));
  auto p = t.take();
  EXPECT_EQ(p.text, "ENx");
  EXPECT_EQ(p.tokens.size(), 2u);
  t.add("", std::nullopt);
  EXPECT_EQ(t.finish().text, "");
  EXPECT_FALSE(t.stopped());
}

TEST(openai, TheEarliestStopWins) {
  reply_text t({"cd", "b"});
  t.add("abcd", tok(1));
  EXPECT_TRUE(t.stopped());
  EXPECT_EQ(t.finish().text, "a");
}

TEST(openai, AnswersHaveOpenAIsFields) {
  openai_meta m{true, "chatcmpl-1", 42, "m_1", true, true};
  openai_token t{7, " hi", -0.5f, {{" hi", -0.5f}, {" yo", -1.5f}}};
  rapidjson::Document d;
  d.Parse(openai_chunk(m, " hi", {t}, true, nullptr).c_str());
  ASSERT_FALSE(d.HasParseError());
  EXPECT_STREQ(d["object"].GetString(), "chat.completion.chunk");
  EXPECT_STREQ(d["choices"][0]["delta"]["role"].GetString(), "assistant");
  EXPECT_TRUE(d["choices"][0]["finish_reason"].IsNull());
  EXPECT_TRUE(d["usage"].IsNull());
  EXPECT_EQ(d["choices"][0]["logprobs"]["content"][0]["top_logprobs"].Size(), 2u);
  EXPECT_EQ(d["choices"][0]["logprobs"]["content"][0]["bytes"].Size(), 3u);
  d.Parse(openai_usage_chunk(m, {5, 3, 0}).c_str());
  EXPECT_EQ(d["choices"].Size(), 0u);
  EXPECT_EQ(d["usage"]["total_tokens"].GetInt(), 8);
  m.chat = false;
  d.Parse(openai_response(m, " hi", {t}, "length", {5, 1, 0}).c_str());
  EXPECT_STREQ(d["object"].GetString(), "text_completion");
  EXPECT_STREQ(d["choices"][0]["finish_reason"].GetString(), "length");
  EXPECT_DOUBLE_EQ(d["choices"][0]["logprobs"]["token_logprobs"][0].GetDouble(), -0.5);
  EXPECT_DOUBLE_EQ(d["choices"][0]["logprobs"]["top_logprobs"][0][" yo"].GetDouble(), -1.5);
  EXPECT_EQ(d["usage"]["prompt_tokens_details"]["cached_tokens"].GetInt(), 0);
}

TEST(openai, ErrorsTakeOpenAIsShape) {
  rapidjson::Document d;
  d.Parse(openai_error_json(400, "n must be 1", "n").c_str());
  EXPECT_STREQ(d["error"]["type"].GetString(), "invalid_request_error");
  EXPECT_STREQ(d["error"]["param"].GetString(), "n");
  EXPECT_TRUE(d["error"]["code"].IsNull());
  d.Parse(openai_error_body(401, R"({"error": "bad key"})").c_str());
  EXPECT_STREQ(d["error"]["message"].GetString(), "bad key");
  EXPECT_STREQ(d["error"]["code"].GetString(), "invalid_api_key");
  EXPECT_EQ(openai_error_body(500, "not json"), "not json");
}

}  // namespace
}  // namespace mpakt::http
