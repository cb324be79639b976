// Inspect and streaming on local files written by the test (the same code paths as remote
// sources, through byte_reader; the real `mpakt host` is driven in loader_host_test.cpp).

#include "actors/loader/inspect.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "actors/loader/selection.hpp"
#include "actors/loader/stream.hpp"
#include "runtime/tensor_builder.hpp"

namespace mpakt::loader {
namespace {

namespace fs = std::filesystem;

struct st_tensor {
  std::string name;
  std::string dtype;
  shape_t shape;
  std::string data;  ///< published bytes; filled with a pattern when empty
};

/// A safetensors file: 8-byte length, JSON header (padded with spaces to `min_header`), data.
std::string safetensors_bytes(std::vector<st_tensor> ts, std::size_t min_header = 0) {
  std::string json = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::string data;
  for (auto& t : ts) {
    const std::size_t n = std::size_t(shape_numel(t.shape)) * std::size_t(published_dtype_size(t.dtype));
    if (t.data.empty()) {
      t.data.resize(n);
      for (std::size_t i = 0; i < n; ++i) t.data[i] = char((i * 131 + t.name.size() * 7 + i / 251) & 0xff);
    }
    std::string shape;
    for (std::size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
    json += ",\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
            std::to_string(data.size()) + "," + std::to_string(data.size() + t.data.size()) + "]}";
    data += t.data;
  }
  json += "}";
  while (json.size() < min_header || json.size() % 8) json += ' ';
  std::string out(8, '\0');
  std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[std::size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + json + data;
}

void write_file(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

/// A local reader that records every request, and can be told a file is missing.
class recording_reader final : public byte_reader {
 public:
  struct call {
    std::string location;
    std::uint64_t first, length;
  };
  result<range_read> read_range(const std::string& location, std::uint64_t first, std::uint64_t length) override {
    calls.push_back({location, first, length});
    if (fail_next > 0) {
      --fail_next;
      return fail_with;
    }
    return inner_->read_range(location, first, length);
  }
  result<std::string> read_all(const std::string& location, std::size_t max_bytes) override {
    calls.push_back({location, 0, max_bytes});
    return inner_->read_all(location, max_bytes);
  }
  std::uint64_t requests() const override { return calls.size(); }
  std::vector<call> calls;
  int fail_next = 0;  ///< this many read_range calls fail with `fail_with` first
  error fail_with{errc::unavailable, "connection reset"};

 private:
  std::unique_ptr<byte_reader> inner_ = make_local_reader();
};

class LoaderInspect : public testing::Test {
 protected:
  fs::path dir = fs::path(testing::TempDir()) / ("mpakt_inspect_" + std::to_string(::getpid()));
  void SetUp() override { fs::remove_all(dir); }
  void TearDown() override { fs::remove_all(dir); }

  result<model_index> inspect_path(const fs::path& p, byte_reader& r) {
    auto src = parse_source(p.string());
    if (!src) return std::move(src).err();
    return inspect_source(*src, r);
  }
};

TEST_F(LoaderInspect, SingleFileIsOneRequestAndReportsEverything) {
  write_file(dir / "m/model.safetensors",
             safetensors_bytes({{"model.embed_tokens.weight", "BF16", {64, 32}, {}},
                                {"model.norm.weight", "F32", {32}, {}},
                                {"model.position_ids", "I64", {1, 16}, {}},
                                {"model.mask", "BOOL", {4, 4}, {}},
                                {"model.freq", "F64", {3}, {}}}));
  recording_reader r;
  auto idx = inspect_path(dir / "m", r);
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  ASSERT_EQ(r.requests(), 1u);  // INS-03: one range request for a single file
  EXPECT_EQ(r.calls[0].first, 0u);
  EXPECT_EQ(r.calls[0].length, header_probe_bytes);
  EXPECT_EQ(idx->count(), 5u);
  EXPECT_FALSE(idx->sharded);
  EXPECT_TRUE(idx->shards.empty());
  EXPECT_EQ(idx->total_bytes, 64u * 32 * 2 + 32 * 4 + 16 * 8 + 16 + 3 * 8);
  EXPECT_EQ(idx->dtypes.at("bf16"), 1u);
  EXPECT_EQ(idx->dtypes.at("int64"), 1u);
  EXPECT_EQ(idx->dtypes.at("bool"), 1u);
  EXPECT_EQ(idx->dtypes.at("f64"), 1u);
  const tensor_info* e = idx->find("model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->entry.shape, (shape_t{64, 32}));
  EXPECT_EQ(e->file_offset, idx->files[0].data_start + e->entry.begin);

  // The API's answer (written as JSON at the edge: test/http/api/render_test.cpp).
  const inspect_model_reply reply = inspect_reply_of(*idx);
  EXPECT_EQ(reply.tensors.size(), 5u);
  EXPECT_EQ(reply.total_bytes, idx->total_bytes);
  ASSERT_FALSE(reply.dtypes.empty());
  EXPECT_EQ(reply.dtypes[0].dtype, "bf16");  // by name
  EXPECT_EQ(reply.dtypes[0].count, 1u);
  EXPECT_FALSE(reply.sharded);
  EXPECT_TRUE(reply.shards.empty());
  const auto& t0 = reply.tensors[0];
  EXPECT_EQ(t0.name, "model.embed_tokens.weight");
  EXPECT_EQ(t0.shape, (std::vector<std::int64_t>{64, 32}));  // as stored: [out, in]
  EXPECT_EQ(t0.dtype, "bf16");
  EXPECT_EQ(t0.bytes, 4096u);
}

TEST_F(LoaderInspect, LongHeaderCostsOneMoreRequest) {
  write_file(dir / "long.safetensors", safetensors_bytes({{"w", "F32", {8}, {}}}, 300 * 1024));
  recording_reader r;
  auto idx = inspect_path(dir / "long.safetensors", r);
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  ASSERT_EQ(r.requests(), 2u);
  EXPECT_EQ(r.calls[1].first, header_probe_bytes);
  EXPECT_EQ(r.calls[1].length, idx->files[0].data_start - header_probe_bytes);
  EXPECT_EQ(idx->count(), 1u);
}

TEST_F(LoaderInspect, ShardedViaIndexWithZeroIndexedShards) {
  write_file(dir / "s/model-00000-of-00002.safetensors",
             safetensors_bytes({{"a.weight", "BF16", {32, 32}, {}}, {"b.weight", "BF16", {32, 32}, {}},
                                {"unlisted", "F32", {2}, {}}}));
  write_file(dir / "s/model-00001-of-00002.safetensors", safetensors_bytes({{"c.weight", "F16", {64, 32}, {}}}));
  write_file(dir / "s/model.safetensors.index.json",
             R"({"metadata":{"total_size":8192},"weight_map":{"c.weight":"model-00001-of-00002.safetensors",)"
             R"("a.weight":"model-00000-of-00002.safetensors","b.weight":"model-00000-of-00002.safetensors"}})");
  recording_reader r;
  auto idx = inspect_path(dir / "s", r);
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  EXPECT_EQ(r.requests(), 3u);  // the index and one header per shard
  EXPECT_TRUE(idx->sharded);
  EXPECT_EQ(idx->shards,
            (std::vector<std::string>{"model-00000-of-00002.safetensors", "model-00001-of-00002.safetensors"}));
  ASSERT_EQ(idx->count(), 3u);  // weight_map is the truth: "unlisted" is not part of the model
  EXPECT_EQ(idx->tensors[0].name(), "a.weight");
  EXPECT_EQ(idx->tensors[2].name(), "c.weight");
  EXPECT_EQ(idx->tensors[2].file, 1u);
  EXPECT_EQ(idx->total_bytes, 2u * 2048 + 4096);
  const inspect_model_reply reply = inspect_reply_of(*idx);
  EXPECT_TRUE(reply.sharded);
  EXPECT_EQ(reply.shards, idx->shards);
}

TEST_F(LoaderInspect, IndexErrorsNameTheShardOrTensor) {
  write_file(dir / "x/s0.safetensors", safetensors_bytes({{"a", "F32", {4}, {}}}));
  write_file(dir / "x/model.safetensors.index.json", R"({"weight_map":{"a":"s0.safetensors","b":"s1.safetensors"}})");
  recording_reader r;
  auto missing = inspect_path(dir / "x", r);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.err().message.find("names shard s1.safetensors"), std::string::npos) << missing.err().message;

  write_file(dir / "x/model.safetensors.index.json", R"({"weight_map":{"a":"s0.safetensors","zz":"s0.safetensors"}})");
  auto absent_tensor = inspect_path(dir / "x", r);
  ASSERT_FALSE(absent_tensor.ok());
  EXPECT_NE(absent_tensor.err().message.find("maps tensor zz to shard s0.safetensors"), std::string::npos)
      << absent_tensor.err().message;

  write_file(dir / "x/model.safetensors.index.json", R"({"weight_map":{"a":"../s0.safetensors"}})");
  auto escape = inspect_path(dir / "x", r);
  ASSERT_FALSE(escape.ok());
  EXPECT_NE(escape.err().message.find("not a plain relative file name"), std::string::npos) << escape.err().message;

  write_file(dir / "x/model.safetensors.index.json", R"({"nothing":1})");
  auto no_map = inspect_path(dir / "x", r);
  ASSERT_FALSE(no_map.ok());
  EXPECT_NE(no_map.err().message.find("has no weight_map"), std::string::npos) << no_map.err().message;
}

TEST_F(LoaderInspect, BrokenFilesAreRefusedNamingThem) {
  write_file(dir / "short.safetensors", "abc");
  write_file(dir / "huge_header.safetensors", std::string("\xff\xff\x00\x00\x00\x00\x00\x00", 8) + "{}");
  std::string truncated = safetensors_bytes({{"w", "F32", {1000}, {}}});
  truncated.resize(truncated.size() - 10);
  write_file(dir / "truncated.safetensors", truncated);
  for (const char* name : {"short.safetensors", "huge_header.safetensors", "truncated.safetensors"}) {
    recording_reader r;
    auto idx = inspect_path(dir / name, r);
    ASSERT_FALSE(idx.ok()) << name;
    EXPECT_EQ(idx.err().code, errc::invalid);
    EXPECT_NE(idx.err().message.find((dir / name).string()), std::string::npos) << idx.err().message;
  }
}

TEST_F(LoaderInspect, MissingCandidatesAreNamed) {
  model_source src;
  src.text = "hf:Org/Gone";
  src.kind = source_kind::url;
  src.candidates = {{(dir / "model.safetensors").string(), false}, {(dir / "model.safetensors.index.json").string(), true}};
  recording_reader r;
  auto idx = inspect_source(src, r);
  ASSERT_FALSE(idx.ok());
  EXPECT_EQ(idx.err().message, "source hf:Org/Gone: neither " + (dir / "model.safetensors").string() + " nor " +
                                   (dir / "model.safetensors.index.json").string() + " exists");
}

TEST_F(LoaderInspect, SelectionOverARealIndex) {
  write_file(dir / "m/model.safetensors", safetensors_bytes({{"model.layers.0.a", "F32", {4}, {}},
                                                             {"model.layers.1.a", "F32", {4}, {}},
                                                             {"model.layers.10.a", "F32", {4}, {}}}));
  recording_reader r;
  auto idx = inspect_path(dir / "m", r);
  ASSERT_TRUE(idx.ok());
  auto sel = select_tensors(*idx, {{"model.layers.1.*"}, {}, {}});
  ASSERT_TRUE(sel.ok());
  ASSERT_EQ(sel->size(), 1u);
  EXPECT_EQ(idx->tensors[(*sel)[0]].name(), "model.layers.1.a");
}

TEST_F(LoaderInspect, StreamingDeliversPiecesInOrderAndBuildsTheSameTensor) {
  std::mt19937 rng(3);
  std::string big(std::size_t(96 * 4000) * 2, '\0');
  for (auto& c : big) c = char(rng() & 0xff);
  // Keep the bf16 values finite and moderate: clear the top exponent bits of each high byte.
  for (std::size_t i = 1; i < big.size(); i += 2) big[i] = char(big[i] & 0x3f);
  write_file(dir / "m/model.safetensors",
             safetensors_bytes({{"small", "F32", {3}, {}}, {"w", "BF16", {4000, 96}, big}, {"tail", "I64", {5}, {}}}));
  recording_reader r;
  auto idx = inspect_path(dir / "m", r);
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  const tensor_info* w = idx->find("w");
  ASSERT_NE(w, nullptr);
  const tensor_location loc = locate(*idx, *w);
  EXPECT_EQ(loc.length, big.size());

  // Pieces of 100,000 bytes: 8 pieces, the last short; a builder quantizes as they arrive.
  tensor_builder builder(loc.file_dtype, loc.shape, dtype::q8, loc.name);
  std::string got;
  std::uint64_t expect_offset = 0;
  const auto before = r.requests();
  auto stats = stream_tensor(r, loc, [&](std::uint64_t off, std::string_view bytes) -> status {
    EXPECT_EQ(off, expect_offset);
    EXPECT_LE(bytes.size(), 100'000u);
    expect_offset += bytes.size();
    got.append(bytes);
    return builder.add(off, bytes);
  }, 100'000);
  ASSERT_TRUE(stats.ok()) << stats.err().message;
  EXPECT_EQ(got, big);
  EXPECT_EQ(stats->pieces, 8u);
  EXPECT_EQ(r.requests() - before, 8u);
  EXPECT_EQ(stats->bytes, big.size());
  EXPECT_LE(stats->peak_buffered, 100'000u);
  auto t = builder.finish();
  ASSERT_TRUE(t.ok()) << t.err().message;
  auto whole = tensor::make(dtype::bf16, {4000, 96});
  ASSERT_TRUE(whole.ok());
  std::memcpy(whole->data(), big.data(), big.size());
  auto want = convert_tensor(*whole, dtype::q8);
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(t->nbytes(), want->nbytes());
  EXPECT_EQ(std::memcmp(t->data(), want->data(), t->nbytes()), 0);
}

TEST_F(LoaderInspect, StreamingUsesSixteenMegabytePiecesByDefault) {
  EXPECT_EQ(piece_bytes, 16'000'000u);
  std::string big(std::size_t(20'000'000), '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = char((i * 7 + i / 1000) & 0xff);
  write_file(dir / "big/model.safetensors", safetensors_bytes({{"emb", "BF16", {10'000'000}, big}}));
  recording_reader r;
  auto idx = inspect_path(dir / "big", r);
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  std::vector<std::size_t> sizes;
  std::uint64_t mismatches = 0, off_seen = 0;
  auto stats = stream_tensor(r, locate(*idx, idx->tensors[0]), [&](std::uint64_t off, std::string_view bytes) {
    sizes.push_back(bytes.size());
    if (std::string_view(big).substr(std::size_t(off), bytes.size()) != bytes) ++mismatches;
    off_seen = off + bytes.size();
    return ok_status();
  });
  ASSERT_TRUE(stats.ok()) << stats.err().message;
  EXPECT_EQ(sizes, (std::vector<std::size_t>{16'000'000, 4'000'000}));
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(off_seen, big.size());
  EXPECT_EQ(stats->peak_buffered, 16'000'000u);
}

TEST_F(LoaderInspect, StreamingStopsWhenTheSinkFailsAndNamesShortFiles) {
  write_file(dir / "m/model.safetensors", safetensors_bytes({{"w", "F32", {1000}, {}}}));
  recording_reader r;
  auto idx = inspect_path(dir / "m", r);
  ASSERT_TRUE(idx.ok());
  int calls = 0;
  auto stopped = stream_tensor(r, locate(*idx, idx->tensors[0]), [&](std::uint64_t, std::string_view) -> status {
    ++calls;
    return make_error(errc::unavailable, "worker w1 went away");
  }, 1000);
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(stopped.err().message, "worker w1 went away");

  tensor_location past = locate(*idx, idx->tensors[0]);
  past.length += 100;  // as if the file were truncated after inspect
  auto short_read = stream_tensor(r, past, [](std::uint64_t, std::string_view) { return ok_status(); }, 1000);
  ASSERT_FALSE(short_read.ok());
  EXPECT_NE(short_read.err().message.find("tensor w: "), std::string::npos) << short_read.err().message;
  EXPECT_NE(short_read.err().message.find("model.safetensors ends at byte"), std::string::npos)
      << short_read.err().message;
}

TEST_F(LoaderInspect, StreamingRetriesTransientFailuresOnly) {
  write_file(dir / "m/model.safetensors", safetensors_bytes({{"w", "F32", {1000}, {}}}));
  recording_reader r;
  auto idx = inspect_path(dir / "m", r);
  ASSERT_TRUE(idx.ok());
  const auto loc = locate(*idx, idx->tensors[0]);
  std::string got;
  auto collect = [&](std::uint64_t, std::string_view b) {
    got.append(b);
    return ok_status();
  };
  r.fail_next = piece_retries;  // each failure is retried: the stream still succeeds
  auto ok = stream_tensor(r, loc, collect, 3000);
  ASSERT_TRUE(ok.ok()) << ok.err().message;
  EXPECT_EQ(got.size(), 4000u);

  r.fail_next = piece_retries + 1;  // one too many
  got.clear();
  auto fails = stream_tensor(r, loc, collect, 3000);
  ASSERT_FALSE(fails.ok());
  EXPECT_EQ(fails.err().code, errc::unavailable);
  EXPECT_EQ(fails.err().message, "tensor w: connection reset");
  EXPECT_TRUE(got.empty());

  const auto before = r.requests();
  r.fail_next = 1;
  r.fail_with = error{errc::invalid, "host x does not honour Range requests"};
  auto final_error = stream_tensor(r, loc, collect, 3000);
  ASSERT_FALSE(final_error.ok());
  EXPECT_EQ(r.requests() - before, 1u);  // not retried
}

}  // namespace
}  // namespace mpakt::loader
