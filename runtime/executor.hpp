#pragma once
/// Validated, planned graphs and their execution.
///
/// `executable_graph::build` validates a parsed graph once — every name, op, input count,
/// parameter (name, JSON type, value), binding and shape — resolving weights and v2
/// tensors through a tensor_source, and plans it: one slot per value, every intermediate
/// preallocated, one kernel chosen per step. `run` then executes the steps in order with
/// no parsing, no name lookups and no allocation in the steady state, so a compiled
/// decode step can run thousands of times per second.
///
/// Lifecycle: built once (inline graphs: per request; compiled graphs: per template and
/// worker), then bound and run any number of times by one thread at a time. Not
/// thread-safe; the owning worker actor serialises calls.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backends/backend.hpp"
#include "runtime/graph.hpp"
#include "runtime/op.hpp"

namespace mpakt {

/// Where non-uploaded inputs come from: a worker's tensor store, a test, the CLI.
class tensor_source {
 public:
  virtual ~tensor_source() = default;
  /// A weight of a loaded model ({model, weight}); errc::not_found naming it when absent.
  virtual result<tensor> weight(std::string_view model, std::string_view name) = 0;
  /// A v2 tensor or a load-response tensorId ({tensorId}).
  virtual result<tensor> by_id(std::string_view id) = 0;
  /// A session tensor; `of` indexes the graph's sessions (-1 = the primary session).
  virtual result<tensor> session_tensor(int of, std::string_view name) = 0;
  /// Number of sessions the graph may address (primary included); 0 = no session.
  virtual int session_count() const = 0;
};

struct build_options {
  /// Largest tensor any one value may need (resident bytes); hostile shapes are refused.
  std::int64_t max_tensor_bytes = std::int64_t(8) << 30;
  /// A compiled template: session inputs carry their shape and are resolved per call.
  bool compiled = false;
  /// Features the executing worker implements; a step needing another is refused,
  /// naming it. Empty = the backend's own list.
  std::vector<std::string> features;
  /// Ops the executing worker does not offer (an older volunteer); a step using one is
  /// refused, naming it.
  std::vector<std::string> missing_ops;
  /// A graph the server built itself (chat's cache allocation): its steps may name the
  /// server-only parameters of op_def::server_params. Never set for a client's graph.
  bool server_params = false;
};

/// How a run may be stopped from outside: a deadline, and a flag any thread may set (the
/// worker's front sets it when the caller went away). `executable_graph::run` checks both
/// before each step and once after the last; a stopped run puts back every row it wrote in
/// place, so it leaves the session exactly as it found it.
///
/// Thread-safety: `cancel()` and `cancelled()` from any thread; the rest is written by the
/// thread running the graph and read by it afterwards.
struct run_control {
  using clock = std::chrono::steady_clock;
  clock::time_point deadline = clock::time_point::max();

  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  /// Whether the run should stop now (cancelled, or past the deadline), and why.
  enum class stop { none, deadline, cancelled };
  stop should_stop() const {
    if (cancelled()) return stop::cancelled;
    return clock::now() >= deadline ? stop::deadline : stop::none;
  }

  /// Called on the running thread after each step with the number of steps done (progress
  /// reports); may call cancel(). Empty = none.
  std::function<void(std::size_t)> on_step;

  /// Set by run(): why it stopped (none when it ran to its end or failed on its own), and how
  /// many steps had run by then.
  stop stopped = stop::none;
  std::size_t steps_done = 0;

 private:
  std::atomic<bool> cancelled_{false};
};

/// The ops and features a graph's steps use (names as in ops.json), without building it: what
/// a worker must offer to be given the graph.
std::vector<std::string> graph_needs(const graph_decl& graph);

class executable_graph {
 public:
  /// Validates and plans. Errors name the step index, op and the input or parameter at
  /// fault, or the input/output entry.
  static result<std::unique_ptr<executable_graph>> build(graph_decl graph, tensor_source& source, backend& be,
                                                         const build_options& opts = {});

  ~executable_graph();
  executable_graph(const executable_graph&) = delete;
  executable_graph& operator=(const executable_graph&) = delete;

  /// Every binding name (bound inputs first, then $bind params), in first-use order.
  const std::vector<std::string>& bindings() const { return binding_names_; }
  bool is_input_binding(std::string_view name) const;
  /// Shape of a bound input (for messages and clients).
  const shape_t* bound_shape(std::string_view name) const;
  /// Fills a bound input; the element count must match its fixed shape.
  status bind_input(std::string_view name, std::span<const float> values);
  /// Sets a $bind parameter (value * mul + add is applied per use).
  status bind_param(std::string_view name, double value);
  /// Sets a numeric parameter of every step of `op` (e.g. the sample step's temperature or
  /// step counter for server-side decoding), literal or bound; checked like a binding.
  /// Errors name the parameter; false-free no-op when the graph has no such step.
  status override_param(std::string_view op, std::string_view param, double value);
  /// The same for one step, by its index in the graph, when that step is an `op` step
  /// (a no-op otherwise): a batched pass sets each conversation's sample step on its own.
  status override_step_param(std::size_t step, std::string_view op, std::string_view param, double value);
  /// Puts back every parameter the two above changed, so a compiled template's next call (a
  /// generation with other settings) starts from its own values, not the last caller's.
  void clear_overrides();
  /// The op of the step producing `value` ("" for an input or unknown name).
  std::string producer_op(std::string_view value) const;
  /// Whether any step runs `op`.
  bool has_op(std::string_view op) const;
  /// The inputs of the step producing `value` (empty for an input or unknown name).
  std::vector<std::string> producer_inputs(std::string_view value) const;
  /// Names of the steps' op features in use (for routing), sorted, unique.
  const std::vector<std::string>& features_used() const { return features_; }
  std::size_t step_count() const;
  /// How many steps run together with a neighbour as one kernel call (backend::group_kernel).
  std::size_t grouped_steps() const;
  /// The op of planned step i (0 ≤ i < step_count(), in run order).
  std::string_view step_op(std::size_t i) const;
  /// Benchmarks: when set, run() writes each step's kernel time — CPU time of the calling
  /// thread, nanoseconds, in run order — into *ns (resized to step_count()); nullptr turns it
  /// off. Costs nothing when off.
  void set_profile(std::vector<double>* ns);

  /// Runs every step. Session inputs are resolved through `source` on each call (the
  /// session may change between calls of a compiled graph); their shapes are checked.
  ///
  /// A run applies all or nothing to the tensors it writes in place (session tensors and a
  /// template's data inputs, through cache_write or short_conv): before each such write the
  /// rows it overwrites are kept, and when the run fails — a kernel's error, or `control`
  /// stopping it (errc::timeout, with control->stopped saying why) — they are put back, in
  /// reverse order, before it returns. Values computed so far stay readable but must not be
  /// used.
  status run(tensor_source& source, run_control* control = nullptr);

  /// A value after run() (inputs included), or nullptr for an unknown name.
  const tensor* value(std::string_view name) const;
  const tensor_desc* desc(std::string_view name) const;
  /// Hands a value's tensor to the caller (retain): later runs write a fresh buffer, so
  /// the handed-out tensor is never overwritten.
  result<tensor> take(std::string_view name);
  /// Whether the value is an input read from a session (so retaining it under its own
  /// name is a no-op) and, if so, which session tensor.
  const input_decl* session_input_of(std::string_view name) const;
  /// Whether the value is (or aliases, through in-place ops) the given input's tensor.
  std::string aliased_input(std::string_view name) const;

 private:
  struct impl;
  explicit executable_graph(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
  std::vector<std::string> binding_names_;
  std::vector<std::string> features_;
};

}  // namespace mpakt
