#pragma once
/// The v3 graph IR and its JSON form.
///
/// `parse_graph` turns the JSON object of a graph ({inputs, steps, outputs, retain,
/// session, sessions}) into a graph_decl, checking structure only: JSON types, required
/// fields, one input form per input, data sizes against shapes. Names, ops, params and
/// shapes are checked by validation (runtime/validate.hpp), which needs the schema and the
/// tensors the inputs refer to. Every error names the field, e.g. "inputs[2].shape".

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <rapidjson/document.h>

#include "runtime/param.hpp"
#include "runtime/status.hpp"
#include "runtime/tensor.hpp"

namespace mpakt {

/// How an input gets its tensor.
enum class input_kind : std::uint8_t {
  data,       ///< {name, shape, data | dataB64}: values uploaded with the call
  weight,     ///< {name, model, weight}: a weight of a loaded model
  session,    ///< {name, session[, of][, shape]}: a tensor held by a session
  tensor_id,  ///< {name, tensorId}: a v2 tensor, or a load-response tensorId
  bound,      ///< {name, shape, bind}: a compiled-graph hole filled per call
};

struct input_decl {
  std::string name;
  input_kind kind = input_kind::data;
  shape_t shape;
  bool has_shape = false;
  std::vector<float> data;   ///< kind data
  std::string model;         ///< kind weight
  std::string weight;        ///< kind weight
  std::string session_name;  ///< kind session: the tensor's name in the session
  int of = -1;               ///< kind session: index into `sessions`; -1 = the primary
  std::string tensor_id;     ///< kind tensor_id
  std::string bind;          ///< kind bound: the binding name
};

/// A parameter hole: {"$bind": name, "mul": m, "add": a} means value * m + a.
struct bind_ref {
  std::string param;  ///< the op parameter it fills
  std::string name;   ///< the binding name
  double mul = 1;
  double add = 0;
};

struct step_decl {
  std::string op;
  std::vector<std::string> in;
  std::string out;
  param_map params;             ///< literal params
  std::vector<bind_ref> binds;  ///< params given as {"$bind"}
};

struct graph_decl {
  std::vector<input_decl> inputs;
  std::vector<step_decl> steps;
  std::vector<std::string> outputs;
  bool has_outputs = false;
  /// retain: session tensor name -> graph value name, in the order written.
  std::vector<std::pair<std::string, std::string>> retain;
  std::optional<std::string> session;   ///< primary session id
  std::vector<std::string> sessions;    ///< multi-session list (empty = just `session`)
};

struct parse_limits {
  std::size_t max_inputs = 65536;
  std::size_t max_steps = 1u << 20;
  std::size_t max_sessions = 64;
};

/// Parses the graph object. `allow_bind` is true for compiled templates (bound inputs and
/// $bind params); inline graphs refuse them.
result<graph_decl> parse_graph(const rapidjson::Value& graph, bool allow_bind, const parse_limits& limits = {});
/// Parses text holding the graph object itself.
result<graph_decl> parse_graph_text(std::string_view json, bool allow_bind, const parse_limits& limits = {});

/// Converts a JSON value into a param_value (any JSON type).
param_value to_param_value(const rapidjson::Value& v);
/// A params object in JSON text (tests, tools).
result<param_map> parse_params_text(std::string_view json);

/// Base64 (RFC 4648, padding optional) of little-endian f32 values.
std::string encode_f32_base64(std::span<const float> values);
result<std::vector<float>> decode_f32_base64(std::string_view text);

}  // namespace mpakt
