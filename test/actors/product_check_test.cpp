// The pieces of a spot-check that redoes one product of a pass (actors/coordinator/
// product_check.hpp): which products a verifier holding only a model's head can redo, the
// extra outputs asked of the volunteer and taken out of the caller's answer, the one-step
// graph the verifier runs, and the comparison of products and argmax tokens.

#include "actors/coordinator/product_check.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/json.hpp"

namespace mpakt {
namespace {

// A decode step's tail as the builder writes it: the final norm, the tied head, argmax.
const std::string graph = R"({
  "inputs": [{"name": "w0", "model": "m_1", "weight": "model.embed_tokens.weight"},
             {"name": "w9", "model": "m_1", "weight": "model.norm.weight"},
             {"name": "w5", "model": "m_1", "weight": "model.layers.0.mlp.down_proj.weight"},
             {"name": "ids", "shape": [1], "data": [3]}],
  "steps": [{"op": "embedding", "in": ["w0", "ids"], "out": "h"},
            {"op": "matmul", "in": ["h", "w5"], "out": "d", "params": {"transB": true}},
            {"op": "rmsnorm", "in": ["d", "w9"], "out": "n", "params": {"eps": 1e-5}},
            {"op": "matmul", "in": ["n", "w0"], "out": "logits", "params": {"transB": true}},
            {"op": "argmax", "in": ["logits"], "out": "tok"}],
  "outputs": ["tok"]})";

auto head_only = [](const std::string& model, const std::string& weight) {
  return model == "m_1" && is_head_weight(weight);
};

TEST(product_check, HeadWeightsAreTheOutputHeadAndTheTokenEmbedding) {
  for (const char* n : {"lm_head.weight", "model.embed_tokens.weight", "embed_out.weight", "transformer.wte.weight",
                        "output.weight", "tok_embeddings.weight"})
    EXPECT_TRUE(is_head_weight(n)) << n;
  for (const char* n : {"model.norm.weight", "model.layers.0.self_attn.q_proj.weight", "lm_head.bias",
                        "model.layers.3.attention.output.weight"})
    EXPECT_FALSE(is_head_weight(n)) << n;
}

TEST(product_check, OnlyProductsOfAHeldWeightAgainstAValueAreProbed) {
  const auto found = products_to_probe(graph, head_only);
  ASSERT_EQ(found.size(), 1u);  // (the embedding lookup reads w0 too, but is no product)
  const auto& p = found[0];
  EXPECT_EQ(p.x, "n");
  EXPECT_EQ(p.out, "logits");
  EXPECT_EQ(p.model, "m_1");
  EXPECT_EQ(p.weight, "model.embed_tokens.weight");
  EXPECT_EQ(p.params_json, R"({"transB":true})");
  EXPECT_EQ(p.argmax_out, "tok");  // (a declared output drawn from it)
  // all weights held: the down projection too, in step order
  const auto all = products_to_probe(graph, [](const std::string&, const std::string&) { return true; });
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].out, "d");
  EXPECT_TRUE(all[0].argmax_out.empty());
  EXPECT_TRUE(products_to_probe(graph, [](const std::string&, const std::string&) { return false; }).empty());
  EXPECT_TRUE(products_to_probe("{not a graph", head_only).empty());
  EXPECT_TRUE(products_to_probe(R"({"inputs": 3, "steps": []})", head_only).empty());
}

TEST(product_check, ExtraOutputsAreAskedForAndTakenOutAgain) {
  auto more = with_outputs(graph, {"n", "logits", "tok"});
  ASSERT_TRUE(more) << more.err().message;
  EXPECT_EQ(declared_outputs(*more), (std::vector<std::string>{"tok", "n", "logits"}));
  auto fresh = with_outputs(R"({"inputs": [], "steps": []})", {"a"});
  ASSERT_TRUE(fresh);
  EXPECT_EQ(declared_outputs(*fresh), std::vector<std::string>{"a"});
  EXPECT_FALSE(with_outputs(R"({"outputs": 5})", {"a"}));

  const std::string answer = R"({"tok":{"shape":[1],"data":[7]},"n":{"shape":[2],"data":[0.5,1e-05]},)"
                             R"("logits":{"shape":[1,3],"data":[1,2,3]}})";
  auto kept = without_outputs(answer, {"n", "logits"});
  ASSERT_TRUE(kept);
  auto doc = parse_json_object(*kept, "kept");
  ASSERT_TRUE(doc);
  EXPECT_EQ(doc->MemberCount(), 1u);
  std::vector<std::int64_t> shape;
  std::vector<float> values;
  ASSERT_TRUE(output_of(*kept, "tok", shape, values));
  EXPECT_EQ(shape, std::vector<std::int64_t>{1});
  EXPECT_EQ(values, std::vector<float>{7});
  values.clear();
  shape.clear();
  ASSERT_TRUE(output_of(answer, "n", shape, values));
  EXPECT_EQ(values[1], 1e-05f);  // (JSON text reads back to the float it was written from)
  shape.clear();
  values.clear();
  EXPECT_FALSE(output_of(R"({"x":{"shape":[3],"data":[1,2]}})", "x", shape, values));  // (too few values)
  EXPECT_FALSE(output_of(answer, "missing", shape, values));
}

TEST(product_check, TheProbeGraphIsOneProductOfTheActivationAndTheHeldWeight) {
  const auto p = products_to_probe(graph, head_only).at(0);
  const std::string g = probe_graph(p, {1, 2}, std::vector<float>{0.25f, -3.0f});
  auto doc = parse_json_object(g, "probe");
  ASSERT_TRUE(doc) << g;
  const auto& d = *doc;
  ASSERT_EQ(d["inputs"].Size(), 2u);
  EXPECT_STREQ(d["inputs"][0]["name"].GetString(), "x");
  EXPECT_EQ(d["inputs"][0]["shape"][1].GetInt64(), 2);
  EXPECT_TRUE(d["inputs"][0].HasMember("dataB64"));
  EXPECT_STREQ(d["inputs"][1]["weight"].GetString(), "model.embed_tokens.weight");
  EXPECT_STREQ(d["steps"][0]["op"].GetString(), "matmul");
  EXPECT_TRUE(d["steps"][0]["params"]["transB"].GetBool());
  EXPECT_STREQ(d["outputs"][0].GetString(), "y");
}

std::string diff(const std::string&, std::span<const float> a, std::span<const float> b, float tol) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (tol <= 0 ? a[i] != b[i] : std::fabs(a[i] - b[i]) > tol) return "logits[" + std::to_string(i) + "]";
  return {};
}

TEST(product_check, ProductsAndTheTokensDrawnFromThemMustAgree) {
  const auto p = products_to_probe(graph, head_only).at(0);
  const std::vector<float> mine{1.0f, 5.0f, 4.99f, -2.0f, 0.0f, 7.0f};  // two rows of 3
  const std::vector<std::int64_t> shape{2, 3};
  auto parsed = [](const std::string& text) -> rapidjson::Document {
    auto d = parse_json_object(text, "answer");
    rapidjson::Document out;
    out.Swap(*d);
    return out;
  };
  auto answer = [&](std::string logits, std::string toks) {
    return parsed(R"({"tok":{"shape":[2],"data":[)" + toks + R"(]},"logits":{"shape":[2,3],"data":[)" + logits + "]}}");
  };
  EXPECT_EQ(probe_difference(p, answer("1,5,4.99,-2,0,7", "1,2"), mine, shape, 0, diff), "");
  EXPECT_EQ(probe_difference(p, answer("1,5,4.99,-2,0,7.5", "1,2"), mine, shape, 0, diff), "product logits[5]");
  // the product right, a token not its argmax (or out of range)
  EXPECT_NE(probe_difference(p, answer("1,5,4.99,-2,0,7", "2,2"), mine, shape, 0, diff).find("output tok[0] is 2"),
            std::string::npos);
  EXPECT_NE(probe_difference(p, answer("1,5,4.99,-2,0,7", "1,4443"), mine, shape, 0, diff), "");
  // on another kernel path a near-tie may go the other way, within the tolerance
  EXPECT_EQ(probe_difference(p, answer("1,5,4.99,-2,0,7", "2,2"), mine, shape, 0.01f, diff), "");
  EXPECT_NE(probe_difference(p, answer("1,5,4.99,-2,0,7", "0,2"), mine, shape, 0.01f, diff), "");
  // what it was asked for must be there, in the product's shape
  EXPECT_NE(probe_difference(p, parsed(R"({"tok":{"shape":[2],"data":[1,2]}})"), mine, shape, 0, diff), "");
  EXPECT_NE(probe_difference(p, parsed(R"({"tok":{"shape":[2],"data":[1,2]},"logits":{"shape":[6],"data":[1,5,4.99,-2,0,7]}})"), mine,
                             shape, 0, diff),
            "");
}

TEST(product_check, AVerifiedAnswerIsMadeOnlyFromTheProductAndTokensDrawnFromIt) {
  const auto p = products_to_probe(graph, head_only).at(0);
  const std::vector<float> mine{1.0f, 5.0f, 4.0f, 9.0f, 0.0f, 7.0f};
  auto a = verified_answer(p, {"tok"}, mine, {2, 3}, false);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, R"({"tok":{"shape":[2],"data":[1,0]}})");
  auto b = verified_answer(p, {"logits", "tok"}, mine, {1, 6}, false);
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, R"({"logits":{"shape":[1,6],"data":[1,5,4,9,0,7]},"tok":{"shape":[1],"data":[3]}})");
  auto c = verified_answer(p, {"tok"}, mine, {6}, true);  // (a vector's argmax is one value, shape [1])
  ASSERT_TRUE(c);
  EXPECT_NE(c->find(R"("shape":[1],"dataB64")"), std::string::npos);
  EXPECT_FALSE(verified_answer(p, {"tok", "n"}, mine, {2, 3}, false));  // (n is not the product's)
}

}  // namespace
}  // namespace mpakt
