#include "http/router.hpp"

#include <algorithm>

namespace mpakt::http {

namespace {

/// How well `pattern` fits `path`: -1 when it does not; otherwise a rank where a literal
/// segment beats a :parameter, earlier segments first, so that GET /api/v3/models/inspect
/// owns that path rather than DELETE /api/v3/models/:modelId.
int fit(const std::vector<std::string_view>& pattern, const std::vector<std::string_view>& path) {
  if (pattern.size() != path.size()) return -1;
  int rank = 0;
  for (std::size_t i = 0; i < path.size(); ++i) {
    const bool param = pattern[i].front() == ':';
    if (!param && pattern[i] != path[i]) return -1;
    rank = rank * 2 + (param ? 0 : 1);
  }
  return rank;
}

}  // namespace

std::vector<std::string_view> path_segments(std::string_view path) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < path.size()) {
    const std::size_t j = std::min(path.find('/', i), path.size());
    if (j > i) out.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

router::router(std::vector<route_key> table) : table_(std::move(table)) {
  for (const auto& r : table_) patterns_.push_back(path_segments(r.pattern));
}

route_match router::match(std::string_view method, std::string_view path_text) const {
  auto path = path_segments(path_text);
  if (path.size() >= 2 && path[0] == "api" && path[1] == "v1") path[1] = "v2";

  route_match out;
  int best = -1;
  for (const auto& p : patterns_) best = std::max(best, fit(p, path));
  if (best < 0) return out;
  bool found = false;
  for (std::size_t i = 0; i < table_.size(); ++i) {
    if (fit(patterns_[i], path) != best) continue;
    if (!found && method == table_[i].method) {
      found = true;
      out.index = i;
    }
    out.allowed += (out.allowed.empty() ? "" : ", ") + std::string(table_[i].method);
  }
  if (!found) {
    out.k = route_match::kind::wrong_method;
    return out;
  }
  out.k = route_match::kind::found;
  out.allowed.clear();
  const auto& p = patterns_[out.index];
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i].front() == ':') out.args.emplace_back(path[i]);
  return out;
}

}  // namespace mpakt::http
