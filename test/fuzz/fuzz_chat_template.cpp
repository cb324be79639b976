// libFuzzer target: chat templates (runtime/models/chat_template.cpp and the Jinja interpreter
// under it, runtime/models/jinja*.cpp). The first byte chooses:
//   0  the rest is a tokenizer_config.json: parse its template, then render a conversation
//   1  the rest is a chat_template.jinja beside a plain tokenizer_config.json, as above
//   2  the rest is a conversation, rendered with each of the fixtures' templates (the layout
//      fixtures and a few real hub templates: Llama 3.1, Qwen3, Gemma 2, Mistral Nemo,
//      DeepSeek-R1) and the plain format: messages split at '\0', each "role\x01content"
// Anything may be refused; nothing may crash, and the interpreter's limits keep every input
// to a bounded time and memory.

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/models/chat_template.hpp"

using namespace mpakt;

namespace {

/// The tokenizer_config.json of every fixture in test/fixtures/chat_templates.
const std::vector<models::chat_template>& templates() {
  static const std::vector<models::chat_template> all = [] {
    std::vector<models::chat_template> out{models::chat_template{}};  // plain
    for (const char* name : {"chatml", "chatml_default_system", "llama3", "gemma", "gemma_no_system", "mistral",
                             "hub/meta-llama-Llama-3.1-8B-Instruct", "hub/Qwen-Qwen3-0.6B", "hub/google-gemma-2-2b-it",
                             "hub/mistralai-Mistral-Nemo-Instruct-2407", "hub/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"}) {
      std::ifstream f(std::string(MPAKT_FIXTURES_DIR "/chat_templates/") + name + ".json");
      std::stringstream ss;
      ss << f.rdbuf();
      rapidjson::Document d;
      d.Parse(ss.str().c_str());
      if (d.HasParseError() || !d.IsObject() || !d.HasMember("tokenizer_config")) __builtin_trap();
      rapidjson::StringBuffer buf;
      rapidjson::Writer<rapidjson::StringBuffer> w(buf);
      d["tokenizer_config"].Accept(w);
      auto t = models::parse_chat_template(std::string_view(buf.GetString(), buf.GetSize()));
      if (!t) __builtin_trap();  // a fixture no longer parses: fix the fixtures, not the fuzzer
      out.push_back(std::move(*t));
    }
    return out;
  }();
  return all;
}

const std::vector<models::chat_message> conversation = {
    {"system", "Be brief."}, {"user", "Hello!"}, {"assistant", "Hi."}, {"user", "Once upon a time"}};

void render_both(const models::chat_template& t, const std::vector<models::chat_message>& messages) {
  (void)models::render_chat(t, messages, true);
  (void)models::render_chat(t, messages, false);
  if (auto text = models::render_chat(t, messages, true)) (void)models::template_adds_bos(t, *text);
  (void)t.format_name();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0:
      if (auto t = models::parse_chat_template(rest)) render_both(*t, conversation);
      break;
    case 1:
      if (auto t = models::parse_chat_template(R"({"bos_token": "<s>", "eos_token": "</s>"})", rest))
        render_both(*t, conversation);
      break;
    case 2: {
      std::vector<models::chat_message> messages;
      std::size_t at = 0;
      while (at <= rest.size()) {
        const std::size_t end = std::min(rest.find('\0', at), rest.size());
        const std::string_view m = rest.substr(at, end - at);
        const std::size_t sep = m.find('\x01');
        messages.push_back({std::string(m.substr(0, sep)), sep == std::string_view::npos ? "" : std::string(m.substr(sep + 1))});
        at = end + 1;
      }
      for (const auto& t : templates()) render_both(t, messages);
      break;
    }
  }
  return 0;
}
