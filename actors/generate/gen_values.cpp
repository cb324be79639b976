#include "actors/generate/gen_values.hpp"

#include <algorithm>
#include <cstdio>

#include "actors/generate/speculator.hpp"

namespace mpakt {

namespace {
std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
}  // namespace

gen_call make_gen_call(const std::vector<std::string>& bindings, const std::vector<std::int64_t>& tokens, std::int64_t pos,
                       const std::vector<std::pair<std::string, double>>& sampling) {
  auto bound = [&](const std::string& n) { return std::find(bindings.begin(), bindings.end(), n) != bindings.end(); };
  gen_call c;
  c.bind_json = "{\"ids\":[";
  for (std::size_t i = 0; i < tokens.size(); ++i) c.bind_json += (i ? "," : "") + std::to_string(tokens[i]);
  c.bind_json += "],\"pos\":" + std::to_string(pos);
  if (bound("step")) c.bind_json += ",\"step\":" + std::to_string(pos);
  else c.overrides.emplace_back("step", double(pos));
  for (const auto& [name, value] : sampling) {
    if (bound(name)) c.bind_json += ",\"" + name + "\":" + number(value);
    else c.overrides.emplace_back(name, value);
  }
  c.bind_json += "}";
  return c;
}

gen_request start_request(const gen_plan& plan, std::string gen_id, gen_listener listener) {
  gen_request r;
  r.gen_id = std::move(gen_id);
  r.graph_id = plan.graph_id;
  r.session = plan.session_id;
  r.bindings = plan.bindings;
  r.first_id = plan.first_id;
  r.start_pos = plan.start_pos;
  r.max_new = plan.max_new;
  r.stop_ids = plan.stop_ids;
  r.sampling = plan.sampling;
  r.listener = std::move(listener);
  r.verify_graphs = plan.verify_graphs;
  r.verify_bindings = plan.verify_bindings;
  r.context = plan.context;
  r.always = plan.always;
  return r;
}

gen_journal fed_journal(const gen_plan& plan, std::int64_t first, std::int64_t start_pos,
                        std::span<const std::int64_t> produced) {
  gen_journal j;
  j.session_id = plan.session_id;
  j.graph_id = plan.graph_id;
  j.bindings = plan.bindings;
  j.sampling = plan.sampling;
  j.start_pos = start_pos;
  if (!produced.empty()) {
    j.fed.push_back(first);
    j.fed.insert(j.fed.end(), produced.begin(), produced.end() - 1);
  }
  return j;
}

gen_done with_counters(gen_done d, const speculator* spec) {
  if (!spec) return d;
  d.speculative = true;
  d.verifies = spec->verifies;
  d.drafted = spec->drafted;
  d.accepted = spec->accepted;
  d.produced = spec->produced;
  d.plain = spec->plains;
  return d;
}

}  // namespace mpakt
