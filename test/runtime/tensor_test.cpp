#include "runtime/tensor.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace mpakt {
namespace {

// Empty tensors are ordinary values (a graph may upload shape [0], a batch may have no rows).
// Making or widening one copied zero bytes from a null pointer, which is undefined behaviour
// that UBSan reports (build-asan, docs/building.md).
TEST(Tensor, EmptyTensorsAreMadeAndWidenedWithoutCopyingFromNull) {
  const std::vector<float> none;
  auto t = make_f32({0}, none);
  ASSERT_TRUE(t) << t.err().message;
  EXPECT_EQ(t->numel(), 0);
  auto wide = to_f32(*t);
  ASSERT_TRUE(wide) << wide.err().message;
  EXPECT_EQ(wide->numel(), 0);
  auto rows = make_f32({0, 4}, {});
  ASSERT_TRUE(rows) << rows.err().message;
  EXPECT_EQ(rows->rows(), 0);
}

// Storage of 4 MB and more is mapped to start on a 2 MB boundary, so its whole 2 MB pages can
// be huge pages (runtime/tensor.cpp); it arrives zeroed and is writable to its last byte, and
// views and copies of the handle keep the mapping alive.
TEST(Tensor, LargeStorageStartsOnAHugePageBoundary) {
  constexpr std::uintptr_t huge = std::uintptr_t(2) << 20;
  for (const auto& shape : std::vector<shape_t>{{1024, 2048}, {1100, 2049}, {3, 1 << 20}}) {
    auto t = tensor::make(dtype::bf16, shape);
    ASSERT_TRUE(t) << t.err().message;
    ASSERT_GE(t->nbytes(), std::size_t(4) << 20);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t->data()) % huge, 0u) << shape_str(shape);
    const auto* bytes = t->data();
    EXPECT_EQ(bytes[0], std::byte{0});
    EXPECT_EQ(bytes[t->nbytes() - 1], std::byte{0});
    t->data()[t->nbytes() - 1] = std::byte{7};
    const tensor view = tensor::view(*t, dtype::bf16, {1}, t->nbytes() - 2);
    *t = tensor();  // (the view alone holds the storage now)
    EXPECT_EQ(view.data()[1], std::byte{7});
  }
  // smaller storage comes from the heap, as before
  auto small = tensor::make(dtype::f32, {16});
  ASSERT_TRUE(small);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small->data()) % 64, 0u);
}

/// The VmFlags line of /proc/self/smaps for the mapping holding `p`.
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < line.find(' ')) inside = lo <= at && at < hi;
    else if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return {};
}

/// Waits until no weight storage is kept (the reaper unmapped it), up to 5 s.
bool nothing_kept() {
  for (int i = 0; i < 500 && kept_weight_bytes() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return kept_weight_bytes() == 0;
}

/// Whether the page holding `p` is mapped (mincore answers ENOMEM for an address that is not).
bool mapped(const void* p) {
  const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
  unsigned char in_core = 0;
  return ::mincore(reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p) / page * page), page, &in_core) == 0;
}

/// Starts a test of kept storage with none kept (what earlier tests' models gave back is
/// unmapped at once), then keeps for 10 s again.
void forget_kept_storage() {
  keep_freed_weights_for(std::chrono::milliseconds(0));
  ASSERT_TRUE(nothing_kept());
  keep_freed_weights_for(std::chrono::seconds(10));
}

/// The bytes of a weight's storage past its own (its allocation rounds up to 64 and adds 64)
/// read as zeros.
void expect_zero_tail(const tensor& t) {
  const std::size_t end = (t.nbytes() + 63) / 64 * 64 + 64;
  for (std::size_t i = t.nbytes(); i < end; ++i) ASSERT_EQ(t.data()[i], std::byte{0}) << "byte " << i << " past the end";
}

// Weights under 4 MB are carved one after another from slabs on huge pages, each group (a
// model) from slabs of its own (runtime/tensor.cpp); a slab goes with its last weight — kept
// a while for the next weights (of any group), then unmapped.
TEST(Tensor, SmallWeightsAreCarvedFromTheirGroupsSlabsOnHugePages) {
  forget_kept_storage();
  auto a = tensor::make_weight(dtype::bf16, {300, 576}, "m_a");  // 345,600 bytes: not whole pages
  auto b = tensor::make_weight(dtype::bf16, {1000, 576}, "m_b");
  auto a2 = tensor::make_weight(dtype::f32, {77}, "m_a");
  ASSERT_TRUE(a && b && a2);
  const auto* pa = a->data();
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(pa) % 64, 0u);
  EXPECT_EQ(a2->data(), pa + (a->nbytes() + 63) / 64 * 64 + 64) << "the group's next weight follows in its slab";
  const auto apart = [](const std::byte* x, const std::byte* y) { return x > y ? std::size_t(x - y) : std::size_t(y - x); };
  EXPECT_GE(apart(b->data(), pa), std::size_t(32) << 20) << "another group's weight is in a slab of its own";
  EXPECT_NE(vm_flags_of(pa).find(" hg"), std::string::npos) << vm_flags_of(pa);
  for (auto* t : {&*a, &*b, &*a2}) {
    expect_zero_tail(*t);
    std::memset(t->data(), 0x5a, t->nbytes());
  }
  // b's slab goes with b, kept; the other group's weights keep their bytes
  std::byte* const pb = b->data();
  *b = tensor();
  EXPECT_TRUE(mapped(pb));
  EXPECT_EQ(kept_weight_bytes(), (std::size_t(32) << 20) + (std::size_t(2) << 20)) << "b's slab (and the 2 MB it was aligned in)";
  for (auto* t : {&*a, &*a2})
    for (std::size_t i = 0; i < t->nbytes(); ++i) ASSERT_EQ(t->data()[i], std::byte{0x5a}) << "byte " << i;
  // the next group's first weight is carved from b's slab, where b was; the bytes past it
  // read as zeros though b's were written there
  std::memset(pb, 0x77, std::size_t(1) << 20);
  auto c = tensor::make_weight(dtype::bf16, {100, 576}, "m_c");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->data(), pb);
  EXPECT_EQ(kept_weight_bytes(), 0u);
  expect_zero_tail(*c);
  // unmapped once kept longer than the keep time
  *c = tensor();
  keep_freed_weights_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(nothing_kept());
  EXPECT_FALSE(mapped(pb));
  keep_freed_weights_for(std::chrono::seconds(10));
  // a view keeps a weight's slab
  const tensor view = tensor::view(*a2, dtype::f32, {1}, 0);
  *a = tensor();
  *a2 = tensor();
  EXPECT_TRUE(mapped(pa)) << "the view holds the slab";
  EXPECT_EQ(kept_weight_bytes(), 0u);
  EXPECT_EQ(view.data()[0], std::byte{0x5a});
}

// A weight of its own mapping (4 MB and more) given back is kept for the next weight of about
// its size, never handed to anything else (whose storage is zeroed); a weight mapped fresh
// unmaps as many kept bytes, so weights and kept storage never grow past what weights held.
TEST(Tensor, AWeightsMappingGivenBackIsKeptForTheNextWeightOfItsSize) {
  forget_kept_storage();
  const std::size_t mib = std::size_t(1) << 20;
  auto w = tensor::make_weight(dtype::bf16, {2048, 2048});  // 8 MB
  ASSERT_TRUE(w);
  std::byte* const pw = w->data();
  std::memset(pw, 0x5a, w->nbytes() + 64);  // (its bytes and the 64 after them)
  *w = tensor();
  EXPECT_TRUE(mapped(pw));
  EXPECT_EQ(kept_weight_bytes(), 8 * mib + 64 + 2 * mib);
  auto t = tensor::make(dtype::bf16, {2048, 2048});
  ASSERT_TRUE(t);
  EXPECT_NE(t->data(), pw) << "only weights take kept storage";
  for (std::size_t i = 0; i < t->nbytes(); i += 4096) ASSERT_EQ(t->data()[i], std::byte{0}) << "byte " << i;
  *t = tensor();
  EXPECT_EQ(kept_weight_bytes(), 8 * mib + 64 + 2 * mib) << "nothing but weights is kept";
  // a weight of 7.5 MB takes it (an eighth more than it needs, at most); one of 6 MB would not
  auto w2 = tensor::make_weight(dtype::bf16, {1920, 2048});
  ASSERT_TRUE(w2);
  EXPECT_EQ(w2->data(), pw);
  EXPECT_EQ(kept_weight_bytes(), 0u);
  expect_zero_tail(*w2);
  *w2 = tensor();
  auto w3 = tensor::make_weight(dtype::bf16, {1536, 2048});
  ASSERT_TRUE(w3);
  EXPECT_NE(w3->data(), pw);
  EXPECT_EQ(kept_weight_bytes(), 0u) << "the 6 MB weight, mapped fresh, unmapped the 10 MB kept";
  EXPECT_FALSE(mapped(pw));
  *w3 = tensor();
  EXPECT_GT(kept_weight_bytes(), 6 * mib);
  keep_freed_weights_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(nothing_kept());
  keep_freed_weights_for(std::chrono::seconds(10));
}

}  // namespace
}  // namespace mpakt
