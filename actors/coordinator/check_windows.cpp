#include "actors/coordinator/check_windows.hpp"

#include <algorithm>

namespace mpakt {

check_windows::check_windows(double fraction, double mean_passes, std::uint64_t seed)
    : fraction_(fraction), mean_passes_(std::max(1.0, mean_passes)), rng_(seed) {}

check_windows::ptr check_windows::fresh() {
  auto w = std::make_shared<window>();
  w->id = next_id_++;
  w->checked = std::uniform_real_distribution<double>(0, 1)(rng_) < fraction_;
  return w;
}

check_windows::ptr check_windows::open(std::set<std::string> sessions) {
  auto w = fresh();
  w->sessions = std::move(sessions);
  // passes it takes: 1 + a geometric draw, mean `mean_passes_`
  w->left = 1;
  if (mean_passes_ > 1) w->left += std::geometric_distribution<std::int64_t>(1.0 / mean_passes_)(rng_);
  for (const auto& s : w->sessions) of_[s] = w;
  return w;
}

check_windows::turnover check_windows::turn(std::vector<ptr> closed, std::set<std::string> sessions) {
  for (const auto& c : closed) {
    c->closing = true;
    for (const auto& s : c->sessions) {
      sessions.insert(s);
      if (auto it = of_.find(s); it != of_.end() && it->second == c) of_.erase(it);
    }
  }
  turnover t;
  t.closed = std::move(closed);
  if (!sessions.empty()) t.opened = open(std::move(sessions));
  return t;
}

check_windows::admission check_windows::admit(const std::vector<std::string>& sessions) {
  std::vector<ptr> involved;
  bool all_in_one = true;
  for (const auto& s : sessions) {
    auto it = of_.find(s);
    if (it == of_.end()) {
      all_in_one = false;
      continue;
    }
    if (std::find(involved.begin(), involved.end(), it->second) == involved.end()) involved.push_back(it->second);
  }
  if (involved.size() > 1) all_in_one = false;
  admission a;
  if (all_in_one && !involved.empty() && !involved.front()->closing) {
    a.into = involved.front();
  } else {
    // A new window over these sessions and all of their windows', once those are quiet.
    for (const auto& w : involved) w->closing = true;
    if (std::any_of(involved.begin(), involved.end(), [](const ptr& w) { return w->in_flight > 0; })) return a;
    a.turned = turn(involved, std::set<std::string>(sessions.begin(), sessions.end()));
    a.into = a.turned->opened;
  }
  a.into->in_flight++;
  a.into->passes++;
  if (--a.into->left <= 0) a.into->closing = true;  // (its last pass: the next waits for its close)
  return a;
}

check_windows::ptr check_windows::single() {
  auto w = fresh();
  w->passes = 1;
  return w;
}

std::optional<check_windows::turnover> check_windows::answered(const ptr& w) {
  if (w->in_flight > 0) w->in_flight--;
  if (w->in_flight > 0 || !w->closing) return std::nullopt;
  // Closed already (a session's pass waited for it and turned it over): nothing more.
  if (std::none_of(w->sessions.begin(), w->sessions.end(), [&](const std::string& s) {
        auto it = of_.find(s);
        return it != of_.end() && it->second == w;
      }))
    return std::nullopt;
  return turn({w}, {});
}

check_windows::ptr check_windows::leave(const std::string& session) {
  auto it = of_.find(session);
  if (it == of_.end()) return nullptr;
  auto w = it->second;
  of_.erase(it);
  w->sessions.erase(session);
  return w;
}

check_windows::ptr check_windows::of(const std::string& session) const {
  auto it = of_.find(session);
  return it == of_.end() ? nullptr : it->second;
}

std::size_t check_windows::open_windows() const {
  std::set<const window*> seen;
  for (const auto& [_, w] : of_) seen.insert(w.get());
  return seen.size();
}

}  // namespace mpakt
