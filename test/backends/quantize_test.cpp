// Quantize on load (backends/cpu/quantize.hpp) on every kernel level this machine supports:
// the bytes must be exactly the reference's (runtime/dtype.cpp quantize_row on the values
// widened to f32) — for ordinary weights, rounding ties, scales in the f16 subnormal range,
// blocks of zeros of either sign, huge and tiny values, and rows holding NaN or ±∞ (which the
// fast kernels leave to the reference).

#include "backends/cpu/quantize.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa.hpp"

namespace mpakt {
namespace {

struct level_restore {
  cpu_isa::level saved = cpu_isa::current();
  ~level_restore() { cpu_isa::set_level(saved); }
};

std::uint16_t bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return std::uint16_t(u >> 16);  // truncation: every result is a valid bf16 value
}

/// Rows of `cols` values, each row from a different family of hard cases.
std::vector<std::vector<float>> hard_rows(std::int64_t cols, int rows, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> normal(0, 0.02f);
  std::vector<std::vector<float>> out;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> x(static_cast<std::size_t>(cols));
    const int kind = r % 14;
    float s = 1;  // (families 10 and 11: the block's scale)
    for (std::int64_t i = 0; i < cols; ++i) {
      float v = normal(g);
      // Rows 12 and 13 mix the families block by block (the kernels take sixteen blocks'
      // scales together): every family, then every one without zeros (which q4 leaves to the
      // reference).
      static constexpr int no_zeros[] = {0, 1, 2, 3, 5, 7, 8, 9, 10, 11};
      const int family = kind == 12 ? int((i / 32) % 12) : kind == 13 ? no_zeros[(i / 32) % 10] : kind;
      // Families 10 (q8) and 11 (q4): a block whose scale is an f16 value s exactly, its values
      // one to three ulps beside (k + ½)·s, so that value / scale lies a hair from a rounding
      // boundary (where a product with 1/s may round otherwise than the quotient).
      if ((family == 10 || family == 11) && i % 32 == 0) s = std::ldexp(1.0f + float(g() % 1024) / 1024, int(g() % 12) - 10);
      const auto beside = [&](float x) {
        for (int n = 1 + int(g() % 3); n > 0; --n) x = std::nextafter(x, (g() & 1) ? 1e30f : -1e30f);
        return x;
      };
      switch (family) {
        case 0: break;                                                    // ordinary weights
        case 1: v = float(int(g() % 255) - 127) * 0.5f; break;           // ties on the grid
        case 2: v = normal(g) * 1e-6f; break;                            // scales in f16 subnormals
        case 3: v = normal(g) * 1e-9f; break;                            // scales that vanish
        case 4: v = (g() & 1) ? 0.0f : -0.0f; break;                     // zeros of both signs
        case 5: v = normal(g) * 1e4f; break;                             // large
        case 6: v = std::fabs(normal(g)) + (i % 32 == 0 ? 0.0f : 0.01f); break;  // minimum exactly 0
        case 7: v = -std::fabs(normal(g)); break;                        // all negative
        case 8: v = float(g() % 16) * 0.125f - 1.0f; break;              // exact q4 steps
        case 9: v = normal(g) * 3e4f; break;                             // near the f16 range
        case 10: v = i % 32 == 0 ? 127 * s : beside((float(int(g() % 255) - 127) + 0.5f) * s); break;
        case 11: v = i % 32 == 0 ? -8 * s : i % 32 == 1 ? 7 * s : beside((float(g() % 15) - 7.5f) * s); break;
      }
      x[std::size_t(i)] = v;
    }
    out.push_back(std::move(x));
  }
  // A row with NaN, one with +inf, one with -inf: left to the reference.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x(static_cast<std::size_t>(cols));
    for (auto& v : x) v = normal(g);
    x[std::size_t(cols / 2)] = bad;
    out.push_back(std::move(x));
  }
  return out;
}

void expect_same_as_reference(dtype to) {
  const std::int64_t cols = 576;
  const auto rows = hard_rows(cols, 70, 7);
  const std::size_t row_bytes = *storage_bytes(to, cols);
  std::vector<float> scratch(static_cast<std::size_t>(cols));
  level_restore restore;
  for (auto level : cpu_isa::supported_levels()) {
    ASSERT_TRUE(cpu_isa::set_level(level));
    for (std::size_t r = 0; r < rows.size(); ++r) {
      // from f32
      std::vector<unsigned char> want(row_bytes), got(row_bytes, 0xee);
      quantize_row(to, rows[r].data(), want.data(), cols);
      cpu_fast::quantize_row_from(dtype::f32, to, rows[r].data(), got.data(), cols, scratch.data());
      EXPECT_EQ(got, want) << "f32 row " << r << " at " << cpu_isa::level_name(level);
      // from bf16 words at an odd address (pieces carry no alignment)
      std::vector<unsigned char> packed(std::size_t(cols) * 2 + 1);
      std::vector<float> widened(static_cast<std::size_t>(cols));
      for (std::int64_t i = 0; i < cols; ++i) {
        const std::uint16_t h = bf16_bits(rows[r][std::size_t(i)]);
        std::memcpy(packed.data() + 1 + 2 * i, &h, 2);
        widened[std::size_t(i)] = bf16_to_f32(h);
      }
      quantize_row(to, widened.data(), want.data(), cols);
      std::fill(got.begin(), got.end(), 0xee);
      cpu_fast::quantize_row_from(dtype::bf16, to, packed.data() + 1, got.data(), cols, scratch.data());
      EXPECT_EQ(got, want) << "bf16 row " << r << " at " << cpu_isa::level_name(level);
      // from f16 (always the reference path, through the scratch)
      for (std::int64_t i = 0; i < cols; ++i) {
        const std::uint16_t h = f32_to_f16(rows[r][std::size_t(i)]);
        std::memcpy(packed.data() + 1 + 2 * i, &h, 2);
        widened[std::size_t(i)] = f16_to_f32(h);
      }
      quantize_row(to, widened.data(), want.data(), cols);
      cpu_fast::quantize_row_from(dtype::f16, to, packed.data() + 1, got.data(), cols, scratch.data());
      EXPECT_EQ(got, want) << "f16 row " << r << " at " << cpu_isa::level_name(level);
    }
  }
}

TEST(QuantizeOnLoad, Q8BytesAreTheReferencesOnEveryLevel) { expect_same_as_reference(dtype::q8); }
TEST(QuantizeOnLoad, Q4BytesAreTheReferencesOnEveryLevel) { expect_same_as_reference(dtype::q4); }

TEST(QuantizeOnLoad, RandomBitPatternsToo) {
  // Every bf16 bit pattern turns up: subnormals, NaN payloads, infinities.
  std::mt19937 g(11);
  const std::int64_t cols = 4096;
  std::vector<unsigned char> packed(std::size_t(cols) * 2);
  std::vector<float> widened(static_cast<std::size_t>(cols)), scratch(static_cast<std::size_t>(cols));
  level_restore restore;
  for (dtype to : {dtype::q8, dtype::q4}) {
    const std::size_t row_bytes = *storage_bytes(to, cols);
    for (int rep = 0; rep < 8; ++rep) {
      for (std::int64_t i = 0; i < cols; ++i) {
        // mostly finite values, some blocks with any bits at all
        std::uint16_t h = bf16_bits(std::ldexp(float(int(g() % 2001) - 1000), int(g() % 60) - 40));
        if ((i / 32) % 7 == rep % 7) h = std::uint16_t(g());
        std::memcpy(packed.data() + 2 * i, &h, 2);
        widened[std::size_t(i)] = bf16_to_f32(h);
      }
      for (auto level : cpu_isa::supported_levels()) {
        ASSERT_TRUE(cpu_isa::set_level(level));
        // the whole row (non-finite blocks send it to the reference)
        std::vector<unsigned char> want_row(row_bytes), got_row(row_bytes);
        quantize_row(to, widened.data(), want_row.data(), cols);
        cpu_fast::quantize_row_from(dtype::bf16, to, packed.data(), got_row.data(), cols, scratch.data());
        ASSERT_EQ(got_row, want_row) << dtype_name(to) << " row at " << cpu_isa::level_name(level);
        // one block at a time, so a non-finite block does not send a whole row to the reference
        for (std::int64_t b = 0; b < cols / 32; ++b) {
          const std::size_t bb = row_bytes / std::size_t(cols / 32);
          std::vector<unsigned char> want(bb), got(bb);
          quantize_row(to, widened.data() + b * 32, want.data(), 32);
          cpu_fast::quantize_row_from(dtype::bf16, to, packed.data() + b * 64, got.data(), 32, scratch.data());
          ASSERT_EQ(got, want) << dtype_name(to) << " block " << b << " at " << cpu_isa::level_name(level);
        }
      }
    }
  }
}

TEST(QuantizeOnLoad, GroupsInLanesAreTheReferencesOnEveryLevel) {
  // Random bytes (any scale, any value: the reorder moves bytes and flips q8's top bits);
  // widths of one block up, and rows longer than their blocks would need none of.
  level_restore restore;
  std::mt19937 g(3);
  for (dtype t : {dtype::q8, dtype::q4})
    for (std::int64_t cols : {32, 96, 576, 2048}) {
      const std::size_t row_bytes = *storage_bytes(t, cols);
      std::vector<std::byte> rows(16 * row_bytes);
      for (auto& b : rows) b = std::byte(g());
      std::vector<std::byte> want(rows.size()), got(rows.size());
      group_to_lanes(t, rows.data(), want.data(), cols);
      for (auto level : cpu_isa::supported_levels()) {
        ASSERT_TRUE(cpu_isa::set_level(level));
        std::fill(got.begin(), got.end(), std::byte{0x5a});
        cpu_fast::group_to_lanes(t, rows.data(), got.data(), cols);
        EXPECT_EQ(got, want) << dtype_name(t) << " cols " << cols << " at " << cpu_isa::level_name(level);
      }
      // and back to the rows (the weight checks' digests read a group in lanes as its rows)
      for (auto level : cpu_isa::supported_levels()) {
        ASSERT_TRUE(cpu_isa::set_level(level));
        std::fill(got.begin(), got.end(), std::byte{0x5a});
        cpu_fast::lanes_to_group(t, want.data(), got.data(), cols);
        EXPECT_EQ(got, rows) << dtype_name(t) << " cols " << cols << " back to rows at " << cpu_isa::level_name(level);
      }
      // and the reference is the reorder tensors take in place
      std::vector<std::byte> in_place = rows;
      rows_to_lanes(t, in_place.data(), 16, cols);
      EXPECT_EQ(in_place, want) << dtype_name(t) << " cols " << cols;
    }
}

TEST(QuantizeOnLoad, GroupsQuantizedStraightIntoLanesAreTheReferences) {
  // Sixteen bf16 rows → q8 in lanes in one pass (quantize_group_to_lanes) against the
  // reference's two steps: every family of hard_rows (rows of one family and rows mixing them
  // block by block, ties, subnormal and vanishing scales, zeros, near-boundary quotients) and
  // rows of random bit patterns, at an odd address with rows longer than their values. Taken
  // at AVX2 and above for every finite group (q4: without a zero extreme, as below); a group
  // holding NaN or ±∞ is declined there.
  level_restore restore;
  const std::int64_t cols = 576;
  const auto hard = hard_rows(cols, 70, 5);
  std::mt19937 g(13);
  std::vector<std::vector<std::uint16_t>> rows;
  for (const auto& r : hard) {
    std::vector<std::uint16_t> w(r.size());
    for (std::size_t i = 0; i < r.size(); ++i) w[i] = bf16_bits(r[i]);
    rows.push_back(std::move(w));
  }
  for (int extra = 0; extra < 32; ++extra) {
    std::vector<std::uint16_t> w(std::size_t(cols), 0);
    for (std::int64_t i = 0; i < cols; ++i) {
      w[std::size_t(i)] = bf16_bits(std::ldexp(float(int(g() % 2001) - 1000), int(g() % 60) - 40));
      if (extra % 4 == 0 && (i / 32) % 5 == extra % 5) {  // any finite bits
        std::uint16_t h = std::uint16_t(g());
        if ((h & 0x7f80) == 0x7f80) h &= 0xbfff;
        w[std::size_t(i)] = h;
      }
    }
    rows.push_back(std::move(w));
  }
  // Blocks whose scale is a small f16 subnormal k · 2^−24 rounded down from amax / 127, so
  // that the largest magnitude's quotient passes 127.5 and only the clamp keeps it at ±127.
  for (int extra = 0; extra < 8; ++extra) {
    std::vector<std::uint16_t> w(std::size_t(cols), 0);
    for (std::int64_t b = 0; b < cols / 32; ++b) {
      const float k = float(1 + g() % 40), f = 0.05f + float(g() % 1000) * 0.0004f;
      const float amax = 127 * std::ldexp(k + f, -24);
      for (int i = 0; i < 32; ++i) {
        const float v = i == int(b % 32) ? amax : amax * (float(int(g() % 2001) - 1000) / 1000);
        w[std::size_t(b * 32 + i)] = bf16_bits((g() & 1) ? v : -v);
      }
    }
    rows.push_back(std::move(w));
  }
  const std::int64_t stride = cols * 2 + 70;  // bytes from one row to the next
  // Groups of rows of every family (rows 7 apart), then groups of the finite rows without a
  // zero extreme in any block (q4's kernel takes only those).
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t first = 0; first + 16 <= rows.size(); first += 2) {
    groups.emplace_back();
    for (std::size_t l = 0; l < 16; ++l) groups.back().push_back((first + l * 7) % rows.size());
  }
  std::vector<std::size_t> plain;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    bool ok = true;
    for (std::int64_t b = 0; b < cols / 32 && ok; ++b) {
      float lo = INFINITY, hi = -INFINITY;
      for (int i = 0; i < 32; ++i) {
        const float v = bf16_to_f32(rows[r][std::size_t(b * 32 + i)]);
        ok = ok && std::isfinite(v);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      ok = ok && lo != 0 && hi != 0;
    }
    if (ok) plain.push_back(r);
  }
  for (std::size_t first = 0; plain.size() >= 16 && first < plain.size(); first += 3) {
    groups.emplace_back();
    for (std::size_t l = 0; l < 16; ++l) groups.back().push_back(plain[(first + l * 5) % plain.size()]);
  }
  for (const dtype t : {dtype::q8, dtype::q4}) {
    // from AVX2 up; q4 declines also a group with a block whose minimum or maximum is zero
    // (which zero the reference keeps depends on the order it meets them in)
    const cpu_isa::level from = cpu_isa::level::avx2;
    const std::size_t group_bytes = 16 * *storage_bytes(t, cols);
    int takeable = 0, taken = 0, declined = 0;
    for (std::size_t first = 0; first < groups.size(); ++first) {
      std::vector<unsigned char> src(std::size_t(16 * stride) + 1, 0xcd);
      std::vector<std::byte> quantized(group_bytes), want(group_bytes), got(group_bytes);
      bool finite = true, zero_extreme = false;
      for (std::size_t l = 0; l < 16; ++l) {
        const auto& w = rows[groups[first][l]];
        std::memcpy(src.data() + 1 + l * std::size_t(stride), w.data(), std::size_t(cols) * 2);
        std::vector<float> widened(static_cast<std::size_t>(cols));
        for (std::int64_t i = 0; i < cols; ++i) {
          widened[std::size_t(i)] = bf16_to_f32(w[std::size_t(i)]);
          finite = finite && std::isfinite(widened[std::size_t(i)]);
        }
        for (std::int64_t b = 0; b < cols / 32; ++b) {
          const auto blk = widened.begin() + b * 32;
          zero_extreme = zero_extreme || *std::min_element(blk, blk + 32) == 0 || *std::max_element(blk, blk + 32) == 0;
        }
        quantize_row(t, widened.data(), quantized.data() + l * group_bytes / 16, cols);
      }
      group_to_lanes(t, quantized.data(), want.data(), cols);
      const bool takes = finite && (t == dtype::q8 || !zero_extreme);
      for (auto level : cpu_isa::supported_levels()) {
        ASSERT_TRUE(cpu_isa::set_level(level));
        std::fill(got.begin(), got.end(), std::byte{0x5a});
        const bool done = cpu_fast::quantize_group_to_lanes(dtype::bf16, t, src.data() + 1, stride, got.data(), cols);
        EXPECT_EQ(done, takes && level >= from) << dtype_name(t) << " group " << first << " at " << cpu_isa::level_name(level);
        if (done) {
          EXPECT_EQ(got, want) << dtype_name(t) << " group " << first << " at " << cpu_isa::level_name(level);
        }
        taken += done;
        declined += !done;
      }
      takeable += takes;
    }
    EXPECT_GT(takeable, 20) << dtype_name(t);
    EXPECT_GT(taken, 0) << dtype_name(t);
    EXPECT_GT(declined, 0) << dtype_name(t);  // (groups holding NaN or ±∞, and every group below the kernel's level)
  }
  // Other sources are always declined: their two steps stay the caller's.
  std::vector<std::byte> out(16 * *storage_bytes(dtype::q8, cols));
  std::vector<float> f(static_cast<std::size_t>(16 * cols), 0.5f);
  EXPECT_FALSE(cpu_fast::quantize_group_to_lanes(dtype::f32, dtype::q8, f.data(), cols * 4, out.data(), cols));
}

}  // namespace
}  // namespace mpakt
