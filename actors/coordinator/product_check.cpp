#include "actors/coordinator/product_check.hpp"

#include <rapidjson/document.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>

#include "actors/json_text.hpp"
#include "runtime/graph.hpp"
#include "runtime/json.hpp"
#include "runtime/outputs.hpp"

namespace mpakt {

namespace {

/// The index argmax picks in a row: its first maximum, or its first NaN.
std::size_t row_argmax(const float* row, std::size_t n) {
  std::size_t best = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isnan(row[i])) return i;
    if (row[i] > row[best]) best = i;
  }
  return best;
}

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string str_of(const rapidjson::Value& o, const char* key) {
  if (!o.IsObject()) return {};
  auto it = o.FindMember(key);
  return it != o.MemberEnd() && it->value.IsString() ? std::string(it->value.GetString(), it->value.GetStringLength())
                                                     : std::string();
}

/// The names in a step's "in" array (empty when it has none or they are not all names).
std::vector<std::string> step_inputs(const rapidjson::Value& step) {
  std::vector<std::string> out;
  auto in = step.FindMember("in");
  if (in == step.MemberEnd() || !in->value.IsArray()) return out;
  for (const auto& v : in->value.GetArray()) {
    if (!v.IsString()) return {};
    out.emplace_back(v.GetString(), v.GetStringLength());
  }
  return out;
}

}  // namespace

bool is_head_weight(const std::string& name) {
  // (the output head, or the token embedding that is the head when the two are tied)
  return ends_with(name, "lm_head.weight") || name == "output.weight" || ends_with(name, "embed_out.weight") ||
         ends_with(name, "embed_tokens.weight") || ends_with(name, "wte.weight") || ends_with(name, "word_embeddings.weight") ||
         name == "tok_embeddings.weight";
}

std::vector<product_probe> products_to_probe(const std::string& graph_json,
                                             const std::function<bool(const std::string&, const std::string&)>& holds) {
  std::vector<product_probe> out;
  auto doc = parse_json_object(graph_json, "graph");
  if (!doc) return out;
  const auto& g = *doc;
  auto inputs = g.FindMember("inputs");
  auto steps = g.FindMember("steps");
  if (inputs == g.MemberEnd() || !inputs->value.IsArray() || steps == g.MemberEnd() || !steps->value.IsArray()) return out;
  std::map<std::string, std::pair<std::string, std::string>> weights;  // input name -> (model, weight)
  for (const auto& in : inputs->value.GetArray()) {
    const std::string name = str_of(in, "name"), model = str_of(in, "model"), weight = str_of(in, "weight");
    if (!name.empty() && !model.empty() && !weight.empty()) weights[name] = {model, weight};
  }
  const auto declared = declared_outputs(graph_json);
  for (const auto& step : steps->value.GetArray()) {
    if (!step.IsObject() || str_of(step, "op") != "matmul") continue;
    const auto in = step_inputs(step);
    if (in.size() != 2 || weights.count(in[0]) || !weights.count(in[1])) continue;
    const auto& [model, weight] = weights.at(in[1]);
    if (!holds(model, weight)) continue;
    product_probe p;
    p.x = in[0];
    p.out = str_of(step, "out");
    if (p.out.empty()) continue;
    p.model = model;
    p.weight = weight;
    auto params = step.FindMember("params");
    p.params_json = params != step.MemberEnd() && params->value.IsObject() ? text_of(params->value) : "{}";
    out.push_back(std::move(p));
  }
  // A declared output an argmax step drew from a probed product is checked with it.
  for (const auto& step : steps->value.GetArray()) {
    if (!step.IsObject() || str_of(step, "op") != "argmax") continue;
    const auto in = step_inputs(step);
    const std::string o = str_of(step, "out");
    if (in.size() != 1 || std::find(declared.begin(), declared.end(), o) == declared.end()) continue;
    for (auto& p : out)
      if (p.out == in[0]) {
        p.argmax_out = o;
        auto params = step.FindMember("params");
        p.argmax_params = params != step.MemberEnd() && params->value.IsObject() ? text_of(params->value) : "{}";
      }
  }
  return out;
}

std::vector<std::string> declared_outputs(const std::string& graph_json) {
  std::vector<std::string> out;
  auto doc = parse_json_object(graph_json, "graph");
  if (!doc) return out;
  auto o = doc->FindMember("outputs");
  if (o == doc->MemberEnd() || !o->value.IsArray()) return out;
  for (const auto& v : o->value.GetArray())
    if (v.IsString()) out.emplace_back(v.GetString(), v.GetStringLength());
  return out;
}

result<std::string> with_outputs(const std::string& graph_json, const std::vector<std::string>& names) {
  auto doc = parse_json_object(graph_json, "graph");
  if (!doc) return std::move(doc).err();
  auto& d = *doc;
  auto& a = d.GetAllocator();
  auto o = d.FindMember("outputs");
  if (o == d.MemberEnd()) {
    d.AddMember("outputs", rapidjson::Value(rapidjson::kArrayType), a);
    o = d.FindMember("outputs");
  }
  if (!o->value.IsArray()) return invalid("the graph's outputs are not a list");
  for (const auto& n : names) {
    bool there = false;
    for (const auto& v : o->value.GetArray()) there = there || (v.IsString() && n == v.GetString());
    if (!there) o->value.PushBack(rapidjson::Value(n.c_str(), rapidjson::SizeType(n.size()), a), a);
  }
  return text_of(d);
}

std::string without_outputs(rapidjson::Document& answer, const std::vector<std::string>& names) {
  for (const auto& n : names) answer.RemoveMember(rapidjson::StringRef(n.c_str(), rapidjson::SizeType(n.size())));
  return text_of(answer);
}

result<std::string> without_outputs(const std::string& outputs_json, const std::vector<std::string>& names) {
  auto doc = parse_json_object(outputs_json, "an answer");
  if (!doc) return std::move(doc).err();
  return without_outputs(*doc, names);
}

bool output_values_of(const rapidjson::Value& o, std::vector<std::int64_t>& shape, std::vector<float>& values) {
  if (!o.IsObject()) return false;
  auto sh = o.FindMember("shape");
  if (sh == o.MemberEnd() || !sh->value.IsArray()) return false;
  for (const auto& d : sh->value.GetArray()) shape.push_back(d.IsInt64() ? d.GetInt64() : -1);
  if (auto b = o.FindMember("dataB64"); b != o.MemberEnd() && b->value.IsString()) {
    auto decoded = decode_f32_base64(std::string_view(b->value.GetString(), b->value.GetStringLength()));
    if (!decoded) return false;
    values = std::move(*decoded);
    return true;
  }
  auto data = o.FindMember("data");
  if (data == o.MemberEnd() || !data->value.IsArray()) return false;
  for (const auto& v : data->value.GetArray()) values.push_back(v.IsNumber() ? float(v.GetDouble()) : std::nanf(""));
  return true;
}

bool output_of(const rapidjson::Value& answer, const std::string& name, std::vector<std::int64_t>& shape,
               std::vector<float>& values) {
  if (!answer.IsObject()) return false;
  auto it = answer.FindMember(rapidjson::StringRef(name.c_str(), rapidjson::SizeType(name.size())));
  if (it == answer.MemberEnd() || !output_values_of(it->value, shape, values)) return false;
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) return false;
    n *= d;
  }
  return std::int64_t(values.size()) == n;
}

bool output_of(const std::string& outputs_json, const std::string& name, std::vector<std::int64_t>& shape,
               std::vector<float>& values) {
  auto doc = parse_json_object(outputs_json, "an answer");
  return doc && output_of(*doc, name, shape, values);
}

std::string probe_graph(const product_probe& p, const std::vector<std::int64_t>& shape, std::span<const float> x) {
  // (base64: the activation's bits exactly, whatever their text would have been)
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "inputs");
    w.StartArray();
    w.StartObject();
    kv(w, "name", "x");
    key(w, "shape");
    w.StartArray();
    for (auto d : shape) w.Int64(d);
    w.EndArray();
    kv(w, "dataB64", encode_f32_base64(x));
    w.EndObject();
    w.StartObject();
    kv(w, "name", "w");
    kv(w, "model", p.model);
    kv(w, "weight", p.weight);
    w.EndObject();
    w.EndArray();
    key(w, "steps");
    w.StartArray();
    w.StartObject();
    kv(w, "op", "matmul");
    key(w, "in");
    strings(w, {"x", "w"});
    kv(w, "out", "y");
    key(w, "params");
    w.RawValue(p.params_json.c_str(), p.params_json.size(), rapidjson::kObjectType);
    w.EndObject();
    w.EndArray();
    key(w, "outputs");
    strings(w, {"y"});
    w.EndObject();
  });
}

std::string probe_difference(const product_probe& p, const rapidjson::Value& their_answer, std::span<const float> mine,
                             const std::vector<std::int64_t>& shape, float tolerance,
                             const std::function<std::string(const std::string&, std::span<const float>, std::span<const float>,
                                                             float)>& first_difference) {
  std::vector<std::int64_t> their_shape;
  std::vector<float> theirs;
  if (!output_of(their_answer, p.out, their_shape, theirs)) return "the product " + p.out + " it was asked for is missing";
  if (their_shape != shape || theirs.size() != mine.size()) return "the product " + p.out + " has another shape";
  if (auto d = first_difference(p.out, theirs, mine, tolerance); !d.empty()) return "product " + d;
  if (p.argmax_out.empty() || shape.empty() || shape.back() <= 0) return {};
  std::vector<std::int64_t> token_shape;
  std::vector<float> tokens;
  if (!output_of(their_answer, p.argmax_out, token_shape, tokens)) return "output " + p.argmax_out + " is missing";
  const std::size_t n = std::size_t(shape.back()), rows = mine.size() / n;
  if (tokens.size() != rows) return "output " + p.argmax_out + " has another shape";
  for (std::size_t r = 0; r < rows; ++r) {
    const float* row = mine.data() + r * n;
    const std::size_t best = row_argmax(row, n);
    const float tok = tokens[r];
    const bool in_range = tok >= 0 && tok < float(n) && std::floor(tok) == tok;
    bool fine = in_range && std::size_t(tok) == best;
    if (!fine && in_range && tolerance > 0) {
      float scale = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (std::isfinite(row[i])) scale = std::max(scale, std::fabs(row[i]));
      fine = row[std::size_t(tok)] >= row[best] - (tolerance * scale + 1e-5f);
    }
    if (!fine)
      return "output " + p.argmax_out + "[" + std::to_string(r) + "] is " + std::to_string(tok) + " where the verifier's product " +
             "has its maximum at " + std::to_string(best);
  }
  return {};
}

std::optional<std::string> verified_answer(const product_probe& p, const std::vector<std::string>& asked,
                                           std::span<const float> mine, const std::vector<std::int64_t>& shape, bool base64) {
  if (shape.empty() || shape.back() <= 0) return std::nullopt;
  for (const auto& n : asked)
    if (n != p.out && (p.argmax_out.empty() || n != p.argmax_out)) return std::nullopt;
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  for (const auto& n : asked) {
    if (n == p.out) {
      write_output(w, n, shape_t(shape.begin(), shape.end()), mine, base64);
      continue;
    }
    const std::size_t cols = std::size_t(shape.back()), rows = mine.size() / cols;
    std::vector<float> tokens(rows);
    for (std::size_t r = 0; r < rows; ++r) tokens[r] = float(row_argmax(mine.data() + r * cols, cols));
    shape_t token_shape(shape.begin(), shape.end() - 1);  // (argmax drops the last axis; a vector gives [1])
    if (token_shape.empty()) token_shape = {1};
    write_output(w, n, token_shape, tokens, base64);
  }
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace mpakt
