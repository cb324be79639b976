#include "backends/cpu/fast/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace mpakt::cpu_fast {

namespace {

/// The helper team. Never destroyed (its threads sleep until the process ends), so no
/// kernel can outlive it during shutdown.
class team {
 public:
  void resize(int helpers) {
    std::lock_guard busy(busy_);
    std::lock_guard l(m_);
    while (int(threads_.size()) < helpers) {
      const int index = int(threads_.size());
      threads_.emplace_back([this, index] { loop(index); });
      threads_.back().detach();
    }
    helpers_ = helpers;
  }

  int helpers() const { return helpers_; }

  void run(int parts, const std::function<void(int)>& f) {
    std::unique_lock busy(busy_, std::try_to_lock);
    const int helpers = std::min(parts - 1, helpers_);
    if (!busy.owns_lock() || helpers <= 0) {
      for (int p = 0; p < parts; ++p) f(p);
      return;
    }
    {
      std::lock_guard l(m_);
      job_ = &f;
      active_ = helpers;
      remaining_.store(helpers, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    start_.notify_all();
    // The caller takes part 0 and every part past the helpers.
    f(0);
    for (int p = helpers + 1; p < parts; ++p) f(p);
    // A decode step runs hundreds of short products: wait by spinning first, then sleep.
    for (int i = 0; i < spin_iterations && remaining_.load(std::memory_order_acquire) != 0; ++i) pause();
    if (remaining_.load(std::memory_order_acquire) != 0) {
      std::unique_lock l(m_);
      done_.wait(l, [&] { return remaining_.load(std::memory_order_acquire) == 0; });
    }
  }

 private:
  /// About half a millisecond of polling before a thread sleeps.
  static constexpr int spin_iterations = 20000;
  static void pause() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }

  void loop(int index) {
    std::uint64_t seen = 0;
    for (;;) {
      for (int i = 0; i < spin_iterations && generation_.load(std::memory_order_acquire) == seen; ++i) pause();
      const std::function<void(int)>* job;
      {
        std::unique_lock l(m_);
        start_.wait(l, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        seen = generation_.load(std::memory_order_acquire);
        if (index >= active_) continue;
        job = job_;
      }
      (*job)(index + 1);
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard l(m_);
        done_.notify_one();
      }
    }
  }

  std::mutex busy_;  ///< one job at a time
  std::mutex m_;
  std::condition_variable start_, done_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  int helpers_ = 0;
  int active_ = 0;
  std::atomic<int> remaining_{0};
  std::atomic<std::uint64_t> generation_{0};
};

team& the_team() {
  static team* t = new team();  // intentionally leaked: see the class comment
  return *t;
}

}  // namespace

void set_kernel_threads(int n) { the_team().resize(std::max(0, n - 1)); }

int kernel_threads() { return the_team().helpers() + 1; }

void parallel_for(int parts, const std::function<void(int)>& f) {
  if (parts <= 1) {
    if (parts == 1) f(0);
    return;
  }
  the_team().run(parts, f);
}

}  // namespace mpakt::cpu_fast
