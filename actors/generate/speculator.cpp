#include "actors/generate/speculator.hpp"

#include <algorithm>
#include <cmath>

namespace mpakt {

namespace {
constexpr double smoothing = 0.2;  // weight of the newest observation in running estimates
void blend(double& est, double v) { est = est == 0 ? v : (1 - smoothing) * est + smoothing * v; }
}  // namespace

speculator::speculator(std::vector<std::int64_t> context, std::vector<int> ks, bool always)
    : context_(std::move(context)), ks_(std::move(ks)), always_(always), pass_ms_(ks_.size(), 0.0) {}

std::vector<std::int64_t> speculator::draft(std::size_t max_len, std::size_t min_len) const {
  const std::size_t n = context_.size();
  for (std::size_t len = std::min<std::size_t>(4, n > 0 ? n - 1 : 0); len >= 1; --len) {
    // The most recent earlier occurrence of the last `len` tokens whose continuation fills
    // at least the smallest verify pass; failing that, the most recent one at all. (In a
    // run of one repeated token the most recent occurrence has a one-token continuation;
    // an earlier one of the same run has a full one.)
    std::vector<std::int64_t> fallback;
    for (std::size_t start = n - len; start-- > 0;) {
      if (!std::equal(context_.begin() + std::ptrdiff_t(start), context_.begin() + std::ptrdiff_t(start + len),
                      context_.end() - std::ptrdiff_t(len)))
        continue;
      const std::size_t from = start + len;
      const std::size_t take = std::min(max_len, n - from);
      if (take == 0) continue;
      std::vector<std::int64_t> d(context_.begin() + std::ptrdiff_t(from), context_.begin() + std::ptrdiff_t(from + take));
      if (take >= min_len) return d;
      if (fallback.empty()) fallback = std::move(d);
    }
    if (!fallback.empty()) return fallback;
  }
  return {};
}

speculator::pass speculator::next() const {
  pass best;
  if (ks_.empty()) return best;
  const int kmax = *std::max_element(ks_.begin(), ks_.end());
  const int kmin = *std::min_element(ks_.begin(), ks_.end());
  const auto drafts = draft(std::size_t(kmax), std::size_t(std::max(kmin, 1)));
  if (drafts.empty()) return best;
  // Measure every verify graph once before trusting the estimates: an unmeasured longer pass
  // would otherwise never be tried (the longest such graph a draft fills goes first).
  for (std::size_t g = 0; g < ks_.size(); ++g) {
    const int k = ks_[g];
    if (k >= 1 && std::size_t(k) <= drafts.size() && pass_ms_[g] == 0 &&
        (best.graph < 0 || k > ks_[std::size_t(best.graph)]))
      best.graph = int(g);
  }
  if (best.graph >= 0) {
    best.drafts.assign(drafts.begin(), drafts.begin() + ks_[std::size_t(best.graph)]);
    return best;
  }
  // Expected tokens per pass with k drafts, each right with probability a independently:
  // 1 + a + … + a^k. Pick the graph with the most tokens per millisecond; a plain step
  // yields 1 token for plain_ms_. Unmeasured costs are assumed to grow with k.
  const double a = std::clamp(accept_rate_, 0.0, 0.99);
  const double plain_cost = plain_ms_ > 0 ? plain_ms_ : 1.0;
  double best_rate = always_ ? -1.0 : 1.0 / plain_cost;
  for (std::size_t g = 0; g < ks_.size(); ++g) {
    const int k = ks_[g];
    if (k < 1 || std::size_t(k) > drafts.size()) continue;
    const double tokens = (1 - std::pow(a, k + 1)) / (1 - a);
    const double cost = pass_ms_[g] > 0 ? pass_ms_[g] : plain_cost * (1.0 + 0.1 * k);
    const double rate = tokens / cost;
    if (rate > best_rate || (always_ && best.graph >= 0 && k > ks_[std::size_t(best.graph)] && rate >= best_rate)) {
      best_rate = rate;
      best.graph = int(g);
    }
  }
  if (best.graph >= 0) best.drafts.assign(drafts.begin(), drafts.begin() + ks_[std::size_t(best.graph)]);
  return best;
}

std::vector<std::int64_t> speculator::verified(const pass& p, const std::vector<std::int64_t>& outputs, double ms) {
  std::vector<std::int64_t> out;
  std::size_t agree = 0;
  while (agree < p.drafts.size() && p.drafts[agree] == outputs[agree]) ++agree;
  out.assign(outputs.begin(), outputs.begin() + std::ptrdiff_t(agree + 1));
  verifies++;
  drafted += p.drafts.size();
  accepted += agree;
  produced += out.size();
  blend(pass_ms_[std::size_t(p.graph)], ms);
  blend(accept_rate_, p.drafts.empty() ? 0.0 : double(agree) / double(p.drafts.size()));
  return out;
}

void speculator::plain(double ms) {
  plains++;
  blend(plain_ms_, ms);
}

void speculator::extend(const std::vector<std::int64_t>& tokens) { context_.insert(context_.end(), tokens.begin(), tokens.end()); }

}  // namespace mpakt
