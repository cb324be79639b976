#include "actors/loader/selection.hpp"

#include <unordered_set>

namespace mpakt::loader {

namespace {

std::string quoted_list(const std::vector<std::string>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", \"" : "\"") + v[i] + "\"";
  return out + "]";
}

bool any_match(const std::vector<std::string>& patterns, std::string_view name) {
  for (const auto& p : patterns)
    if (glob_match(p, name)) return true;
  return false;
}

/// True when the name alone marks a quantised checkpoint (GPTQ/AWQ/bitsandbytes/fp8 scales):
/// looks_quantised with the dtype question taken out.
bool has_marker_name(const st_entry& e) {
  st_entry probe;
  probe.name = e.name;
  probe.file_dtype = "F32";
  return looks_quantised(probe);
}

}  // namespace

bool glob_match(std::string_view p, std::string_view s) {
  // Iterative matcher with one backtrack point (the last '*'): linear in practice, no recursion.
  std::size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

result<std::vector<std::size_t>> select_tensors(const model_index& index, const selection_request& req) {
  for (const auto& n : req.names)
    if (!index.find(n)) return invalid("names lists " + n + ", which " + index.source + " does not hold");
  const bool everything = req.include.empty() && req.names.empty();
  const std::unordered_set<std::string_view> names(req.names.begin(), req.names.end());
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < index.tensors.size(); ++i) {
    const std::string& name = index.tensors[i].name();
    const bool in = everything || names.count(name) || any_match(req.include, name);
    if (in && !any_match(req.exclude, name)) out.push_back(i);
  }
  if (out.empty()) {
    std::string what;
    if (!req.include.empty()) what += "include " + quoted_list(req.include);
    if (!req.names.empty()) what += std::string(what.empty() ? "" : " and ") + "names " + quoted_list(req.names);
    if (what.empty()) what = "the whole checkpoint";
    if (!req.exclude.empty()) what += " minus exclude " + quoted_list(req.exclude);
    return invalid(what + " selects no tensor of " + index.source);
  }
  return out;
}

status check_not_quantised(const model_index& index, const std::vector<std::size_t>& selected) {
  std::vector<std::string> offending;
  std::unordered_set<std::size_t> seen;
  auto note = [&](std::size_t i) {
    if (!seen.insert(i).second) return;
    const auto& e = index.tensors[i].entry;
    offending.push_back(e.name + " (" + published_dtype_name(e.file_dtype) + ")");
  };
  for (std::size_t i : selected)
    if (looks_quantised(index.tensors[i].entry)) note(i);
  for (std::size_t i = 0; i < index.tensors.size(); ++i)
    if (has_marker_name(index.tensors[i].entry)) note(i);
  if (offending.empty()) return ok_status();
  std::string list;
  for (std::size_t i = 0; i < offending.size() && i < 10; ++i) list += (i ? ", " : "") + offending[i];
  if (offending.size() > 10) list += " and " + std::to_string(offending.size() - 10) + " more";
  return invalid(index.source +
                 " is a quantised checkpoint (GPTQ, AWQ, bitsandbytes, int8 or fp8) and cannot be loaded, as "
                 "there is no dequantisation path; offending tensors: " +
                 list);
}

}  // namespace mpakt::loader
