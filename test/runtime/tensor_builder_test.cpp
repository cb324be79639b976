#include "runtime/tensor_builder.hpp"

#include "backends/cpu/fast/parallel.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace mpakt {
namespace {

/// Published bytes of `n` random elements of `file_dtype`.
std::string random_published(const std::string& file_dtype, std::int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 0.5f);
  std::string out;
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = nd(rng);
    if (file_dtype == "F32") {
      out.append(reinterpret_cast<const char*>(&v), 4);
    } else if (file_dtype == "BF16") {
      const std::uint16_t h = f32_to_bf16(v);
      out.append(reinterpret_cast<const char*>(&h), 2);
    } else if (file_dtype == "F16") {
      const std::uint16_t h = f32_to_f16(v);
      out.append(reinterpret_cast<const char*>(&h), 2);
    } else if (file_dtype == "F64") {
      const double d = double(v) * 1.000000001;
      out.append(reinterpret_cast<const char*>(&d), 8);
    } else if (file_dtype == "I64") {
      const std::int64_t x = std::int64_t(rng() % 100000) - 50000;
      out.append(reinterpret_cast<const char*>(&x), 8);
    } else if (file_dtype == "BOOL") {
      out.push_back(char(rng() % 3));  // 0, 1 and a non-canonical 2 (true)
    }
  }
  return out;
}

/// The whole tensor converted at once, as a worker without streaming would.
tensor convert_whole(const std::string& file_dtype, const shape_t& shape, dtype resident, const std::string& bytes) {
  const dtype held = *resident_dtype(file_dtype);
  auto t = tensor::make(held, shape);
  EXPECT_TRUE(t.ok());
  convert_piece(file_dtype, reinterpret_cast<const std::byte*>(bytes.data()), std::size_t(t->numel()), t->data());
  if (resident == held) return *t;
  auto c = convert_tensor(*t, resident);
  EXPECT_TRUE(c.ok()) << c.err().message;
  return *c;
}

/// The whole conversion, reordered into lanes by the pass over the finished tensor.
tensor convert_whole_in_lanes(const std::string& file_dtype, const shape_t& shape, dtype resident, const std::string& bytes) {
  tensor t = convert_whole(file_dtype, shape, resident, bytes);
  EXPECT_TRUE(t.to_lanes16().ok());
  return t;
}

/// Feeds `bytes` in pieces cut at random points (empty, one-byte and unaligned pieces included).
result<tensor> build_in_pieces(const std::string& file_dtype, const shape_t& shape, dtype resident,
                               const std::string& bytes, std::mt19937& rng, std::size_t* max_pending = nullptr,
                               bool lanes = false) {
  tensor_builder b(file_dtype, shape, resident, "w", {}, lanes);
  std::size_t off = 0;
  while (off < bytes.size()) {
    std::size_t n;
    switch (rng() % 4) {
      case 0: n = 0; break;
      case 1: n = 1; break;
      case 2: n = rng() % 7; break;
      default: n = rng() % (bytes.size() / 3 + 2); break;
    }
    n = std::min(n, bytes.size() - off);
    auto st = b.add(off, std::string_view(bytes).substr(off, n));
    if (!st) return st.err();
    if (max_pending) *max_pending = std::max(*max_pending, b.pending_bytes());
    off += n;
  }
  return b.finish();
}

void expect_same(const tensor& a, const tensor& b, const std::string& what) {
  ASSERT_EQ(a.type(), b.type()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << what << ": bytes differ";
}

struct path_case {
  std::string file_dtype;
  dtype resident;
};

TEST(TensorBuilder, RandomSplitsMatchWholeConversionOnEveryPath) {
  const std::vector<path_case> cases = {
      {"F32", dtype::f32},  {"BF16", dtype::bf16}, {"F16", dtype::f16}, {"BF16", dtype::f32},
      {"F16", dtype::f32},  {"F64", dtype::f32},   {"I64", dtype::f32}, {"BOOL", dtype::f32},
      {"F32", dtype::q8},   {"BF16", dtype::q8},   {"F16", dtype::q8},  {"F64", dtype::q8},
      {"F32", dtype::q4},   {"BF16", dtype::q4},   {"F16", dtype::q4},
  };
  const std::vector<shape_t> float_shapes = {{7, 96}, {3, 2, 64}, {1, 32}, {5, 160}};
  const std::vector<shape_t> other_shapes = {{13}, {3, 5}, {}, {2, 3, 4}};
  std::mt19937 rng(42);
  for (const auto& c : cases) {
    const auto& shapes = is_quantized(c.resident) ? float_shapes : other_shapes;
    for (const auto& shape : shapes) {
      const std::string bytes = random_published(c.file_dtype, shape_numel(shape), rng);
      const tensor want = convert_whole(c.file_dtype, shape, c.resident, bytes);
      for (int trial = 0; trial < 25; ++trial) {
        std::size_t max_pending = 0;
        auto got = build_in_pieces(c.file_dtype, shape, c.resident, bytes, rng, &max_pending);
        const std::string what = c.file_dtype + " -> " + std::string(dtype_name(c.resident)) + " " + shape_str(shape);
        ASSERT_TRUE(got.ok()) << what << ": " << got.err().message;
        expect_same(*got, want, what);
        // Buffering: at most one partial element (or row, when quantizing).
        const std::size_t unit = std::size_t(published_dtype_size(c.file_dtype)) *
                                 (is_quantized(c.resident) ? std::size_t(shape.back()) : 1);
        EXPECT_LT(max_pending, std::max<std::size_t>(unit, 1)) << what;
      }
    }
  }
}

TEST(TensorBuilder, OnePieceAndOneBytePiecesAgree) {
  std::mt19937 rng(7);
  const shape_t shape{4, 64};
  const std::string bytes = random_published("BF16", 4 * 64, rng);
  const tensor want = convert_whole("BF16", shape, dtype::q4, bytes);
  tensor_builder whole("BF16", shape, dtype::q4);
  ASSERT_TRUE(whole.add(0, bytes).ok());
  auto a = whole.finish();
  ASSERT_TRUE(a.ok());
  expect_same(*a, want, "one piece");
  tensor_builder bytewise("BF16", shape, dtype::q4);
  for (std::size_t i = 0; i < bytes.size(); ++i) ASSERT_TRUE(bytewise.add(i, bytes.substr(i, 1)).ok());
  auto b = bytewise.finish();
  ASSERT_TRUE(b.ok());
  expect_same(*b, want, "byte by byte");
}

TEST(TensorBuilder, PiecesOfManyRowsQuantizedByTheKernelThreadsMatchWholeConversion) {
  // Pieces of hundreds of KiB are quantized by the kernel threads together (several parts,
  // each with its scratch row; in lanes, its buffer of 16 rows, a group two parts share
  // written a row at a time); the bytes must be those of one thread, wherever the pieces cut
  // the rows.
  cpu_fast::set_kernel_threads(2);
  std::mt19937 rng(11);
  for (bool lanes : {false, true}) {
    const shape_t shape{lanes ? 704 : 700, 576};
    for (const path_case& c : {path_case{"BF16", dtype::q8}, path_case{"BF16", dtype::q4}, path_case{"F64", dtype::q8},
                              path_case{"F32", dtype::q4}}) {
      const std::string bytes = random_published(c.file_dtype, shape_numel(shape), rng);
      const tensor want = lanes ? convert_whole_in_lanes(c.file_dtype, shape, c.resident, bytes)
                                : convert_whole(c.file_dtype, shape, c.resident, bytes);
      for (int trial = 0; trial < 3; ++trial) {
        tensor_builder b(c.file_dtype, shape, c.resident, "w", {}, lanes);
        for (std::size_t off = 0; off < bytes.size();) {
          const std::size_t n = std::min(bytes.size() - off, std::size_t(300'000 + rng() % 900'000));
          ASSERT_TRUE(b.add(off, std::string_view(bytes).substr(off, n)).ok());
          off += n;
        }
        auto got = b.finish();
        ASSERT_TRUE(got.ok()) << got.err().message;
        EXPECT_EQ(got->lanes16(), lanes);
        expect_same(*got, want, c.file_dtype + " -> " + std::string(dtype_name(c.resident)) + (lanes ? " in lanes" : ""));
      }
    }
  }
  cpu_fast::set_kernel_threads(1);
}

TEST(TensorBuilder, BuiltInLanesGroupByGroupMatchesTheWholeReorderedWhereverPiecesCut) {
  // Pieces end mid-row and mid-group, so a group's rows come in several pieces (written a row
  // at a time), and pieces of one byte leave every row to the carried partial row; one thread.
  std::mt19937 rng(5);
  for (const path_case& c : {path_case{"F32", dtype::q8}, path_case{"BF16", dtype::q8}, path_case{"F16", dtype::q8},
                             path_case{"F64", dtype::q8}, path_case{"F32", dtype::q4}, path_case{"BF16", dtype::q4},
                             path_case{"F16", dtype::q4}}) {
    for (const shape_t& shape : {shape_t{16, 32}, shape_t{48, 96}, shape_t{80, 160}}) {
      const std::string bytes = random_published(c.file_dtype, shape_numel(shape), rng);
      const tensor want = convert_whole_in_lanes(c.file_dtype, shape, c.resident, bytes);
      const std::string what = c.file_dtype + " -> " + std::string(dtype_name(c.resident)) + " " + shape_str(shape);
      for (int trial = 0; trial < 15; ++trial) {
        auto got = build_in_pieces(c.file_dtype, shape, c.resident, bytes, rng, nullptr, true);
        ASSERT_TRUE(got.ok()) << what << ": " << got.err().message;
        EXPECT_TRUE(got->lanes16()) << what;
        expect_same(*got, want, what + " in lanes");
      }
    }
  }
  // A matrix that lanes do not fit (rows not a multiple of 16) and a vector stay row-major.
  for (const shape_t& shape : {shape_t{7, 96}, shape_t{3, 2, 64}}) {
    const std::string bytes = random_published("BF16", shape_numel(shape), rng);
    auto got = build_in_pieces("BF16", shape, dtype::q8, bytes, rng, nullptr, true);
    ASSERT_TRUE(got.ok());
    EXPECT_FALSE(got->lanes16()) << shape_str(shape);
    expect_same(*got, convert_whole("BF16", shape, dtype::q8, bytes), shape_str(shape));
  }
}

TEST(TensorBuilder, RowsConvertedElsewhereCountOnlyAsWholeRowsInOrder) {
  // A reader converts whole rows with conversion() from its own thread (two threads here, the
  // rows of one group split between them) and records them with converted(); the builder adds
  // the rows around them. Only a quantizing builder has a converter.
  std::mt19937 rng(17);
  const shape_t shape{48, 64};
  const std::string bytes = random_published("BF16", shape_numel(shape), rng);
  const std::size_t row = 64 * 2;
  for (bool lanes : {false, true}) {
    tensor_builder b("BF16", shape, dtype::q8, "w", {}, lanes);
    const row_converter rows = b.conversion();
    ASSERT_TRUE(bool(rows));
    ASSERT_EQ(rows.row_bytes(), row);
    ASSERT_EQ(rows.rows(), 48u);
    ASSERT_TRUE(b.add(0, std::string_view(bytes).substr(0, 3 * row + 5)).ok());  // rows 0-2, and 5 bytes of row 3
    // mid-row: refused (and sticky)
    tensor_builder c("BF16", shape, dtype::q8, "w", {}, lanes);
    ASSERT_TRUE(c.add(0, std::string_view(bytes).substr(0, 5)).ok());
    EXPECT_FALSE(c.converted(5, row).ok());
    ASSERT_TRUE(b.add(3 * row + 5, std::string_view(bytes).substr(3 * row + 5, row - 5)).ok());  // row 3 whole
    std::thread t1([&] { rows.convert(4, bytes.data() + 4 * row, 6); });   // rows 4-9 (group 0 cut)
    std::thread t2([&] { rows.convert(10, bytes.data() + 10 * row, 30); });  // rows 10-39
    t1.join();
    t2.join();
    EXPECT_FALSE(tensor_builder("BF16", shape, dtype::q8, "w", {}, lanes).converted(0, row + 1).ok()) << "not whole rows";
    ASSERT_TRUE(b.converted(4 * row, 36 * row).ok());
    ASSERT_TRUE(b.add(40 * row, std::string_view(bytes).substr(40 * row)).ok());
    auto got = b.finish();
    ASSERT_TRUE(got.ok()) << got.err().message;
    const tensor want = lanes ? convert_whole_in_lanes("BF16", shape, dtype::q8, bytes) : convert_whole("BF16", shape, dtype::q8, bytes);
    EXPECT_EQ(got->lanes16(), lanes);
    expect_same(*got, want, lanes ? "in lanes" : "in rows");
  }
  // kept as published or widened: no converter, and converted() is refused
  EXPECT_FALSE(bool(tensor_builder("BF16", shape, dtype::bf16).conversion()));
  EXPECT_FALSE(bool(tensor_builder("BF16", shape, dtype::f32).conversion()));
  EXPECT_FALSE(tensor_builder("BF16", shape, dtype::f32).converted(0, row).ok());
}

TEST(TensorBuilder, RefusesPiecesOutOfOrderOrPastTheEnd) {
  {
    tensor_builder b("F32", {4}, dtype::f32, "x");
    ASSERT_TRUE(b.add(0, std::string(4, '\0')).ok());
    auto st = b.add(8, std::string(4, '\0'));
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.err().message.find("tensor x"), std::string::npos) << st.err().message;
    EXPECT_NE(st.err().message.find("in order"), std::string::npos) << st.err().message;
    EXPECT_FALSE(b.finish().ok());  // sticky
  }
  {
    tensor_builder b("BF16", {4}, dtype::bf16, "y");
    auto st = b.add(0, std::string(9, '\0'));
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.err().message.find("runs past"), std::string::npos) << st.err().message;
  }
}

TEST(TensorBuilder, BytesWrittenInPlaceCountInOrderAndOnlyWhereNothingIsConverted) {
  // kept as published: a reader writes into destination() and records it; the result holds
  // exactly those bytes, mixed freely with copied pieces
  tensor_builder b("BF16", {2, 4}, dtype::bf16, "w");
  tensor dst = b.destination();
  ASSERT_FALSE(dst.empty());
  ASSERT_EQ(dst.nbytes(), 16u);
  const std::string bytes = "0123456789abcdef";
  std::memcpy(dst.data(), bytes.data(), 6);
  ASSERT_TRUE(b.wrote(0, 6).ok());
  ASSERT_TRUE(b.add(6, bytes.substr(6, 4)).ok());
  auto early = b.wrote(12, 4);  // (byte 10 is next)
  ASSERT_FALSE(early.ok());
  EXPECT_NE(early.err().message.find("in order"), std::string::npos) << early.err().message;
  tensor_builder c("BF16", {2, 4}, dtype::bf16, "w");
  std::memcpy(c.destination().data(), bytes.data(), 16);
  ASSERT_TRUE(c.wrote(0, 10).ok());
  EXPECT_FALSE(c.wrote(10, 7).ok());  // past the end
  tensor_builder d("BF16", {2, 4}, dtype::bf16, "w");
  std::memcpy(d.destination().data(), bytes.data(), 16);
  ASSERT_TRUE(d.wrote(0, 10).ok() && d.wrote(10, 6).ok());
  auto t = d.finish();
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(std::memcmp(t->data(), bytes.data(), 16), 0);
  // converted (widened or quantized): no destination, and nothing may claim to be written
  tensor_builder widen("BF16", {2, 4}, dtype::f32, "w");
  EXPECT_TRUE(widen.destination().empty());
  EXPECT_FALSE(widen.wrote(0, 4).ok());
  tensor_builder q8("BF16", {1, 32}, dtype::q8, "w");
  EXPECT_TRUE(q8.destination().empty());
  // what the coordinator asks before it lets an embedded worker read a tensor's range itself:
  // the same answer as the builder's (a destination exactly where it keeps as published)
  for (const auto& [file_dtype, resident, kept] : std::vector<std::tuple<std::string, dtype, bool>>{
           {"BF16", dtype::bf16, true}, {"F16", dtype::f16, true}, {"F32", dtype::f32, true},
           {"BF16", dtype::f32, false}, {"F16", dtype::f32, false}, {"BF16", dtype::q8, false},
           {"F32", dtype::q4, false}, {"F64", dtype::f32, false}, {"I64", dtype::f32, false},
           {"BOOL", dtype::f32, false}}) {
    EXPECT_EQ(tensor_builder::keeps_as_published(file_dtype, resident), kept) << file_dtype << " " << dtype_name(resident);
    EXPECT_EQ(!tensor_builder(file_dtype, {2, 32}, resident, "w").destination().empty(), kept)
        << file_dtype << " " << dtype_name(resident);
  }
}

TEST(TensorBuilder, FinishNamesMissingBytes) {
  tensor_builder b("F64", {3}, dtype::f32, "pos");
  ASSERT_TRUE(b.add(0, std::string(13, '\0')).ok());
  EXPECT_EQ(b.pending_bytes(), 5u);
  auto t = b.finish();
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.err().message.find("only 13 of its 24 bytes"), std::string::npos) << t.err().message;
}

TEST(TensorBuilder, RefusesConversionsItDoesNotDo) {
  for (const auto& [file_dtype, resident, shape] :
       std::vector<std::tuple<std::string, dtype, shape_t>>{{"F32", dtype::bf16, {4}},
                                                            {"I64", dtype::q8, {2, 32}},
                                                            {"BOOL", dtype::q4, {2, 32}},
                                                            {"I8", dtype::f32, {4}},
                                                            {"F8_E4M3", dtype::f32, {4}},
                                                            {"BF16", dtype::q8, {2, 48}}}) {
    tensor_builder b(file_dtype, shape, resident, "w");
    auto st = b.add(0, "");
    EXPECT_FALSE(st.ok()) << file_dtype << " -> " << dtype_name(resident);
    EXPECT_FALSE(b.finish().ok());
  }
}

TEST(TensorBuilder, EmptyTensorsFinishAtOnce) {
  tensor_builder b("BF16", {0, 64}, dtype::q8);
  auto t = b.finish();
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_EQ(t->numel(), 0);
}

}  // namespace
}  // namespace mpakt
