#include "backends/cpu/fast/parallel.hpp"
#include "runtime/interrupt.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mpakt::cpu_fast {

namespace {

/// The helper threads. A job is a count of parts and a function; the caller and the
/// helpers claim parts one at a time from a shared counter, so a helper the OS has not
/// scheduled yet (a busy volunteer machine) simply claims nothing: the caller takes its
/// parts and returns as soon as every *claimed* part is done. The counter carries the
/// job's number in its high half, so a helper that wakes late can never claim a part of a
/// job that has ended (its compare-and-swap fails). Never destroyed: its threads sleep
/// until the process ends, so no kernel can outlive it during shutdown.
class team {
 public:
  void resize(int helpers) {
    std::lock_guard busy(busy_);
    std::lock_guard l(m_);
    while (int(threads_.size()) < helpers) {
      threads_.emplace_back([this] { loop(); });
      threads_.back().detach();
    }
    helpers_ = helpers;
  }

  int helpers() const { return helpers_; }

  void run(int parts, const std::function<void(int)>& f) {
    std::unique_lock busy(busy_, std::try_to_lock);
    if (!busy.owns_lock() || helpers_ <= 0) {
      for (int p = 0; p < parts; ++p) f(p);
      return;
    }
    const std::uint64_t job = (claim_.load(std::memory_order_relaxed) >> 32) + 1;
    job_.store(&f, std::memory_order_relaxed);
    parts_.store(parts, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    // publishes job_ and parts_; sequentially consistent with the sleepers_ check below (a
    // helper going to sleep increments sleepers_ and then looks for a job: one sees the other)
    claim_.store(job << 32, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard l(m_);
      wake_.notify_all();
    }
    int mine = 0;
    for (int p; (p = claim(job)) >= 0; ++mine) f(p);
    // Every part is claimed; wait for the helpers' to finish (spinning: they are running).
    while (done_.load(std::memory_order_acquire) + mine < parts) pause();
    // Ends the job: a helper that has not claimed yet now fails its compare-and-swap.
    claim_.store((job << 32) | 0xffffffffu, std::memory_order_release);
  }

 private:
  /// About half a millisecond of polling before a helper sleeps.
  static constexpr int spin_iterations = 20000;

  static void pause() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }

  /// Claims the next part of job `job`, or -1 when it has none left (or has ended).
  int claim(std::uint64_t job) {
    std::uint64_t c = claim_.load(std::memory_order_acquire);
    for (;;) {
      if ((c >> 32) != job) return -1;
      const std::uint32_t next = std::uint32_t(c);
      if (next >= std::uint32_t(parts_.load(std::memory_order_relaxed))) return -1;
      if (claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return int(next);
    }
  }

  /// Whether job `seen` is open with parts left to claim.
  bool open_after(std::uint64_t seen) const {
    const std::uint64_t c = claim_.load(std::memory_order_seq_cst);
    return (c >> 32) != seen && std::uint32_t(c) < std::uint32_t(parts_.load(std::memory_order_relaxed));
  }

  void loop() {
    std::uint64_t seen = 0;
    for (;;) {
      for (int i = 0; i < spin_iterations && !open_after(seen); ++i) pause();
      if (!open_after(seen)) {
        std::unique_lock l(m_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        // Sleeps until a job opens; the timeout only looks again (an idle helper that spun
        // after every timeout spent about 1 % of a core doing nothing).
        while (!wake_.wait_for(l, std::chrono::milliseconds(50), [&] { return open_after(seen); })) {
        }
        sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      }
      const std::uint64_t job = claim_.load(std::memory_order_acquire) >> 32;
      seen = job;
      int p;
      int ran = 0;
      const std::function<void(int)>* f = job_.load(std::memory_order_relaxed);
      while ((p = claim(job)) >= 0) {
        (*f)(p);
        ++ran;
      }
      if (ran) done_.fetch_add(ran, std::memory_order_acq_rel);
    }
  }

  std::mutex busy_;  ///< one job at a time
  std::mutex m_;
  std::condition_variable wake_;
  std::vector<std::thread> threads_;
  int helpers_ = 0;
  /// high 32 bits: the job's number; low 32 bits: the next part to claim
  std::atomic<std::uint64_t> claim_{0};
  std::atomic<const std::function<void(int)>*> job_{nullptr};
  std::atomic<int> parts_{0};
  std::atomic<int> done_{0};       ///< parts finished by helpers
  std::atomic<int> sleepers_{0};
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
  // A run told to stop leaves the parts not yet begun (runtime/interrupt.hpp); the helpers
  // ask the caller's interrupt, not their own.
  if (const interrupt stop = current_interrupt(); stop.test) {
    the_team().run(parts, [&](int p) {
      if (!stop.requested()) f(p);
    });
    return;
  }
  the_team().run(parts, f);
}

}  // namespace mpakt::cpu_fast
