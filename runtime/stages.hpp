#pragma once
/// Splitting a graph into stages for a model spread over several workers.
///
/// A model too large for any one worker is placed layer by layer over several (a tensor
/// never spans workers, a layer's tensors stay together). A graph reading its weights then
/// runs as a chain of stages, each a whole v3 graph run on one worker, the values that cross
/// from one stage to a later one travelling as f32 (exact: base64 out, dataB64 in).
///
/// Which worker runs a step:
///   1. the worker holding the weight it reads (a step reading weights on two workers is
///      refused, naming it);
///   2. else the worker of its most recently computed input (the data flows on);
///   3. else the worker a session tensor it reads was already placed on in this graph;
///   4. else the worker of the step before it, or (for the first) of the first step reading
///      a weight, or `home`.
/// A session tensor lives where the step reading it runs: if it lives elsewhere now, the
/// plan lists a move (done once; it stays there afterwards). Retained values stay on the
/// worker that computed them. Consecutive steps on one worker form one stage.
///
/// A session tensor allocated by a `zeros` step that nothing else in the graph reads (how a
/// session allocates its caches) is not computed anywhere yet: the plan lists it as deferred,
/// and it is created as zeros on the worker that first reads it (a cache then never has to fit,
/// or travel, on a worker whose layers do not use it).

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "runtime/status.hpp"
#include "runtime/tensor.hpp"

namespace mpakt {

struct stage_placement {
  /// `session_worker` of a deferred tensor (zeros not yet created anywhere).
  static constexpr int deferred = -2;
  /// The worker holding a model's weight; -1 when no worker holds it.
  std::function<int(const std::string& model, const std::string& weight)> weight_worker;
  /// The worker a session tensor lives on now; -1 when it does not exist yet, `deferred` when
  /// it is zeros still to be created where first read.
  std::function<int(const std::string& tensor)> session_worker;
  int home = 0;
};

/// A value crossing between stages (or an output), as f32.
struct stage_value {
  shape_t shape;
  std::vector<float> values;
};

struct stage {
  int worker = 0;
  std::vector<std::string> input_texts;  ///< the graph's own input objects this stage reads, as JSON
  std::vector<std::string> step_texts;   ///< its steps, as JSON, in order
  std::vector<std::size_t> step_index;   ///< each step's index in the whole graph (for messages)
  std::vector<std::string> receives;     ///< values computed by earlier stages
  std::vector<std::string> sends;        ///< values later stages read
  std::vector<std::string> outputs;      ///< the graph's outputs computed here
  std::vector<std::pair<std::string, std::string>> retain;  ///< session tensor -> value kept here
  /// The v3 graph of this stage, with `received` values as dataB64 inputs.
  std::string graph_json(const std::map<std::string, stage_value>& received) const;
  /// The stage as a compiled template: each received value a bound input of the given shape,
  /// bound under received_binding(value) per call.
  std::string template_json(const std::map<std::string, shape_t>& shapes) const;
  static std::string received_binding(const std::string& value);
  /// What this stage returns: its sends, then its outputs (unique).
  std::vector<std::string> returns() const;

 private:
  std::string text(const std::vector<std::string>& received_inputs) const;
};

struct stage_plan {
  std::vector<stage> stages;
  /// Session tensors to move before running: (tensor, destination worker).
  std::vector<std::pair<std::string, int>> moves;
  /// Deferred session tensors this graph reads, to create as zeros before running: (tensor,
  /// worker).
  std::vector<std::pair<std::string, int>> create;
  /// Session tensors this graph allocates as zeros without reading them: deferred.
  std::vector<std::pair<std::string, shape_t>> deferred;
  std::vector<std::string> outputs;  ///< the graph's outputs, in its order
  /// Every session tensor the graph reads, and the worker whose step reads it (where it must
  /// live when the graph runs); moves and create follow from it and where tensors are now.
  std::map<std::string, int> session_reads;
  /// The stage computing each step's value (an output a call asks for goes to that stage).
  std::map<std::string, std::size_t> value_stage;
};

/// Recomputes `plan.moves` and `plan.create` from `session_reads` and where tensors live now
/// (a compiled template's plan is reused for every call).
void session_work(stage_plan& plan, const std::function<int(const std::string&)>& session_worker);

/// Splits a graph (a compiled template with `allow_bind`: its stages keep their bound inputs
/// and $bind parameters; its `session`/`sessions` fields are ignored: the caller passes the
/// session with each stage). Where a step runs depends on the weights and the data flow only,
/// not on where session tensors live now, so a template's split holds for every session.
/// Errors name the step or entry at fault.
result<stage_plan> split_graph(const rapidjson::Value& graph, const stage_placement& where, bool allow_bind = false);

/// The binding names of a template, bound inputs first, then $bind parameters, in first-use
/// order (as a worker's compiled graph lists them).
std::vector<std::string> template_bindings(const rapidjson::Value& tmpl);

/// A tensor to place and the memory each worker has free, for `plan_spread`.
struct spread_tensor {
  std::string name;
  std::uint64_t bytes = 0;
};

/// Places a model over several workers when no one of them can hold it: tensors are grouped
/// by layer (the name up to its first all-digit component, "model.layers.7"; other tensors
/// are a group each) and the groups, in model order (embeddings, layers by number, the rest),
/// cut into consecutive runs, one per worker in the order given (most free first). It uses the
/// fewest workers that can hold the model (fewest stages) and, among cuts over that many, the
/// most even one (the least any worker must hold), leaving each room for session caches.
/// Returns the worker index of each tensor; refuses, naming the group, when it fits nowhere.
result<std::vector<int>> plan_spread(const std::vector<spread_tensor>& tensors, const std::vector<std::uint64_t>& free_bytes);

/// The layer group of a tensor name ("model.layers.7.mlp.up_proj.weight" -> "model.layers.7";
/// a name without an all-digit component is its own group).
std::string layer_group(const std::string& name);

/// The layer groups of these tensor names, each once, in model order (as plan_spread fills).
std::vector<std::string> layer_groups(const std::vector<std::string>& names);

}  // namespace mpakt
