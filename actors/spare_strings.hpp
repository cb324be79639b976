#pragma once
/// Byte strings kept after use for the next bytes of the same kind — the pieces and ranges of
/// weights a load moves. Making a fresh buffer of several MB for each costs its pages' faults
/// and the kernel's clearing of them, and growing a std::string clears what it adds; a kept
/// string of the right size costs neither. Bounded in number and bytes; thread-safe.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace mpakt {

class spare_strings {
 public:
  /// Keeps at most `max_count` strings of at most `max_bytes` together, none shorter than
  /// `min_size` (by size, not capacity: what a taker gets without growing it).
  spare_strings(std::size_t max_count, std::uint64_t max_bytes, std::size_t min_size = 1)
      : max_count_(max_count), max_bytes_(max_bytes), min_size_(min_size) {}

  /// Keeps `s` where the bounds allow, else frees it.
  void give(std::string s) {
    std::lock_guard<std::mutex> lock(m_);
    if (s.size() < min_size_ || kept_.size() >= max_count_ || held_ + s.size() > max_bytes_) return;
    held_ += s.size();
    kept_.push_back(std::move(s));
  }

  /// The kept string best suited to `n` bytes, its old bytes still in it: the smallest at
  /// least that long (the long ones stay for long takers; one exactly that long ends the
  /// search), else the longest; an empty string when none is kept. Growing a string clears
  /// what it adds, so a taker is best served by a string of its own size: a load's weights
  /// come in a few sizes over and over, and as many of them are on their way at once as the
  /// load's bound allows — keep room for that many strings, not a few.
  std::string take(std::size_t n) {
    std::lock_guard<std::mutex> lock(m_);
    if (kept_.empty()) return {};
    auto best = kept_.begin();
    for (auto it = kept_.begin(); it != kept_.end() && best->size() != n; ++it) {
      const bool fits = it->size() >= n, best_fits = best->size() >= n;
      if (fits ? !best_fits || it->size() < best->size() : !best_fits && it->size() > best->size()) best = it;
    }
    std::string s = std::move(*best);
    kept_.erase(best);
    held_ -= s.size();
    return s;
  }

  /// Frees every kept string.
  void clear() {
    std::vector<std::string> gone;
    std::lock_guard<std::mutex> lock(m_);
    gone.swap(kept_);
    held_ = 0;
  }

  /// Bytes kept.
  std::uint64_t bytes() const {
    std::lock_guard<std::mutex> lock(m_);
    return held_;
  }

 private:
  mutable std::mutex m_;
  std::vector<std::string> kept_;
  std::uint64_t held_ = 0;
  const std::size_t max_count_;
  const std::uint64_t max_bytes_;
  const std::size_t min_size_;
};

}  // namespace mpakt
