#include "runtime/dtype.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace mpakt {
namespace {

TEST(Dtype, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(Dtype, F16RoundTripAndEdges) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f})
    EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
}

TEST(Dtype, Q8AndQ4ErrorsStayWithinHalfAStep) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(64), back(64);
  for (auto& v : x) v = nd(rng);
  for (dtype t : {dtype::q8, dtype::q4}) {
    std::vector<std::byte> packed(*storage_bytes(t, 64));
    quantize_row(t, x.data(), packed.data(), 64);
    dequantize_row(t, packed.data(), back.data(), 64);
    for (int b = 0; b < 2; ++b) {
      float lo = x[b * 32], hi = x[b * 32], amax = 0;
      for (int i = 0; i < 32; ++i) {
        lo = std::min(lo, x[b * 32 + i]);
        hi = std::max(hi, x[b * 32 + i]);
        amax = std::max(amax, std::fabs(x[b * 32 + i]));
      }
      const float step = t == dtype::q8 ? amax / 127 : (hi - lo) / 15;
      for (int i = 0; i < 32; ++i) EXPECT_NEAR(back[b * 32 + i], x[b * 32 + i], step * 0.51f + 1e-3f);
    }
    // a range read agrees with the whole-row read
    std::vector<float> part(5);
    dequantize_range(t, packed.data(), 30, part.data(), 5);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(part[i], back[30 + i]);
  }
  EXPECT_EQ(*storage_bytes(dtype::q8, 64), 68u);
  EXPECT_EQ(*storage_bytes(dtype::q4, 64), 40u);
}

}  // namespace
}  // namespace mpakt
