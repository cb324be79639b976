#pragma once
/// The sampler's counter-based random numbers: one uniform draw per (seed, counter), with no
/// state, so a generation replays exactly. The sample op draws row r with counter step + r;
/// the server's decode loop and the tests call the same functions.

#include <cstdint>

namespace mpakt::ops {

/// SplitMix64's output mix (Steele, Lea and Flood 2014; the finaliser of java.util.SplittableRandom).
constexpr std::uint64_t splitmix64_mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

/// The 64 random bits for (seed, counter).
constexpr std::uint64_t sample_bits(std::uint64_t seed, std::uint64_t counter) {
  const std::uint64_t z = splitmix64_mix(seed + 0x9E3779B97F4A7C15ull) ^ (counter * 0xD1B54A32D192ED03ull);
  return splitmix64_mix(z);
}

/// A uniform double in [0, 1) for (seed, counter): the top 53 bits of sample_bits.
constexpr double sample_uniform(std::uint64_t seed, std::uint64_t counter) {
  return double(sample_bits(seed, counter) >> 11) * 0x1.0p-53;
}

}  // namespace mpakt::ops
