#pragma once
/// Waiting, in tests, for something another thread or process does.

#include <chrono>
#include <functional>
#include <thread>

namespace mpakt::test {

/// Polls `cond` every 5 ms until it holds or `patience` has passed (the caller then asserts
/// what it expected, so a timeout reads as that assertion's failure).
inline void wait_until(const std::function<bool()>& cond, std::chrono::milliseconds patience = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + patience;
  while (!cond() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace mpakt::test
