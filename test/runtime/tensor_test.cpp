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

}  // namespace
}  // namespace mpakt
