#include "http/api/limits.hpp"

#include <algorithm>
#include <cctype>

namespace mpakt::http {

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}
}  // namespace

void login_limiter::prune(std::map<std::string, window>& m, clock::time_point now) {
  for (auto it = m.begin(); it != m.end();) {
    auto& w = it->second;
    while (!w.empty() && now - w.front() >= cfg_.login_window) w.pop_front();
    it = w.empty() ? m.erase(it) : std::next(it);
  }
}

std::optional<std::chrono::seconds> login_limiter::wait_for(std::map<std::string, window>& m, const std::string& k,
                                                            int limit, clock::time_point now) {
  if (limit <= 0) return std::nullopt;
  auto it = m.find(k);
  if (it == m.end()) return std::nullopt;
  auto& w = it->second;
  while (!w.empty() && now - w.front() >= cfg_.login_window) w.pop_front();
  if (int(w.size()) < limit) return std::nullopt;
  // the attempt may go once the failures beyond limit - 1 have left the window
  const auto frees = w[w.size() - std::size_t(limit)] + cfg_.login_window;
  const auto s = std::chrono::ceil<std::chrono::seconds>(frees - now);
  return std::max(s, std::chrono::seconds(1));
}

std::optional<std::chrono::seconds> login_limiter::blocked(const std::string& username, const std::string& address,
                                                           clock::time_point now) {
  std::lock_guard<std::mutex> lock(m_);
  auto by_user = wait_for(users_, lower(username), cfg_.login_failures_per_user, now);
  auto by_address = wait_for(addresses_, address, cfg_.login_failures_per_address, now);
  if (by_user && by_address) return std::max(*by_user, *by_address);
  return by_user ? by_user : by_address;
}

void login_limiter::failed(const std::string& username, const std::string& address, clock::time_point now) {
  std::lock_guard<std::mutex> lock(m_);
  // Every so often forget whole windows that have passed, so made-up usernames cannot grow
  // the maps without bound (each address adds at most its own limit per window).
  if (++calls_ % 256 == 0) {
    prune(users_, now);
    prune(addresses_, now);
  }
  if (cfg_.login_failures_per_user > 0) users_[lower(username)].push_back(now);
  if (cfg_.login_failures_per_address > 0) addresses_[address].push_back(now);
}

std::shared_ptr<void> generation_slots::acquire(const std::string& key_id) {
  {
    std::lock_guard<std::mutex> lock(m_);
    int& n = running_[key_id];
    if (per_key_ > 0 && n >= per_key_) return nullptr;
    ++n;
  }
  auto self = shared_from_this();
  return std::shared_ptr<void>(new char(0), [self, key_id](void* p) {
    delete static_cast<char*>(p);
    self->release(key_id);
  });
}

int generation_slots::running(const std::string& key_id) {
  std::lock_guard<std::mutex> lock(m_);
  auto it = running_.find(key_id);
  return it == running_.end() ? 0 : it->second;
}

void generation_slots::release(const std::string& key_id) {
  std::lock_guard<std::mutex> lock(m_);
  auto it = running_.find(key_id);
  if (it == running_.end()) return;
  if (--it->second <= 0) running_.erase(it);
}

}  // namespace mpakt::http
