#include "actors/loader/quantize_plan.hpp"

#include <gtest/gtest.h>

namespace mpakt::loader {
namespace {

struct spec {
  std::string name;
  std::string dtype;
  shape_t shape;
};

model_index make_index(const std::vector<spec>& tensors) {
  model_index idx;
  idx.source = "hf:Test/Model";
  idx.files.push_back({"model.safetensors", "/nowhere/model.safetensors", 8, std::nullopt, {}});
  std::uint64_t off = 0;
  for (const auto& s : tensors) {
    tensor_info t;
    t.entry.name = s.name;
    t.entry.file_dtype = s.dtype;
    t.entry.shape = s.shape;
    t.entry.begin = off;
    t.entry.end = off + std::uint64_t(shape_numel(s.shape)) * std::uint64_t(published_dtype_size(s.dtype));
    off = t.entry.end;
    t.file_offset = 8 + t.entry.begin;
    idx.by_name.emplace(s.name, idx.tensors.size());
    idx.total_bytes += t.bytes();
    ++idx.dtypes[published_dtype_name(s.dtype)];
    idx.tensors.push_back(t);
  }
  return idx;
}

/// SmolLM2-135M-Instruct's tensors: 576 hidden, 1536 intermediate, 30 layers, 9/3 heads of
/// 64, 49152 vocabulary, tied embedding (no lm_head), all bf16.
model_index smollm2() {
  std::vector<spec> v;
  v.push_back({"model.embed_tokens.weight", "BF16", {49152, 576}});
  for (int l = 0; l < 30; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    v.push_back({p + "input_layernorm.weight", "BF16", {576}});
    v.push_back({p + "self_attn.q_proj.weight", "BF16", {576, 576}});
    v.push_back({p + "self_attn.k_proj.weight", "BF16", {192, 576}});
    v.push_back({p + "self_attn.v_proj.weight", "BF16", {192, 576}});
    v.push_back({p + "self_attn.o_proj.weight", "BF16", {576, 576}});
    v.push_back({p + "post_attention_layernorm.weight", "BF16", {576}});
    v.push_back({p + "mlp.gate_proj.weight", "BF16", {1536, 576}});
    v.push_back({p + "mlp.up_proj.weight", "BF16", {1536, 576}});
    v.push_back({p + "mlp.down_proj.weight", "BF16", {576, 1536}});
  }
  v.push_back({"model.norm.weight", "BF16", {576}});
  return make_index(v);
}

std::vector<std::size_t> all(const model_index& idx) {
  std::vector<std::size_t> out(idx.count());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = i;
  return out;
}

pool_capacity pool_of(std::uint64_t free, int workers = 1, std::uint64_t largest = 0) {
  pool_capacity p;
  p.free_bytes = free;
  p.largest_free_bytes = largest ? largest : free;
  p.workers = workers;
  return p;
}

weight_kind kind(const std::string& name, const std::string& dt, shape_t shape) {
  st_entry e;
  e.name = name;
  e.file_dtype = dt;
  e.shape = std::move(shape);
  return classify_weight(e);
}

TEST(LoaderQuantizePlan, ModeNames) {
  for (auto m : {quantize_mode::none, quantize_mode::q8, quantize_mode::q4, quantize_mode::automatic})
    EXPECT_EQ(quantize_mode_from_name(quantize_mode_name(m)), m);
  EXPECT_EQ(quantize_mode_name(quantize_mode::automatic), "auto");
  EXPECT_FALSE(quantize_mode_from_name("q2").has_value());
  EXPECT_FALSE(quantize_mode_from_name("Q8").has_value());
}

TEST(LoaderQuantizePlan, ClassifiesByShapeDtypeAndName) {
  using wk = weight_kind;
  // Left as published: norms (1-D or not), biases, small tensors, ragged rows, conv kernels.
  EXPECT_EQ(kind("model.layers.0.input_layernorm.weight", "BF16", {576}), wk::kept);
  EXPECT_EQ(kind("model.layers.0.self_attn.q_norm.weight", "BF16", {64, 64}), wk::kept);
  EXPECT_EQ(kind("transformer.ln_f.weight", "F32", {64, 64}), wk::kept);
  EXPECT_EQ(kind("blocks.0.ln2.weight", "F32", {64, 64}), wk::kept);
  EXPECT_EQ(kind("encoder.attn_ln.weight", "F32", {64, 64}), wk::kept);
  EXPECT_EQ(kind("model.layers.0.mlp.up_proj.bias", "BF16", {64, 64}), wk::kept);
  EXPECT_EQ(kind("model.layers.0.mlp.up_proj.weight", "BF16", {16, 32}), wk::kept);   // 512 elements
  EXPECT_EQ(kind("model.layers.0.mlp.up_proj.weight", "BF16", {32, 32}), wk::matrix); // 1024: at the threshold
  EXPECT_EQ(kind("model.layers.0.mlp.up_proj.weight", "BF16", {64, 100}), wk::kept);  // rows not a multiple of 32
  EXPECT_EQ(kind("model.layers.0.conv.conv.weight", "BF16", {1024, 1, 3}), wk::kept);
  // Buffers become f32 whatever their shape.
  EXPECT_EQ(kind("model.position_ids", "I64", {1, 2048}), wk::buffer);
  EXPECT_EQ(kind("transformer.h.0.attn.bias", "BOOL", {1, 1, 1024, 1024}), wk::buffer);
  EXPECT_EQ(kind("rotary.inv_freq", "F64", {64, 64}), wk::buffer);
  // Matrices, and the ones that stay q8 under q4.
  EXPECT_EQ(kind("model.layers.0.self_attn.k_proj.weight", "BF16", {192, 576}), wk::matrix);
  EXPECT_EQ(kind("model.layers.0.self_attn.v_proj.weight", "BF16", {192, 576}), wk::sensitive);
  EXPECT_EQ(kind("model.layers.0.mlp.down_proj.weight", "BF16", {576, 1536}), wk::sensitive);
  EXPECT_EQ(kind("model.embed_tokens.weight", "BF16", {49152, 576}), wk::sensitive);
  EXPECT_EQ(kind("lm_head.weight", "BF16", {49152, 576}), wk::sensitive);
  EXPECT_EQ(kind("output.weight", "F16", {32000, 4096}), wk::sensitive);
  EXPECT_EQ(kind("gpt_neox.embed_in.weight", "F16", {512, 64}), wk::sensitive);
  EXPECT_EQ(kind("embed_out.weight", "F16", {512, 64}), wk::sensitive);
  EXPECT_EQ(kind("transformer.wte.weight", "F32", {512, 64}), wk::sensitive);
  EXPECT_EQ(kind("transformer.h.0.mlp.c_proj.weight", "F32", {256, 64}), wk::sensitive);
  EXPECT_EQ(kind("transformer.h.0.attn.c_proj.weight", "F32", {64, 64}), wk::matrix);
  EXPECT_EQ(kind("gpt_neox.layers.0.mlp.dense_4h_to_h.weight", "F16", {64, 256}), wk::sensitive);
  EXPECT_EQ(kind("model.layers.0.mlp.fc2.weight", "F16", {64, 256}), wk::sensitive);
  EXPECT_EQ(kind("model.layers.0.block_sparse_moe.experts.3.w2.weight", "BF16", {64, 256}), wk::sensitive);
  EXPECT_EQ(kind("model.layers.0.block_sparse_moe.experts.3.w1.weight", "BF16", {256, 64}), wk::matrix);
  EXPECT_EQ(kind("encoder.layer.0.output.dense.weight", "F32", {64, 256}), wk::matrix);  // BERT, not a head
  // 3-D MoE expert stacks are matrices: rows are the last dimension.
  EXPECT_EQ(kind("model.layers.0.mlp.experts.gate_up_proj", "BF16", {8, 64, 256}), wk::matrix);
  EXPECT_EQ(kind("model.layers.0.mlp.experts.down_proj", "BF16", {8, 128, 64}), wk::sensitive);
}

TEST(LoaderQuantizePlan, SmolLM2SizesMatchTheSpec) {
  const auto idx = smollm2();
  const auto sel = all(idx);
  const auto pool = pool_of(1'000'000'000'000);
  const auto none = plan_mode(idx, sel, quantize_mode::none, pool);
  const auto q8 = plan_mode(idx, sel, quantize_mode::q8, pool);
  const auto q4 = plan_mode(idx, sel, quantize_mode::q4, pool);
  // 134,515,008 parameters, bf16.
  EXPECT_EQ(none.published_bytes, 269'030'016u);
  EXPECT_EQ(none.resident_bytes, 269'030'016u);  // packed: resident = published
  EXPECT_EQ(q8.published_bytes, 269'030'016u);   // nothing changes on the wire (QNT-08)
  // QNT-14/15: "weights 270 to 143 MB" (q8) and "110 MB" (q4).
  EXPECT_EQ(q8.resident_bytes, 142'955'136u);
  EXPECT_EQ(mb_up(q8.resident_bytes), 143u);
  EXPECT_EQ(q4.resident_bytes, 109'570'176u);
  EXPECT_EQ(mb_up(q4.resident_bytes), 110u);
  // Every matrix at q8 is exactly 8.5/16 of its bf16 size (QNT-16); norms stay bf16.
  for (const auto& t : q8.tensors) {
    const auto& e = idx.tensors[t.tensor].entry;
    if (e.shape.size() == 2) {
      EXPECT_EQ(t.resident, dtype::q8) << e.name;
      EXPECT_EQ(t.resident_bytes * 16, t.published_bytes * 17 / 2) << e.name;
    } else {
      EXPECT_EQ(t.resident, dtype::bf16) << e.name;
      EXPECT_EQ(t.resident_bytes, t.published_bytes) << e.name;
    }
  }
  // q4: embedding, v_proj and down_proj stay q8 (QNT-05).
  for (const auto& t : q4.tensors) {
    const auto& name = idx.tensors[t.tensor].name();
    if (idx.tensors[t.tensor].entry.shape.size() != 2) continue;
    const bool floor = name.find("embed") != std::string::npos || name.find("v_proj") != std::string::npos ||
                       name.find("down_proj") != std::string::npos;
    EXPECT_EQ(t.resident, floor ? dtype::q8 : dtype::q4) << name;
  }
}

TEST(LoaderQuantizePlan, BuffersAreHeldAsF32) {
  const auto idx = make_index({{"model.position_ids", "I64", {1, 2048}},
                               {"mask", "BOOL", {1, 1, 64, 64}},
                               {"inv_freq", "F64", {32}}});
  const auto plan = plan_mode(idx, all(idx), quantize_mode::q4, pool_of(1 << 30));
  ASSERT_EQ(plan.tensors.size(), 3u);
  EXPECT_EQ(plan.tensors[0].resident, dtype::f32);
  EXPECT_EQ(plan.tensors[0].resident_bytes, 2048u * 4);  // int64 halves
  EXPECT_EQ(plan.tensors[1].resident_bytes, 4096u * 4);  // bool quadruples
  EXPECT_EQ(plan.tensors[2].resident_bytes, 32u * 4);
}

TEST(LoaderQuantizePlan, CapacityMessagesVerbatim) {
  EXPECT_EQ(capacity_message(1'420'000'000, 890'000'000, 6),
            "model needs 1420 MB but only 890 MB is free across 6 worker(s) \u2014 load fewer layers or wait for more "
            "volunteers");
  // Needs rounded up, free rounded down: never "needs 891 MB but only 891 MB is free".
  EXPECT_EQ(capacity_message(890'000'001, 890'999'999, 1),
            "model needs 891 MB but only 890 MB is free across 1 worker(s) \u2014 load fewer layers or wait for more "
            "volunteers");
  EXPECT_EQ(tensor_capacity_message("model.embed_tokens.weight", 56'623'104, 50'000'000),
            "tensor model.embed_tokens.weight needs 57 MB but the largest worker has 50 MB free");
  EXPECT_EQ(mb_up(0), 0u);
  EXPECT_EQ(mb_up(1), 1u);
  EXPECT_EQ(mb_up(1'000'000), 1u);
  EXPECT_EQ(mb_up(1'000'001), 2u);
}

TEST(LoaderQuantizePlan, ExplicitModeRefusedWhenItDoesNotFit) {
  const auto idx = smollm2();
  auto r = plan_load(idx, all(idx), quantize_mode::none, pool_of(200'000'000, 3));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::unavailable);
  EXPECT_EQ(r.err().message,
            "model needs 270 MB but only 200 MB is free across 3 worker(s) \u2014 load fewer layers or wait for more "
            "volunteers");
  auto q8 = plan_load(idx, all(idx), quantize_mode::q8, pool_of(200'000'000, 3));
  ASSERT_TRUE(q8.ok()) << q8.err().message;
  EXPECT_EQ(q8->mode, quantize_mode::q8);
}

TEST(LoaderQuantizePlan, AutoTakesTheLeastAggressiveThatFits) {
  const auto idx = smollm2();
  const auto sel = all(idx);
  auto a = plan_load(idx, sel, quantize_mode::automatic, pool_of(300'000'000));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->mode, quantize_mode::none);
  auto b = plan_load(idx, sel, quantize_mode::automatic, pool_of(150'000'000));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->mode, quantize_mode::q8);
  auto c = plan_load(idx, sel, quantize_mode::automatic, pool_of(120'000'000));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->mode, quantize_mode::q4);
  auto d = plan_load(idx, sel, quantize_mode::automatic, pool_of(100'000'000, 2));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.err().code, errc::unavailable);
  EXPECT_EQ(d.err().message,  // q4's figure: the least the load could need
            "model needs 110 MB but only 100 MB is free across 2 worker(s) \u2014 load fewer layers or wait for more "
            "volunteers");
}

TEST(LoaderQuantizePlan, SingleTensorMustFitOneWorker) {
  const auto idx = smollm2();
  const auto sel = all(idx);
  auto r = plan_load(idx, sel, quantize_mode::none, pool_of(1'000'000'000, 20, 50'000'000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::unavailable);
  EXPECT_EQ(r.err().message, "tensor model.embed_tokens.weight needs 57 MB but the largest worker has 50 MB free");
  // auto moves on to q8, where the embedding is 30.1 MB.
  auto a = plan_load(idx, sel, quantize_mode::automatic, pool_of(1'000'000'000, 20, 50'000'000));
  ASSERT_TRUE(a.ok()) << a.err().message;
  EXPECT_EQ(a->mode, quantize_mode::q8);
}

TEST(LoaderQuantizePlan, OlderWorkersPlanAtPublishedOrWidenedSize) {
  const auto idx = smollm2();
  const auto sel = all(idx);
  pool_capacity old = pool_of(1'000'000'000);
  old.widen_factor = 2;
  old.can_quantize = false;
  const auto none = plan_mode(idx, sel, quantize_mode::none, old);
  EXPECT_EQ(none.planned_bytes, 2u * 269'030'016u);  // bf16 widened to f32 on an old worker
  const auto q8 = plan_mode(idx, sel, quantize_mode::q8, old);
  EXPECT_EQ(q8.planned_bytes, 2u * 269'030'016u);  // cannot count on quantization (QNT-13)
  EXPECT_EQ(q8.resident_bytes, 142'955'136u);      // what a capable worker would hold
  auto a = plan_load(idx, sel, quantize_mode::automatic, [&] {
    auto p = old;
    p.free_bytes = p.largest_free_bytes = 300'000'000;
    return p;
  }());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.err().message.find("model needs 539 MB but only 300 MB"), std::string::npos) << a.err().message;

  pool_capacity packs_not_quantizes = pool_of(1'000'000'000);
  packs_not_quantizes.can_quantize = false;
  EXPECT_EQ(plan_mode(idx, sel, quantize_mode::q4, packs_not_quantizes).planned_bytes, 269'030'016u);
  pool_capacity quantizes_not_packs = pool_of(1'000'000'000);
  quantizes_not_packs.widen_factor = 2;
  // q8 matrices are unaffected; only the bf16 norms double.
  EXPECT_EQ(plan_mode(idx, sel, quantize_mode::q8, quantizes_not_packs).planned_bytes, 142'955'136u + 70'272u);
}

}  // namespace
}  // namespace mpakt::loader
