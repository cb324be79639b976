#pragma once
/// Llama-family config.json → v3 graphs (prefill and decode step).
///
/// The graphs are built as v3 JSON, exactly what a client would send, so they exercise the
/// same parser and validator as any request. Later work generalises this to every
/// architecture of the spec; configs this builder cannot map are refused naming the field.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.hpp"

namespace mpakt::models {

struct llama_config {
  int hidden = 0;
  int intermediate = 0;
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  double rms_eps = 1e-6;
  double rope_theta = 10000;
  bool tied_embeddings = false;
  std::string rope_scaling_json;  ///< config's rope_scaling object as JSON, or empty
};

/// Parses config.json. Refuses a model_type or a setting it cannot map (attention or MLP
/// biases, a hidden_act other than silu), naming the field.
result<llama_config> parse_llama_config(std::string_view config_json);

struct llama_graph_options {
  std::string model_id;        ///< the {model} of every weight input
  int tokens = 1;              ///< T rows fed in this pass
  /// Use KV caches held by the session as "k<L>"/"v<L>" of [cache_rows, kvHeads*headDim].
  bool use_cache = false;
  int cache_rows = 0;
  /// Compiled template: ids are a bound input "ids" and positions a {"$bind": "pos"}.
  bool compiled = false;
  int pos = 0;                 ///< first position (when not compiled)
  std::vector<int> ids;        ///< token ids (when not compiled)
  /// Output: "logits" [T, vocab] or "tok" (argmax of every row).
  bool argmax = false;
  /// Output "tok" from a sample step instead (temperature etc. set per call by generate).
  bool sample = false;
  /// With use_cache: keep the fed token ids in the session's "hist" [cache_rows, 1] and let
  /// the sample step penalise repeats over positions 0..pos of each row (its
  /// repetitionPenalty; 1 keeps the history without penalising). 0 = no history.
  double repetition_penalty = 0;
};

/// The v3 graph object (JSON text) for one pass.
std::string llama_graph(const llama_config& c, const llama_graph_options& o);
/// A graph allocating the session's KV caches with zeros and retaining them, and the token
/// history "hist" [cache_rows, 1] when `history` (see repetition_penalty).
std::string llama_cache_graph(const llama_config& c, int cache_rows, bool history = false);

}  // namespace mpakt::models
