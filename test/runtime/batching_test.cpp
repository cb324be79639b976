// Batched decode passes (spec 'Several sessions in one graph', SES-14; issue: batching of
// concurrent conversations): a single-session stories260K decode template rewritten for
// three sessions gives every session exactly the tokens and cache contents of running the
// template alone, greedy and sampled with per-session settings, while reading each weight
// once per pass.

#include "runtime/batching.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "backends/cpu/cpu_backend.hpp"
#include "runtime/models/arch.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/tensor_store.hpp"
#include "test/support/files.hpp"
#include "test/support/model_store.hpp"

namespace mpakt {
namespace {

const std::string model_dir = std::string(MPAKT_SHARED_DIR) + "/models/stories260K";
constexpr int cache_rows = 96;

struct batching : ::testing::Test {
  void SetUp() override {
    auto cfg = models::parse_arch_config(test::read_file(model_dir + "/config.json"));
    ASSERT_TRUE(cfg.ok()) << cfg.err().message;
    config = *cfg;
    auto put = test::put_checkpoint(store, "m_s", model_dir + "/model.safetensors");
    ASSERT_TRUE(put.ok()) << put.err().message;
  }

  /// Runs an inline graph in `session` and keeps what it retains.
  void run_inline(const std::string& json, const std::string& session) {
    auto decl = parse_graph_text(json, false);
    ASSERT_TRUE(decl.ok()) << decl.err().message;
    auto retain = decl->retain;
    tensor_store::source src(store, {session});
    build_options opts;
    opts.server_params = true;  // the cache allocation may name the KV caches' dtype
    auto g = executable_graph::build(std::move(*decl), src, backend, opts);
    ASSERT_TRUE(g.ok()) << g.err().message;
    ASSERT_TRUE((*g)->run(src).ok());
    ASSERT_TRUE(store.apply_retain(**g, session, retain).ok());
  }

  /// Zeroed caches, then the prompt prefilled, in a fresh session.
  void prefill(const std::string& session, const std::vector<int>& prompt) {
    store.session(session);
    run_inline(models::arch_cache_graph(config, cache_rows, false, kv), session);
    models::arch_graph_options o;
    o.model_id = "m_s";
    o.tokens = int(prompt.size());
    o.ids = prompt;
    o.use_cache = true;
    o.cache_rows = cache_rows;
    run_inline(models::arch_graph(config, o), session);
  }

  std::string template_json(bool sample) const {
    models::arch_graph_options o;
    o.model_id = "m_s";
    o.tokens = 1;
    o.use_cache = true;
    o.cache_rows = cache_rows;
    o.compiled = true;
    o.argmax = !sample;
    o.sample = sample;
    return models::arch_graph(config, o);
  }

  std::unique_ptr<executable_graph> build(const graph_decl& decl) {
    tensor_store::source src(store, {});
    build_options opts;
    opts.compiled = true;
    auto g = executable_graph::build(decl, src, backend, opts);
    EXPECT_TRUE(g.ok()) << g.err().message;
    return g.ok() ? std::move(*g) : nullptr;
  }

  struct conversation {
    std::string solo, batched;  ///< the same conversation in two sessions
    float token = 0;
    int pos = 0;
    double temperature = 0, top_k = 0, seed = 0;
  };

  /// Sets a sample step's per-conversation settings the way server-side decoding does.
  template <class Set>
  void set_sampling(const conversation& c, Set set) {
    set("temperature", c.temperature);
    set("topK", c.top_k);
    set("seed", c.seed);
    set("step", c.pos);
  }

  models::arch_config config;
  tensor_store store;
  cpu_backend backend;
  dtype kv = dtype::f32;  ///< how prefill allocates the KV caches
};

int count_op(const graph_decl& d, const std::string& op) {
  int n = 0;
  for (const auto& s : d.steps) n += s.op == op;
  return n;
}

void expect_same_sessions(const tensor_store& store, const std::string& a, const std::string& b) {
  const auto* x = store.find_session(a);
  const auto* y = store.find_session(b);
  ASSERT_TRUE(x && y);
  ASSERT_EQ(x->size(), y->size());
  for (const auto& [name, t] : *x) {
    const tensor& u = y->at(name);
    ASSERT_EQ(t.shape(), u.shape()) << name;
    EXPECT_EQ(std::memcmp(t.data(), u.data(), t.nbytes()), 0) << "session tensor " << name << " differs";
  }
}

/// Three conversations at different positions, greedy and sampled with their own settings:
/// the batched pass gives each the tokens and caches it gets alone, bit for bit.
void decode_and_compare(batching& f, bool sample) {
  const auto json = f.template_json(sample);
  auto decl = parse_graph_text(json, true);
  ASSERT_TRUE(decl.ok()) << decl.err().message;
  auto solo = f.build(*decl);
  ASSERT_TRUE(solo);

  std::vector<batching::conversation> convs = {
      {"a0", "b0", 0, 0, sample ? 0.8 : 0, sample ? 20.0 : 0.0, 11},
      {"a1", "b1", 0, 0, sample ? 1.1 : 0, 0, 12},
      {"a2", "b2", 0, 0, 0, 0, 13},
  };
  const std::vector<std::vector<int>> prompts = {{1, 403, 407}, {1, 20, 30, 40, 50, 60, 70}, {1, 9}};
  for (std::size_t i = 0; i < convs.size(); ++i) {
    f.prefill(convs[i].solo, prompts[i]);
    f.prefill(convs[i].batched, prompts[i]);
    convs[i].token = float(prompts[i].back());
    convs[i].pos = int(prompts[i].size()) - 1;  // refeed the last prompt token at its position
  }
  auto batched = batch_graph(*decl, *solo, 3);
  ASSERT_TRUE(batched.ok()) << batched.err().message;
  // the weights are read once per pass: as many matmuls as the template, all shared
  EXPECT_EQ(count_op(batched->decl, "matmul"), count_op(*decl, "matmul"));
  EXPECT_EQ(count_op(batched->decl, "attention"), 3 * count_op(*decl, "attention"));
  EXPECT_GT(batched->shared_steps, std::size_t(count_op(*decl, "matmul")));
  auto multi = f.build(batched->decl);
  ASSERT_TRUE(multi);

  std::vector<std::vector<int>> solo_tokens(3), batched_tokens(3);
  std::vector<batching::conversation> alone = convs;
  for (int step = 0; step < 24; ++step) {
    for (std::size_t i = 0; i < alone.size(); ++i) {
      auto& c = alone[i];
      ASSERT_TRUE(solo->bind_input("ids", std::span<const float>(&c.token, 1)).ok());
      ASSERT_TRUE(solo->bind_param("pos", c.pos).ok());
      if (sample)
        f.set_sampling(c, [&](const char* p, double v) { ASSERT_TRUE(solo->override_param("sample", p, v).ok()); });
      tensor_store::source src(f.store, {c.solo});
      ASSERT_TRUE(solo->run(src).ok());
      c.token = solo->value("tok")->f32()[0];
      c.pos++;
      solo_tokens[i].push_back(int(c.token));
    }
    std::vector<std::string> sessions;
    for (std::size_t i = 0; i < convs.size(); ++i) {
      auto& c = convs[i];
      sessions.push_back(c.batched);
      ASSERT_TRUE(multi->bind_input(session_value_name("ids", int(i)), std::span<const float>(&c.token, 1)).ok());
      ASSERT_TRUE(multi->bind_param(session_value_name("pos", int(i)), c.pos).ok());
      if (sample)
        f.set_sampling(c, [&](const char* p, double v) {
          for (std::size_t s : batched->session_steps[i]) ASSERT_TRUE(multi->override_step_param(s, "sample", p, v).ok());
        });
    }
    tensor_store::source src(f.store, sessions.front(), sessions);
    auto st = multi->run(src);
    ASSERT_TRUE(st.ok()) << st.err().message;
    for (std::size_t i = 0; i < convs.size(); ++i) {
      convs[i].token = multi->value(batched->session_outputs[i].front())->f32()[0];
      convs[i].pos++;
      batched_tokens[i].push_back(int(convs[i].token));
    }
  }
  for (std::size_t i = 0; i < convs.size(); ++i) {
    EXPECT_EQ(batched_tokens[i], solo_tokens[i]) << "conversation " << i;
    expect_same_sessions(f.store, convs[i].solo, convs[i].batched);
  }
  // different prompts and settings really gave different streams
  EXPECT_NE(solo_tokens[0], solo_tokens[1]);
}

TEST_F(batching, GreedyTokensAndCachesEqualEachSessionAlone) { decode_and_compare(*this, false); }

TEST_F(batching, SampledTokensWithPerSessionSettingsEqualEachSessionAlone) { decode_and_compare(*this, true); }

/// KV caches held as bf16 (a model's kvDtype): the same template, batched, still gives each
/// conversation its own tokens and cache rows bit for bit.
TEST_F(batching, HalfWidthCachesBatchAsTheyRunAlone) {
  kv = dtype::bf16;
  decode_and_compare(*this, false);
  ASSERT_EQ(store.session("b0")["k0"].type(), dtype::bf16);
}

/// A compiled template serves one generation after another: settings a call does not give are
/// the template's own again, never the previous caller's (a topK of 1 must not stay behind).
TEST_F(batching, OverridesOfOneCallDoNotLeakIntoTheNext) {
  auto decl = parse_graph_text(template_json(true), true);
  ASSERT_TRUE(decl.ok());
  auto reused = build(*decl);
  auto fresh = build(*decl);
  ASSERT_TRUE(reused && fresh);
  prefill("p", {1, 403, 407});
  const float token = 407;
  auto run = [&](executable_graph& g, std::initializer_list<std::pair<const char*, double>> settings) {
    EXPECT_TRUE(g.bind_input("ids", std::span<const float>(&token, 1)).ok());
    EXPECT_TRUE(g.bind_param("pos", 2).ok());
    for (const auto& [k, v] : settings) EXPECT_TRUE(g.override_param("sample", k, v).ok());
    tensor_store::source src(store, {"p"});
    EXPECT_TRUE(g.run(src).ok());
    return int(g.value("tok")->f32()[0]);
  };
  int leaked = 0;
  for (int seed = 1; seed <= 24; ++seed) {
    run(*reused, {{"temperature", 1.5}, {"topK", 1}, {"seed", seed}, {"step", 2}});  // topK 1: the argmax
    const int stale = run(*reused, {{"temperature", 1.5}, {"seed", seed}, {"step", 2}});
    reused->clear_overrides();
    const int cleared = run(*reused, {{"temperature", 1.5}, {"seed", seed}, {"step", 2}});
    const int want = run(*fresh, {{"temperature", 1.5}, {"seed", seed}, {"step", 2}});
    EXPECT_EQ(cleared, want) << "seed " << seed;
    leaked += stale != want;  // without clearing, the last caller's topK stays
    reused->clear_overrides();
  }
  EXPECT_GT(leaked, 0) << "topK 1 never changed a draw: the check above proves nothing";
}

TEST_F(batching, RefusesTemplatesItCannotRewrite) {
  auto decl = parse_graph_text(template_json(false), true);
  ASSERT_TRUE(decl.ok());
  auto solo = build(*decl);
  ASSERT_TRUE(solo);
  EXPECT_FALSE(batch_graph(*decl, *solo, 1).ok());
  EXPECT_FALSE(batch_graph(*decl, *solo, 65).ok());
  graph_decl retaining = *decl;
  retaining.retain.emplace_back("kept", "h1");
  auto r = batch_graph(retaining, *solo, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("retains"), std::string::npos);
}

TEST_F(batching, PositionDependentStepsRunPerSession) {
  // rope with a literal offset still depends on each row's place in its tensor, so it must
  // not run over stacked rows; silu may.
  const char* json = R"({"inputs":[{"name":"x","shape":[1,8],"bind":"x"}],
    "steps":[{"op":"silu","in":["x"],"out":"a"},{"op":"silu","in":["a"],"out":"b"},
             {"op":"rope","in":["b"],"out":"r","params":{"headDim":8,"offset":3}}],
    "outputs":["r"]})";
  auto decl = parse_graph_text(json, true);
  ASSERT_TRUE(decl.ok()) << decl.err().message;
  auto solo = build(*decl);
  ASSERT_TRUE(solo);
  auto b = batch_graph(*decl, *solo, 2);
  ASSERT_TRUE(b.ok()) << b.err().message;
  EXPECT_EQ(count_op(b->decl, "rope"), 2);
  EXPECT_EQ(count_op(b->decl, "silu"), 2);  // both run once, over two stacked rows
  auto multi = build(b->decl);
  ASSERT_TRUE(multi);
  std::vector<float> x0 = {1, 2, 3, 4, 5, 6, 7, 8}, x1 = {-1, 0.5f, 2, -3, 4, 0, 1, 2};
  ASSERT_TRUE(multi->bind_input("x@0", x0).ok());
  ASSERT_TRUE(multi->bind_input("x@1", x1).ok());
  tensor_store::source none(store, {});
  ASSERT_TRUE(multi->run(none).ok());
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE(solo->bind_input("x", s == 0 ? x0 : x1).ok());
    ASSERT_TRUE(solo->run(none).ok());
    const tensor* want = solo->value("r");
    const tensor* got = multi->value(b->session_outputs[std::size_t(s)].front());
    ASSERT_EQ(got->shape(), want->shape());
    EXPECT_EQ(std::memcmp(got->data(), want->data(), want->nbytes()), 0) << "session " << s;
  }
}

}  // namespace
}  // namespace mpakt
