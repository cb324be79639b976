#pragma once
/// Asynchronous steps one after another, for actors that must never block.

#include <cstddef>
#include <functional>

namespace mpakt {

/// Runs step(i, next) for i = 0 … n-1, each after the one before called next(), then done().
/// A step that fails simply does not call next(); its own handler answers.
inline void in_sequence(std::size_t n, std::function<void(std::size_t, std::function<void()>)> step,
                        std::function<void()> done, std::size_t i = 0) {
  if (i == n) return done();
  step(i, [n, step, done, i] { in_sequence(n, step, done, i + 1); });
}

}  // namespace mpakt
