#include "actors/worker/compute_actor.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstring>
#include <thread>
#include <algorithm>
#include <random>
#include <cmath>
#include <limits>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "actors/digest.hpp"
#include "actors/errors.hpp"
#include "actors/off_thread.hpp"
#include "actors/generate/gen_values.hpp"
#include "actors/generate/speculator.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "runtime/batching.hpp"
#include "runtime/executor.hpp"
#include "runtime/generate_check.hpp"
#include "runtime/graph.hpp"
#include "runtime/json.hpp"
#include "runtime/metrics.hpp"
#include "runtime/outputs.hpp"
#include "runtime/row_bits.hpp"
#include "runtime/tensor_store.hpp"

namespace mpakt {

namespace {

/// A compiled template rewritten to run several sessions' plain decode steps in one pass.
struct batched_entry {
  batched_graph meta;
  std::unique_ptr<executable_graph> graph;
};

/// A template compiled on this worker.
struct compiled_entry {
  std::unique_ptr<executable_graph> graph;
  std::vector<std::string> outputs;
  std::vector<std::pair<std::string, std::string>> retain;
  std::set<std::string> models;  ///< models whose weights it reads
  graph_decl decl;               ///< what it was built from (batched forms derive from it)
  /// Batched forms by session count, built on first use; nullptr = this template cannot be
  /// batched (its sessions then run one by one).
  std::map<int, std::unique_ptr<batched_entry>> batched;
};

/// Most sessions one batched pass runs (the spec allows 64 per graph).
constexpr std::size_t max_batch = 16;
/// Most rows a batched pass stacks: the products compute a row the same bits alone or stacked
/// up to 32 rows (more take the AMX tiles of prefill), so a shared pass decides exactly as the
/// sessions' own passes would.
constexpr std::size_t batch_rows = 32;

struct compute_state {
  std::shared_ptr<worker_shared> shared;
  tensor_store store;
  std::shared_ptr<mpakt::backend> backend;  ///< the CPU backend, or the device one the program chose
  std::map<std::string, compiled_entry> graphs;
  /// What the last graph call was (for a call that waited past its limit behind it).
  std::string last_call;

  /// A worker-side decode loop in progress (one token per genstep message).
  struct generation {
    gen_request req;
    std::int64_t token = 0;  ///< the next token to feed
    std::int64_t pos = 0;    ///< where it is fed
    std::uint32_t index = 0;
    std::unique_ptr<speculator> spec;  ///< set when speculative
    bool lie = false;                  ///< --fault cheat-unless-dumped: its tokens altered
    std::uint64_t batched = 0;         ///< tokens produced by shared passes
    std::uint64_t batched_verifies = 0;  ///< verify passes it shared
  };
  std::map<std::string, generation> generations;
  bool tick_pending = false;  ///< a genstep message is on its way
  /// --fault corrupt-results: the draws deciding which answers to corrupt (seeded by the id).
  std::mt19937_64 fault_rng;
  /// --fault cheat-unless-dumped: sessions dumped since their last pass, and whether the
  /// answer being made is to lie.
  std::set<std::string> dumped;
  bool lie_now = false;
  /// Whether a pass on `sessions` lies (they were not all dumped since their last pass).
  bool cheats_on(const std::vector<std::string>& sessions) {
    if (!cfg().cheat_unless_dumped || sessions.empty()) return false;
    bool all = true;
    for (const auto& s : sessions) all = dumped.erase(s) > 0 && all;
    return !all;
  }
  bool corrupt_now() {
    if (std::exchange(lie_now, false)) return true;
    if (shared->cfg.corrupt_results <= 0) return false;
    return std::uniform_real_distribution<double>(0, 1)(fault_rng) < shared->cfg.corrupt_results;
  }

  /// --fault corrupt-weights-later: the weights already altered (each once, after its first
  /// digest answer).
  std::set<std::string> altered;

  /// --fault corrupt-caches / corrupt-generation-caches: one value of the session's first f32
  /// tensor changed after a graph call / a worker-side generation.
  void corrupt_session(const std::string& id, bool generation = false) {
    if (!(generation ? cfg().corrupt_generation_caches : cfg().corrupt_caches) || id.empty()) return;
    for (auto& [_, t] : store.session(id))
      if (t.type() == dtype::f32 && t.numel() > 0) {
        t.f32()[0] += 1.0f;
        return;
      }
  }

  const worker_config& cfg() const { return shared->cfg; }
  std::uint64_t free() const { return shared->free(); }

  build_options options(bool compiled, bool server_params = false) const {
    build_options o;
    o.compiled = compiled;
    o.server_params = server_params;
    o.max_tensor_bytes = std::int64_t(cfg().memory_bytes);
    o.features = shared->features;
    o.missing_ops = cfg().lacks;
    return o;
  }

  /// Before each message: weights the receiver finished join the store (a graph sent after
  /// their load ended finds them).
  void adopt_arrivals() {
    std::lock_guard<std::mutex> lock(shared->m);
    for (auto& a : shared->inbox) store.put_weight(a.model, std::move(a.name), std::move(a.t));
    shared->inbox.clear();
    shared->arrived = 0;
    shared->held = store.bytes_held();
  }
  /// After each message: what the front reports.
  void publish() {
    std::lock_guard<std::mutex> lock(shared->m);
    shared->held = store.bytes_held();
    shared->generations = std::uint32_t(generations.size());
  }
  /// Marks the compute side busy with a graph (or a compile) until the returned guard ends.
  struct busy_guard {
    worker_shared* shared;
    ~busy_guard() {
      std::lock_guard<std::mutex> lock(shared->m);
      shared->busy = {};
    }
  };
  busy_guard busy_with(std::string graph, std::string session, std::uint32_t steps) {
    shared->progress.store(0, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(shared->m);
    shared->busy.on = true;
    shared->busy.since = std::chrono::steady_clock::now();
    shared->busy.since_unix_ms = std::uint64_t(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
    shared->busy.graph = std::move(graph);
    shared->busy.session = std::move(session);
    shared->busy.steps = steps;
    return busy_guard{shared.get()};
  }
  void drop_graphs_reading(const std::string& model) {
    for (auto it = graphs.begin(); it != graphs.end();)
      it = it->second.models.count(model) ? graphs.erase(it) : std::next(it);
  }
};

using compute_pointer = compute_actor::stateful_pointer<compute_state>;

std::string mb(std::uint64_t bytes) { return std::to_string((bytes + 999999) / 1000000) + " MB"; }

/// The answer of a run: its outputs copied out of the graph and written as JSON — at once when
/// small, else on a helper thread, so the compute thread goes on with the next call.
caf::result<run_reply> answer_run(compute_pointer self, const executable_graph& g, const std::vector<std::string>& names,
                                  bool base64) {
  auto values = std::make_shared<output_values>(take_outputs(g, names));
  if (self->state.corrupt_now() && !values->values.empty() && values->values.front().second.numel() > 0) {
    float* v = values->values.front().second.f32();  // (--fault: one value of the answer changed)
    v[0] += 10.0f * (1.0f + std::fabs(v[0]));
  }
  const auto steps = std::uint32_t(g.step_count());
  if (self->state.cfg().malformed_answers)  // (--fault malformed-answers: text that is no outputs object)
    return run_reply{"{\"y\":" + std::string(100000, '['), steps};
  if (values->bytes() < off_thread_bytes) return run_reply{outputs_json(*values, base64), steps};
  auto rp = self->make_response_promise<run_reply>();
  maybe_off_thread<result<std::string>>(self, true, [values, base64] { return result<std::string>(outputs_json(*values, base64)); },
                                        [rp, steps](result<std::string>& text) mutable {
                                          if (text) rp.deliver(run_reply{std::move(*text), steps});
                                          else rp.deliver(to_caf(text.err()));
                                        });
  return caf::result<run_reply>(rp);
}

/// Applies a compiled call's bindings ({"name": number | [numbers]}); every declared
/// binding must be given (decisions.md), none may be unknown.
status apply_bindings(executable_graph& g, const std::string& bind_json) {
  auto parsed = parse_json(bind_json.empty() ? std::string_view("{}") : std::string_view(bind_json), "bind");
  if (!parsed) return std::move(parsed).err();
  rapidjson::Document& d = *parsed;
  if (!d.IsObject()) return invalid("bind must be an object of binding values");
  for (const auto& name : g.bindings())
    if (!d.HasMember(name.c_str())) return invalid("binding " + name + " was not given");
  std::vector<float> values;
  for (auto it = d.MemberBegin(); it != d.MemberEnd(); ++it) {
    const std::string name(it->name.GetString(), it->name.GetStringLength());
    const auto& v = it->value;
    if (g.is_input_binding(name)) {
      values.clear();
      if (v.IsNumber()) {
        values.push_back(float(v.GetDouble()));
      } else if (v.IsString()) {  // base64 f32, exact (a spread model's values between stages)
        auto decoded = decode_f32_base64(std::string_view(v.GetString(), v.GetStringLength()));
        if (!decoded) return invalid("bind." + name + ": " + decoded.err().message);
        values = std::move(*decoded);
      } else if (v.IsArray()) {
        for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
          if (!v[i].IsNumber()) return invalid("bind." + name + "[" + std::to_string(i) + "] must be a number");
          values.push_back(float(v[i].GetDouble()));
        }
      } else {
        return invalid("bind." + name + " must be an array of numbers");
      }
      MPAKT_TRY(g.bind_input(name, values));
    } else {
      if (!v.IsNumber()) return invalid("bind." + name + " must be a number");
      MPAKT_TRY(g.bind_param(name, v.GetDouble()));
    }
  }
  return {};
}

std::set<std::string> models_of(const graph_decl& d) {
  std::set<std::string> out;
  for (const auto& in : d.inputs)
    if (in.kind == input_kind::weight) out.insert(in.model);
  return out;
}

/// Runs a compiled template once with a call's bindings and sample-step overrides, then
/// keeps retained values in the primary session. The one path every compiled run takes.
status run_compiled(compute_state& st, compiled_entry& e, const std::string& bind_json,
                    const std::vector<std::pair<std::string, double>>& overrides, const std::string& session,
                    const std::vector<std::string>& sessions, run_control* control = nullptr) {
  tensor_store::source src(st.store, session, sessions);
  MPAKT_TRY(apply_bindings(*e.graph, bind_json));
  // Settings this call does not give are the template's own, not the previous caller's.
  e.graph->clear_overrides();
  for (const auto& [name, value] : overrides) MPAKT_TRY(e.graph->override_param("sample", name, value));
  MPAKT_TRY(e.graph->run(src, control));
  if (!e.retain.empty()) {
    const std::string primary = session.empty() && !sessions.empty() ? sessions.front() : session;
    if (primary.empty()) return invalid("the graph retains values but no session was given");
    MPAKT_TRY(st.store.apply_retain(*e.graph, primary, e.retain));
  }
  return {};
}

/// Whether a compiled template can drive generation (runtime/generate_check.hpp), and
/// returns one token id per fed row. Returns k (0 for a plain graph).
result<std::int32_t> check_generate_graph(const compiled_entry& e, bool sampling, bool verify) {
  auto k = check_generate_template(e.decl, e.graph->bindings(), sampling, verify);
  if (!k) return k;
  const tensor_desc* d = e.graph->desc(e.outputs.front());
  if (!d || shape_numel(d->shape) != *k + 1)
    return invalid("the graph must return one token id per fed position (" + std::to_string(*k + 1) + ")");
  return k;
}

void schedule_pass(compute_pointer self) {
  if (self->state.tick_pending) return;
  self->state.tick_pending = true;
  self->send(self, genstep_atom::value);
}

/// Ends a generation: tells its listener how, and forgets it.
void finish_generation(compute_pointer self, const std::string& id, std::string stopped, std::string err) {
  auto& gens = self->state.generations;
  auto it = gens.find(id);
  if (it == gens.end()) return;
  auto& g = it->second;
  gen_done d = with_counters(gen_done{std::move(stopped), std::move(err), g.pos}, g.spec.get());
  d.batched = g.batched;
  d.batched_verifies = g.batched_verifies;
  self->state.corrupt_session(g.req.session, true);  // (--fault corrupt-generation-caches)
  self->send(g.req.listener, gendone_atom::value, id, std::move(d));
  gens.erase(it);
}

/// The logits rows a generation graph's tokens were drawn from, in output order: the first
/// input of each sample or argmax step that `output` is (or concatenates). False when the
/// output is made otherwise. Without `rows` (before a run) only the graph's shape is checked.
bool drawn_rows(const executable_graph& g, const std::string& output, std::vector<std::pair<const tensor*, std::int64_t>>* rows,
                int depth = 0) {
  const std::string op = g.producer_op(output);
  const auto inputs = g.producer_inputs(output);
  if (inputs.empty() || depth > 64) return false;
  if (op == "sample" || op == "argmax") {
    if (!rows) return true;
    const tensor* logits = g.value(inputs.front());
    if (!logits) return false;
    for (std::int64_t r = 0; r < logits->rows(); ++r) rows->emplace_back(logits, r);
    return true;
  }
  if (op != "concat") return false;
  for (const auto& in : inputs)
    if (!drawn_rows(g, in, rows, depth + 1)) return false;
  return true;
}

std::vector<std::pair<const tensor*, std::int64_t>> logits_of(const executable_graph& g, const std::string& output) {
  std::vector<std::pair<const tensor*, std::int64_t>> rows;
  if (!drawn_rows(g, output, &rows)) rows.clear();
  return rows;
}

/// Sets t's log-probability and its `n` likeliest alternatives from row `row` of `logits`
/// (log-softmax in double; ties in order of id).
void add_logprobs(gen_token& t, const tensor& logits, std::int64_t row, std::int32_t n) {
  // (a row of a [rows, V] tensor; a 1-D one is one row)
  const std::int64_t v = logits.cols();
  if (row >= logits.rows() || t.token < 0 || t.token >= v) {
    t.logprob = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const float* x = logits.f32() + row * v;
  double m = -std::numeric_limits<double>::infinity();
  bool nan = false;
  for (std::int64_t i = 0; i < v; ++i) {
    nan = nan || std::isnan(x[i]);
    m = std::max(m, double(x[i]));
  }
  double total = 0;
  for (std::int64_t i = 0; i < v; ++i) total += std::exp(double(x[i]) - m);
  const double lse = m + std::log(total);
  auto lp = [&](std::int64_t i) { return nan ? std::numeric_limits<float>::quiet_NaN() : float(double(x[i]) - lse); };
  t.logprob = lp(t.token);
  const std::int64_t k = std::min<std::int64_t>(n, v);
  if (k <= 0) return;
  std::vector<std::int64_t> order(static_cast<std::size_t>(v));
  for (std::int64_t i = 0; i < v; ++i) order[std::size_t(i)] = i;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](std::int64_t a, std::int64_t b) { return x[a] != x[b] ? x[a] > x[b] : a < b; });
  for (std::int64_t j = 0; j < k; ++j) {
    t.top_ids.push_back(order[std::size_t(j)]);
    t.top_logprobs.push_back(lp(order[std::size_t(j)]));
  }
}

/// Streams a pass's produced tokens to the listener, applying the stop and length rules;
/// `logits` (entry i drew produced[i]) gives their log-probabilities when the generation asked
/// for them. Returns false when the generation ended.
bool deliver_tokens(compute_pointer self, const std::string& id, const std::vector<std::int64_t>& produced, double ms,
                    const std::vector<std::pair<const tensor*, std::int64_t>>& logits) {
  auto& g = self->state.generations.at(id);
  for (std::size_t i = 0; i < produced.size(); ++i) {
    std::int64_t tok = produced[i];
    if (g.lie || self->state.corrupt_now() || self->state.cfg().corrupt_generation_tokens)
      tok = tok > 0 ? tok - 1 : 1;  // (--fault: a lie, fed on as drawn)
    gen_token t;
    t.token = tok;
    t.index = g.index;
    t.pos = g.pos;
    t.ms = ms / double(produced.size());
    if (g.spec) {
      t.drafted = g.spec->drafted;
      t.accepted = g.spec->accepted;
    }
    if (g.req.logprobs >= 0) {
      if (i < logits.size()) add_logprobs(t, *logits[i].first, logits[i].second, g.req.logprobs);
      else t.logprob = std::numeric_limits<float>::quiet_NaN();  // (never expected: genstart checked the graph)
    }
    if (self->state.cfg().flood_tokens)  // (--fault flood-tokens: each token sent 100 times more)
      for (int k = 0; k < 100; ++k) self->send(g.req.listener, gentoken_atom::value, id, t);
    self->send(g.req.listener, gentoken_atom::value, id, std::move(t));
    g.token = tok;
    g.pos++;
    g.index++;
    if (std::find(g.req.stop_ids.begin(), g.req.stop_ids.end(), tok) != g.req.stop_ids.end()) {
      finish_generation(self, id, "stop token", "");
      return false;
    }
    if (g.index >= g.req.max_new) {
      finish_generation(self, id, "max tokens", "");
      return false;
    }
  }
  if (g.spec) g.spec->extend(produced);
  return true;
}

std::vector<std::int64_t> token_ids(const tensor& out) {
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < out.numel(); ++i) ids.push_back(std::int64_t(out.f32()[i]));
  return ids;
}

/// A pass's call: the token to feed and, for a verify pass, its drafts after it, with the
/// bindings of the pass's graph.
gen_call pass_call(const compute_state::generation& g, const speculator::pass& pass) {
  std::vector<std::int64_t> fed{g.token};
  fed.insert(fed.end(), pass.drafts.begin(), pass.drafts.end());
  const auto& bindings = pass.graph < 0 ? g.req.bindings : g.req.verify_bindings[std::size_t(pass.graph)];
  return make_gen_call(bindings, fed, g.pos, g.req.sampling);
}

/// The tokens a pass produced, from the graph's outputs: a plain step's one token, or what a
/// verify pass accepted (the speculator learns from either).
std::vector<std::int64_t> pass_tokens(compute_state::generation& g, const speculator::pass& pass,
                                      const std::vector<std::int64_t>& outputs, double ms) {
  if (pass.graph >= 0) return g.spec->verified(pass, outputs, ms);
  if (g.spec) g.spec->plain(ms);
  return {outputs.front()};
}

/// One generation's pass on its own: a plain decode step, or a verify pass of drafts.
void run_solo_pass(compute_pointer self, const std::string& id, const speculator::pass& pass) {
  auto& st = self->state;
  auto it = st.generations.find(id);
  if (it == st.generations.end()) return;
  auto& g = it->second;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string& graph_id = pass.graph < 0 ? g.req.graph_id : g.req.verify_graphs[std::size_t(pass.graph)];
  auto e = st.graphs.find(graph_id);
  if (e == st.graphs.end()) return finish_generation(self, id, "error", "graph " + graph_id + " was deleted during the generation");
  const gen_call call = pass_call(g, pass);
  if (auto s = run_compiled(st, e->second, call.bind_json, call.overrides, g.req.session, {}); !s)
    return finish_generation(self, id, "error", s.err().message);
  const std::vector<std::int64_t> outputs = token_ids(*e->second.graph->value(e->second.outputs.front()));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  deliver_tokens(self, id, pass_tokens(g, pass, outputs, ms), ms, logits_of(*e->second.graph, e->second.outputs.front()));
}

/// The template's batched form for n sessions, built once; nullptr when it cannot be.
batched_entry* batched_for(compute_state& st, compiled_entry& e, int n) {
  auto it = e.batched.find(n);
  if (it != e.batched.end()) return it->second.get();
  std::unique_ptr<batched_entry> made;
  if (auto meta = batch_graph(e.decl, *e.graph, n)) {
    tensor_store::source src(st.store, {});
    if (auto g = executable_graph::build(meta->decl, src, *st.backend, st.options(true))) {
      made = std::make_unique<batched_entry>();
      made->meta = std::move(*meta);
      made->graph = std::move(*g);
    }
  }
  return e.batched.emplace(n, std::move(made)).first->second.get();
}

/// Adds one call's bindings to a batched call's, each name renamed for session b.
status add_session_bindings(rapidjson::Document& all, const std::string& bind_json, int b) {
  auto parsed = parse_json(bind_json, "bind");
  if (!parsed) return std::move(parsed).err();
  rapidjson::Document& one = *parsed;
  if (!one.IsObject()) return invalid("bindings of a batched call are not an object");
  for (auto it = one.MemberBegin(); it != one.MemberEnd(); ++it) {
    const std::string name = session_value_name(std::string_view(it->name.GetString(), it->name.GetStringLength()), b);
    rapidjson::Value key(name.c_str(), rapidjson::SizeType(name.size()), all.GetAllocator());
    all.AddMember(key, rapidjson::Value(it->value, all.GetAllocator()), all.GetAllocator());
  }
  return {};
}

/// One plain decode step for several generations of one template in a single
/// multi-session pass. Returns false (having changed nothing) when the template cannot be
/// batched or the pass fails before running, so the caller runs them one by one.
bool run_batched_pass(compute_pointer self, const std::string& graph_id,
                      const std::vector<std::pair<std::string, speculator::pass>>& items) {
  auto& st = self->state;
  auto e = st.graphs.find(graph_id);
  if (e == st.graphs.end()) return false;
  batched_entry* be = batched_for(st, e->second, int(items.size()));
  if (!be) return false;
  const auto t0 = std::chrono::steady_clock::now();
  rapidjson::Document all;
  all.SetObject();
  std::vector<std::string> sessions;
  std::vector<std::vector<std::pair<std::string, double>>> overrides;
  for (std::size_t b = 0; b < items.size(); ++b) {
    const auto& g = st.generations.at(items[b].first);
    const gen_call call = pass_call(g, items[b].second);
    if (!add_session_bindings(all, call.bind_json, int(b))) return false;
    sessions.push_back(g.req.session);
    overrides.push_back(call.overrides);
  }
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  all.Accept(w);
  executable_graph& graph = *be->graph;
  if (!apply_bindings(graph, std::string(buf.GetString(), buf.GetSize()))) return false;
  graph.clear_overrides();  // each slot starts from the template's own settings
  for (std::size_t b = 0; b < items.size(); ++b)
    for (const auto& [name, value] : overrides[b])
      for (std::size_t step : be->meta.session_steps[b])
        if (!graph.override_step_param(step, "sample", name, value)) return false;
  tensor_store::source src(st.store, sessions.front(), sessions);
  // A failure here (a session closed meanwhile) happens before any step writes a cache, and
  // a step re-run alone writes the same rows again, so falling back is always safe.
  if (!graph.run(src)) return false;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (std::size_t b = 0; b < items.size(); ++b) {
    const auto& [id, pass] = items[b];
    auto& g = st.generations.at(id);
    const std::string& out = be->meta.session_outputs[b].front();
    const std::vector<std::int64_t> produced = pass_tokens(g, pass, token_ids(*graph.value(out)), ms);
    if (pass.graph >= 0) g.batched_verifies++;
    g.batched += produced.size();
    deliver_tokens(self, id, produced, ms, logits_of(graph, out));
  }
  return true;
}

}  // namespace

namespace {

/// Every message handler begins with one: weights that arrived join the store first, the
/// backend's device becomes the one this thread's kernels use (backend::activate: an actor's
/// messages may run on different scheduler threads), and what the front reports is brought up
/// to date after.
struct turn {
  compute_state& st;
  explicit turn(compute_state& s) : st(s) {
    st.adopt_arrivals();
    if (st.backend) st.backend->activate();
  }
  ~turn() { st.publish(); }
  turn(const turn&) = delete;
  turn& operator=(const turn&) = delete;
};

std::string limit_text(std::uint64_t ms) { return "the --graph-timeout-ms limit (" + std::to_string(ms) + " ms)"; }

/// The answer to a call that is not run at all: it waited past its limit behind other work,
/// or its caller cancelled it before it began.
caf::error not_run(const compute_state& st, const worker_shared::run_entry& e, run_control::stop why) {
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - e.received);
  if (why == run_control::stop::cancelled)
    return to_caf(errc::unavailable, "the graph was not run: its caller went away before worker " + st.cfg().worker_id +
                                         " could start it; nothing was applied");
  return to_caf(errc::timeout, "the graph was not run: it waited " + std::to_string(waited.count()) + " ms for worker " +
                                   st.cfg().worker_id + (st.last_call.empty() ? "" : ", busy with " + st.last_call) +
                                   ", past " + limit_text(e.timeout_ms) + "; nothing was applied");
}

/// The answer to a call stopped while it ran: it applied nothing (the executor put back what
/// it wrote in place, and nothing was retained).
caf::error stopped(const compute_state& st, const worker_shared::run_entry& e, const run_control& c, std::size_t steps) {
  const std::string where = "after " + std::to_string(c.steps_done) + " of " + std::to_string(steps) + " steps";
  if (c.stopped == run_control::stop::cancelled)
    return to_caf(errc::unavailable, "the graph was stopped " + where + " on worker " + st.cfg().worker_id +
                                         ": its caller went away; nothing it wrote was kept");
  return to_caf(errc::timeout, "the graph ran past " + limit_text(e.timeout_ms) + " and was stopped " + where +
                                   " on worker " + st.cfg().worker_id + "; nothing it wrote was kept");
}

/// Sleeps `ms` (a volunteer standing for a slow link), waking early when the call is stopped.
void delay(const run_control& c, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (c.should_stop() == run_control::stop::none && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(std::chrono::milliseconds(20),
                                                                             until - std::chrono::steady_clock::now()));
}

compute_actor::behavior_type compute_behavior(compute_pointer self, std::shared_ptr<worker_shared> shared,
                                              std::shared_ptr<backend> be) {
  self->state.shared = std::move(shared);
  self->state.backend = std::move(be);
  self->state.fault_rng.seed(std::hash<std::string>{}(self->state.cfg().worker_id));
  return {
      [=](dropmodel_atom, const std::string& model) {
        turn on_turn(self->state);
        self->state.drop_graphs_reading(model);
        return self->state.store.drop_model(model);
      },
      [=](sopen_atom, const std::string& sid) {
        turn on_turn(self->state);
        self->state.store.session(sid);
        return true;
      },
      [=](sclose_atom, const std::string& sid) {
        turn on_turn(self->state);
        return self->state.store.drop_session(sid);
      },
      [=](sinfo_atom, const std::string& sid) -> caf::result<session_info> {
        turn on_turn(self->state);
        const auto* s = self->state.store.find_session(sid);
        if (!s) return to_caf(errc::not_found, "session " + sid + " is not on worker " + self->state.cfg().worker_id);
        session_info info;
        for (const auto& [name, t] : *s) {
          info.tensors.push_back({name, t.shape(), std::string(dtype_name(t.type())), t.nbytes()});
          info.bytes += t.nbytes();
        }
        return info;
      },
      [=](sdump_atom, const std::string& sid) -> caf::result<session_dump> {
        turn on_turn(self->state);
        const auto* s = self->state.store.find_session(sid);
        if (!s) return to_caf(errc::not_found, "session " + sid + " is not on worker " + self->state.cfg().worker_id);
        session_dump d;
        for (const auto& [name, t] : *s) {
          d.tensors.push_back({name, t.shape(), std::string(dtype_name(t.type())),
                               std::string(reinterpret_cast<const char*>(t.data()), t.nbytes())});
          d.bytes += t.nbytes();
        }
        if (self->state.cfg().cheat_unless_dumped) self->state.dumped.insert(sid);
        return d;
      },
      [=](sload_atom, const std::string& sid, session_dump& d) -> caf::result<bool> {
        turn on_turn(self->state);
        auto& st = self->state;
        const auto* old = st.store.find_session(sid);
        const std::uint64_t freed = old ? tensor_store::bytes_of(*old) : 0;
        // (what the dump holds, whatever its `bytes` says: it may come from a volunteer)
        const std::uint64_t needs = std::max(d.bytes, d.carried());
        if (needs > st.free() + freed)
          return to_caf(errc::unavailable, "restoring session " + sid + " needs " + mb(needs) + " but worker " +
                                               st.cfg().worker_id + " has " + mb(st.free() + freed) + " free");
        // (its form first: nothing is allocated for a shape its bytes do not fill)
        if (const std::string why = malformed_copy(d); !why.empty())
          return to_caf(errc::invalid, "the copy of session " + sid + " to restore is malformed: " + why);
        tensor_store::tensor_map m;
        for (auto& b : d.tensors) {
          auto t = tensor::make(*dtype_from_name(b.dtype), b.shape);
          if (!t) return to_caf(t.err());
          std::memcpy(t->data(), b.bytes.data(), b.bytes.size());
          m[b.name] = std::move(*t);
        }
        st.store.session(sid) = std::move(m);
        return true;
      },
      [=](run_atom, run_request& r, std::uint64_t number) -> caf::result<run_reply> {
        turn on_turn(self->state);
        auto& st = self->state;
        // The call's entry (its run control) stays registered, so the front can cancel it,
        // until this answer is made.
        // (a big inline graph was parsed by the front: taken first, so it never stays behind)
        auto parsed = st.shared->take_parsed(number);
        worker_shared::run_entry entry;
        {
          std::lock_guard<std::mutex> lock(st.shared->m);
          auto it = st.shared->runs.find(number);
          if (it != st.shared->runs.end()) entry = it->second;
        }
        if (!entry.control) entry.control = std::make_shared<run_control>();
        struct unregister {
          worker_shared* shared;
          std::uint64_t number;
          ~unregister() {
            std::lock_guard<std::mutex> lock(shared->m);
            shared->runs.erase(number);
          }
        } on_answer{st.shared.get(), number};
        run_control& control = *entry.control;
        if (auto why = control.should_stop(); why != run_control::stop::none) return not_run(st, entry, why);
        if (st.cfg().delay_ms > 0) {
          delay(control, st.cfg().delay_ms);
          if (auto why = control.should_stop(); why != run_control::stop::none) return not_run(st, entry, why);
        }
        if (!r.session.empty() && !st.store.find_session(r.session))
          return to_caf(errc::not_found, "session " + r.session + " is not on this worker");
        for (const auto& s : r.sessions)
          if (!st.store.find_session(s)) return to_caf(errc::not_found, "session " + s + " is not on this worker");
        tensor_store::source src(st.store, r.session, r.sessions);
        const std::string primary = r.session.empty() && !r.sessions.empty() ? r.sessions.front() : r.session;
        {
          std::vector<std::string> touched = r.sessions;
          if (!r.session.empty()) touched.push_back(r.session);
          st.lie_now = st.cheats_on(touched);  // (--fault cheat-unless-dumped)
        }
        // (a graph listing several sessions keeps each row's bits alone whatever the caller said: SES-20)
        const free_rows_scope rows(r.free_rows && r.sessions.size() <= 1);
        auto* progress = &st.shared->progress;
        control.on_step = [progress](std::size_t done) { progress->store(std::uint32_t(done), std::memory_order_relaxed); };
        if (!r.graph_id.empty()) {
          auto it = st.graphs.find(r.graph_id);
          if (it == st.graphs.end()) return to_caf(errc::not_found, "graph " + r.graph_id + " is not compiled on this worker");
          auto& e = it->second;
          st.last_call = "graph " + r.graph_id + (primary.empty() ? "" : " in session " + primary);
          auto busy = st.busy_with(r.graph_id, primary, std::uint32_t(e.graph->step_count()));
          if (auto s = run_compiled(st, e, r.bind_json, r.overrides, r.session, r.sessions, &control); !s) {
            if (control.stopped != run_control::stop::none) return stopped(st, entry, control, e.graph->step_count());
            return to_caf(s.err());
          }
          auto answer = answer_run(self, *e.graph, r.outputs.empty() ? e.outputs : r.outputs, r.base64);
          st.corrupt_session(primary);
          return answer;
        }
        auto decl = parsed ? std::move(*parsed) : parse_graph_text(r.graph_json, false);
        if (!decl) return to_caf(decl.err());
        if (!decl->retain.empty() && primary.empty())
          return to_caf(errc::invalid, "graph.retain needs a session to keep values in");
        auto outputs = decl->outputs;
        auto retain = decl->retain;
        const std::size_t steps = decl->steps.size();
        st.last_call = "an inline graph of " + std::to_string(steps) + " steps" + (primary.empty() ? "" : " in session " + primary);
        auto busy = st.busy_with("inline", primary, std::uint32_t(steps));
        auto g = executable_graph::build(std::move(*decl), src, *st.backend, st.options(false, r.server_params));
        if (!g) return to_caf(g.err());
        if (auto s = (*g)->run(src, &control); !s) {
          if (control.stopped != run_control::stop::none) return stopped(st, entry, control, steps);
          return to_caf(s.err());
        }
        if (!retain.empty())
          if (auto s = st.store.apply_retain(**g, primary, retain); !s) return to_caf(s.err());
        auto answer = answer_run(self, **g, outputs, r.base64);
        st.corrupt_session(primary);
        return answer;
      },
      [=](compile_atom, compile_request& r, std::uint64_t number) -> caf::result<compile_reply> {
        turn on_turn(self->state);
        auto& st = self->state;
        auto parsed = st.shared->take_parsed(number);
        auto decl = parsed ? std::move(*parsed) : parse_graph_text(r.graph_json, true);
        if (!decl) return to_caf(decl.err());
        auto busy = st.busy_with("compile " + r.graph_id, "", 0);
        compiled_entry e;
        e.outputs = decl->outputs;
        e.retain = decl->retain;
        e.models = models_of(*decl);
        e.decl = *decl;
        tensor_store::source src(st.store, {});
        auto g = executable_graph::build(std::move(*decl), src, *st.backend, st.options(true));
        if (!g) return to_caf(g.err());
        e.graph = std::move(*g);
        compile_reply reply;
        reply.steps = std::uint32_t(e.graph->step_count());
        reply.bindings = e.graph->bindings();
        reply.features = e.graph->features_used();
        for (const auto& name : r.describe) {
          const tensor_desc* d = e.graph->desc(name);
          if (!d) return to_caf(errc::invalid, "the graph has no value " + name);
          reply.shapes.push_back(d->shape);
        }
        st.graphs[r.graph_id] = std::move(e);
        return reply;
      },
      [=](dropgraph_atom, const std::string& id) {
        turn on_turn(self->state);
        return self->state.graphs.erase(id) > 0;
      },
      [=](gencheck_atom, const std::string& id, bool sampling, bool verify) -> caf::result<std::int32_t> {
        turn on_turn(self->state);
        auto it = self->state.graphs.find(id);
        if (it == self->state.graphs.end()) return to_caf(errc::not_found, "graph " + id + " is not compiled on this worker");
        auto k = check_generate_graph(it->second, sampling, verify);
        if (!k) return to_caf(k.err());
        return *k;
      },
      [=](genstart_atom, gen_request& r) -> caf::result<bool> {
        turn on_turn(self->state);
        auto& st = self->state;
        auto it = st.graphs.find(r.graph_id);
        if (it == st.graphs.end()) return to_caf(errc::not_found, "graph " + r.graph_id + " is not compiled on this worker");
        bool sampling = false;
        for (const auto& [k, v] : r.sampling) sampling = sampling || (k == "temperature" && v > 0);
        if (auto k = check_generate_graph(it->second, sampling, false); !k) return to_caf(k.err());
        if (r.logprobs > max_top_logprobs)
          return to_caf(errc::invalid, "logprobs asks for " + std::to_string(r.logprobs) + " alternatives, more than " +
                                           std::to_string(max_top_logprobs));
        auto draws = [&](const compiled_entry& e) { return r.logprobs < 0 || drawn_rows(*e.graph, e.outputs.front(), nullptr); };
        if (!draws(it->second))
          return to_caf(errc::invalid, "log-probabilities need a graph whose output a sample or argmax step draws");
        std::vector<int> ks;
        for (const auto& vid : r.verify_graphs) {
          auto v = st.graphs.find(vid);
          if (v == st.graphs.end()) return to_caf(errc::not_found, "verify graph " + vid + " is not compiled on this worker");
          auto k = check_generate_graph(v->second, sampling, true);
          if (!k) return to_caf(errc::invalid, "verify graph " + vid + ": " + k.err().message);
          if (!draws(v->second))
            return to_caf(errc::invalid, "verify graph " + vid + ": log-probabilities need a graph whose output a sample or argmax step draws");
          ks.push_back(*k);
        }
        if (!st.store.find_session(r.session)) return to_caf(errc::not_found, "session " + r.session + " is not on this worker");
        compute_state::generation g;
        g.token = r.first_id;
        g.pos = r.start_pos;
        g.lie = st.cheats_on({r.session});  // (--fault cheat-unless-dumped)
        if (!r.verify_graphs.empty()) g.spec = std::make_unique<speculator>(r.context, ks, r.always);
        const std::string id = r.gen_id;
        g.req = std::move(r);
        st.generations[id] = std::move(g);
        schedule_pass(self);
        return true;
      },
      [=](genstep_atom) {
        turn on_turn(self->state);
        auto& st = self->state;
        st.tick_pending = false;
        // Every running generation advances one pass. Passes of one template — plain steps,
        // or verify passes of one verify graph — share multi-session passes, as many sessions
        // as keep the stacked rows within batch_rows (so every product computes each row the
        // same bits as alone).
        std::map<std::string, std::vector<std::pair<std::string, speculator::pass>>> by_graph;
        for (auto& [id, g] : st.generations) {
          speculator::pass pass = g.spec ? g.spec->next() : speculator::pass{};
          const std::string& graph_id = pass.graph < 0 ? g.req.graph_id : g.req.verify_graphs[std::size_t(pass.graph)];
          by_graph[graph_id].emplace_back(id, std::move(pass));
        }
        for (const auto& [graph_id, items] : by_graph) {
          const std::size_t rows = 1 + items.front().second.drafts.size();  // per session, the same for one graph
          const std::size_t per_pass = std::max<std::size_t>(1, std::min(max_batch, batch_rows / rows));
          for (std::size_t i = 0; i < items.size(); i += per_pass) {
            const std::vector<std::pair<std::string, speculator::pass>> chunk(
                items.begin() + std::ptrdiff_t(i), items.begin() + std::ptrdiff_t(std::min(items.size(), i + per_pass)));
            auto& occupancy = metrics::m().batch_occupancy.with();
            if (chunk.size() > 1 && run_batched_pass(self, graph_id, chunk)) {
              occupancy.observe(double(chunk.size()));
              continue;
            }
            for (const auto& [id, pass] : chunk) {
              occupancy.observe(1);
              run_solo_pass(self, id, pass);
            }
          }
        }
        if (!st.generations.empty()) schedule_pass(self);
      },
      [=](gencancel_atom, const std::string& id) {
        turn on_turn(self->state);
        self->state.generations.erase(id);
      },
      [=](tput_atom, tensor_upload& u) -> caf::result<bool> {
        turn on_turn(self->state);
        auto t = make_f32(u.shape, u.values);
        if (!t) return to_caf(t.err());
        if (t->nbytes() > self->state.free())
          return to_caf(errc::unavailable, "tensor needs " + mb(t->nbytes()) + " but the worker has " + mb(self->state.free()) + " free");
        self->state.store.put_tensor(u.tensor_id, std::move(*t));
        return true;
      },
      [=](tdrop_atom, const std::string& id) {
        turn on_turn(self->state);
        return self->state.store.drop_tensor(id);
      },
      [=](tdigest_atom, const std::string& model, const std::string& name, const std::string& nonce) -> caf::result<std::string> {
        turn on_turn(self->state);
        const tensor* t = nullptr;
        if (const auto* m = self->state.store.model(model))
          if (auto it = m->find(name); it != m->end()) t = &it->second;
        if (!t) return to_caf(errc::not_found, "weight " + name + " of model " + model + " is not on this worker");
        std::string digest = tensor_digest(nonce, *t);
        if (self->state.cfg().corrupt_weights_later && t->nbytes() > 0 && self->state.altered.insert(model + "/" + name).second) {
          tensor held = *t;  // (a handle on the same bytes)
          held.data()[held.nbytes() / 2] ^= std::byte{0x40};
        }
        return digest;
      },
  };
}

}  // namespace

compute_actor spawn_compute(caf::actor_system& sys, std::shared_ptr<worker_shared> shared, std::shared_ptr<backend> be) {
  return sys.spawn<caf::detached>(compute_behavior, std::move(shared), std::move(be));
}

}  // namespace mpakt
