#pragma once
/// Decoders of the bodies that can be large — graph calls, templates to compile, v2 tensor
/// uploads — into the typed requests the coordinator takes (actors/requests.hpp). They run
/// at the edge, on the request's own thread when the body is large (http/api/routes.cpp), and
/// check everything that needs no state: fields and their types, the graph's structure and
/// data sizes, sessions lists, what API v2 allows. Every refusal is errc::invalid naming the
/// field, as the coordinator named it before.
///
/// Thread-safety: plain functions, no shared state.

#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "actors/requests.hpp"
#include "runtime/status.hpp"

namespace mpakt::http {

/// tensorId -> (model id, weight name): tensorIds of a loaded model's weights, which a graph
/// then reads as {model, weight} (the coordinator's answer to `resolve`).
using weight_aliases = std::map<std::string, std::pair<std::string, std::string>>;

/// POST /api/v3/graph (`version` 3) and /api/v2/graph (2).
result<graph_call> decode_graph_call(std::string_view body, std::int32_t version, const weight_aliases& aliases = {});
/// POST /api/v3/graphs.
result<compile_call> decode_compile_call(std::string_view body, const weight_aliases& aliases = {});
/// POST /api/v2/tensors: {shape, data | dataB64}, read as a graph input is.
result<tensor_call> decode_tensor_upload(std::string_view body);
/// POST /api/v3/models: {source, include, exclude, names, quantize, token}.
result<load_call> decode_load_call(std::string_view body);
/// POST /api/v3/generate: {graphId, sessionId, ids, startPos, maxNewTokens, stopIds,
/// temperature, topK, topP, seed, stream, workerLoop, speculative}.
result<generate_call> decode_generate_call(std::string_view body);
/// POST /api/v3/sessions: {modelId, label}; an empty body is an empty request.
result<session_call> decode_session_call(std::string_view body);

/// The tensorIds a decoded graph reads (the coordinator resolves them).
std::vector<std::string> tensor_ids(const graph_refs& refs);

}  // namespace mpakt::http
