#pragma once
// The benchmarks' read-bandwidth probe: `threads` kernel threads summing their parts of one
// buffer of 64-bit words, the bound a memory-bound kernel is measured against in the same run.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backends/cpu/fast/parallel.hpp"

namespace mpakt::bench {

/// Bytes/s of `threads` threads summing `bytes` of memory (best of 3).
inline double read_bandwidth(std::size_t bytes, int threads) {
  using clk = std::chrono::steady_clock;
  const std::size_t n = bytes / sizeof(std::uint64_t);
  std::vector<std::uint64_t> buf(n, 1);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::uint64_t> sums(static_cast<std::size_t>(threads));
    const auto t0 = clk::now();
    cpu_fast::parallel_for(threads, [&](int p) {
      const std::size_t b = n * std::size_t(p) / std::size_t(threads), e = n * std::size_t(p + 1) / std::size_t(threads);
      std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (std::size_t i = b; i + 4 <= e; i += 4) {
        s0 += buf[i];
        s1 += buf[i + 1];
        s2 += buf[i + 2];
        s3 += buf[i + 3];
      }
      sums[std::size_t(p)] = s0 + s1 + s2 + s3;
    });
    const double s = std::chrono::duration<double>(clk::now() - t0).count();
    std::uint64_t total = 0;
    for (auto v : sums) total += v;
    if (total == 0) std::puts("");  // keeps the sums alive
    best = std::max(best, double(n * sizeof(std::uint64_t)) / s);
  }
  return best;
}

}  // namespace mpakt::bench
