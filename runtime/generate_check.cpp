#include "runtime/generate_check.hpp"

#include <algorithm>

namespace mpakt {

namespace {

const step_decl* producer_of(const graph_decl& d, const std::string& value) {
  for (auto it = d.steps.rbegin(); it != d.steps.rend(); ++it)
    if (it->out == value) return &*it;
  return nullptr;
}

std::string token_producer(const graph_decl& d, const std::string& value, int depth) {
  const step_decl* s = producer_of(d, value);
  const std::string op = s ? s->op : "";
  if (op != "concat" || depth > 256) return op;
  std::string found;
  for (const auto& in : s->in) {
    const std::string part = token_producer(d, in, depth + 1);
    if (part != "argmax" && part != "sample") return part.empty() ? "concat of an input" : part;
    found = found.empty() || found == part ? part : "a mix of argmax and sample";
  }
  return found;
}

/// The sample steps whose ids make up `value`, looking through concat (in row order).
void sample_steps(const graph_decl& d, const std::string& value, int depth, std::vector<const step_decl*>& out) {
  const step_decl* s = producer_of(d, value);
  if (!s || depth > 256) return;
  if (s->op == "sample") out.push_back(s);
  if (s->op == "concat")
    for (const auto& in : s->in) sample_steps(d, in, depth + 1, out);
}

/// A verify graph that draws its rows with one sample step each must give each row the
/// counter a plain step at that row's position would use (step + row): generate fills an
/// unbound `step` with the same value in every sample step, so the rows would all draw with
/// one counter and seeded output would silently differ from plain decoding.
status check_row_counters(const graph_decl& d, const std::vector<std::string>& b) {
  std::vector<const step_decl*> samples;
  sample_steps(d, d.outputs.front(), 0, samples);
  if (samples.size() < 2) return ok_status();  // one multi-row step draws row r with step + r
  std::vector<std::pair<std::string, std::pair<double, double>>> seen;
  for (const step_decl* s : samples) {
    const auto bind = std::find_if(s->binds.begin(), s->binds.end(), [](const bind_ref& r) { return r.param == "step"; });
    const bool bound = bind != s->binds.end() && std::find(b.begin(), b.end(), bind->name) != b.end();
    if (!bound)
      return invalid("a verify graph with one sample step per row must bind each one's step to the row's position, e.g. "
                     "{\"$bind\": \"step\", \"add\": r} for row r; sample step " + s->out +
                     " does not, so every row would draw with the same counter and seeded output would differ from plain decoding");
    const std::pair<std::string, std::pair<double, double>> key{bind->name, {bind->mul, bind->add}};
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      return invalid("a verify graph with one sample step per row must give each row its own step (step + its row), but "
                     "sample step " + s->out + " binds the same step as another row's");
    seen.push_back(key);
  }
  return ok_status();
}

/// Whether a rope step scales its frequencies by the pass's length (dynamic NTK).
bool dynamic_rope(const step_decl& s) {
  if (s.op != "rope") return false;
  const param_value* scaling = s.params.find("scaling");
  if (!scaling) return false;
  const param_value* type = scaling->field("rope_type");
  if (!type || type->k != param_value::kind::string) type = scaling->field("type");
  return type && type->k == param_value::kind::string && type->str == "dynamic";
}

}  // namespace

std::string token_producer(const graph_decl& d, const std::string& value) { return token_producer(d, value, 0); }

result<std::int32_t> check_generate_template(const graph_decl& d, const std::vector<std::string>& b, bool sampling,
                                             bool verify) {
  for (const char* need : {"ids", "pos"})
    if (std::find(b.begin(), b.end(), need) == b.end())
      return invalid(std::string("the graph must bind ") + need +
                     " for generate (an input with \"bind\": \"ids\" and {\"$bind\": \"pos\"} params)");
  const input_decl* ids = nullptr;
  for (const auto& in : d.inputs)
    if (in.kind == input_kind::bound && in.bind == "ids") ids = &in;
  if (!ids) return invalid("ids must be a bound input of the graph, not a parameter");
  const std::int64_t rows = shape_numel(ids->shape);
  if (!verify && rows != 1)
    return invalid("generate feeds one token per step, but the graph binds ids with shape " + shape_str(ids->shape));
  if (verify && rows < 2) return invalid("a verify graph binds ids with two or more positions, not shape " + shape_str(ids->shape));
  if (d.outputs.size() != 1)
    return invalid("the graph must have exactly one output, the next token ids, not " + std::to_string(d.outputs.size()));
  const std::string op = token_producer(d, d.outputs.front());
  if (op != "argmax" && op != "sample")
    return invalid("the graph must end in argmax or sample, but its output " + d.outputs.front() + " comes from " +
                   (op.empty() ? "an input" : op));
  if (sampling && op == "argmax") return invalid("the graph ends in argmax; sampling with temperature > 0 needs a sample step");
  if (verify && op == "sample") MPAKT_TRY(check_row_counters(d, b));
  // Rows written for rejected drafts are harmless in a KV cache (overwritten before they are
  // read), but a short_conv state advanced past a rejected draft cannot be taken back.
  if (verify && std::any_of(d.steps.begin(), d.steps.end(), [](const step_decl& s) { return s.op == "short_conv"; }))
    return invalid("a verify graph may not carry short_conv state: a rejected draft would leave the state advanced past it");
  // Past max_position_embeddings dynamic NTK takes the frequencies of a pass's last position for
  // every row (as transformers does for a multi-token forward), so a k-token verify pass is not
  // k plain steps: its drafts would be judged against other numbers than plain decoding's.
  for (std::size_t i = 0; i < d.steps.size(); ++i)
    if (verify && dynamic_rope(d.steps[i]))
      return invalid("a verify graph may not use dynamic rope scaling (step " + std::to_string(i) +
                     "): past max_position_embeddings its frequencies follow the pass's length, so a pass of several "
                     "tokens differs from one-token steps");
  return std::int32_t(rows - 1);
}

}  // namespace mpakt
