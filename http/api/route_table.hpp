#pragma once

#include <vector>

#include "http/router.hpp"
/// Every endpoint, as docs/api-reference.md lists them (checklist EP-01 … EP-23): one row
/// per route, X(method, pattern, auth level, handler). http/api/routes.cpp expands it into
/// the route table with its handlers; test/fuzz/fuzz_http_request.cpp into the patterns
/// alone, so the router is fuzzed with the API's own table. Adding an endpoint is one row
/// here and its handler in routes.cpp.
///
/// A path that no pattern matches is 404 naming it; a path that matches with another method
/// is 400 naming the method, the path and the methods it takes (decisions.md). /api/v1/… is
/// /api/v2/… (v1 is an alias of v2); /v1/… (no /api) is the OpenAI-compatible API, whose
/// errors all take OpenAI's shape. GET and HEAD of other paths outside /api/ and /v1/ serve
/// the chat page's files.

// clang-format off
#define MPAKT_API_ROUTES(X)                                                          \
  /* no key (EP-01, EP-18, EP-19; Z-52) */                                           \
  X("GET", "/api/versions", none, on_versions)                                       \
  X("GET", "/api/ops", none, on_ops)                                                 \
  X("GET", "/llms.txt", none, on_llms_txt)                                           \
  X("HEAD", "/llms.txt", none, on_llms_txt)                                          \
  /* operators: Prometheus metrics (outside /api/, where scrapers look) */           \
  X("GET", "/metrics", metrics, on_metrics)                                          \
  /* accounts and keys (Z-01) */                                                     \
  X("POST", "/api/accounts", none, on_sign_up)                                       \
  X("POST", "/api/accounts/login", none, on_login)                                   \
  X("POST", "/api/keys", login, on_make_key)                                         \
  X("GET", "/api/keys", login, on_list_keys)                                         \
  X("DELETE", "/api/keys/:keyId", login, on_revoke_key)                              \
  X("POST", "/api/admin/accounts/:name/approve", operator_key, on_approve)           \
  X("POST", "/api/v3/admin/workers/:workerId/check", operator_key, on_check_worker)   \
  X("GET", "/api/v3/admin/actors", operator_key, on_admin_actors)                    \
  X("GET", "/api/v3/admin/actors/stream", operator_key, on_admin_actors_stream)      \
  /* v3 (EP-02 … EP-17) */                                                           \
  X("GET", "/api/v3/status", key, on_status)                                         \
  X("GET", "/api/v3/models/inspect", key, on_inspect)                                \
  X("POST", "/api/v3/models", key, on_load)                                          \
  X("GET", "/api/v3/models", key, on_list_models)                                    \
  X("DELETE", "/api/v3/models/:modelId", key, on_delete_model)                       \
  X("POST", "/api/v3/models/:modelId/graph", key, on_model_graph)                    \
  X("POST", "/api/v3/sessions", key, on_open_session)                                \
  X("GET", "/api/v3/sessions/:sessionId", key, on_get_session)                       \
  X("DELETE", "/api/v3/sessions/:sessionId", key, on_close_session)                  \
  X("POST", "/api/v3/sessions/:sessionId/checkpoint", key, on_checkpoint)            \
  X("POST", "/api/v3/sessions/:sessionId/restore", key, on_restore)                  \
  X("POST", "/api/v3/graph", key, on_graph_v3)                                       \
  X("POST", "/api/v3/graphs", key, on_compile)                                       \
  X("GET", "/api/v3/graphs", key, on_list_graphs)                                    \
  X("DELETE", "/api/v3/graphs/:graphId", key, on_delete_graph)                       \
  X("POST", "/api/v3/chat", key, on_chat)                                            \
  X("POST", "/api/v3/generate", key, on_generate)                                    \
  X("GET", "/api/v3/random", key, on_random)                                         \
  /* v2 (EP-20, VER-20); v1 is its alias */                                          \
  X("POST", "/api/v2/tensors", key, on_upload_tensor)                                \
  X("DELETE", "/api/v2/tensors/:tensorId", key, on_delete_tensor)                    \
  X("POST", "/api/v2/graph", key, on_graph_v2)                                      \
  /* the OpenAI-compatible API (its key as Authorization: Bearer or x-api-key) */    \
  X("GET", "/v1/models", openai, on_openai_models)                                   \
  X("GET", "/v1/models/:model", openai, on_openai_model)                             \
  X("POST", "/v1/chat/completions", openai, on_openai_chat)                          \
  X("POST", "/v1/completions", openai, on_openai_completion)
// clang-format on

namespace mpakt::http {

/// The router over the table's (method, pattern) pairs, in the table's order: a match's index
/// is the row's. One for the server, the router's tests and its fuzzer alike.
inline const router& api_router() {
  static const router r([] {
    std::vector<route_key> keys;
#define MPAKT_ROUTE(method, pattern, level, handler) keys.push_back({method, pattern});
    MPAKT_API_ROUTES(MPAKT_ROUTE)
#undef MPAKT_ROUTE
    return keys;
  }());
  return r;
}

}  // namespace mpakt::http
