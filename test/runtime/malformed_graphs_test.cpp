// A corpus of malformed and hostile graphs: each must be refused with one clear error that
// names the fault (the step index and op, the input, parameter or field), and nothing may
// crash. Parse errors, validation errors, binding errors and run-time value errors.

#include "runtime/executor.hpp"

#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.hpp"
#include "runtime/graph.hpp"
#include "runtime/tensor_store.hpp"

namespace mpakt {
namespace {

struct bad_case {
  const char* name;
  const char* graph;
  std::vector<std::string> expect;  ///< fragments the error message must contain
  bool compiled = false;
  std::vector<std::pair<std::string, double>> params = {};   ///< param bindings before run
  std::vector<std::pair<std::string, std::vector<float>>> inputs = {};  ///< input bindings
  std::vector<std::string> features = {};                    ///< worker features (empty = all)
};

// clang-format off
const std::vector<bad_case> corpus = {
  // ---- JSON and structure ----
  {"not_json", R"({"steps": [)", {"not valid JSON"}},
  {"graph_not_object", R"([])", {"graph must be an object"}},
  {"no_steps", R"({"inputs": []})", {"lacks \"steps\""}},
  {"steps_not_array", R"({"steps": {}})", {"graph.steps must be an array"}},
  {"unknown_graph_field", R"({"steps": [], "outputz": []})", {"unknown field \"outputz\""}},
  {"inputs_not_array", R"({"inputs": {}, "steps": []})", {"graph.inputs must be an array"}},
  {"input_not_object", R"({"inputs": [1], "steps": []})", {"inputs[0] must be an object"}},
  {"input_without_name", R"({"inputs": [{"shape": [1], "data": [1]}], "steps": []})", {"inputs[0]", "\"name\""}},
  {"input_name_not_string", R"({"inputs": [{"name": 3, "shape": [1], "data": [1]}], "steps": []})", {"inputs[0].name must be a string"}},
  {"input_without_form", R"({"inputs": [{"name": "x", "shape": [1]}], "steps": []})", {"inputs[0] (x)", "needs one of"}},
  {"input_mixes_forms", R"({"inputs": [{"name": "x", "shape": [1], "data": [1], "model": "m_t", "weight": "w"}], "steps": []})", {"inputs[0] (x)", "mixes input forms"}},
  {"data_without_shape", R"({"inputs": [{"name": "x", "data": [1]}], "steps": []})", {"inputs[0] (x)", "no shape"}},
  {"shape_not_array", R"({"inputs": [{"name": "x", "shape": 4, "data": [1]}], "steps": []})", {"inputs[0] (x).shape"}},
  {"negative_dimension", R"({"inputs": [{"name": "x", "shape": [2, -1], "data": [1]}], "steps": []})", {"inputs[0] (x).shape[1]", "non-negative integer"}},
  {"fractional_dimension", R"({"inputs": [{"name": "x", "shape": [1.5], "data": [1]}], "steps": []})", {"inputs[0] (x).shape[0]"}},
  {"too_many_dimensions", R"({"inputs": [{"name": "x", "shape": [1,1,1,1,1,1,1,1,1], "data": [1]}], "steps": []})", {"inputs[0] (x).shape", "at most 8"}},
  {"data_count_mismatch", R"({"inputs": [{"name": "x", "shape": [2, 2], "data": [1, 2, 3]}], "steps": []})", {"inputs[0] (x).data", "3 values", "[2, 2]", "4"}},
  {"data_not_numbers", R"({"inputs": [{"name": "x", "shape": [2], "data": [1, "a"]}], "steps": []})", {"inputs[0] (x).data[1] must be a number"}},
  {"data_and_b64", R"({"inputs": [{"name": "x", "shape": [1], "data": [1], "dataB64": "AACAPw=="}], "steps": []})", {"inputs[0] (x)", "both data and dataB64"}},
  {"b64_bad_character", R"({"inputs": [{"name": "x", "shape": [1], "dataB64": "AA*APw=="}], "steps": []})", {"inputs[0] (x).dataB64", "invalid base64"}},
  {"b64_wrong_count", R"({"inputs": [{"name": "x", "shape": [2], "dataB64": "AACAPw=="}], "steps": []})", {"inputs[0] (x).dataB64", "needs 2"}},
  {"b64_hostile_shape", R"({"inputs": [{"name": "x", "shape": [1000000000, 1000000000], "dataB64": "AACAPw=="}], "steps": []})", {"inputs[0] (x).dataB64", "holds at most"}},
  {"hostile_shape_overflow", R"({"inputs": [{"name": "x", "shape": [4000000000000000, 4000000000000000], "data": []}], "steps": []})", {"inputs[0] (x).shape", "overflows"}},
  {"unknown_input_field", R"({"inputs": [{"name": "x", "shape": [1], "dat": [1]}], "steps": []})", {"inputs[0] (x)", "unknown field \"dat\""}},
  {"of_without_session", R"({"inputs": [{"name": "x", "shape": [1], "data": [1], "of": 0}], "steps": []})", {"inputs[0] (x)", "\"of\""}},
  {"bound_input_inline", R"({"inputs": [{"name": "ids", "shape": [1], "bind": "ids"}], "steps": []})", {"inputs[0] (ids)", "compiled graphs"}},
  {"bind_param_inline", R"({"inputs": [{"name": "x", "shape": [1, 4], "data": [1,2,3,4]}], "steps": [{"op": "rope", "in": ["x"], "out": "y", "params": {"headDim": 4, "offset": {"$bind": "pos"}}}]})", {"step 0 (rope)", "offset", "$bind"}},
  {"step_not_object", R"({"steps": [3]})", {"step 0 must be an object"}},
  {"step_without_op", R"({"steps": [{"in": [], "out": "y"}]})", {"step 0", "\"op\""}},
  {"step_without_out", R"({"inputs": [{"name": "x", "shape": [1], "data": [1]}], "steps": [{"op": "relu", "in": ["x"]}]})", {"step 0 (relu)", "\"out\""}},
  {"step_in_not_array", R"({"steps": [{"op": "relu", "in": "x", "out": "y"}]})", {"step 0 (relu)", "\"in\" must be an array"}},
  {"step_unknown_field", R"({"steps": [{"op": "relu", "in": [], "out": "y", "param": {}}]})", {"step 0 (relu)", "unknown field \"param\""}},
  {"params_not_object", R"({"steps": [{"op": "relu", "in": [], "out": "y", "params": []}]})", {"step 0 (relu)", "params must be an object"}},
  {"outputs_not_array", R"({"steps": [], "outputs": "y"})", {"graph.outputs must be an array"}},
  {"output_not_string", R"({"steps": [], "outputs": [1]})", {"graph.outputs[0]"}},
  {"retain_not_object", R"({"steps": [], "retain": ["y"]})", {"graph.retain must be an object"}},
  {"retain_value_not_string", R"({"steps": [], "retain": {"k": 1}})", {"graph.retain.k"}},
  {"too_many_sessions", R"({"steps": [], "sessions": ["a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a","a"]})", {"65 sessions", "at most 64"}},

  // ---- names, ops, params ----
  {"unknown_op", R"({"inputs": [{"name": "a", "shape": [2, 2], "data": [1,2,3,4]}], "steps": [{"op": "matmull", "in": ["a", "a"], "out": "y"}]})", {"step 0", "unknown op \"matmull\"", "did you mean matmul"}},
  {"too_few_inputs", R"({"inputs": [{"name": "a", "shape": [2], "data": [1,2]}], "steps": [{"op": "add", "in": ["a"], "out": "y"}]})", {"step 0 (add)", "takes 2 input(s), got 1"}},
  {"too_many_inputs", R"({"inputs": [{"name": "a", "shape": [2], "data": [1,2]}], "steps": [{"op": "relu", "in": ["a", "a"], "out": "y"}]})", {"step 0 (relu)", "takes 1 input(s), got 2"}},
  {"unknown_param", R"({"inputs": [{"name": "x", "shape": [1, 4], "data": [1,2,3,4]}], "steps": [{"op": "rope", "in": ["x"], "out": "y", "params": {"headdim": 4}}]})", {"step 0 (rope)", "unknown parameter headdim", "did you mean headDim"}},
  {"param_on_paramless_op", R"({"inputs": [{"name": "x", "shape": [1], "data": [1]}], "steps": [{"op": "relu", "in": ["x"], "out": "y", "params": {"alpha": 1}}]})", {"step 0 (relu)", "unknown parameter alpha", "takes no parameters"}},
  {"mistyped_param", R"({"inputs": [{"name": "a", "shape": [2, 2], "data": [1,2,3,4]}], "steps": [{"op": "matmul", "in": ["a", "a"], "out": "y", "params": {"transB": 1}}]})", {"step 0 (matmul)", "transB must be a boolean, not a number"}},
  {"missing_required_param", R"({"inputs": [{"name": "x", "shape": [1, 4], "data": [1,2,3,4]}], "steps": [{"op": "rope", "in": ["x"], "out": "y"}]})", {"step 0 (rope)", "missing required parameter headDim"}},
  {"undefined_name", R"({"inputs": [{"name": "x", "shape": [1], "data": [1]}], "steps": [{"op": "relu", "in": ["z"], "out": "y"}]})", {"step 0 (relu)", "input \"z\" is not defined"}},
  {"use_before_definition", R"({"inputs": [{"name": "x", "shape": [1], "data": [1]}], "steps": [{"op": "relu", "in": ["b"], "out": "a"}, {"op": "relu", "in": ["x"], "out": "b"}]})", {"step 0 (relu)", "input \"b\" is used before it is defined (by step 1)"}},
  {"output_redefines_input", R"({"inputs": [{"name": "x", "shape": [1], "data": [1]}], "steps": [{"op": "relu", "in": ["x"], "out": "x"}]})", {"step 0 (relu)", "output \"x\" is already defined by an input"}},
  {"output_redefines_step", R"({"inputs": [{"name": "x", "shape": [1], "data": [1]}], "steps": [{"op": "relu", "in": ["x"], "out": "y"}, {"op": "relu", "in": ["y"], "out": "y"}]})", {"step 1 (relu)", "already defined by step 0"}},
  {"duplicate_input_name", R"({"inputs": [{"name": "x", "shape": [1], "data": [1]}, {"name": "x", "shape": [1], "data": [2]}], "steps": []})", {"inputs[1] (x)", "used by an earlier input"}},
  {"unknown_output", R"({"inputs": [{"name": "x", "shape": [1], "data": [1]}], "steps": [], "outputs": ["nope"]})", {"outputs[0]", "\"nope\" is not a value"}},
  {"unknown_retain", R"({"inputs": [{"name": "x", "shape": [1], "data": [1]}], "steps": [], "retain": {"k": "nope"}})", {"retain.k", "\"nope\""}},

  // ---- shapes ----
  {"matmul_inner_mismatch_hint", R"({"inputs": [{"name": "a", "shape": [1, 4], "data": [1,2,3,4]}, {"name": "w", "model": "m_t", "weight": "w"}], "steps": [{"op": "matmul", "in": ["a", "w"], "out": "y"}]})", {"step 0 (matmul)", "transB"}},
  {"add_bad_broadcast", R"({"inputs": [{"name": "a", "shape": [2, 3], "data": [1,2,3,4,5,6]}, {"name": "b", "shape": [2], "data": [1,2]}], "steps": [{"op": "add", "in": ["a", "b"], "out": "y"}]})", {"step 0 (add)", "b"}},
  {"attention_kvheads_not_dividing", R"({"inputs": [{"name": "q", "shape": [1, 6], "data": [1,2,3,4,5,6]}], "steps": [{"op": "attention", "in": ["q", "q", "q"], "out": "y", "params": {"heads": 3, "headDim": 2, "kvHeads": 2}}]})", {"step 0 (attention)", "kvHeads"}},
  {"attention_width_mismatch", R"({"inputs": [{"name": "q", "shape": [1, 8], "data": [1,2,3,4,5,6,7,8]}, {"name": "k", "shape": [2, 6], "data": [1,2,3,4,5,6,1,2,3,4,5,6]}], "steps": [{"op": "attention", "in": ["q", "k", "k"], "out": "y", "params": {"heads": 2, "headDim": 4}}]})", {"step 0 (attention)", "k"}},
  {"zeros_hostile_size", R"({"steps": [{"op": "zeros", "in": [], "out": "z", "params": {"shape": [100000, 100000, 100000]}}]})", {"step 0 (zeros)", "more than the limit"}},
  {"reshape_count_mismatch", R"({"inputs": [{"name": "x", "shape": [2, 3], "data": [1,2,3,4,5,6]}], "steps": [{"op": "reshape", "in": ["x"], "out": "y", "params": {"shape": [4, 2]}}]})", {"step 0 (reshape)", "shape"}},
  {"slice_middle_axis", R"({"inputs": [{"name": "x", "shape": [2, 2, 2], "data": [1,2,3,4,5,6,7,8]}], "steps": [{"op": "slice", "in": ["x"], "out": "y", "params": {"start": 0, "length": 1, "axis": 1}}]})", {"step 0 (slice)", "axis"}},
  {"concat_mismatch", R"({"inputs": [{"name": "a", "shape": [2, 3], "data": [1,2,3,4,5,6]}, {"name": "b", "shape": [2, 2], "data": [1,2,3,4]}], "steps": [{"op": "concat", "in": ["a", "b"], "out": "y"}]})", {"step 0 (concat)"}},
  {"slice_past_end", R"({"inputs": [{"name": "x", "shape": [4, 2], "data": [1,2,3,4,5,6,7,8]}], "steps": [{"op": "slice", "in": ["x"], "out": "y", "params": {"start": 3, "length": 2}}]})", {"step 0 (slice)"}},
  {"rope_odd_head_dim", R"({"inputs": [{"name": "x", "shape": [1, 6], "data": [1,2,3,4,5,6]}], "steps": [{"op": "rope", "in": ["x"], "out": "y", "params": {"headDim": 3}}]})", {"step 0 (rope)", "headDim"}},
  {"rope_width_not_multiple", R"({"inputs": [{"name": "x", "shape": [1, 6], "data": [1,2,3,4,5,6]}], "steps": [{"op": "rope", "in": ["x"], "out": "y", "params": {"headDim": 4}}]})", {"step 0 (rope)"}},
  {"embedding_table_rank", R"({"inputs": [{"name": "ids", "shape": [1], "data": [0]}, {"name": "t", "shape": [4], "data": [1,2,3,4]}], "steps": [{"op": "embedding", "in": ["ids", "t"], "out": "y"}]})", {"step 0 (embedding)"}},
  {"transpose_3d", R"({"inputs": [{"name": "x", "shape": [1, 2, 2], "data": [1,2,3,4]}], "steps": [{"op": "transpose", "in": ["x"], "out": "y"}]})", {"step 0 (transpose)"}},
  {"cache_write_width", R"({"inputs": [{"name": "c", "shape": [4, 2], "data": [0,0,0,0,0,0,0,0]}, {"name": "v", "shape": [1, 3], "data": [1,2,3]}], "steps": [{"op": "cache_write", "in": ["c", "v"], "out": "c2", "params": {"offset": 0}}]})", {"step 0 (cache_write)"}},
  {"moe_wrong_expert_inputs", R"({"inputs": [{"name": "x", "shape": [1, 4], "data": [1,2,3,4]}, {"name": "l", "shape": [1, 2], "data": [1,2]}], "steps": [{"op": "moe", "in": ["x", "l", "x"], "out": "y", "params": {"topK": 1}}]})", {"step 0 (moe)"}},
  {"sample_bad_top_p", R"({"inputs": [{"name": "x", "shape": [1, 4], "data": [1,2,3,4]}], "steps": [{"op": "sample", "in": ["x"], "out": "y", "params": {"temperature": 1, "topP": 5}}]})", {"step 0 (sample)", "topP"}},
  {"moe_bad_scoring", R"({"inputs": [{"name": "x", "shape": [1, 4], "data": [1,2,3,4]}], "steps": [{"op": "moe", "in": ["x", "x"], "out": "y", "params": {"topK": 1, "scoring": "argmax"}}]})", {"step 0 (moe)", "scoring"}},

  // ---- references to tensors held elsewhere ----
  {"session_input_without_session", R"({"inputs": [{"name": "k", "session": "kcache"}], "steps": []})", {"inputs[0] (k)", "names no session"}},
  {"unknown_model", R"({"inputs": [{"name": "w", "model": "m_nope", "weight": "w"}], "steps": []})", {"inputs[0] (w)", "m_nope"}},
  {"unknown_weight", R"({"inputs": [{"name": "w", "model": "m_t", "weight": "nope.weight"}], "steps": []})", {"inputs[0] (w)", "nope.weight"}},
  {"unknown_tensor_id", R"({"inputs": [{"name": "w", "tensorId": "t_nope"}], "steps": []})", {"inputs[0] (w)", "t_nope"}},
  {"cache_write_into_weight", R"({"inputs": [{"name": "w", "model": "m_t", "weight": "w"}, {"name": "v", "shape": [1, 4], "data": [1,2,3,4]}], "steps": [{"op": "cache_write", "in": ["w", "v"], "out": "y", "params": {"offset": 0}}]})", {"step 0 (cache_write)", "in place", "model weight"}},
  {"feature_not_supported", R"({"inputs": [{"name": "q", "shape": [1, 4], "data": [1,2,3,4]}], "steps": [{"op": "attention", "in": ["q", "q", "q"], "out": "y", "params": {"heads": 1, "headDim": 4, "window": 2}}]})", {"no connected worker supports feature attention.window", "step 0", "attention"}, false, {}, {}, {"rope.scaling"}},

  // ---- compiled templates and bindings ----
  {"bind_shape_param", R"({"inputs": [{"name": "x", "shape": [1, 4], "data": [1,2,3,4]}], "steps": [{"op": "rope", "in": ["x"], "out": "y", "params": {"headDim": {"$bind": "hd"}}}]})", {"step 0 (rope)", "headDim", "cannot be bound"}, true},
  {"bind_boolean_param", R"({"inputs": [{"name": "a", "shape": [2, 2], "data": [1,2,3,4]}], "steps": [{"op": "matmul", "in": ["a", "a"], "out": "y", "params": {"transB": {"$bind": "t"}}}]})", {"step 0 (matmul)", "transB", "only numbers"}, true},
  {"bind_unknown_field", R"({"inputs": [{"name": "x", "shape": [1, 4], "data": [1,2,3,4]}], "steps": [{"op": "rope", "in": ["x"], "out": "y", "params": {"headDim": 4, "offset": {"$bind": "pos", "plus": 1}}}]})", {"step 0 (rope)", "offset", "\"plus\""}, true},
  {"compiled_session_without_shape", R"({"inputs": [{"name": "k", "session": "kcache"}], "steps": []})", {"inputs[0] (k)", "needs its shape"}, true},
  {"bind_name_twice", R"({"inputs": [{"name": "a", "shape": [1], "bind": "ids"}, {"name": "b", "shape": [1], "bind": "ids"}], "steps": []})", {"inputs[1] (b)", "binding ids"}, true},
  {"missing_binding_at_run", R"({"inputs": [{"name": "x", "shape": [1, 4], "data": [1,2,3,4]}], "steps": [{"op": "rope", "in": ["x"], "out": "y", "params": {"headDim": 4, "offset": {"$bind": "pos"}}}]})", {"binding pos was not given"}, true},
  {"unknown_binding", R"({"inputs": [{"name": "x", "shape": [1, 4], "data": [1,2,3,4]}], "steps": [{"op": "rope", "in": ["x"], "out": "y", "params": {"headDim": 4, "offset": {"$bind": "pos"}}}]})", {"binding step is not declared"}, true, {{"step", 3}}},
  {"bound_input_wrong_count", R"({"inputs": [{"name": "ids", "shape": [1], "bind": "ids"}], "steps": []})", {"binding ids needs 1 values", "got 2"}, true, {}, {{"ids", {1, 2}}}},
  {"bound_offset_past_cache", R"({"inputs": [{"name": "c", "shape": [4, 2], "data": [0,0,0,0,0,0,0,0]}, {"name": "v", "shape": [1, 2], "data": [1,2]}], "steps": [{"op": "cache_write", "in": ["c", "v"], "out": "c2", "params": {"offset": {"$bind": "pos"}}}]})", {"step 0 (cache_write)", "offset"}, true, {{"pos", 4}}},
  {"bound_negative_position", R"({"inputs": [{"name": "x", "shape": [1, 4], "data": [1,2,3,4]}], "steps": [{"op": "rope", "in": ["x"], "out": "y", "params": {"headDim": 4, "offset": {"$bind": "pos"}}}]})", {"step 0 (rope)", "offset"}, true, {{"pos", -3}}},
};
// clang-format on

class malformed : public ::testing::TestWithParam<bad_case> {
 protected:
  void SetUp() override {
    tensor_store::tensor_map m;
    m["w"] = *make_f32({3, 4}, std::vector<float>(12, 1.0f));
    store.put_model("m_t", std::move(m));
    store.session("s_1")["kcache"] = *make_f32({4, 2}, std::vector<float>(8, 0.0f));
  }
  tensor_store store;
  cpu_backend be;
};

/// Runs the whole path (parse, build, bind, run) and returns the first error message.
std::string first_error(const bad_case& c, tensor_store& store, backend& be) {
  auto decl = parse_graph_text(c.graph, c.compiled);
  if (!decl) return decl.err().message;
  tensor_store::source src(store, {});
  build_options opts;
  opts.compiled = c.compiled;
  opts.features = c.features;
  auto g = executable_graph::build(std::move(*decl), src, be, opts);
  if (!g) return g.err().message;
  for (const auto& [k, v] : c.inputs)
    if (auto s = (*g)->bind_input(k, v); !s) return s.err().message;
  for (const auto& [k, v] : c.params)
    if (auto s = (*g)->bind_param(k, v); !s) return s.err().message;
  auto st = (*g)->run(src);
  if (!st) return st.err().message;
  return "";
}

TEST_P(malformed, IsRefusedNamingTheFault) {
  const bad_case& c = GetParam();
  const std::string msg = first_error(c, store, be);
  ASSERT_FALSE(msg.empty()) << c.name << " was accepted";
  for (const auto& frag : c.expect) EXPECT_NE(msg.find(frag), std::string::npos) << c.name << ": \"" << msg << "\" lacks \"" << frag << "\"";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one sentence, one line: " << msg;
}

INSTANTIATE_TEST_SUITE_P(corpus, malformed, ::testing::ValuesIn(corpus),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(malformed_corpus, HasAtLeastFiftyCases) { EXPECT_GE(corpus.size(), 50u); }

}  // namespace
}  // namespace mpakt
