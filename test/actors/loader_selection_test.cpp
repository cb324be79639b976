#include "actors/loader/selection.hpp"

#include <gtest/gtest.h>

namespace mpakt::loader {
namespace {

/// An index of one imaginary file holding `names` (bf16 [64, 64] each unless given).
model_index make_index(const std::vector<std::pair<std::string, std::string>>& tensors) {
  model_index idx;
  idx.source = "hf:Test/Model";
  idx.files.push_back({"model.safetensors", "/nowhere/model.safetensors", 8, std::nullopt, {}});
  std::uint64_t off = 0;
  for (const auto& [name, dt] : tensors) {
    tensor_info t;
    t.entry.name = name;
    t.entry.file_dtype = dt;
    t.entry.shape = {64, 64};
    t.entry.begin = off;
    t.entry.end = off + 64 * 64 * std::uint64_t(std::max(1, published_dtype_size(dt)));
    off = t.entry.end;
    t.file_offset = 8 + t.entry.begin;
    idx.by_name.emplace(name, idx.tensors.size());
    idx.total_bytes += t.bytes();
    ++idx.dtypes[published_dtype_name(dt)];
    idx.tensors.push_back(t);
  }
  return idx;
}

model_index layers_index() {
  std::vector<std::pair<std::string, std::string>> v;
  v.emplace_back("model.embed_tokens.weight", "BF16");
  for (int l = 0; l < 28; ++l)
    for (const char* part : {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.v_proj.weight", "mlp.down_proj.weight"})
      v.emplace_back("model.layers." + std::to_string(l) + "." + part, "BF16");
  v.emplace_back("model.norm.weight", "BF16");
  v.emplace_back("lm_head.weight", "BF16");
  return make_index(v);
}

std::vector<std::string> names_of(const model_index& idx, const std::vector<std::size_t>& sel) {
  std::vector<std::string> out;
  for (auto i : sel) out.push_back(idx.tensors[i].name());
  return out;
}

TEST(LoaderGlob, StarCrossesDotsAndQuestionMarkIsOneCharacter) {
  EXPECT_TRUE(glob_match("model.layers.26.*", "model.layers.26.self_attn.q_proj.weight"));
  EXPECT_FALSE(glob_match("model.layers.26.*", "model.layers.2.self_attn.q_proj.weight"));
  EXPECT_FALSE(glob_match("model.layers.2.*", "model.layers.26.mlp.weight"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("*", "anything.at.all"));
  EXPECT_TRUE(glob_match("*.bias", "a.b.bias"));
  EXPECT_FALSE(glob_match("*.bias", "a.b.bias.x"));
  EXPECT_TRUE(glob_match("model.layers.?.mlp.*", "model.layers.7.mlp.up_proj.weight"));
  EXPECT_FALSE(glob_match("model.layers.?.mlp.*", "model.layers.17.mlp.up_proj.weight"));
  EXPECT_TRUE(glob_match("*layers.*.q_proj*", "model.layers.3.self_attn.q_proj.weight"));
  EXPECT_TRUE(glob_match("a*b*c", "aXXbYYbZZc"));
  EXPECT_FALSE(glob_match("a*b*c", "aXXbYYbZZ"));
  EXPECT_TRUE(glob_match("exact", "exact"));
  EXPECT_FALSE(glob_match("exact", "exactly"));
  EXPECT_FALSE(glob_match("", "x"));
  EXPECT_TRUE(glob_match("[x]", "[x]"));  // no character classes: brackets are literal
  EXPECT_TRUE(glob_match("**?", "ab"));
  EXPECT_FALSE(glob_match("**??", "a"));
}

TEST(LoaderSelection, EverythingWhenNothingIsGiven) {
  const auto idx = layers_index();
  auto sel = select_tensors(idx, {});
  ASSERT_TRUE(sel.ok());
  EXPECT_EQ(sel->size(), idx.count());
}

TEST(LoaderSelection, IncludeTwoLayersAsTheSpecExampleDoes) {
  const auto idx = layers_index();
  auto sel = select_tensors(idx, {{"model.layers.26.*", "model.layers.27.*"}, {}, {}});
  ASSERT_TRUE(sel.ok()) << sel.err().message;
  EXPECT_EQ(sel->size(), 8u);
  for (const auto& n : names_of(idx, *sel))
    EXPECT_TRUE(n.rfind("model.layers.26.", 0) == 0 || n.rfind("model.layers.27.", 0) == 0) << n;
}

TEST(LoaderSelection, IncludeUnionNamesMinusExclude) {
  const auto idx = layers_index();
  selection_request req;
  req.include = {"model.layers.0.*"};
  req.names = {"lm_head.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight"};
  req.exclude = {"*layernorm*", "*.norm.*"};
  auto sel = select_tensors(idx, req);
  ASSERT_TRUE(sel.ok()) << sel.err().message;
  EXPECT_EQ(names_of(idx, *sel),
            (std::vector<std::string>{"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.v_proj.weight",
                                      "model.layers.0.mlp.down_proj.weight", "lm_head.weight"}));
}

TEST(LoaderSelection, ExcludeAloneStartsFromEverything) {
  const auto idx = layers_index();
  auto sel = select_tensors(idx, {{}, {"model.layers.*"}, {}});
  ASSERT_TRUE(sel.ok());
  EXPECT_EQ(names_of(idx, *sel),
            (std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}));
}

TEST(LoaderSelection, NamesAloneSelectExactlyThem) {
  const auto idx = layers_index();
  auto sel = select_tensors(idx, {{}, {}, {"model.layers.3.mlp.down_proj.weight"}});
  ASSERT_TRUE(sel.ok());
  EXPECT_EQ(names_of(idx, *sel), (std::vector<std::string>{"model.layers.3.mlp.down_proj.weight"}));
}

TEST(LoaderSelection, EmptySelectionNamesThePatterns) {
  const auto idx = layers_index();
  auto a = select_tensors(idx, {{"model.layers.99.*"}, {}, {}});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.err().code, errc::invalid);
  EXPECT_EQ(a.err().message, "include [\"model.layers.99.*\"] selects no tensor of hf:Test/Model");
  auto b = select_tensors(idx, {{"model.layers.1.*"}, {"*"}, {}});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.err().message, "include [\"model.layers.1.*\"] minus exclude [\"*\"] selects no tensor of hf:Test/Model");
  auto c = select_tensors(idx, {{}, {"*"}, {}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.err().message, "the whole checkpoint minus exclude [\"*\"] selects no tensor of hf:Test/Model");
}

TEST(LoaderSelection, UnknownExactNameIsNamed) {
  const auto idx = layers_index();
  auto s = select_tensors(idx, {{"*"}, {}, {"lm_head.weight", "model.layers.0.mlp.gate_proj.weight"}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err().code, errc::invalid);
  EXPECT_EQ(s.err().message, "names lists model.layers.0.mlp.gate_proj.weight, which hf:Test/Model does not hold");
}

TEST(LoaderQuantised, SelectedQuantisedDtypesAreRefusedByName) {
  const auto idx = make_index({{"a.weight", "BF16"}, {"b.weight", "I8"}, {"c.weight", "F8_E4M3"}, {"d.weight", "F16"}});
  auto sel = select_tensors(idx, {});
  ASSERT_TRUE(sel.ok());
  auto st = check_not_quantised(idx, *sel);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().code, errc::invalid);
  EXPECT_NE(st.err().message.find("hf:Test/Model is a quantised checkpoint"), std::string::npos) << st.err().message;
  EXPECT_NE(st.err().message.find("b.weight (i8), c.weight (f8_e4m3)"), std::string::npos) << st.err().message;
  EXPECT_EQ(st.err().message.find("a.weight"), std::string::npos);
}

TEST(LoaderQuantised, UnselectedOddDtypeDoesNotBlockButMarkersAnywhereDo) {
  // An int32 buffer left out of the selection is fine...
  const auto plain = make_index({{"a.weight", "BF16"}, {"buf.counts", "I32"}});
  auto sel = select_tensors(plain, {{}, {}, {"a.weight"}});
  ASSERT_TRUE(sel.ok());
  EXPECT_TRUE(check_not_quantised(plain, *sel).ok());
  // ...but GPTQ marker tensors anywhere refuse the checkpoint, even when not selected.
  const auto gptq = make_index({{"model.embed_tokens.weight", "F16"},
                                {"model.layers.0.self_attn.q_proj.qweight", "I32"},
                                {"model.layers.0.self_attn.q_proj.scales", "F16"},
                                {"model.layers.0.self_attn.q_proj.qzeros", "I32"}});
  auto only_embed = select_tensors(gptq, {{}, {}, {"model.embed_tokens.weight"}});
  ASSERT_TRUE(only_embed.ok());
  auto st = check_not_quantised(gptq, *only_embed);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("model.layers.0.self_attn.q_proj.scales (f16)"), std::string::npos) << st.err().message;
}

TEST(LoaderQuantised, NamesAtMostTenTensors) {
  std::vector<std::pair<std::string, std::string>> v;
  for (int i = 0; i < 14; ++i) v.emplace_back("l" + std::to_string(i) + ".weight", "I8");
  const auto idx = make_index(v);
  auto sel = select_tensors(idx, {});
  ASSERT_TRUE(sel.ok());
  auto st = check_not_quantised(idx, *sel);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("l9.weight (i8) and 4 more"), std::string::npos) << st.err().message;
  EXPECT_EQ(st.err().message.find("l10.weight"), std::string::npos) << st.err().message;
}

}  // namespace
}  // namespace mpakt::loader
