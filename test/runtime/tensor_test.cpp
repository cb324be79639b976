#include "runtime/tensor.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
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

// Weights under 4 MB are carved one after another from slabs on huge pages, each group (a
// model) from slabs of its own (runtime/tensor.cpp); a slab is unmapped with its last weight.
TEST(Tensor, SmallWeightsAreCarvedFromTheirGroupsSlabsOnHugePages) {
  const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
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
    EXPECT_EQ(t->data()[0], std::byte{0});
    EXPECT_EQ(t->data()[t->nbytes() - 1], std::byte{0});
    std::memset(t->data(), 0x5a, t->nbytes());
  }
  // b's slab goes with b (mincore answers ENOMEM for an address no longer mapped); the other
  // group's weights keep their bytes
  const auto first = reinterpret_cast<std::uintptr_t>(b->data()) / page * page;
  *b = tensor();
  unsigned char in_core = 0;
  EXPECT_EQ(::mincore(reinterpret_cast<void*>(first), page, &in_core), -1);
  EXPECT_EQ(errno, ENOMEM);
  for (auto* t : {&*a, &*a2})
    for (std::size_t i = 0; i < t->nbytes(); ++i) ASSERT_EQ(t->data()[i], std::byte{0x5a}) << "byte " << i;
  // a view keeps a weight's slab
  const tensor view = tensor::view(*a2, dtype::f32, {1}, 0);
  const auto a_page = reinterpret_cast<std::uintptr_t>(pa) / page * page;
  *a = tensor();
  *a2 = tensor();
  EXPECT_EQ(::mincore(reinterpret_cast<void*>(a_page), page, &in_core), 0) << "the view holds the slab";
  EXPECT_EQ(view.data()[0], std::byte{0x5a});
}

}  // namespace
}  // namespace mpakt
