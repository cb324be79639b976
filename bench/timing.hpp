#pragma once
/// Timing for the benchmarks built with the project: wall seconds since a point, and the best of
/// several runs (the machines are shared; the best run is the one least disturbed).

#include <algorithm>
#include <chrono>

namespace mpakt::bench {

using clk = std::chrono::steady_clock;

inline double seconds_since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

/// Best time of `repeats` runs of f().
template <class F>
double best_of(int repeats, F&& f) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clk::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

}  // namespace mpakt::bench
