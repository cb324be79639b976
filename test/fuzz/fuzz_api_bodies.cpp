// libFuzzer target: the request bodies of the API's endpoints, each through the decoder the
// server uses. The first byte chooses the endpoint; the rest is the body:
//   0  any body: the shared reader (runtime/json.cpp: depth, UTF-8, integers) and its fields
//   1  POST /api/v3/chat (parse_chat_request), and the same body as POST /v1/chat/completions
//      and /v1/completions (parse_openai_chat, parse_openai_completion, openai_error_body)
//   2  POST /api/v3/models/:id/graph (build_model_graph, against stories260K's config.json)
//   3  POST /api/v3/graph and /api/v2/graph (decode_graph_call, both versions, with a tensorId
//      alias as the coordinator's resolve would give)
//   4  POST /api/v3/graphs: the template (decode_compile_call; the generate check)
//   5  POST /api/v2/tensors (decode_tensor_upload)
//   6  POST /api/v3/models (decode_load_call) and its source (loader::parse_source, local paths
//      confined); POST /api/v3/sessions (decode_session_call)
//   7  step parameters (parse_params_text, as `mpakt run --bind` and templates use)
// The field checks the coordinator does inline (sessions, generate) are driven by the e2e
// flood test (test/e2e/test_hardening.py). Anything may be refused; nothing may crash.

#include <rapidjson/document.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "actors/loader/source.hpp"
#include "http/api/chat_model.hpp"
#include "http/api/openai.hpp"
#include "http/api/model_graph.hpp"
#include "http/api/requests.hpp"
#include "runtime/generate_check.hpp"
#include "runtime/graph.hpp"
#include "runtime/json.hpp"

using namespace mpakt;

namespace {

const std::string& stories_config() {
  static const std::string text = [] {
    std::ifstream f(MPAKT_SHARED_DIR "/models/stories260K/config.json");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }();
  return text;
}

void read_fields(const rapidjson::Value& v, int depth) {
  if (depth > 300) __builtin_trap();  // the reader's depth limit did not hold
  if (v.IsObject())
    for (auto it = v.MemberBegin(); it != v.MemberEnd(); ++it) read_fields(it->value, depth + 1);
  else if (v.IsArray())
    for (const auto& x : v.GetArray()) read_fields(x, depth + 1);
  else if (v.IsNumber())
    (void)json_integer(v, "x", INT64_MIN, INT64_MAX), (void)json_number_text(v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const int endpoint = data[0] % 8;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (endpoint) {
    case 0: {
      auto d = parse_json_object(body, "request body");
      if (d) read_fields(*d, 0);
      break;
    }
    case 1: {
      (void)http::parse_chat_request(body);
      http::openai_refusal why;
      (void)http::parse_openai_chat(body, &why);
      (void)http::parse_openai_completion(body, &why);
      (void)http::openai_error_body(400, std::string(body));
      break;
    }
    case 2:
      (void)http::build_model_graph(body, stories_config(), "m_000000000000000000000000");
      break;
    case 3: {
      const http::weight_aliases aliases{{"t_0", {"m_0", "w"}}};
      (void)http::decode_graph_call(body, 3, aliases);
      (void)http::decode_graph_call(body, 2);
      break;
    }
    case 4: {
      (void)http::decode_compile_call(body);
      // the generate check reads the template's graph as the coordinator does
      auto d = parse_json_object(body, "request body");
      if (!d || !d->HasMember("graph")) break;
      auto decl = parse_graph((*d)["graph"], true);
      if (!decl || decl->outputs.empty()) break;
      std::vector<std::string> bindings;
      for (const auto& in : decl->inputs)
        if (in.kind == input_kind::bound) bindings.push_back(in.bind);
      for (const auto& s : decl->steps)
        for (const auto& b : s.binds) bindings.push_back(b.name);
      (void)token_producer(*decl, decl->outputs.front());
      (void)check_generate_template(*decl, bindings, true, false);
      (void)check_generate_template(*decl, bindings, false, true);
      break;
    }
    case 5:
      (void)http::decode_tensor_upload(body);
      break;
    case 6: {
      (void)http::decode_load_call(body);
      (void)http::decode_session_call(body);
      (void)http::decode_generate_call(body);
      auto d = parse_json_object(body, "request body");
      if (!d || !d->HasMember("source") || !(*d)["source"].IsString()) break;
      loader::source_options opts;
      opts.hf_endpoint = "http://127.0.0.1:9";
      opts.local_dirs = std::vector<std::string>{"/nonexistent/mpakt-fuzz-models"};
      const auto& s = (*d)["source"];
      (void)loader::parse_source(std::string_view(s.GetString(), s.GetStringLength()), opts);
      break;
    }
    case 7:
      (void)parse_params_text(body);
      break;
  }
  return 0;
}
