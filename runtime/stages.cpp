#include "runtime/stages.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "runtime/graph.hpp"
#include "runtime/json.hpp"

namespace mpakt {

namespace {

using json_writer = rapidjson::Writer<rapidjson::StringBuffer>;

std::string quoted(const std::string& s) {
  rapidjson::StringBuffer buf;
  json_writer w(buf);
  w.String(s.c_str(), rapidjson::SizeType(s.size()));
  return std::string(buf.GetString(), buf.GetSize());
}

std::string step_at(std::size_t i, const step_decl& s) { return "step " + std::to_string(i) + " (" + s.op + ")"; }

}  // namespace

namespace {

std::string shape_text(const shape_t& shape) {
  std::string out = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) out += (d ? "," : "") + std::to_string(shape[d]);
  return out + "]";
}

}  // namespace

std::string stage::graph_json(const std::map<std::string, stage_value>& received) const {
  std::vector<std::string> extra;
  for (const auto& name : receives) {
    auto it = received.find(name);
    if (it == received.end()) continue;  // the worker then names the missing value
    extra.push_back("{\"name\":" + quoted(name) + ",\"shape\":" + shape_text(it->second.shape) + ",\"dataB64\":\"" +
                    encode_f32_base64(it->second.values) + "\"}");
  }
  return text(extra);
}

std::string stage::template_json(const std::map<std::string, shape_t>& shapes) const {
  std::vector<std::string> extra;
  for (const auto& name : receives) {
    auto it = shapes.find(name);
    if (it == shapes.end()) continue;  // the worker then names the missing value
    extra.push_back("{\"name\":" + quoted(name) + ",\"shape\":" + shape_text(it->second) + ",\"bind\":" +
                    quoted(received_binding(name)) + "}");
  }
  return text(extra);
}

std::string stage::received_binding(const std::string& value) { return "@" + value; }

std::string stage::text(const std::vector<std::string>& received_inputs) const {
  std::string out = "{\"inputs\":[";
  bool first = true;
  for (const auto& t : input_texts) {
    out += first ? "" : ",";
    out += t;
    first = false;
  }
  for (const auto& t : received_inputs) {
    out += first ? "" : ",";
    out += t;
    first = false;
  }
  out += "],\"steps\":[";
  for (std::size_t i = 0; i < step_texts.size(); ++i) out += (i ? "," : "") + step_texts[i];
  out += "],\"outputs\":[";
  const auto r = returns();
  for (std::size_t i = 0; i < r.size(); ++i) out += (i ? "," : "") + quoted(r[i]);
  out += "]";
  if (!retain.empty()) {
    out += ",\"retain\":{";
    for (std::size_t i = 0; i < retain.size(); ++i) out += (i ? "," : "") + quoted(retain[i].first) + ":" + quoted(retain[i].second);
    out += "}";
  }
  out += "}";
  return out;
}

std::vector<std::string> stage::returns() const {
  std::vector<std::string> r = sends;
  for (const auto& o : outputs)
    if (std::find(r.begin(), r.end(), o) == r.end()) r.push_back(o);
  return r;
}

result<stage_plan> split_graph(const rapidjson::Value& graph, const stage_placement& where, bool allow_bind) {
  auto parsed = parse_graph(graph, allow_bind);
  if (!parsed) return std::move(parsed).err();
  const graph_decl& d = *parsed;
  if (d.sessions.size() > 1)
    return invalid("a graph listing several sessions cannot run on a model spread over several workers");
  // (either member may be absent: each is read only for the entries parse_graph found in it)
  const auto inputs_json = graph.FindMember("inputs");
  const auto steps_json = graph.FindMember("steps");

  std::map<std::string, std::size_t> input_of;  // input name -> index
  for (std::size_t i = 0; i < d.inputs.size(); ++i) input_of[d.inputs[i].name] = i;
  std::map<std::string, std::size_t> producer;  // value -> step index
  std::vector<int> worker_of(d.steps.size(), -1);
  std::map<std::string, int> session_dest;  // session tensor -> where it is read in this graph

  auto weight_worker = [&](const input_decl& in, const std::string& at) -> result<int> {
    const int w = where.weight_worker(in.model, in.weight);
    if (w < 0) return make_error(errc::not_found, at + ": weight " + in.weight + " of model " + in.model + " is on no worker");
    return w;
  };
  // Where the first weight-reading step runs: the start for steps before it.
  int first_weight_worker = -1;
  for (const auto& s : d.steps) {
    for (const auto& name : s.in) {
      auto it = input_of.find(name);
      if (it != input_of.end() && d.inputs[it->second].kind == input_kind::weight) {
        first_weight_worker = where.weight_worker(d.inputs[it->second].model, d.inputs[it->second].weight);
        break;
      }
    }
    if (first_weight_worker >= 0) break;
  }

  // zeros steps whose value is only retained: deferred, not run here.
  std::vector<bool> skip(d.steps.size(), false);
  stage_plan plan;
  {
    std::set<std::string> read;
    for (const auto& s : d.steps)
      for (const auto& name : s.in) read.insert(name);
    for (const auto& o : d.outputs) read.insert(o);
    for (std::size_t i = 0; i < d.steps.size(); ++i) {
      const auto& s = d.steps[i];
      if (s.op != "zeros" || !s.in.empty() || !s.binds.empty() || read.count(s.out)) continue;
      // a half-width KV cache (the server's dtype) is made at once by a stage, and moved to
      // the part that reads it as any session tensor is: deferred zeros are made f32
      if (s.params.has("dtype")) continue;
      const param_value* shape = s.params.find("shape");
      if (!shape || shape->k != param_value::kind::array) continue;
      shape_t dims;
      bool whole = true;
      for (const auto& dim : shape->items) {
        whole = whole && dim.is_number() && dim.num >= 0 && dim.num == std::floor(dim.num);
        dims.push_back(whole ? static_cast<std::int64_t>(dim.num) : 0);
      }
      std::vector<std::string> kept_as;  // the session tensors it is retained as
      for (const auto& [tensor, value] : d.retain)
        if (value == s.out) kept_as.push_back(tensor);
      if (!whole || kept_as.empty()) continue;
      skip[i] = true;
      for (const auto& tensor : kept_as) plan.deferred.emplace_back(tensor, dims);
    }
  }

  int current = -1;
  for (std::size_t i = 0; i < d.steps.size(); ++i) {
    const auto& s = d.steps[i];
    const std::string at = step_at(i, s);
    if (skip[i]) continue;
    int w = -1;
    for (const auto& name : s.in) {
      auto it = input_of.find(name);
      if (producer.count(name) || it == input_of.end() || d.inputs[it->second].kind != input_kind::weight) continue;
      auto ww = weight_worker(d.inputs[it->second], at);
      if (!ww) return std::move(ww).err();
      if (w >= 0 && *ww != w)
        return invalid(at + " reads weights held by two different workers; a layer's weights must stay together");
      w = *ww;
    }
    if (w < 0) {
      std::size_t latest = 0;
      bool any = false;
      for (const auto& name : s.in) {
        auto p = producer.find(name);
        if (p != producer.end() && (!any || p->second > latest)) {
          latest = p->second;
          any = true;
        }
      }
      if (any) w = worker_of[latest];
    }
    std::vector<std::string> reads;
    for (const auto& name : s.in) {
      auto it = input_of.find(name);
      if (producer.count(name) || it == input_of.end() || d.inputs[it->second].kind != input_kind::session) continue;
      reads.push_back(d.inputs[it->second].session_name);
    }
    if (w < 0)
      for (const auto& t : reads)
        if (auto p = session_dest.find(t); p != session_dest.end()) {
          w = p->second;
          break;
        }
    if (w < 0) w = current >= 0 ? current : first_weight_worker >= 0 ? first_weight_worker : where.home;
    for (const auto& t : reads) {
      auto [p, fresh] = session_dest.emplace(t, w);
      if (!fresh && p->second != w)
        return invalid(at + " reads session tensor " + t + " on a different worker from an earlier step of the graph");
    }
    worker_of[i] = w;
    current = w;
    producer[s.out] = i;
  }

  // Consecutive steps on one worker form a stage.
  std::vector<std::size_t> stage_of(d.steps.size(), 0);
  for (std::size_t i = 0; i < d.steps.size(); ++i) {
    if (skip[i]) continue;
    if (plan.stages.empty() || plan.stages.back().worker != worker_of[i]) {
      plan.stages.emplace_back();
      plan.stages.back().worker = worker_of[i];
    }
    stage_of[i] = plan.stages.size() - 1;
    plan.value_stage[d.steps[i].out] = stage_of[i];
    plan.stages.back().step_texts.push_back(text_of(steps_json->value[rapidjson::SizeType(i)]));
    plan.stages.back().step_index.push_back(i);
  }
  if (plan.stages.empty()) {
    plan.stages.emplace_back();
    plan.stages.back().worker = first_weight_worker >= 0 ? first_weight_worker : where.home;
  }
  // Graph inputs go to every stage reading them; values computed elsewhere cross.
  std::vector<std::set<std::string>> has_input(plan.stages.size());
  auto add_input = [&](std::size_t st, const std::string& name) {
    if (has_input[st].insert(name).second)
      plan.stages[st].input_texts.push_back(text_of(inputs_json->value[rapidjson::SizeType(input_of.at(name))]));
  };
  auto add_cross = [&](std::size_t from, std::size_t to, const std::string& name) {
    auto& snd = plan.stages[from].sends;
    if (std::find(snd.begin(), snd.end(), name) == snd.end()) snd.push_back(name);
    auto& rcv = plan.stages[to].receives;
    if (std::find(rcv.begin(), rcv.end(), name) == rcv.end()) rcv.push_back(name);
  };
  producer.clear();
  for (std::size_t i = 0; i < d.steps.size(); ++i) {
    if (skip[i]) continue;
    for (const auto& name : d.steps[i].in) {
      if (auto p = producer.find(name); p != producer.end()) {
        if (stage_of[p->second] != stage_of[i]) add_cross(stage_of[p->second], stage_of[i], name);
      } else if (input_of.count(name)) {
        add_input(stage_of[i], name);
      }
    }
    producer[d.steps[i].out] = i;
  }
  // Where a graph input named by outputs or retain can be read: data anywhere (the last
  // stage), a weight or session tensor only on the worker holding it.
  auto stage_for_input = [&](const std::string& name, const std::string& at) -> result<std::size_t> {
    const input_decl& in = d.inputs[input_of.at(name)];
    int w = -1;
    if (in.kind == input_kind::weight) {
      auto ww = weight_worker(in, at);
      if (!ww) return std::move(ww).err();
      w = *ww;
    } else if (in.kind == input_kind::session) {
      auto p = session_dest.find(in.session_name);
      w = p != session_dest.end() ? p->second : where.session_worker(in.session_name);
      if (w < 0) {
        // Not created yet (or missing: the worker then names it): read on the last stage.
        session_dest[in.session_name] = plan.stages.back().worker;
        return plan.stages.size() - 1;
      }
    } else {
      return plan.stages.size() - 1;
    }
    for (std::size_t st = plan.stages.size(); st-- > 0;)
      if (plan.stages[st].worker == w) return st;
    return invalid(at + " names input " + name + ", held on a worker no step of this graph runs on");
  };
  auto owner = [&](const std::string& value, const std::string& at) -> result<std::size_t> {
    if (auto p = producer.find(value); p != producer.end()) return stage_of[p->second];
    if (!input_of.count(value)) return invalid(at + " names " + value + ", which no input or step defines");
    auto st = stage_for_input(value, at);
    if (!st) return std::move(st).err();
    add_input(*st, value);
    return *st;
  };
  for (std::size_t i = 0; i < d.outputs.size(); ++i) {
    auto st = owner(d.outputs[i], "outputs[" + std::to_string(i) + "]");
    if (!st) return std::move(st).err();
    plan.stages[*st].outputs.push_back(d.outputs[i]);
  }
  plan.outputs = d.outputs;
  std::set<std::string> deferred_tensors;
  for (const auto& [tensor, _] : plan.deferred) deferred_tensors.insert(tensor);
  for (const auto& [tensor, value] : d.retain) {
    if (deferred_tensors.count(tensor)) continue;
    if (auto it = input_of.find(value); it != input_of.end() && !producer.count(value)) {
      const auto& in = d.inputs[it->second];
      if (in.kind == input_kind::session && in.session_name == tensor) continue;  // keeping it where it is
    }
    auto st = owner(value, "retain." + tensor);
    if (!st) return std::move(st).err();
    plan.stages[*st].retain.emplace_back(tensor, value);
  }
  plan.session_reads = session_dest;
  session_work(plan, where.session_worker);
  return plan;
}

std::vector<std::string> template_bindings(const rapidjson::Value& tmpl) {
  std::vector<std::string> out;
  auto add = [&](const std::string& n) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  if (tmpl.HasMember("inputs") && tmpl["inputs"].IsArray())
    for (const auto& in : tmpl["inputs"].GetArray())
      if (in.IsObject() && in.HasMember("bind") && in["bind"].IsString()) add(in["bind"].GetString());
  if (tmpl.HasMember("steps") && tmpl["steps"].IsArray())
    for (const auto& s : tmpl["steps"].GetArray()) {
      if (!s.IsObject() || !s.HasMember("params") || !s["params"].IsObject()) continue;
      for (const auto& p : s["params"].GetObject())
        if (p.value.IsObject() && p.value.HasMember("$bind") && p.value["$bind"].IsString()) add(p.value["$bind"].GetString());
    }
  return out;
}

void session_work(stage_plan& plan, const std::function<int(const std::string&)>& session_worker) {
  plan.moves.clear();
  plan.create.clear();
  for (const auto& [tensor, w] : plan.session_reads) {
    const int now = session_worker(tensor);
    if (now >= 0 && now != w) plan.moves.emplace_back(tensor, w);
    if (now == stage_placement::deferred) plan.create.emplace_back(tensor, w);
  }
}

std::string layer_group(const std::string& name) {
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t end = name.find('.', start);
    if (end == std::string::npos) end = name.size();
    const std::string_view part(name.data() + start, end - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return name.substr(0, end);
    start = end + 1;
  }
  return name;
}

namespace {

/// Model order of a group: embeddings first, then layers by number, then the rest.
std::tuple<int, std::string, long long> group_rank(const std::string& group) {
  const auto dot = group.rfind('.');
  const std::string last = dot == std::string::npos ? group : group.substr(dot + 1);
  if (!last.empty() && std::all_of(last.begin(), last.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return {1, group.substr(0, dot), last.size() > 15 ? 0 : std::stoll(last)};
  for (const char* front : {"embed", "wte", "wpe", "word_embeddings", "embed_in"})
    if (group.find(front) != std::string::npos) return {0, group, 0};
  return {2, group, 0};
}

}  // namespace

std::vector<std::string> layer_groups(const std::vector<std::string>& names) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const auto& n : names)
    if (auto g = layer_group(n); seen.insert(g).second) out.push_back(g);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return group_rank(a) < group_rank(b); });
  return out;
}

namespace {

/// Fills `groups` (bytes, in order) into the first `k` workers, each up to min(its free
/// memory, cap), moving on when a group does not fit; the worker of each group, or empty.
std::vector<int> fill(const std::vector<std::uint64_t>& groups, const std::vector<std::uint64_t>& free_bytes, std::size_t k,
                      std::uint64_t cap) {
  std::vector<int> out;
  std::size_t w = 0;
  std::uint64_t used = 0;
  for (const auto need : groups) {
    while (w < k && used + need > std::min(free_bytes[w], cap)) {
      ++w;
      used = 0;
    }
    if (w == k) return {};
    used += need;
    out.push_back(int(w));
  }
  return out;
}

}  // namespace

result<std::vector<int>> plan_spread(const std::vector<spread_tensor>& tensors, const std::vector<std::uint64_t>& free_bytes) {
  std::map<std::string, std::uint64_t> group_bytes;
  for (const auto& t : tensors) group_bytes[layer_group(t.name)] += t.bytes;
  std::vector<std::string> order;
  for (const auto& [g, _] : group_bytes) order.push_back(g);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return group_rank(a) < group_rank(b); });
  std::vector<std::uint64_t> sizes;
  std::uint64_t total = 0, largest = 0;
  for (const auto& g : order) {
    sizes.push_back(group_bytes[g]);
    total += group_bytes[g];
    largest = std::max(largest, group_bytes[g]);
  }
  // The fewest workers that can hold it (fewest stages), then the most even split among them
  // (the least any one of them must hold: the smallest cap that still fits), which leaves each
  // the most room for the sessions' caches.
  for (std::size_t k = 1; k <= free_bytes.size(); ++k) {
    if (fill(sizes, free_bytes, k, total).empty()) continue;
    std::uint64_t lo = largest, hi = total;
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (fill(sizes, free_bytes, k, mid).empty()) lo = mid + 1;
      else hi = mid;
    }
    const auto where = fill(sizes, free_bytes, k, lo);
    std::map<std::string, int> group_worker;
    for (std::size_t i = 0; i < order.size(); ++i) group_worker[order[i]] = where[i];
    std::vector<int> out;
    out.reserve(tensors.size());
    for (const auto& t : tensors) out.push_back(group_worker[layer_group(t.name)]);
    return out;
  }
  // Name the group that fits nowhere when every worker is filled to its free memory.
  std::size_t w = 0;
  std::uint64_t used = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    while (w < free_bytes.size() && used + sizes[i] > free_bytes[w]) {
      ++w;
      used = 0;
    }
    if (w == free_bytes.size())
      return make_error(errc::unavailable, "the model cannot be spread over the workers: " + order[i] + " needs " +
                                               std::to_string((sizes[i] + 999999) / 1000000) +
                                               " MB together and no worker left in the order of placement has that much free");
    used += sizes[i];
  }
  return make_error(errc::unavailable, "the model cannot be spread over the workers");
}

}  // namespace mpakt
