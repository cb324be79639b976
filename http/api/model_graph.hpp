#pragma once
/// POST /api/v3/models/:modelId/graph — the architecture builder as a service: the graph of one
/// pass (prefill, decode step, verify pass) or the graph allocating a session's state, built
/// from the model's own config.json by the same builder chat uses (runtime/models/arch.hpp).
/// Clients (the Python client's Model.graph) get exact graphs for every family without a
/// second builder to keep in step. Refused, naming the config field, for a model the builder
/// cannot map.

#include <string>
#include <string_view>

#include "runtime/status.hpp"

namespace mpakt::http {

/// Builds the reply body ({"family", "graph"}) for a request body and a model's config.json.
result<std::string> build_model_graph(std::string_view body, std::string_view config_json, const std::string& model_id);

}  // namespace mpakt::http
