// backends/resident_cache.hpp: a device's copies of immutable host tensors, kept across calls
// (issue: CUDA workers — weights resident on the GPU). The policy without a device: the
// "device buffer" is a host vector, and each test counts the copies made.

#include "backends/resident_cache.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace mpakt {
namespace {

using buffer = std::vector<std::byte>;

struct copier {
  int made = 0;
  int fail_next = 0;  ///< how many of the next copies fail, as a full device would
  result<buffer> operator()(const tensor& t) {
    if (fail_next > 0) {
      --fail_next;
      return make_error(errc::too_large, "out of device memory");
    }
    ++made;
    return buffer(t.data(), t.data() + t.nbytes());
  }
};

tensor filled(std::int64_t n, float v) {
  auto t = tensor::make(dtype::f32, {n});
  for (std::int64_t i = 0; i < n; ++i) t->f32()[i] = v;
  return *t;
}

TEST(ResidentCache, AWeightIsCopiedOnceAndServedFromTheCopyAfter) {
  resident_cache<buffer> cache;
  copier copy;
  const tensor w = filled(256, 1.5f);
  auto a = cache.get(w, std::ref(copy));
  ASSERT_TRUE(a.ok());
  auto b = cache.get(w, std::ref(copy));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(copy.made, 1);
  EXPECT_EQ(cache.uploads(), 1u);
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.bytes(), w.nbytes());
  EXPECT_EQ(std::memcmp((*a)->data(), w.data(), w.nbytes()), 0);
  // a handle aliasing the same bytes is the same weight
  const tensor alias = w;
  ASSERT_TRUE(cache.get(alias, std::ref(copy)).ok());
  EXPECT_EQ(copy.made, 1);
}

TEST(ResidentCache, AGoneWeightsCopyIsNeverServedForNewBytesAtItsAddress) {
  resident_cache<buffer> cache;
  copier copy;
  const std::byte* first_address = nullptr;
  {
    const tensor w = filled(1024, 1.0f);
    first_address = w.data();
    ASSERT_TRUE(cache.get(w, std::ref(copy)).ok());
  }  // (its model deleted)
  // Allocations of the same size tend to land at the same address: whatever address it gets,
  // the new tensor's copy holds its own bytes.
  for (int attempt = 0; attempt < 8; ++attempt) {
    const tensor w2 = filled(1024, 2.0f + float(attempt));
    auto got = cache.get(w2, std::ref(copy));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(std::memcmp((*got)->data(), w2.data(), w2.nbytes()), 0) << "attempt " << attempt
                                                                      << (w2.data() == first_address ? " (same address)" : "");
  }
  EXPECT_EQ(copy.made, 9);
  // the gone tensors' copies were dropped as new ones were made: at most the last one is held
  EXPECT_LE(cache.size(), 1u);
  EXPECT_LE(cache.bytes(), std::size_t(1024 * 4));
}

TEST(ResidentCache, ViewsOfOneStorageAreKeptApart) {
  resident_cache<buffer> cache;
  copier copy;
  const tensor base = filled(64, 3.0f);
  const tensor head = tensor::view(base, dtype::f32, {32}, 0);
  const tensor tail = tensor::view(base, dtype::f32, {32}, 32 * sizeof(float));
  ASSERT_TRUE(cache.get(head, std::ref(copy)).ok());
  ASSERT_TRUE(cache.get(tail, std::ref(copy)).ok());
  ASSERT_TRUE(cache.get(base, std::ref(copy)).ok());
  EXPECT_EQ(copy.made, 3);  // (same storage, other bytes: three copies)
  ASSERT_TRUE(cache.get(tail, std::ref(copy)).ok());
  EXPECT_EQ(copy.made, 3);
}

TEST(ResidentCache, AFullDeviceIsEmptiedOnceThenTheFailureIsReturned) {
  resident_cache<buffer> cache;
  copier copy;
  const tensor a = filled(16, 1.0f), b = filled(16, 2.0f), c = filled(16, 3.0f);
  ASSERT_TRUE(cache.get(a, std::ref(copy)).ok());
  ASSERT_TRUE(cache.get(b, std::ref(copy)).ok());
  copy.fail_next = 1;  // full: the cache gives its copies back and the second try fits
  auto got = cache.get(c, std::ref(copy));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(std::memcmp((*got)->data(), c.data(), c.nbytes()), 0);
  copy.fail_next = 2;  // too big even for an empty device: the caller is told, and copies per call
  auto refused = cache.get(a, std::ref(copy));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.err().code, errc::too_large);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
}

}  // namespace
}  // namespace mpakt
