#include "runtime/tensor.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mpakt
