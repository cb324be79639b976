#pragma once
/// Batching: one pass of a single-session template for several sessions at once.
///
/// Conversations decoding at the same time on one model should read the weights once per
/// pass, not once per conversation (spec: 'Several sessions in one graph'). `batch_graph`
/// rewrites a compiled single-session template (a decode step) into a multi-session graph
/// for N sessions:
///  - steps that treat rows independently and read only shared operands besides their rows
///    (matmul/linear/embedding against a weight, norms, element-wise ops, argmax) run once
///    over the sessions' rows stacked along axis 0 — these are where the weights are read;
///  - every other step (rope, cache_write, attention, sample, anything with a `$bind`
///    parameter or an op not known to be row-wise) runs once per session on that session's
///    rows, with its session inputs read through `of` and its bindings renamed per session;
///  - slice and concat steps move values between the two forms where needed.
/// Because row-wise kernels compute each row the same way however many rows there are,
/// each session's results are exactly those of running the template alone (tested).
///
/// Anything the rewrite cannot do safely (a template that already lists sessions, retains
/// values, or uses names containing '@') is an error; callers then run sessions one by one.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/executor.hpp"
#include "runtime/graph.hpp"

namespace mpakt {

struct batched_graph {
  graph_decl decl;  ///< a compiled template listing `sessions` sessions (set per call)
  int sessions = 0;
  /// Per session: indices of decl.steps that run for that session alone (its sample step
  /// among them, so per-conversation sampling settings can be set on exactly those).
  std::vector<std::vector<std::size_t>> session_steps;
  /// Per session: the value holding each of the template's outputs for that session.
  std::vector<std::vector<std::string>> session_outputs;
  std::size_t shared_steps = 0;  ///< steps run once for every session together
};

/// The name a template value or binding takes for session `b` in a batched graph.
std::string session_value_name(std::string_view name, int b);

/// Rewrites `tmpl` (the declaration a compiled template was built from) for `sessions`
/// sessions; `built` is that template's executable graph, which supplies value shapes.
result<batched_graph> batch_graph(const graph_decl& tmpl, const executable_graph& built, int sessions);

}  // namespace mpakt
