#include "runtime/executor.hpp"
#include "runtime/interrupt.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstring>
#include <deque>

#include "backends/cpu/cpu_backend.hpp"
#include "runtime/metrics.hpp"
#include "runtime/schema.hpp"

namespace mpakt {

namespace {

enum class slot_kind : std::uint8_t { data, weight, tensor_id, session, bound, step, widened };

struct slot {
  std::string name;
  slot_kind kind = slot_kind::step;
  tensor_desc desc;
  tensor t;
  int input_index = -1;  ///< for input slots: index into graph inputs
  int step = -1;         ///< producing step for step outputs
  int alias_of = -1;     ///< in-place output: the slot whose tensor it is
  int view_of = -1;      ///< view output: the slot whose bytes it shows
  bool taken = false;    ///< handed out by take(): reallocate before the next write
  /// A compiled template's session input read only where bf16 and f16 serve as well as f32
  /// (op_def::half_inputs: a KV cache written and attended over): the session's tensor may
  /// be any of the three, so one template serves caches of every width.
  bool any_half = false;
};

struct widen_task {
  int from = -1;
  int to = -1;
};

struct planned_step {
  int index = 0;
  const op_def* def = nullptr;
  std::unique_ptr<op_params> params;
  std::vector<int> in_slots;
  std::vector<tensor*> in_ptrs;
  /// kernel_call::immutable_inputs: the inputs that are weights, v2 tensors or their widened copies.
  std::uint32_t immutable_inputs = 0;
  int out_slot = -1;
  kernel_fn fn = nullptr;
  /// The backend's kernel for running this step with its neighbours (backend::group_kernel).
  group_kernel_fn group_fn = nullptr;
  /// Whether group_fn takes only steps reading the same first input (backend::group_needs_same_input).
  bool group_same_input = true;
  /// The kernel runs on the device of the plan's device_state (backend::on_device): it reads
  /// and leaves values there; a host kernel's tensors are brought back before it runs.
  bool on_device = false;
  /// On the first step of a group: how many steps, from this one, run as one call (≥ 2).
  int group_size = 0;
  bool has_binds = false;
  std::vector<widen_task> per_call_widen;
  /// The op's step count and step time in the process's metrics, looked up once at build.
  metrics::counter* steps_metric = nullptr;
  metrics::counter* seconds_metric = nullptr;
};

struct param_use {
  int step = 0;
  double* field = nullptr;
  double mul = 1;
  double add = 0;
};

struct param_binding {
  std::string name;
  std::vector<param_use> uses;
  bool set = false;
};

struct input_binding {
  std::string name;
  int slot = -1;
  bool set = false;
};

std::string step_prefix(std::size_t i, std::string_view op) {
  return "step " + std::to_string(i) + " (" + std::string(op) + "): ";
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string suggestion(std::string_view name, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_d = 3;
  for (const auto& k : known) {
    std::string lk = k, ln(name);
    std::transform(lk.begin(), lk.end(), lk.begin(), ::tolower);
    std::transform(ln.begin(), ln.end(), ln.begin(), ::tolower);
    const std::size_t d = edit_distance(ln, lk);
    if (d < best_d) { best_d = d; best = k; }
  }
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

const char* kind_name(param_spec::type t) {
  switch (t) {
    case param_spec::type::number: return "a number";
    case param_spec::type::boolean: return "a boolean";
    case param_spec::type::string: return "a string";
    case param_spec::type::array: return "an array";
    case param_spec::type::object: return "an object";
  }
  return "?";
}

const char* value_kind_name(param_value::kind k) {
  switch (k) {
    case param_value::kind::null: return "null";
    case param_value::kind::number: return "a number";
    case param_value::kind::boolean: return "a boolean";
    case param_value::kind::string: return "a string";
    case param_value::kind::array: return "an array";
    case param_value::kind::object: return "an object";
  }
  return "?";
}

bool kind_matches(param_spec::type t, param_value::kind k) {
  switch (t) {
    case param_spec::type::number: return k == param_value::kind::number;
    case param_spec::type::boolean: return k == param_value::kind::boolean;
    case param_spec::type::string: return k == param_value::kind::string;
    case param_spec::type::array: return k == param_value::kind::array;
    case param_spec::type::object: return k == param_value::kind::object;
  }
  return false;
}

bool input_may_be_packed(const op_def& d, std::size_t i) {
  if (d.packed_from >= 0 && i >= std::size_t(d.packed_from)) return true;
  return i < 32 && (d.packed_inputs >> i) & 1u;
}

bool input_may_be_half(const op_def& d, std::size_t i) { return i < 32 && (d.half_inputs >> i) & 1u; }
bool is_half(dtype t) { return t == dtype::bf16 || t == dtype::f16; }

}  // namespace

struct executable_graph::impl {
  graph_decl graph;
  std::deque<slot> slots;  // deque: element addresses stay put while planning appends
  std::unordered_map<std::string, int> by_name;
  std::vector<planned_step> steps;
  std::vector<double>* profile = nullptr;  ///< per-step kernel ns (benchmarks only)
  std::vector<param_binding> params;
  std::vector<input_binding> inputs;
  std::vector<int> session_slots;
  /// Parameters changed by override_param / override_step_param, with their built values.
  std::vector<std::pair<double*, double>> overridden;
  workspace ws;
  bool compiled = false;

  /// Rows a run overwrote in place, kept until it ends (see run()): where they were, and
  /// their old bytes in `undo_bytes` from `at`. Both vectors are reused from run to run.
  struct undo_entry {
    tensor target;  ///< shares the written tensor's storage
    std::size_t offset = 0;
    std::size_t at = 0;
    std::size_t bytes = 0;
  };
  std::vector<undo_entry> undo;
  std::vector<std::byte> undo_bytes;

  status resolve_sessions(tensor_source& src);
  status prepare_output(planned_step& st);
  /// Whether writing into this slot in place changes something that outlives the run.
  bool outlives_run(int slot_index) const;
  /// Keeps the rows step `st` is about to write in place.
  void remember_writes(const planned_step& st);
  /// Puts back everything remembered, newest first, and forgets it.
  void roll_back();
  /// Forgets what was remembered (the run succeeded).
  void forget_writes();
  /// Marks runs of consecutive steps that can go to their group kernel as one call.
  void plan_groups();
  /// Prepares step `st`'s output before its kernel runs (a value handed out by take() gets
  /// a new tensor).
  status ready_output(const planned_step& st);

  /// The device backend's memory for this plan (backend::make_device_state), or nullptr.
  std::unique_ptr<device_state> dev;
  std::vector<const tensor*> host_tensors;  ///< host_step_begins' list (kept: no allocation per step)
  /// Before a host kernel runs step `st` (its output ready): what it reads or writes that the
  /// device holds newer comes back.
  status host_step_begins(const planned_step& st);
  /// After it ran: what it wrote is newer on the host.
  void host_step_ended(const planned_step& st);
  /// Brings one value back from the device where it holds it newer (no device state: nothing).
  status to_host(const tensor& t) const {
    const tensor* one = &t;
    return dev ? dev->to_host(std::span<const tensor* const>(&one, 1)) : status{};
  }
};

status executable_graph::impl::host_step_begins(const planned_step& st) {
  if (!dev) return {};
  host_tensors.assign(st.in_ptrs.begin(), st.in_ptrs.end());
  host_tensors.push_back(&slots[std::size_t(st.out_slot)].t);
  return dev->to_host(host_tensors);
}

void executable_graph::impl::host_step_ended(const planned_step& st) {
  if (!dev) return;
  dev->host_wrote(slots[std::size_t(st.out_slot)].t);
  if (st.def->writes_input >= 0 && std::size_t(st.def->writes_input) < st.in_ptrs.size())
    dev->host_wrote(*st.in_ptrs[std::size_t(st.def->writes_input)]);
}

/// The most steps one group kernel call takes (run() keeps their calls on the stack).
constexpr std::size_t max_group_steps = 8;

void executable_graph::impl::plan_groups() {
  // A step joins the group of the steps before it when it has the same group kernel and
  // (where that kernel asks for it) the same first input, needs no widening before its
  // kernel, and reads no output of the group (which has not been computed yet). Checks of
  // bound parameters run for each step of a group before its kernel.
  auto plain = [&](const planned_step& st) {
    const slot& o = slots[std::size_t(st.out_slot)];
    return st.group_fn && st.per_call_widen.empty() && o.alias_of < 0 && o.view_of < 0 &&
           st.def->aliases_input < 0 && st.def->writes_input < 0 && !st.in_slots.empty();
  };
  for (std::size_t i = 0; i < steps.size();) {
    std::size_t j = i + 1;
    if (plain(steps[i])) {
      while (j < steps.size() && j - i < max_group_steps && plain(steps[j]) && steps[j].group_fn == steps[i].group_fn &&
             (!steps[i].group_same_input || steps[j].in_slots[0] == steps[i].in_slots[0])) {
        bool reads_group = false;
        for (int in : steps[j].in_slots)
          for (std::size_t g = i; g < j; ++g) reads_group = reads_group || in == steps[g].out_slot;
        if (reads_group) break;
        ++j;
      }
    }
    if (j - i >= 2) steps[i].group_size = int(j - i);
    i = j;
  }
}

status executable_graph::impl::ready_output(const planned_step& st) {
  slot& out = slots[std::size_t(st.out_slot)];
  if (out.alias_of >= 0) {
    out.t = slots[std::size_t(out.alias_of)].t;
  } else if (out.view_of >= 0) {
    out.t.alias_storage(slots[std::size_t(out.view_of)].t);
  } else if (out.taken) {
    auto t = tensor::make(out.desc.type, out.desc.shape);
    if (!t) return make_error(t.err().code, step_prefix(std::size_t(st.index), st.def->name) + "output: " + t.err().message);
    out.t = std::move(*t);
    out.taken = false;
  }
  return {};
}

bool executable_graph::impl::outlives_run(int slot_index) const {
  // Follow in-place results and views to the tensor whose bytes they are.
  for (;;) {
    const slot& s = slots[std::size_t(slot_index)];
    if (s.alias_of >= 0) slot_index = s.alias_of;
    else if (s.view_of >= 0) slot_index = s.view_of;
    else return s.kind == slot_kind::session || s.kind == slot_kind::data;
  }
}

void executable_graph::impl::remember_writes(const planned_step& st) {
  for (int w : {st.def->aliases_input, st.def->writes_input}) {
    if (w < 0 || std::size_t(w) >= st.in_slots.size() || !outlives_run(st.in_slots[std::size_t(w)])) continue;
    const tensor& target = *st.in_ptrs[std::size_t(w)];
    const std::int64_t rows = target.rows();
    std::int64_t first = 0, count = rows;
    if (w == st.def->aliases_input && st.def->written_rows) {
      auto [f, n] = st.def->written_rows(*st.params, st.in_ptrs);
      first = std::clamp<std::int64_t>(f, 0, rows);
      count = std::clamp<std::int64_t>(n, 0, rows - first);
    }
    const std::size_t row_bytes = rows > 0 ? target.nbytes() / std::size_t(rows) : 0;
    undo_entry e{target, std::size_t(first) * row_bytes, undo_bytes.size(), std::size_t(count) * row_bytes};
    if (e.bytes == 0) continue;
    undo_bytes.resize(e.at + e.bytes);
    std::memcpy(undo_bytes.data() + e.at, target.data() + e.offset, e.bytes);
    undo.push_back(std::move(e));
  }
}

void executable_graph::impl::roll_back() {
  for (auto it = undo.rbegin(); it != undo.rend(); ++it)
    std::memcpy(it->target.data() + it->offset, undo_bytes.data() + it->at, it->bytes);
  forget_writes();
}

void executable_graph::impl::forget_writes() {
  undo.clear();
  undo_bytes.clear();
  // A prefill's rows need not stay reserved for the decode steps that follow.
  constexpr std::size_t keep_bytes = std::size_t(16) << 20;
  if (undo_bytes.capacity() > keep_bytes) undo_bytes.shrink_to_fit();
}

std::vector<std::string> graph_needs(const graph_decl& graph) {
  std::vector<std::string> out;
  auto add = [&](const std::string& x) {
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  };
  for (const auto& sd : graph.steps) {
    add(sd.op);
    const op_def* def = find_op_def(sd.op);
    if (!def || !def->features) continue;
    std::vector<std::string> used;
    def->features(sd.params, sd.in.size(), used);
    for (const auto& f : used) add(f);
  }
  return out;
}

executable_graph::executable_graph(std::unique_ptr<impl> p) : p_(std::move(p)) {}
executable_graph::~executable_graph() = default;

std::size_t executable_graph::step_count() const { return p_->steps.size(); }

std::size_t executable_graph::grouped_steps() const {
  std::size_t n = 0;
  for (const auto& st : p_->steps) n += std::size_t(st.group_size);
  return n;
}

result<std::unique_ptr<executable_graph>> executable_graph::build(graph_decl graph, tensor_source& source, backend& be,
                                                                  const build_options& opts) {
  auto p = std::make_unique<impl>();
  p->compiled = opts.compiled;
  p->dev = be.make_device_state();
  const schema& sc = schema::instance();
  std::vector<std::string> allowed = opts.features.empty() ? be.features() : opts.features;
  std::vector<std::string> op_names;
  for (const auto& o : sc.ops()) op_names.push_back(o.name);
  std::vector<std::string> features;
  std::vector<std::string> binding_order;

  auto size_ok = [&](const tensor_desc& d, const std::string& what) -> status {
    const std::int64_t n = shape_numel(d.shape);
    auto bytes = storage_bytes(d.type, n);
    if (n < 0 || !bytes || std::int64_t(*bytes) > opts.max_tensor_bytes)
      return make_error(errc::too_large, what + " " + shape_str(d.shape) + " would need " +
                                             (bytes ? std::to_string(*bytes) : std::string("more than 2^63")) +
                                             " bytes, more than the limit of " + std::to_string(opts.max_tensor_bytes) +
                                             " bytes for one tensor");
    return {};
  };

  // ---- inputs ----
  const int session_count = source.session_count();
  for (std::size_t i = 0; i < graph.inputs.size(); ++i) {
    const input_decl& in = graph.inputs[i];
    const std::string at = "inputs[" + std::to_string(i) + "] (" + in.name + ")";
    if (p->by_name.count(in.name)) return invalid(at + ": the name " + in.name + " is used by an earlier input");
    slot s;
    s.name = in.name;
    s.input_index = int(i);
    switch (in.kind) {
      case input_kind::data: {
        s.kind = slot_kind::data;
        s.desc = {dtype::f32, in.shape};
        MPAKT_TRY(size_ok(s.desc, at + ": shape"));
        auto t = make_f32(in.shape, in.data);
        if (!t) return invalid(at + ": " + t.err().message);
        s.t = std::move(*t);
        break;
      }
      case input_kind::bound: {
        s.kind = slot_kind::bound;
        s.desc = {dtype::f32, in.shape};
        MPAKT_TRY(size_ok(s.desc, at + ": shape"));
        auto t = tensor::make(dtype::f32, in.shape);
        if (!t) return make_error(t.err().code, at + ": " + t.err().message);
        s.t = std::move(*t);
        for (const auto& b : p->inputs)
          if (b.name == in.bind) return invalid(at + ": binding " + in.bind + " already fills input " + p->slots[std::size_t(b.slot)].name);
        p->inputs.push_back({in.bind, int(p->slots.size()), false});
        binding_order.push_back(in.bind);
        break;
      }
      case input_kind::weight: {
        s.kind = slot_kind::weight;
        auto t = source.weight(in.model, in.weight);
        if (!t) return make_error(t.err().code, at + ": " + t.err().message);
        s.t = std::move(*t);
        s.desc = s.t.desc();
        break;
      }
      case input_kind::tensor_id: {
        s.kind = slot_kind::tensor_id;
        auto t = source.by_id(in.tensor_id);
        if (!t) return make_error(t.err().code, at + ": " + t.err().message);
        s.t = std::move(*t);
        s.desc = s.t.desc();
        break;
      }
      case input_kind::session: {
        s.kind = slot_kind::session;
        if (!opts.compiled) {
          if (session_count == 0)
            return invalid(at + ": reads session tensor " + in.session_name + " but the graph names no session");
          if (in.of >= session_count)
            return invalid(at + ": of " + std::to_string(in.of) + " is past the " + std::to_string(session_count) +
                           " session(s) the graph lists");
          auto t = source.session_tensor(in.of, in.session_name);
          if (!t) return make_error(t.err().code, at + ": " + t.err().message);
          if (in.has_shape && t->shape() != in.shape)
            return invalid(at + ": session tensor " + in.session_name + " has shape " + shape_str(t->shape()) +
                           ", not " + shape_str(in.shape));
          s.desc = t->desc();
          s.t = std::move(*t);
        } else {
          if (!in.has_shape)
            return invalid(at + ": a session input in a compiled graph needs its shape ({name, session, shape})");
          s.desc = {dtype::f32, in.shape};
          s.any_half = true;  // until a step reads it where only f32 serves
          MPAKT_TRY(size_ok(s.desc, at + ": shape"));
        }
        p->session_slots.push_back(int(p->slots.size()));
        break;
      }
    }
    p->by_name[in.name] = int(p->slots.size());
    p->slots.push_back(std::move(s));
  }

  // Where each name is first defined (to tell "defined later" from "never defined").
  std::unordered_map<std::string, std::size_t> defined_by_step;
  for (std::size_t i = 0; i < graph.steps.size(); ++i) defined_by_step.emplace(graph.steps[i].out, i);

  // ---- steps ----
  for (std::size_t i = 0; i < graph.steps.size(); ++i) {
    step_decl& sd = graph.steps[i];
    const op_spec* spec = sc.find(sd.op);
    if (!spec)
      return invalid("step " + std::to_string(i) + ": unknown op \"" + sd.op + "\"" + suggestion(sd.op, op_names));
    const std::string pre = step_prefix(i, sd.op);
    const op_def* def = find_op_def(sd.op);
    if (!def) return make_error(errc::internal, pre + "op has no implementation");
    if (std::find(opts.missing_ops.begin(), opts.missing_ops.end(), sd.op) != opts.missing_ops.end())
      return make_error(errc::unavailable, pre + "op " + sd.op + " is not available on this worker");
    if (int(sd.in.size()) < spec->min_inputs || int(sd.in.size()) > spec->max_inputs) {
      const std::string want = spec->min_inputs == spec->max_inputs
                                   ? std::to_string(spec->min_inputs)
                                   : std::to_string(spec->min_inputs) + " to " + std::to_string(spec->max_inputs);
      return invalid(pre + "takes " + want + " input(s), got " + std::to_string(sd.in.size()));
    }

    // Parameters against the schema.
    std::vector<std::string> param_names;
    for (const auto& ps : spec->params) param_names.push_back(ps.name);
    param_map full = sd.params;
    for (const auto& [name, value] : sd.params.items()) {
      const param_spec* ps = spec->param(name);
      const bool server_param = opts.server_params && std::find(def->server_params.begin(), def->server_params.end(),
                                                                 std::string_view(name)) != def->server_params.end();
      if (!ps && server_param) continue;  // typed by the op's parse
      if (!ps) {
        std::string known;
        for (const auto& n : param_names) known += (known.empty() ? "" : ", ") + n;
        return invalid(pre + "unknown parameter " + name + suggestion(name, param_names) +
                       (known.empty() ? "; this op takes no parameters" : "; it takes " + known));
      }
      if (!kind_matches(ps->kind, value.k))
        return invalid(pre + "parameter " + name + " must be " + kind_name(ps->kind) + ", not " + value_kind_name(value.k));
    }
    for (const auto& b : sd.binds) {
      const param_spec* ps = spec->param(b.param);
      if (!ps) return invalid(pre + "unknown parameter " + b.param + suggestion(b.param, param_names));
      if (ps->kind != param_spec::type::number)
        return invalid(pre + "parameter " + b.param + " is " + kind_name(ps->kind) + " and cannot be bound; only numbers can");
      full.set(b.param, param_value::number(0));
    }
    for (const auto& ps : spec->params)
      if (!ps.optional && !full.has(ps.name)) return invalid(pre + "missing required parameter " + ps.name);

    planned_step st;
    st.index = int(i);
    st.def = def;
    st.steps_metric = &metrics::m().graph_steps.with({def->name});
    st.seconds_metric = &metrics::m().graph_step_seconds.with({def->name});
    auto parsed = def->parse(full);
    if (!parsed) {
      // parse never range-checks bindable parameters (op.hpp), so an error about a bound
      // one means the parameter is not bindable at all.
      for (const auto& b : sd.binds)
        if (parsed.err().message.find("parameter " + b.param) != std::string::npos)
          return invalid(pre + "parameter " + b.param + " cannot be bound because it determines the output's shape");
      return make_error(parsed.err().code, pre + parsed.err().message);
    }
    st.params = std::move(*parsed);
    st.has_binds = !sd.binds.empty();
    for (const auto& b : sd.binds) {
      double* field = def->bindable ? def->bindable(*st.params, b.param) : nullptr;
      if (!field) return invalid(pre + "parameter " + b.param + " cannot be bound because it determines the output's shape");
      auto it = std::find_if(p->params.begin(), p->params.end(), [&](const param_binding& pb) { return pb.name == b.name; });
      if (it == p->params.end()) {
        for (const auto& ib : p->inputs)
          if (ib.name == b.name) return invalid(pre + "binding " + b.name + " already names a bound input");
        p->params.push_back({b.name, {}, false});
        it = p->params.end() - 1;
        binding_order.push_back(b.name);
      }
      it->uses.push_back({int(i), field, b.mul, b.add});
    }
    if (!st.has_binds && def->check) {
      auto ck = def->check(*st.params);
      if (!ck) return make_error(ck.err().code, pre + ck.err().message);
    }

    // Features: the step may only use what the worker implements.
    std::vector<std::string> used;
    if (def->features) def->features(full, sd.in.size(), used);
    for (const auto& f : used) {
      if (std::find(allowed.begin(), allowed.end(), f) == allowed.end())
        return make_error(errc::unavailable, "no connected worker supports feature " + f + " (step " + std::to_string(i) + ", " + sd.op + ")");
      features.push_back(f);
    }

    // Inputs by name; packed inputs widened where the op reads only f32.
    std::vector<tensor_desc> in_descs;
    for (std::size_t j = 0; j < sd.in.size(); ++j) {
      const std::string& name = sd.in[j];
      auto it = p->by_name.find(name);
      if (it == p->by_name.end()) {
        auto later = defined_by_step.find(name);
        if (later != defined_by_step.end() && later->second >= i)
          return invalid(pre + "input \"" + name + "\" is used before it is defined (by step " + std::to_string(later->second) + ")");
        std::vector<std::string> known;
        for (const auto& [k, _] : p->by_name) known.push_back(k);
        return invalid(pre + "input \"" + name + "\" is not defined" + suggestion(name, known));
      }
      int sid = it->second;
      {
        // a compiled session input (through in-place outputs) read where only f32 serves
        int root = sid;
        while (p->slots[std::size_t(root)].alias_of >= 0) root = p->slots[std::size_t(root)].alias_of;
        if (!input_may_be_half(*def, j)) p->slots[std::size_t(root)].any_half = false;
      }
      const dtype in_type = p->slots[std::size_t(sid)].desc.type;
      if (in_type != dtype::f32 && !input_may_be_packed(*def, j) && !(is_half(in_type) && input_may_be_half(*def, j))) {
        slot w;
        w.name = p->slots[std::size_t(sid)].name + "#f32";
        w.kind = slot_kind::widened;
        w.desc = {dtype::f32, p->slots[std::size_t(sid)].desc.shape};
        const slot& from = p->slots[std::size_t(sid)];
        const bool constant = from.kind == slot_kind::weight || from.kind == slot_kind::tensor_id;
        if (constant) {
          auto t = to_f32(from.t);
          if (!t) return make_error(t.err().code, pre + "input \"" + name + "\": " + t.err().message);
          w.t = std::move(*t);
        } else {
          auto t = tensor::make(dtype::f32, w.desc.shape);
          if (!t) return make_error(t.err().code, pre + "input \"" + name + "\": " + t.err().message);
          w.t = std::move(*t);
          st.per_call_widen.push_back({sid, int(p->slots.size())});
        }
        sid = int(p->slots.size());
        p->slots.push_back(std::move(w));
      }
      st.in_slots.push_back(sid);
      in_descs.push_back(p->slots[std::size_t(sid)].desc);
    }

    // In-place writes must land in a tensor the graph may modify.
    for (int w : {def->aliases_input, def->writes_input}) {
      if (w < 0 || std::size_t(w) >= st.in_slots.size()) continue;
      const slot& target = p->slots[std::size_t(st.in_slots[std::size_t(w)])];
      if (target.kind == slot_kind::weight || target.kind == slot_kind::tensor_id || target.kind == slot_kind::widened)
        return invalid(pre + "writes input \"" + sd.in[std::size_t(w)] + "\" in place, but it is a " +
                       (target.kind == slot_kind::tensor_id ? "shared v2 tensor" : "model weight") +
                       "; write into a session tensor or a zeros value");
    }

    auto out = def->infer(shape_query{in_descs, *st.params});
    if (!out) return make_error(out.err().code, pre + out.err().message);
    MPAKT_TRY(size_ok(*out, pre + "output"));

    if (p->by_name.count(sd.out)) {
      const slot& prev = p->slots[std::size_t(p->by_name[sd.out])];
      return invalid(pre + "output \"" + sd.out + "\" is already defined by " +
                     (prev.step >= 0 ? "step " + std::to_string(prev.step) : "an input") + "; every value needs its own name");
    }
    slot o;
    o.name = sd.out;
    o.kind = slot_kind::step;
    o.desc = *out;
    o.step = int(i);
    if (def->aliases_input >= 0) {
      o.alias_of = st.in_slots[std::size_t(def->aliases_input)];
      o.t = p->slots[std::size_t(o.alias_of)].t;
    } else if (def->view_of_input0 && in_descs.size() > 0 && in_descs[0].type == dtype::f32 && out->type == dtype::f32) {
      o.view_of = st.in_slots[0];
      o.t = tensor::view(p->slots[std::size_t(o.view_of)].t, dtype::f32, out->shape, 0);
    } else {
      auto t = tensor::make(out->type, out->shape);
      if (!t) return make_error(t.err().code, pre + "output: " + t.err().message);
      o.t = std::move(*t);
    }
    st.out_slot = int(p->slots.size());
    p->by_name[sd.out] = st.out_slot;
    p->slots.push_back(std::move(o));

    st.fn = be.kernel(sd.op, in_descs, *st.params);
    if (!st.fn) st.fn = cpu_backend::reference(sd.op);  // every worker ships every op
    if (!st.fn) return make_error(errc::internal, pre + "no kernel");
    st.group_fn = be.group_kernel(st.fn);
    st.group_same_input = be.group_needs_same_input(st.fn);
    // In-place writes and views share host bytes with other values: those stay host steps
    // (their kernels then see no device_state and keep their tensors current themselves).
    st.on_device = p->dev && be.on_device(st.fn) && def->aliases_input < 0 && def->writes_input < 0 &&
                   p->slots[std::size_t(st.out_slot)].view_of < 0;
    p->steps.push_back(std::move(st));
  }
  p->plan_groups();

  // ---- outputs and retain name existing values ----
  for (std::size_t i = 0; i < graph.outputs.size(); ++i)
    if (!p->by_name.count(graph.outputs[i]))
      return invalid("outputs[" + std::to_string(i) + "]: \"" + graph.outputs[i] + "\" is not a value of this graph");
  for (const auto& [sess_name, value] : graph.retain)
    if (!p->by_name.count(value))
      return invalid("retain." + sess_name + ": \"" + value + "\" is not a value of this graph");
  // A value returned or retained is read as its dtype says: its session input keeps f32.
  auto keep_f32 = [&](const std::string& name) {
    int root = p->by_name[name];
    while (p->slots[std::size_t(root)].alias_of >= 0) root = p->slots[std::size_t(root)].alias_of;
    p->slots[std::size_t(root)].any_half = false;
  };
  for (const auto& name : graph.outputs) keep_f32(name);
  for (const auto& [sess_name, value] : graph.retain) keep_f32(value);

  // Kernel argument arrays point into the slot deque, which no longer grows. Weights, v2
  // tensors and their copies widened once per plan never change while the plan lives.
  for (auto& st : p->steps)
    for (std::size_t j = 0; j < st.in_slots.size(); ++j) {
      const int sid = st.in_slots[j];
      const slot& s = p->slots[std::size_t(sid)];
      st.in_ptrs.push_back(&p->slots[std::size_t(sid)].t);
      const bool widened_per_call = std::any_of(st.per_call_widen.begin(), st.per_call_widen.end(),
                                                [&](const widen_task& w) { return w.to == sid; });
      const bool immutable = s.kind == slot_kind::weight || s.kind == slot_kind::tensor_id ||
                             (s.kind == slot_kind::widened && !widened_per_call);
      if (immutable && j < 32) st.immutable_inputs |= 1u << j;
    }

  std::sort(features.begin(), features.end());
  features.erase(std::unique(features.begin(), features.end()), features.end());
  p->graph = std::move(graph);
  std::unique_ptr<executable_graph> eg(new executable_graph(std::move(p)));
  eg->binding_names_ = std::move(binding_order);
  eg->features_ = std::move(features);
  return eg;
}

bool executable_graph::is_input_binding(std::string_view name) const {
  return std::any_of(p_->inputs.begin(), p_->inputs.end(), [&](const input_binding& b) { return b.name == name; });
}

const shape_t* executable_graph::bound_shape(std::string_view name) const {
  for (const auto& b : p_->inputs)
    if (b.name == name) return &p_->slots[std::size_t(b.slot)].desc.shape;
  return nullptr;
}

status executable_graph::bind_input(std::string_view name, std::span<const float> values) {
  for (auto& b : p_->inputs) {
    if (b.name != name) continue;
    slot& s = p_->slots[std::size_t(b.slot)];
    if (std::int64_t(values.size()) != s.t.numel())
      return invalid("binding " + b.name + " needs " + std::to_string(s.t.numel()) + " values (shape " +
                     shape_str(s.desc.shape) + "), got " + std::to_string(values.size()));
    if (!values.empty()) std::memcpy(s.t.data(), values.data(), values.size() * 4);  // (an empty span's data may be null)
    b.set = true;
    return {};
  }
  if (std::any_of(p_->params.begin(), p_->params.end(), [&](const param_binding& b) { return b.name == name; }))
    return invalid("binding " + std::string(name) + " is a parameter and takes one number, not an array");
  return invalid("binding " + std::string(name) + " is not declared by this graph");
}

status executable_graph::bind_param(std::string_view name, double value) {
  if (!std::isfinite(value)) return invalid("binding " + std::string(name) + " must be a finite number");
  for (auto& b : p_->params) {
    if (b.name != name) continue;
    for (const auto& u : b.uses) *u.field = value * u.mul + u.add;
    b.set = true;
    return {};
  }
  if (is_input_binding(name)) return invalid("binding " + std::string(name) + " fills an input and takes an array of numbers");
  return invalid("binding " + std::string(name) + " is not declared by this graph");
}

status executable_graph::impl::resolve_sessions(tensor_source& src) {
  const int count = src.session_count();
  for (int sid : session_slots) {
    slot& s = slots[std::size_t(sid)];
    const input_decl& in = graph.inputs[std::size_t(s.input_index)];
    const std::string at = "inputs[" + std::to_string(s.input_index) + "] (" + in.name + ")";
    if (count == 0) return invalid(at + ": reads session tensor " + in.session_name + " but no session was given");
    if (in.of >= count)
      return invalid(at + ": of " + std::to_string(in.of) + " is past the " + std::to_string(count) + " session(s) given");
    auto t = src.session_tensor(in.of, in.session_name);
    if (!t) return make_error(t.err().code, at + ": " + t.err().message);
    const bool type_ok = t->type() == s.desc.type || (s.any_half && is_half(t->type()));
    if (t->shape() != s.desc.shape || !type_ok)
      return invalid(at + ": session tensor " + in.session_name + " is " + std::string(dtype_name(t->type())) + " " +
                     shape_str(t->shape()) + " but the graph expects " + std::string(dtype_name(s.desc.type)) + " " +
                     shape_str(s.desc.shape));
    s.t = std::move(*t);
  }
  return {};
}

namespace {
/// CPU time of the calling thread: a profile on a shared machine counts only this thread's
/// work, not the time it waited for a core.
double thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e9 + double(t.tv_nsec);
}
}  // namespace

std::string_view executable_graph::step_op(std::size_t i) const { return p_->steps.at(i).def->name; }

void executable_graph::set_profile(std::vector<double>* ns) {
  p_->profile = ns;
  if (ns) ns->assign(p_->steps.size(), 0.0);
}

status executable_graph::run(tensor_source& source, run_control* control) {
  for (const auto& b : p_->inputs)
    if (!b.set) return invalid("binding " + b.name + " was not given");
  for (const auto& b : p_->params)
    if (!b.set) return invalid("binding " + b.name + " was not given");
  MPAKT_TRY(p_->resolve_sessions(source));
  if (control) {
    control->stopped = run_control::stop::none;
    control->steps_done = 0;
  }
  // Long kernels ask this between parts of their work (runtime/interrupt.hpp).
  const interrupt_scope in_run(control ? interrupt{[](const void* c) {
                                                     return static_cast<const run_control*>(c)->should_stop() !=
                                                            run_control::stop::none;
                                                   },
                                                   control}
                                       : interrupt{});
  // Whatever ends the run early puts back the rows it wrote in place.
  auto fail = [&](error e) -> status {
    p_->roll_back();
    return e;
  };
  auto stopped = [&](run_control::stop why, std::size_t done) -> status {
    control->stopped = why;
    control->steps_done = done;
    return fail(error{errc::timeout, std::string(why == run_control::stop::deadline ? "past its deadline" : "cancelled") +
                                         ", stopped after " + std::to_string(done) + " of " +
                                         std::to_string(p_->steps.size()) + " steps"});
  };

  // A kernel may have left part of its work undone when the run was told to stop while it
  // ran: its step does not count as done.
  auto interrupted = [&] { return control ? control->should_stop() : run_control::stop::none; };

  std::size_t done = 0;
  for (std::size_t si = 0; si < p_->steps.size(); ++si) {
    auto& st = p_->steps[si];
    if (control)
      if (auto why = control->should_stop(); why != run_control::stop::none) return stopped(why, done);
    const std::string_view op = st.def->name;
    if (st.group_size >= 2) {
      // One call for the group (plan_groups): each step's output, then the group kernel.
      const std::size_t n = std::size_t(st.group_size);
      std::array<kernel_call, max_group_steps> calls;
      for (std::size_t g = 0; g < n; ++g) {
        auto& m = p_->steps[si + g];
        if (m.has_binds && m.def->check) {
          auto ck = m.def->check(*m.params);
          if (!ck) return fail(make_error(ck.err().code, step_prefix(std::size_t(m.index), op) + ck.err().message));
        }
        if (auto r = p_->ready_output(m); !r) return fail(r.err());
        if (auto r = p_->host_step_begins(m); !r)
          return fail(make_error(r.err().code, step_prefix(std::size_t(m.index), op) + r.err().message));
        calls[g] = kernel_call{m.params.get(), m.in_ptrs, &p_->slots[std::size_t(m.out_slot)].t, &p_->ws,
                               m.immutable_inputs};
      }
      const double t0 = p_->profile ? thread_cpu_ns() : 0.0;
      const auto wall0 = std::chrono::steady_clock::now();
      auto s = st.group_fn(std::span<const kernel_call>(calls.data(), n));
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
      const double ns = p_->profile ? thread_cpu_ns() - t0 : 0.0;
      for (std::size_t g = 0; g < n; ++g) {
        auto& m = p_->steps[si + g];
        m.seconds_metric->inc(secs / double(n));
        m.steps_metric->inc();
        if (p_->profile) (*p_->profile)[si + g] = ns / double(n);
      }
      for (std::size_t g = 0; g < n; ++g) p_->host_step_ended(p_->steps[si + g]);
      if (!s) return fail(make_error(s.err().code, step_prefix(std::size_t(st.index), op) + s.err().message));
      if (auto why = interrupted(); why != run_control::stop::none) return stopped(why, done);
      for (std::size_t g = 0; g < n; ++g) {
        ++done;
        if (control && control->on_step) control->on_step(done);
      }
      si += n - 1;
      continue;
    }
    if (st.has_binds && st.def->check) {
      auto ck = st.def->check(*st.params);
      if (!ck) return fail(make_error(ck.err().code, step_prefix(std::size_t(st.index), op) + ck.err().message));
    }
    for (const auto& w : st.per_call_widen) {
      const tensor& from = p_->slots[std::size_t(w.from)].t;
      tensor& to = p_->slots[std::size_t(w.to)].t;
      if (p_->dev) {  // (a host copy: what the device holds newer comes back first)
        const std::array<const tensor*, 2> both{&from, &to};
        if (auto r = p_->dev->to_host(both); !r)
          return fail(make_error(r.err().code, step_prefix(std::size_t(st.index), op) + r.err().message));
        p_->dev->host_wrote(to);
      }
      widen_rows(from, to.f32());
    }
    if (auto r = p_->ready_output(st); !r) return fail(r.err());
    if (!st.on_device)
      if (auto r = p_->host_step_begins(st); !r)
        return fail(make_error(r.err().code, step_prefix(std::size_t(st.index), op) + r.err().message));
    slot& out = p_->slots[std::size_t(st.out_slot)];
    if (st.def->aliases_input >= 0 || st.def->writes_input >= 0) p_->remember_writes(st);
    kernel_call call{st.params.get(), st.in_ptrs, &out.t, &p_->ws, st.immutable_inputs,
                     st.on_device ? p_->dev.get() : nullptr};
    const double t0 = p_->profile ? thread_cpu_ns() : 0.0;
    const auto wall0 = std::chrono::steady_clock::now();
    auto s = st.fn(call);
    st.seconds_metric->inc(std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count());
    st.steps_metric->inc();
    if (p_->profile) (*p_->profile)[si] = thread_cpu_ns() - t0;
    if (!st.on_device) p_->host_step_ended(st);
    if (!s) return fail(make_error(s.err().code, step_prefix(std::size_t(st.index), op) + s.err().message));
    if (auto why = interrupted(); why != run_control::stop::none) return stopped(why, done);
    ++done;
    if (control && control->on_step) control->on_step(done);
  }
  // A run that finished only after its deadline (a long last kernel) is stopped all the same:
  // its caller has been told it timed out.
  if (control) {
    if (auto why = control->should_stop(); why != run_control::stop::none) return stopped(why, done);
    control->steps_done = done;
  }
  // The graph's outputs come back from the device now, so the caller reads them at once (any
  // other value comes back when value() or take() asks for it).
  if (p_->dev)
    for (const auto& name : p_->graph.outputs)
      if (auto r = p_->to_host(p_->slots[std::size_t(p_->by_name.at(name))].t); !r)
        return fail(make_error(r.err().code, "output " + name + ": " + r.err().message));
  p_->forget_writes();
  return {};
}

namespace {
/// Sets one numeric parameter of one planned step, checked like a binding; the first change of
/// a field records its built value in `overridden`.
template <class Step>
status set_step_param(Step& st, std::string_view param, double value, std::vector<std::pair<double*, double>>& overridden) {
  const std::string_view op = st.def->name;
  double* field = st.def->bindable ? st.def->bindable(*st.params, param) : nullptr;
  if (!field) return invalid("parameter " + std::string(param) + " of " + std::string(op) + " cannot be set per call");
  if (std::none_of(overridden.begin(), overridden.end(), [&](const auto& o) { return o.first == field; }))
    overridden.emplace_back(field, *field);
  *field = value;
  if (st.def->check) {
    auto ck = st.def->check(*st.params);
    if (!ck) return make_error(ck.err().code, step_prefix(std::size_t(st.index), op) + ck.err().message);
  }
  return {};
}
}  // namespace

status executable_graph::override_param(std::string_view op, std::string_view param, double value) {
  if (!std::isfinite(value)) return invalid(std::string(param) + " must be a finite number");
  for (auto& st : p_->steps)
    if (st.def->name == op) MPAKT_TRY(set_step_param(st, param, value, p_->overridden));
  return {};
}

void executable_graph::clear_overrides() {
  for (auto it = p_->overridden.rbegin(); it != p_->overridden.rend(); ++it) *it->first = it->second;
  p_->overridden.clear();
}

status executable_graph::override_step_param(std::size_t step, std::string_view op, std::string_view param, double value) {
  if (!std::isfinite(value)) return invalid(std::string(param) + " must be a finite number");
  // (steps are planned in graph order: found by their index without a walk over the graph,
  // which a batched pass of eight conversations does for every sampling setting of each)
  auto it = std::lower_bound(p_->steps.begin(), p_->steps.end(), step,
                             [](const planned_step& st, std::size_t i) { return std::size_t(st.index) < i; });
  if (it != p_->steps.end() && std::size_t(it->index) == step)
    return it->def->name == op ? set_step_param(*it, param, value, p_->overridden) : status{};
  return invalid("the graph has no step " + std::to_string(step));
}

std::string executable_graph::producer_op(std::string_view value) const {
  auto it = p_->by_name.find(std::string(value));
  if (it == p_->by_name.end()) return {};
  const slot& s = p_->slots[std::size_t(it->second)];
  return s.step >= 0 ? std::string(p_->steps[std::size_t(s.step)].def->name) : std::string();
}

bool executable_graph::has_op(std::string_view op) const {
  for (const auto& st : p_->steps)
    if (st.def->name == op) return true;
  return false;
}

std::vector<std::string> executable_graph::producer_inputs(std::string_view value) const {
  auto it = p_->by_name.find(std::string(value));
  if (it == p_->by_name.end()) return {};
  const slot& s = p_->slots[std::size_t(it->second)];
  if (s.step < 0) return {};
  return p_->graph.steps[std::size_t(p_->steps[std::size_t(s.step)].index)].in;
}

const tensor* executable_graph::value(std::string_view name) const {
  auto it = p_->by_name.find(std::string(name));
  if (it == p_->by_name.end()) return nullptr;
  const tensor& t = p_->slots[std::size_t(it->second)].t;
  // A value the device holds newer comes back first; if that fails (a broken device), there
  // is no value to give.
  if (!p_->to_host(t)) return nullptr;
  return &t;
}

const tensor_desc* executable_graph::desc(std::string_view name) const {
  auto it = p_->by_name.find(std::string(name));
  return it == p_->by_name.end() ? nullptr : &p_->slots[std::size_t(it->second)].desc;
}

result<tensor> executable_graph::take(std::string_view name) {
  auto it = p_->by_name.find(std::string(name));
  if (it == p_->by_name.end()) return invalid("\"" + std::string(name) + "\" is not a value of this graph");
  slot& s = p_->slots[std::size_t(it->second)];
  MPAKT_TRY(p_->to_host(s.t));
  const bool owns = s.kind == slot_kind::step && s.alias_of < 0 && s.view_of < 0;
  if (owns) {
    s.taken = true;
    // its bytes are the caller's now: the device's copy must never stand in for them
    if (p_->dev) p_->dev->host_wrote(s.t);
    return s.t;
  }
  // Inputs, in-place results and views share bytes with something else: hand out a copy.
  auto copy = tensor::make(s.t.type(), s.t.shape());
  if (!copy) return copy;
  if (s.t.nbytes() > 0) std::memcpy(copy->data(), s.t.data(), s.t.nbytes());
  return copy;
}

const input_decl* executable_graph::session_input_of(std::string_view name) const {
  auto it = p_->by_name.find(std::string(name));
  if (it == p_->by_name.end()) return nullptr;
  const slot& s = p_->slots[std::size_t(it->second)];
  if (s.kind != slot_kind::session) return nullptr;
  return &p_->graph.inputs[std::size_t(s.input_index)];
}

std::string executable_graph::aliased_input(std::string_view name) const {
  auto it = p_->by_name.find(std::string(name));
  if (it == p_->by_name.end()) return {};
  int sid = it->second;
  while (p_->slots[std::size_t(sid)].alias_of >= 0) sid = p_->slots[std::size_t(sid)].alias_of;
  const slot& s = p_->slots[std::size_t(sid)];
  return s.input_index >= 0 ? s.name : std::string();
}

}  // namespace mpakt
