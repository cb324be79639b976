// A model spread over several workers (issue: cluster — "a graph that touches weights on
// several workers is split into stages that run where their weights are, with activations
// passed between them"). stories260K is placed over two tensor stores by plan_spread; its
// prefill and compiled decode graphs run as stages on the two, with the crossing values
// passed as the base64 f32 a coordinator relays (inline, and as compiled stage templates
// bound per call), and give logits, tokens and caches
// bit-identical to the whole model in one store.

#include "runtime/stages.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "backends/cpu/cpu_backend.hpp"
#include "runtime/graph.hpp"
#include "runtime/models/arch.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/tensor_store.hpp"
#include "test/support/files.hpp"
#include "test/support/model_store.hpp"

namespace mpakt {
namespace {

const std::string model_dir = std::string(MPAKT_SHARED_DIR) + "/models/stories260K";
constexpr int cache_rows = 64;

/// Two stores standing for two workers, and the coordinator's view of where things are.
struct spread : ::testing::Test {
  void SetUp() override {
    auto cfg = models::parse_arch_config(test::read_file(model_dir + "/config.json"));
    ASSERT_TRUE(cfg.ok()) << cfg.err().message;
    config = *cfg;
    auto weights = load_safetensors_file(model_dir + "/model.safetensors");
    ASSERT_TRUE(weights.ok()) << weights.err().message;
    std::vector<spread_tensor> ts;
    std::uint64_t total = 0;
    for (auto& [name, t] : *weights) {
      ts.push_back({name, t.nbytes()});
      total += t.nbytes();
    }
    // Neither "worker" holds it all: 60% of the model each.
    auto plan = plan_spread(ts, {total * 6 / 10, total * 6 / 10});
    ASSERT_TRUE(plan.ok()) << plan.err().message;
    tensor_store::tensor_map part[2], all;
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const int w = (*plan)[i];
      weight_worker[ts[i].name] = w;
      part[w][ts[i].name] = (*weights)[i].second;
      all[ts[i].name] = (*weights)[i].second;
    }
    ASSERT_FALSE(part[0].empty());
    ASSERT_FALSE(part[1].empty());
    workers[0].put_model("m", std::move(part[0]));
    workers[1].put_model("m", std::move(part[1]));
    whole.put_model("m", std::move(all));
  }

  stage_placement placement(const std::string& session) const {
    stage_placement p;
    p.weight_worker = [this](const std::string& model, const std::string& weight) {
      auto it = weight_worker.find(weight);
      return model == "m" && it != weight_worker.end() ? it->second : -1;
    };
    p.session_worker = [this, session](const std::string& tensor) {
      if (zeros.count(tensor)) return stage_placement::deferred;
      auto it = session_where.find(tensor);
      return it == session_where.end() ? -1 : it->second;
    };
    return p;
  }

  /// Runs an inline graph on one store; returns its outputs (f32) and keeps what it retains.
  std::map<std::string, stage_value> run_on(tensor_store& store, const std::string& json, const std::string& session) {
    auto decl = parse_graph_text(json, false);
    EXPECT_TRUE(decl.ok()) << decl.err().message;
    if (!decl.ok()) return {};
    auto retain = decl->retain;
    auto outputs = decl->outputs;
    store.session(session);
    tensor_store::source src(store, {session});
    build_options opts;
    opts.server_params = true;  // as a worker running the server's own allocation (zeros' dtype)
    auto g = executable_graph::build(std::move(*decl), src, backend, opts);
    EXPECT_TRUE(g.ok()) << g.err().message;
    if (!g.ok()) return {};
    auto st = (*g)->run(src);
    EXPECT_TRUE(st.ok()) << st.err().message;
    std::map<std::string, stage_value> out;
    for (const auto& name : outputs) {
      auto wide = to_f32(*(*g)->value(name));
      EXPECT_TRUE(wide.ok());
      auto span = wide->f32_span();
      out[name] = stage_value{wide->shape(), std::vector<float>(span.begin(), span.end())};
    }
    EXPECT_TRUE(store.apply_retain(**g, session, retain).ok());
    return out;
  }

  /// What a pipeline does with one call: moves session tensors, then runs the stages in
  /// order, passing values through base64 as the wire does.
  std::map<std::string, stage_value> run_split(const std::string& json, const std::string& session) {
    rapidjson::Document d;
    d.Parse(json.c_str());
    auto plan = split_graph(d, placement(session));
    EXPECT_TRUE(plan.ok()) << plan.err().message;
    if (!plan.ok()) return {};
    for (const auto& [tensor, shape] : plan->deferred) {
      zeros[tensor] = shape;
      session_where.erase(tensor);
    }
    for (const auto& [tensor, to] : plan->create) {  // created as zeros where first read
      auto t = tensor::make(dtype::f32, zeros.at(tensor));
      EXPECT_TRUE(t.ok());
      std::memset(t->data(), 0, t->nbytes());
      workers[to].session(session)[tensor] = std::move(*t);
      zeros.erase(tensor);
      session_where[tensor] = to;
      created++;
    }
    for (const auto& [tensor, to] : plan->moves) {
      auto& from = workers[session_where.at(tensor)].session(session);
      workers[to].session(session)[tensor] = from.at(tensor);
      from.erase(tensor);
      session_where[tensor] = to;
      moves++;
    }
    std::map<std::string, stage_value> carried, outputs;
    for (const auto& s : plan->stages) {
      if (s.step_texts.empty() && s.retain.empty() && s.returns().empty()) continue;  // as the pipeline does
      stages_run++;
      auto got = run_on(workers[s.worker], s.graph_json(carried), session);
      for (auto& [name, v] : got) {
        auto back = decode_f32_base64(encode_f32_base64(v.values));  // the wire
        EXPECT_TRUE(back.ok());
        v.values = *back;
        carried[name] = v;
      }
      for (const auto& o : s.outputs) outputs[o] = carried[o];
      for (const auto& [tensor, _] : s.retain) {
        session_where[tensor] = s.worker;
        zeros.erase(tensor);
      }
    }
    return outputs;
  }

  std::string prefill_json(const std::vector<int>& ids) const {
    models::arch_graph_options o;
    o.model_id = "m";
    o.tokens = int(ids.size());
    o.ids = ids;
    o.use_cache = true;
    o.cache_rows = cache_rows;
    return models::arch_graph(config, o);
  }

  std::string decode_template(bool sample) const {
    models::arch_graph_options o;
    o.model_id = "m";
    o.use_cache = true;
    o.cache_rows = cache_rows;
    o.compiled = true;
    o.sample = sample;
    o.argmax = !sample;
    return models::arch_graph(config, o);
  }

  models::arch_config config;
  std::map<std::string, int> weight_worker;
  std::map<std::string, int> session_where;
  std::map<std::string, shape_t> zeros;  ///< deferred session tensors
  tensor_store workers[2], whole;
  cpu_backend backend;
  int moves = 0, created = 0;
  std::size_t stages_run = 0;
};

void expect_identical(const stage_value& a, const stage_value& b, const std::string& what) {
  ASSERT_EQ(a.shape, b.shape) << what;
  ASSERT_EQ(a.values.size(), b.values.size()) << what;
  EXPECT_EQ(std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)), 0) << what << " differs";
}

TEST_F(spread, PlacementKeepsLayersTogetherAndInModelOrder) {
  // every layer's tensors on one worker; the first worker holds the embeddings and early layers
  std::map<std::string, std::set<int>> by_group;
  for (const auto& [name, w] : weight_worker) by_group[layer_group(name)].insert(w);
  for (const auto& [g, ws] : by_group) EXPECT_EQ(ws.size(), 1u) << g;
  EXPECT_EQ(weight_worker.at("model.embed_tokens.weight"), 0);
  EXPECT_EQ(weight_worker.at("model.layers.0.self_attn.q_proj.weight"), 0);
  EXPECT_EQ(weight_worker.at("model.layers.4.mlp.down_proj.weight"), 1);
  EXPECT_EQ(weight_worker.at("model.norm.weight"), 1);
  int previous = 0;
  for (int l = 0; l < config.layers; ++l) {
    const int w = weight_worker.at("model.layers." + std::to_string(l) + ".input_layernorm.weight");
    EXPECT_GE(w, previous) << "layer " << l;  // contiguous: never back to an earlier worker
    previous = w;
  }
}

TEST_F(spread, PlacementIsEvenOverTheFewestWorkersAndRefusesNamingAGroupThatFitsNowhere) {
  auto p = plan_spread({{"model.layers.0.a", 60}, {"model.layers.0.b", 60}, {"model.layers.1.a", 10}}, {100, 100});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.err().message.find("model.layers.0 needs"), std::string::npos) << p.err().message;
  auto q = plan_spread({{"model.layers.10.a", 50}, {"model.layers.9.a", 50}, {"model.layers.2.a", 50}, {"lm_head.weight", 10},
                        {"model.embed_tokens.weight", 10}},
                       {110, 110});
  ASSERT_TRUE(q.ok()) << q.err().message;
  // model order: embeddings, layer 2, layer 9 | layer 10, lm_head (numbers, not text order)
  EXPECT_EQ(*q, (std::vector<int>{1, 0, 0, 1, 0}));
  // the fewest workers, split evenly: 2 and 2 (not 3 and 1), so each keeps room for caches
  auto even = plan_spread({{"h.0.w", 100}, {"h.1.w", 100}, {"h.2.w", 100}, {"h.3.w", 100}}, {300, 300, 300});
  ASSERT_TRUE(even.ok()) << even.err().message;
  EXPECT_EQ(*even, (std::vector<int>{0, 0, 1, 1}));
  // one worker that can hold it all takes it all
  auto whole = plan_spread({{"h.0.w", 100}, {"h.1.w", 100}}, {500, 300});
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, (std::vector<int>{0, 0}));
}

TEST_F(spread, PrefillAndDecodeStagesGiveTheWholeModelsNumbersBitForBit) {
  const std::vector<int> prompt = {1, 403, 407, 261, 378};
  run_on(whole, models::arch_cache_graph(config, cache_rows), "s");
  run_split(models::arch_cache_graph(config, cache_rows), "s");
  // the caches are allocated nowhere yet: each is created where its layer first reads it
  EXPECT_TRUE(session_where.empty());
  EXPECT_EQ(zeros.size(), 10u);
  EXPECT_EQ(stages_run, 0u) << "allocating ran nothing";

  // k4 made again by a computed step: it is kept where that step ran (the first worker) and
  // must move to layer 4's worker when first read there
  const std::string remake = R"({"inputs":[],"steps":[{"op":"zeros","in":[],"out":"z","params":{"shape":[64,32]}},
      {"op":"add","in":["z","z"],"out":"k"}],"retain":{"k4":"k"}})";
  run_on(whole, remake, "s");
  run_split(remake, "s");
  EXPECT_EQ(session_where.at("k4"), 0);

  auto ref = run_on(whole, prefill_json(prompt), "s");
  auto got = run_split(prefill_json(prompt), "s");
  ASSERT_TRUE(got.count("logits"));
  expect_identical(got["logits"], ref["logits"], "prefill logits");
  EXPECT_EQ(created, 9);
  EXPECT_EQ(moves, 1) << "only the remade k4 had to travel";
  EXPECT_EQ(session_where.at("k4"), 1);
  EXPECT_EQ(session_where.at("k0"), 0);

  // Compiled decode, sampled with server-side settings: the template split once, each stage
  // compiled on its store with the values it receives as bound inputs of the shapes the stage
  // before reported, then bound per call as a pipeline does.
  rapidjson::Document tmpl;
  tmpl.Parse(decode_template(true).c_str());
  auto decl = parse_graph(tmpl, true);
  ASSERT_TRUE(decl.ok()) << decl.err().message;
  EXPECT_EQ(template_bindings(tmpl), (std::vector<std::string>{"ids", "pos"}));
  build_options opts;
  opts.compiled = true;
  tensor_store::source none(whole, {});
  auto compiled = executable_graph::build(*decl, none, backend, opts);
  ASSERT_TRUE(compiled.ok()) << compiled.err().message;
  auto split = split_graph(tmpl, placement("s"), true);
  ASSERT_TRUE(split.ok()) << split.err().message;
  ASSERT_EQ(split->stages.size(), 3u);  // tied embeddings: embed, layers over both, lm_head (= embed) back
  std::map<std::string, shape_t> shapes;
  std::vector<std::unique_ptr<executable_graph>> stage_graphs;
  for (const auto& st : split->stages) {
    auto sd = parse_graph_text(st.template_json(shapes), true);
    ASSERT_TRUE(sd.ok()) << sd.err().message;
    tensor_store::source src(workers[st.worker], {});
    auto g = executable_graph::build(std::move(*sd), src, backend, opts);
    ASSERT_TRUE(g.ok()) << g.err().message;
    for (const auto& v : st.sends) shapes[v] = (*g)->desc(v)->shape;
    stage_graphs.push_back(std::move(*g));
  }
  float token = float(prompt.back());
  int pos = int(prompt.size()) - 1;
  std::vector<int> ref_tokens, split_tokens;
  const std::vector<std::pair<std::string, double>> sampling = {{"temperature", 0.9}, {"topK", 12}, {"seed", 7}};
  for (int step = 0; step < 12; ++step) {
    auto& g = **compiled;
    ASSERT_TRUE(g.bind_input("ids", std::span<const float>(&token, 1)).ok());
    ASSERT_TRUE(g.bind_param("pos", pos).ok());
    for (const auto& [k, v] : sampling) ASSERT_TRUE(g.override_param("sample", k, v).ok());
    tensor_store::source src(whole, {"s"});
    ASSERT_TRUE(g.run(src).ok());
    const float ref_tok = g.value("tok")->f32()[0];

    session_work(*split, placement("s").session_worker);
    EXPECT_TRUE(split->moves.empty() && split->create.empty());  // the caches are where they are read
    std::map<std::string, stage_value> carried;
    for (std::size_t i = 0; i < split->stages.size(); ++i) {
      const auto& st = split->stages[i];
      auto& sg = *stage_graphs[i];
      for (const auto& name : sg.bindings()) {
        if (name == "ids") ASSERT_TRUE(sg.bind_input("ids", std::span<const float>(&token, 1)).ok());
        else if (name == "pos") ASSERT_TRUE(sg.bind_param("pos", pos).ok());
        else {
          ASSERT_EQ(name, stage::received_binding(name.substr(1)));
          auto wire = decode_f32_base64(encode_f32_base64(carried.at(name.substr(1)).values));
          ASSERT_TRUE(sg.bind_input(name, *wire).ok()) << name;
        }
      }
      for (const auto& [k, v] : sampling) ASSERT_TRUE(sg.override_param("sample", k, v).ok());
      tensor_store::source ssrc(workers[st.worker], {"s"});
      auto ran = sg.run(ssrc);
      ASSERT_TRUE(ran.ok()) << ran.err().message;
      for (const auto& v : st.returns()) {
        auto wide = to_f32(*sg.value(v));
        carried[v] = stage_value{wide->shape(), std::vector<float>(wide->f32_span().begin(), wide->f32_span().end())};
      }
    }
    ref_tokens.push_back(int(ref_tok));
    split_tokens.push_back(int(carried.at("tok").values[0]));
    token = ref_tok;
    pos++;
  }
  EXPECT_EQ(split_tokens, ref_tokens);
  // The caches, wherever they now live, equal the whole model's.
  const auto* ref_session = whole.find_session("s");
  ASSERT_TRUE(ref_session);
  for (const auto& [name, t] : *ref_session) {
    const auto* held = workers[session_where.at(name)].find_session("s");
    ASSERT_TRUE(held && held->count(name)) << name;
    const tensor& u = held->at(name);
    ASSERT_EQ(t.nbytes(), u.nbytes());
    EXPECT_EQ(std::memcmp(t.data(), u.data(), t.nbytes()), 0) << "cache " << name << " differs";
  }
}

/// bf16 KV caches (a model's kvDtype) are made at once by a stage rather than deferred (a
/// deferred cache is made as f32 zeros), moved to the part reading them, and the split
/// prefill gives the whole model's logits and caches bit for bit.
TEST_F(spread, HalfWidthCachesAreMadeAtOnceAndMovedWhereRead) {
  const std::vector<int> prompt = {1, 403, 407, 261, 378};
  const std::string alloc = models::arch_cache_graph(config, cache_rows, false, dtype::bf16);
  run_on(whole, alloc, "s");
  run_split(alloc, "s");
  EXPECT_TRUE(zeros.empty()) << "a half-width cache must not be deferred";
  EXPECT_EQ(session_where.size(), 10u);
  auto ref = run_on(whole, prefill_json(prompt), "s");
  auto got = run_split(prefill_json(prompt), "s");
  ASSERT_TRUE(got.count("logits"));
  expect_identical(got["logits"], ref["logits"], "prefill logits");
  for (const auto& [name, t] : *whole.find_session("s")) {
    const tensor& u = workers[session_where.at(name)].session("s").at(name);
    ASSERT_EQ(u.type(), dtype::bf16) << name;
    ASSERT_EQ(t.nbytes(), u.nbytes());
    EXPECT_EQ(std::memcmp(t.data(), u.data(), t.nbytes()), 0) << "cache " << name << " differs";
  }
}

TEST(stages, RefusesAStepReadingWeightsOnTwoWorkers) {
  rapidjson::Document g;
  g.Parse(R"({"inputs":[{"name":"a","model":"m","weight":"x"},{"name":"b","model":"m","weight":"y"}],
              "steps":[{"op":"matmul","in":["a","b"],"out":"c"}],"outputs":["c"]})");
  stage_placement p;
  p.weight_worker = [](const std::string&, const std::string& w) { return w == "x" ? 0 : 1; };
  p.session_worker = [](const std::string&) { return -1; };
  auto plan = split_graph(g, p);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.err().message.find("step 0 (matmul) reads weights held by two different workers"), std::string::npos)
      << plan.err().message;
}

}  // namespace
}  // namespace mpakt
