// Stopping a graph run (issue: hardening, "a graph that times out is never stopped"): a run
// stopped between steps — cancelled, or past its deadline — and a run that fails on its own
// leave every tensor they wrote in place exactly as it was; the same graph run to its end
// writes as before.

#include "runtime/executor.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/isa.hpp"
#include "runtime/graph.hpp"
#include "runtime/tensor_store.hpp"

namespace mpakt {
namespace {

constexpr int cache_rows = 8, width = 4;

/// Two cache_writes into the session's cache "kc" (rows 1-2, then rows from `second`), then a
/// few element-wise steps, so a stop can fall before, between or after the writes.
std::string writes_graph(const std::string& second_offset) {
  return R"({"session": "s", "inputs": [
      {"name": "c", "session": "kc", "shape": [8, 4]},
      {"name": "a", "shape": [2, 4], "data": [1, 2, 3, 4, 5, 6, 7, 8]},
      {"name": "b", "shape": [1, 4], "data": [9, 9, 9, 9]}],
    "steps": [
      {"op": "cache_write", "in": ["c", "a"], "out": "c1", "params": {"offset": 1}},
      {"op": "cache_write", "in": ["c1", "b"], "out": "c2", "params": {"offset": )" +
         second_offset + R"(}},
      {"op": "add", "in": ["c2", "c2"], "out": "d"},
      {"op": "add", "in": ["d", "d"], "out": "e"}],
    "outputs": ["e"]})";
}

struct executor_stop : ::testing::Test {
  void SetUp() override {
    auto kc = tensor::make(dtype::f32, {cache_rows, width});
    ASSERT_TRUE(kc.ok());
    for (int i = 0; i < cache_rows * width; ++i) kc->f32()[i] = float(100 + i);
    store.session("s")["kc"] = *kc;
    before = values();
  }

  std::vector<float> values() const {
    const tensor& t = store.find_session("s")->at("kc");
    return std::vector<float>(t.f32(), t.f32() + t.numel());
  }

  std::unique_ptr<executable_graph> build(const std::string& json, bool compiled = false) {
    auto decl = parse_graph_text(json, compiled);
    EXPECT_TRUE(decl.ok()) << decl.err().message;
    tensor_store::source src(store, "s", {});
    build_options o;
    o.compiled = compiled;
    auto g = executable_graph::build(std::move(*decl), src, backend, o);
    EXPECT_TRUE(g.ok()) << g.err().message;
    return g.ok() ? std::move(*g) : nullptr;
  }

  status run(executable_graph& g, run_control* ctl) {
    tensor_store::source src(store, "s", {});
    return g.run(src, ctl);
  }

  tensor_store store;
  cpu_backend backend;
  std::vector<float> before;
};

TEST_F(executor_stop, a_run_cancelled_between_the_writes_puts_the_first_back) {
  auto g = build(writes_graph("5"));
  ASSERT_TRUE(g);
  run_control ctl;
  ctl.on_step = [&](std::size_t done) {
    if (done == 1) {
      // The first cache_write has happened, in place.
      EXPECT_NE(values(), before);
      ctl.cancel();
    }
  };
  auto s = run(*g, &ctl);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err().code, errc::timeout);
  EXPECT_NE(s.err().message.find("stopped after 1 of 4 steps"), std::string::npos) << s.err().message;
  EXPECT_EQ(ctl.stopped, run_control::stop::cancelled);
  EXPECT_EQ(ctl.steps_done, 1u);
  EXPECT_EQ(values(), before) << "a stopped run applies nothing";

  // The same graph run to its end writes both, as ever.
  run_control go;
  ASSERT_TRUE(run(*g, &go).ok());
  EXPECT_EQ(go.stopped, run_control::stop::none);
  EXPECT_EQ(go.steps_done, 4u);
  std::vector<float> want = before;
  for (int i = 0; i < 8; ++i) want[std::size_t(width + i)] = float(i + 1);
  for (int i = 0; i < width; ++i) want[std::size_t(5 * width + i)] = 9;
  EXPECT_EQ(values(), want);
  EXPECT_EQ(g->value("e")->f32()[width], 4.0f);
}

TEST_F(executor_stop, a_run_stopped_after_both_writes_puts_both_back_in_reverse_order) {
  // The second write overlaps the first (row 2): putting back newest first restores row 2's
  // original bytes, not the first write's.
  auto g = build(writes_graph("2"));
  ASSERT_TRUE(g);
  run_control ctl;
  ctl.on_step = [&](std::size_t done) {
    if (done == 3) ctl.cancel();
  };
  auto s = run(*g, &ctl);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(ctl.steps_done, 3u);
  EXPECT_EQ(values(), before);
}

TEST_F(executor_stop, a_run_past_its_deadline_stops_before_writing) {
  auto g = build(writes_graph("5"));
  ASSERT_TRUE(g);
  run_control ctl;
  ctl.deadline = run_control::clock::now() - std::chrono::milliseconds(1);
  auto s = run(*g, &ctl);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err().code, errc::timeout);
  EXPECT_EQ(ctl.stopped, run_control::stop::deadline);
  EXPECT_EQ(ctl.steps_done, 0u);
  EXPECT_EQ(values(), before);
}

TEST_F(executor_stop, a_run_that_ends_past_its_deadline_applies_nothing) {
  // Its last step finished too late: the caller has been told it timed out, so nothing stays.
  auto g = build(writes_graph("5"));
  ASSERT_TRUE(g);
  run_control ctl;
  ctl.on_step = [&](std::size_t done) {
    if (done == 4) ctl.deadline = run_control::clock::now() - std::chrono::milliseconds(1);
  };
  auto s = run(*g, &ctl);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(ctl.stopped, run_control::stop::deadline);
  EXPECT_EQ(ctl.steps_done, 4u);
  EXPECT_EQ(values(), before);
}

TEST_F(executor_stop, a_run_failing_at_a_later_step_applies_nothing) {
  // A compiled template whose second offset is bound: bound past the cache, the kernel
  // refuses at run time, after the first write happened.
  auto g = build(writes_graph(R"({"$bind": "at"})"), true);
  ASSERT_TRUE(g);
  ASSERT_TRUE(g->bind_param("at", 100).ok());
  auto s = run(*g, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.err().message.find("offset"), std::string::npos) << s.err().message;
  EXPECT_EQ(values(), before);
  // Bound in range, it runs and writes.
  ASSERT_TRUE(g->bind_param("at", 6).ok());
  ASSERT_TRUE(run(*g, nullptr).ok());
  EXPECT_EQ(values()[std::size_t(6 * width)], 9.0f);
  EXPECT_EQ(values()[std::size_t(width)], 1.0f);
}

TEST_F(executor_stop, a_stopped_run_puts_short_convs_state_back) {
  // short_conv advances its state (a session tensor) in place, besides its fresh output.
  auto state = tensor::make(dtype::f32, {2, width});
  ASSERT_TRUE(state.ok());
  for (int i = 0; i < 2 * width; ++i) state->f32()[i] = float(i + 1);
  store.session("s")["conv_state"] = *state;
  auto read_state = [&] {
    const tensor& t = store.find_session("s")->at("conv_state");
    return std::vector<float>(t.f32(), t.f32() + t.numel());
  };
  const std::vector<float> state_before = read_state();
  auto ones = [](int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += (i ? ",1" : "1");
    return out;
  };
  auto g = build(R"({"session": "s", "inputs": [
      {"name": "st", "session": "conv_state", "shape": [2, 4]},
      {"name": "x", "shape": [1, 4], "data": [1, 2, 3, 4]},
      {"name": "w_in", "shape": [12, 4], "data": [)" + ones(48) + R"(]},
      {"name": "w_conv", "shape": [4, 1, 3], "data": [)" + ones(12) + R"(]},
      {"name": "w_out", "shape": [4, 4], "data": [)" + ones(16) + R"(]}],
    "steps": [
      {"op": "short_conv", "in": ["x", "w_in", "w_conv", "w_out", "st"], "out": "y"},
      {"op": "add", "in": ["y", "y"], "out": "z"}],
    "outputs": ["z"]})");
  ASSERT_TRUE(g);
  run_control ctl;
  ctl.on_step = [&](std::size_t done) {
    if (done == 1) {
      EXPECT_NE(read_state(), state_before);
      ctl.cancel();
    }
  };
  ASSERT_FALSE(run(*g, &ctl).ok());
  EXPECT_EQ(read_state(), state_before);
  ASSERT_TRUE(run(*g, nullptr).ok());
  EXPECT_NE(read_state(), state_before);
}


/// A run past its deadline inside one long kernel stops there (runtime/interrupt.hpp): the
/// product's parts not yet begun are skipped, so the run ends well before the product would
/// have, and it is reported as stopped like a stop between steps.
TEST_F(executor_stop, a_long_product_stops_inside_its_kernel) {
  if (cpu_isa::best() < cpu_isa::level::avx2) GTEST_SKIP() << "the portable product is not split";
  const std::string json = R"({"inputs": [], "steps": [
      {"op": "zeros", "in": [], "out": "x", "params": {"shape": [2048, 2048]}},
      {"op": "zeros", "in": [], "out": "w", "params": {"shape": [2048, 2048]}},
      {"op": "matmul", "in": ["x", "w"], "out": "y", "params": {"transB": true}}],
    "outputs": ["y"]})";
  auto g = build(json);
  ASSERT_TRUE(g);
  using clock = run_control::clock;
  // the product alone, run to its end
  run_control whole;
  clock::time_point product_began;
  whole.on_step = [&](std::size_t done) {
    if (done == 2) product_began = clock::now();
  };
  ASSERT_TRUE(run(*g, &whole).ok());
  const auto full = clock::now() - product_began;
  // the same with a deadline a tenth of the way into the product
  run_control ctl;
  ctl.on_step = [&](std::size_t done) {
    if (done == 2) {
      product_began = clock::now();
      ctl.deadline = product_began + full / 10;
    }
  };
  auto s = run(*g, &ctl);
  const auto stopped_after = clock::now() - product_began;
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.err().code, errc::timeout);
  EXPECT_EQ(ctl.stopped, run_control::stop::deadline);
  EXPECT_EQ(ctl.steps_done, 2u);
  EXPECT_LT(stopped_after, full / 2) << "the product ran on past its deadline: "
                                     << std::chrono::duration<double, std::milli>(stopped_after).count() << " ms of "
                                     << std::chrono::duration<double, std::milli>(full).count();
}

}  // namespace
}  // namespace mpakt

namespace mpakt {
namespace {

/// A backend whose matmul and add record the kernel_call's immutable_inputs, then run the
/// reference kernels.
std::vector<std::uint32_t> seen_immutable;
status recording_kernel(const kernel_call& c, kernel_fn ref) {
  seen_immutable.push_back(c.immutable_inputs);
  return ref(c);
}
status recording_matmul(const kernel_call& c) { return recording_kernel(c, cpu_backend::reference("matmul")); }
status recording_add(const kernel_call& c) { return recording_kernel(c, cpu_backend::reference("add")); }

class recording_backend final : public backend {
 public:
  std::string_view name() const override { return "cpu"; }
  kernel_fn kernel(std::string_view op, std::span<const tensor_desc>, const op_params&) const override {
    if (op == "matmul") return recording_matmul;
    if (op == "add") return recording_add;
    return cpu_backend::reference(op);
  }
  std::vector<std::string> features() const override { return cpu_backend().features(); }
};

// (issue: CUDA workers, residency) A kernel is told which inputs never change while the plan
// lives — model weights, and a weight's copy widened once per plan — so a device backend may
// keep them; data, session tensors and values computed by the graph are not marked.
TEST(ExecutorImmutableInputs, WeightsAndTheirWidenedCopiesAreMarkedNothingElse) {
  tensor_store store;
  tensor_store::tensor_map weights;
  weights["w"] = *make_f32({3, 4}, std::vector<float>(12, 0.5f));
  weights["b"] = *convert_tensor(*make_f32({4}, std::vector<float>{1, 2, 3, 4}), dtype::bf16);
  store.put_model("m", std::move(weights));
  auto& sess = store.session("s");
  sess["h"] = *make_f32({2, 4}, std::vector<float>(8, 1.0f));
  const std::string graph = R"({"session": "s", "inputs": [
      {"name": "x", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]},
      {"name": "w", "model": "m", "weight": "w"},
      {"name": "b", "model": "m", "weight": "b"},
      {"name": "h", "session": "h", "shape": [2, 4]}],
    "steps": [
      {"op": "matmul", "in": ["x", "w"], "out": "y"},
      {"op": "add", "in": ["y", "b"], "out": "z"},
      {"op": "add", "in": ["z", "h"], "out": "u"}],
    "outputs": ["u"]})";
  auto decl = parse_graph_text(graph, false);
  ASSERT_TRUE(decl.ok()) << decl.err().message;
  recording_backend be;
  tensor_store::source src(store, "s", {});
  auto g = executable_graph::build(std::move(*decl), src, be);
  ASSERT_TRUE(g.ok()) << g.err().message;
  seen_immutable.clear();
  ASSERT_TRUE((*g)->run(src).ok());
  // matmul(x data, w weight); add(y computed, b: the bf16 weight widened once); add(z, h session)
  EXPECT_EQ(seen_immutable, (std::vector<std::uint32_t>{0b10, 0b10, 0b00}));
  EXPECT_EQ((*g)->value("u")->f32()[0], 0.5f * (1 + 2 + 3) + 1 + 1);  // (x row 0 · w, + b[0], + h)
}

}  // namespace
}  // namespace mpakt
