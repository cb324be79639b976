// The edge's decoders of graph calls, templates and v2 uploads (http/api/requests.hpp): what
// the coordinator routes by, and the refusals that need no state, named as before they moved
// out of the coordinator (hardening: typed messages at the edge).
#include "http/api/requests.hpp"

#include <gtest/gtest.h>

#include <string>

#include "runtime/graph.hpp"

namespace mpakt::http {
namespace {

std::string refusal(const result<graph_call>& r) { return r ? std::string("(accepted)") : r.err().message; }

TEST(requests, InlineGraphCarriesItsReferencesAndText) {
  auto r = decode_graph_call(R"({"graph": {"session": "s_a", "sessions": ["s_a", "s_b"],
      "inputs": [{"name": "w", "model": "m_1", "weight": "emb"}, {"name": "t", "tensorId": "t_9"},
                 {"name": "x", "shape": [2], "data": [1, 2]}, {"name": "k", "session": "kc", "of": 1}],
      "steps": [{"op": "add", "in": ["x", "x"], "out": "y"}], "outputs": ["y"]}, "encoding": "base64"})", 3);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_TRUE(r->base64);
  EXPECT_EQ(r->session, "s_a");
  EXPECT_EQ(r->sessions, (std::vector<std::string>{"s_a", "s_b"}));
  ASSERT_EQ(r->refs.inputs.size(), 2u);
  EXPECT_EQ(r->refs.inputs[0].input, 0u);
  EXPECT_TRUE(r->refs.inputs[0].weight);
  EXPECT_EQ(r->refs.inputs[0].id, "m_1");
  EXPECT_EQ(r->refs.inputs[1].input, 1u);
  EXPECT_FALSE(r->refs.inputs[1].weight);
  EXPECT_EQ(r->refs.inputs[1].id, "t_9");
  EXPECT_EQ(tensor_ids(r->refs), std::vector<std::string>{"t_9"});
  EXPECT_NE(std::find(r->refs.needs.begin(), r->refs.needs.end(), "add"), r->refs.needs.end());
  // The text is the graph object itself, which the worker parses.
  auto back = parse_graph_text(r->graph_json, false);
  ASSERT_TRUE(back) << back.err().message;
  EXPECT_EQ(back->inputs.size(), 4u);
  EXPECT_EQ(back->inputs[2].data, (std::vector<float>{1, 2}));
}

TEST(requests, AliasesTurnTensorIdsIntoWeights) {
  const std::string body = R"({"graph": {"inputs": [{"name": "w", "tensorId": "t_w"}, {"name": "u", "tensorId": "t_u"}],
      "steps": [{"op": "add", "in": ["w", "u"], "out": "y"}], "outputs": ["y"]}})";
  auto r = decode_graph_call(body, 3, {{"t_w", {"m_7", "lm_head.weight"}}});
  ASSERT_TRUE(r) << r.err().message;
  ASSERT_EQ(r->refs.inputs.size(), 2u);
  EXPECT_TRUE(r->refs.inputs[0].weight);
  EXPECT_EQ(r->refs.inputs[0].id, "m_7");
  EXPECT_FALSE(r->refs.inputs[1].weight);
  auto back = parse_graph_text(r->graph_json, false);
  ASSERT_TRUE(back) << back.err().message;
  EXPECT_EQ(back->inputs[0].kind, input_kind::weight);
  EXPECT_EQ(back->inputs[0].model, "m_7");
  EXPECT_EQ(back->inputs[0].weight, "lm_head.weight");
  EXPECT_EQ(back->inputs[1].kind, input_kind::tensor_id);
}

TEST(requests, CompiledCallsKeepTheirBindings) {
  auto r = decode_graph_call(R"({"graphId": "gt_1", "sessions": ["s_b", "s_c"], "bind": {"pos": 41.0}})", 3);
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_EQ(r->graph_id, "gt_1");
  EXPECT_EQ(r->session, "s_b");  // the list's first is the primary
  EXPECT_EQ(r->bind_json, R"({"pos":41.0})");
  EXPECT_EQ(decode_graph_call(R"({"graphId": "gt_1"})", 3)->bind_json, "{}");
}

TEST(requests, StatelessRefusalsNameTheField) {
  EXPECT_EQ(refusal(decode_graph_call(R"({"graph": {"inputs": [], "steps": []}, "extra": 1})", 3)),
            "graph request has unknown field \"extra\"");
  EXPECT_EQ(refusal(decode_graph_call(R"({"graphId": "gt_1", "encoding": "hex"})", 3)),
            "encoding must be \"base64\" (or absent for JSON numbers)");
  EXPECT_EQ(refusal(decode_graph_call(R"({"graphId": "gt_1"})", 2)),
            "compiled graphs are an API v3 feature; use /api/v3/graph");
  EXPECT_EQ(refusal(decode_graph_call(R"({"graphId": "gt_1", "graph": {}})", 3)), "give either graph or graphId, not both");
  EXPECT_EQ(refusal(decode_graph_call(R"({"graphId": "gt_1", "bind": [1]})", 3)),
            "bind must be an object mapping binding names to values");
  EXPECT_EQ(refusal(decode_graph_call(R"({"session": "s_a"})", 3)),
            "graph request needs graph (inline) or graphId (compiled)");
  EXPECT_EQ(refusal(decode_graph_call(R"({"graph": {"inputs": [], "steps": []}, "bind": {}})", 3)),
            "bind belongs to compiled graphs (graphId)");
  EXPECT_EQ(refusal(decode_graph_call(R"({"graph": {"session": "s_a", "inputs": [], "steps": []}, "session": "s_b"})", 3)),
            "graph.session and session name different sessions");
  EXPECT_EQ(refusal(decode_graph_call(R"({"graph": {"inputs": [], "steps": []}, "session": "s_z", "sessions": ["s_a"]})", 3)),
            "sessions must include the primary session s_z");
  EXPECT_EQ(refusal(decode_graph_call(R"({"graph": {"inputs": [], "steps": []}, "session": "s_a"})", 2)),
            "sessions are an API v3 feature; use /api/v3/graph");
  EXPECT_EQ(refusal(decode_graph_call(R"({"graph": {"inputs": [{"name": "w", "model": "m", "weight": "x"}], "steps": []}})", 2)),
            "inputs[0] (w): API v2 inputs carry data or a tensorId; model and session inputs need /api/v3/graph");
  EXPECT_EQ(refusal(decode_graph_call(R"({"graph": {"inputs": [{"name": "x", "shape": [2], "data": [1, 2]}],
                                          "steps": [{"op": "rmsnorm", "in": ["x", "x"], "out": "y"}]}})", 2)),
            "step 0 (rmsnorm): op rmsnorm was added in API v3; use /api/v3/graph");
  // The graph's own structure errors, from the one graph parser.
  EXPECT_EQ(refusal(decode_graph_call(R"({"graph": {"inputs": [{"name": "x", "shape": [3], "data": [1, 2]}], "steps": []}})", 3)),
            "inputs[0] (x).data has 2 values but shape [3] needs 3");
  std::string sessions = R"({"graph": {"inputs": [], "steps": []}, "sessions": [)";
  for (int i = 0; i < 65; ++i) sessions += (i ? ",\"s_" : "\"s_") + std::to_string(i) + "\"";
  EXPECT_EQ(refusal(decode_graph_call(sessions + "]}", 3)), "a graph may list at most 64 sessions");
}

TEST(requests, TemplatesReportTheirSizesAndRefuseSessions) {
  const std::string body = R"({"label": "decode", "graph": {"inputs": [{"name": "ids", "shape": [1], "bind": "ids"}],
      "steps": [{"op": "scale", "in": ["ids"], "out": "y", "params": {"factor": {"$bind": "f"}}}], "outputs": ["y"]}})";
  auto c = decode_compile_call(body);
  ASSERT_TRUE(c) << c.err().message;
  EXPECT_EQ(c->label, "decode");
  EXPECT_EQ(c->body_bytes, body.size());
  // {"graphId":"gt_…24…","session":"s_…24…","bind":{"ids":[0],"f":0}}
  EXPECT_EQ(c->per_call_bytes, std::string(R"({"graphId":"gt_000000000000000000000000","session":"s_000000000000000000000000","bind":{"ids":[0],"f":0}})").size());
  auto s = decode_compile_call(R"({"graph": {"session": "s_a", "inputs": [], "steps": []}})");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.err().message, "a compiled graph names its session per call, not in the template");
  EXPECT_EQ(decode_compile_call(R"({"graph": {"inputs": [], "steps": []}, "x": 1})").err().message,
            "compile request has unknown field \"x\"");
  EXPECT_EQ(decode_compile_call(R"({"label": "x"})").err().message, "compile request needs a graph");
}

TEST(requests, UploadsDecodeTheirValues) {
  auto t = decode_tensor_upload(R"({"shape": [2, 2], "data": [1, 0, 0, 1]})");
  ASSERT_TRUE(t) << t.err().message;
  EXPECT_EQ(t->shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(t->data, (std::vector<float>{1, 0, 0, 1}));
  auto b = decode_tensor_upload(R"({"shape": [1], "dataB64": "AACAPw=="})");
  ASSERT_TRUE(b) << b.err().message;
  EXPECT_EQ(b->data, std::vector<float>{1.0f});
  EXPECT_EQ(decode_tensor_upload(R"({"shape": [3], "data": [1]})").err().message,
            "tensor upload.data has 1 values but shape [3] needs 3");
  EXPECT_EQ(decode_tensor_upload(R"({"shape": [1], "data": [1], "name": "x"})").err().message,
            "tensor upload has unknown field \"name\"");
}

TEST(requests, LoadsAndSessionsAreDecodedAtTheEdge) {
  auto l = decode_load_call(R"({"source": "hf:Org/M@v1", "include": ["model.layers.0*"], "exclude": ["*.bias"],
      "names": ["model.norm.weight"], "quantize": "q8", "token": "hf_x"})");
  ASSERT_TRUE(l) << l.err().message;
  EXPECT_EQ(l->source, "hf:Org/M@v1");
  EXPECT_EQ(l->include, std::vector<std::string>{"model.layers.0*"});
  EXPECT_EQ(l->exclude, std::vector<std::string>{"*.bias"});
  EXPECT_EQ(l->names, std::vector<std::string>{"model.norm.weight"});
  EXPECT_EQ(l->quantize, "q8");
  EXPECT_EQ(l->token, "hf_x");
  const auto refused = [](const auto& r) { return r ? std::string("(accepted)") : r.err().message; };
  EXPECT_EQ(refused(decode_load_call(R"({"include": []})")), "load request needs a source, e.g. \"hf:Org/Model\"");
  EXPECT_NE(refused(decode_load_call(R"({"source": "hf:a/b", "colour": 1})")).find("colour"), std::string::npos);
  EXPECT_NE(refused(decode_load_call(R"({"source": "hf:a/b", "include": "x"})")).find("include"), std::string::npos);
  EXPECT_NE(refused(decode_load_call(R"({"source": 5})")).find("source"), std::string::npos);
  EXPECT_NE(refused(decode_load_call("")).find("request body"), std::string::npos);

  auto s = decode_session_call(R"({"modelId": "m_1", "label": "chat"})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->model_id, "m_1");
  EXPECT_EQ(s->label, "chat");
  auto empty = decode_session_call(" \n");
  ASSERT_TRUE(empty);  // an empty body is a session of no model
  EXPECT_TRUE(empty->model_id.empty());
  EXPECT_NE(refused(decode_session_call(R"({"modelId": 1})")).find("modelId"), std::string::npos);
  EXPECT_NE(refused(decode_session_call(R"({"model": "m_1"})")).find("model"), std::string::npos);
  EXPECT_NE(refused(decode_session_call("[1]")).find("request body"), std::string::npos);
}

// CHK: generate's fields (api-v3 "generate"), integral doubles read as integers (issue 16, defect 5).
TEST(requests, GenerateRequestsAreDecodedAtTheEdge) {
  const auto refused = [](const auto& r) { return r ? std::string("(accepted)") : r.err().message; };
  auto g = decode_generate_call(R"({"graphId": "gt_1", "sessionId": "s_1", "ids": [5, 41.0], "startPos": 7.0,
      "maxNewTokens": 3, "stopIds": [2], "temperature": 0.5, "topK": 40.0, "topP": 0.9, "seed": 12,
      "stream": false, "speculative": {"graphIds": ["gt_2"], "always": true}})");
  ASSERT_TRUE(g) << g.err().message;
  EXPECT_EQ(g->graph_id, "gt_1");
  EXPECT_EQ(g->session_id, "s_1");
  EXPECT_EQ(g->ids, (std::vector<std::int64_t>{5, 41}));
  EXPECT_EQ(g->start_pos, 7);
  EXPECT_EQ(g->max_new, 3u);
  EXPECT_EQ(g->stop_ids, (std::vector<std::int64_t>{2}));
  using kv = std::pair<std::string, double>;
  EXPECT_EQ(g->sampling, (std::vector<kv>{{"temperature", 0.5}, {"topP", 0.9}, {"topK", 40}}));
  EXPECT_TRUE(g->has_seed);
  EXPECT_EQ(g->seed, 12);
  EXPECT_FALSE(g->stream);
  EXPECT_TRUE(g->worker_loop);
  EXPECT_TRUE(g->speculative);
  EXPECT_EQ(g->verify_graphs, (std::vector<std::string>{"gt_2"}));
  EXPECT_TRUE(g->always);
  EXPECT_FALSE(g->has_context);

  auto d = decode_generate_call(R"({"graphId": "gt_1", "sessionId": "s_1", "ids": [9], "startPos": 0})");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->max_new, 256u);  // the spec's default
  EXPECT_FALSE(d->has_seed);
  EXPECT_TRUE(d->stream);
  EXPECT_TRUE(d->sampling.empty());

  const std::string base = R"("graphId": "gt_1", "sessionId": "s_1", )";
  auto why = [&](const std::string& rest) { return refused(decode_generate_call("{" + base + rest + "}")); };
  EXPECT_NE(why(R"("ids": [1], "startPos": 41.5)").find("startPos must be an integer"), std::string::npos);
  EXPECT_NE(why(R"("ids": [1.5], "startPos": 0)").find("ids[0]"), std::string::npos);
  EXPECT_NE(why(R"("ids": [], "startPos": 0)").find("ids must hold"), std::string::npos);
  EXPECT_NE(why(R"("startPos": 0)").find("needs ids"), std::string::npos);
  EXPECT_NE(why(R"("ids": [1])").find("needs startPos"), std::string::npos);
  EXPECT_NE(why(R"("ids": [1], "startPos": 0, "maxNewTokens": 5000)").find("maxNewTokens"), std::string::npos);
  EXPECT_NE(why(R"("ids": [1], "startPos": 0, "topP": 0)").find("topP"), std::string::npos);
  EXPECT_NE(why(R"("ids": [1], "startPos": 0, "temperature": -1)").find("temperature"), std::string::npos);
  EXPECT_NE(why(R"("ids": [1], "startPos": 0, "stream": 1)").find("stream"), std::string::npos);
  EXPECT_NE(why(R"("ids": [1], "startPos": 0, "bogus": 1)").find("bogus"), std::string::npos);
  EXPECT_NE(why(R"("ids": [1], "startPos": 0, "speculative": {"graphIds": []})").find("graphIds"), std::string::npos);
  EXPECT_NE(why(R"("ids": [1], "startPos": 0, "speculative": {"graphIds": ["a"], "context": [-1]})")
                .find("speculative.context[0]"),
            std::string::npos);
  EXPECT_NE(refused(decode_generate_call(R"({"sessionId": "s", "ids": [1], "startPos": 0})")).find("graphId"),
            std::string::npos);
}

}  // namespace
}  // namespace mpakt::http
