// KV caches held as bf16 or f16: cache_write's rounding into them and attention reading
// them, on the reference kernel and every fast attention level this CPU has, against
// test/fixtures/kv_cache.json (numpy's float16 and ml_dtypes' bfloat16 rounding, float64
// attention over the rounded keys and values; tools/goldens/gen_kv_cache.py). Then the graph
// side: zeros' server-only dtype (OP-ZEROS-01 stays the catalogue's), cache_write in place
// (OP-CW-02, SES-09) and one compiled template serving caches of every width.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/tensor_store.hpp"
#include "test/support/files.hpp"
#include "test/support/levels.hpp"
#include "test/support/op_checks.hpp"
#include "test/support/op_runner.hpp"

namespace mpakt {
namespace {

struct fixture {
  rapidjson::Document doc;
  fixture() { doc.Parse(test::read_file(std::string(MPAKT_FIXTURES_DIR) + "/kv_cache.json").c_str()); }
};
const fixture& golden() {
  static const fixture f;
  return f;
}

std::vector<float> f32_of(const rapidjson::Value& v, const char* key) { return *decode_f32_base64(v[key].GetString()); }

/// The 16-bit patterns of a fixture entry (little-endian u16, base64).
std::vector<std::uint16_t> bits_of(const rapidjson::Value& v, const char* key) {
  // (read as 4-byte groups: the fixture's counts are even)
  auto words = decode_f32_base64(v[key].GetString());
  std::vector<std::uint16_t> out;
  if (!words) {
    ADD_FAILURE() << "undecodable " << key;
    return out;
  }
  out.resize(words->size() * 2);
  std::memcpy(out.data(), words->data(), out.size() * 2);
  return out;
}

/// A [rows, width] cache of `t` holding `values` written by cache_write's reference kernel.
tensor half_cache(dtype t, std::int64_t rows, std::int64_t width, const std::vector<float>& values) {
  tensor cache = *tensor::make(t, {rows, width});
  std::memset(cache.data(), 0, cache.nbytes());
  auto out = test::run_op("cache_write", R"({"offset":0})", {cache, test::t32({rows, width}, values)});
  EXPECT_TRUE(out.ok()) << out.err().message;
  return cache;
}

std::vector<float> widened(const tensor& t) {
  const tensor w = *to_f32(t);
  return {w.f32_span().begin(), w.f32_span().end()};
}

TEST(HalfCache, CacheWriteRoundsToNearestEvenAsTheLibrariesDo) {
  const auto& doc = golden().doc;
  ASSERT_TRUE(doc.IsObject()) << "test/fixtures/kv_cache.json is missing or not JSON";
  for (const auto& r : doc["rounding"].GetArray()) {
    const std::string name = r["dtype"].GetString();
    SCOPED_TRACE(name);
    const dtype t = *dtype_from_name(name);
    const auto values = f32_of(r, "valuesB64");
    const auto want = bits_of(r, "bitsB64");
    const std::int64_t n = r["count"].GetInt64();
    ASSERT_EQ(std::int64_t(values.size()), n);
    const tensor cache = half_cache(t, n, 1, values);
    const auto* got = reinterpret_cast<const std::uint16_t*>(cache.data());
    int wrong = 0;
    for (std::int64_t i = 0; i < n && wrong < 10; ++i)
      if (got[i] != want[std::size_t(i)]) {
        ++wrong;
        ADD_FAILURE() << "value " << values[std::size_t(i)] << " (#" << i << ") became 0x" << std::hex << got[i]
                      << ", not 0x" << want[std::size_t(i)];
      }
  }
}

TEST(HalfCache, NaNStaysNaN) {
  for (dtype t : {dtype::bf16, dtype::f16}) {
    const tensor cache = half_cache(t, 2, 1, {std::nanf(""), -std::nanf("")});
    for (float v : widened(cache)) EXPECT_TRUE(std::isnan(v)) << dtype_name(t);
  }
}

/// Every level's attention over half caches matches the float64 attention over the values
/// the libraries round to; and a fast kernel reading bf16/f16 gives the same bits as that
/// kernel reading the same values widened to f32 beforehand (the conversion is exact and the
/// arithmetic the f32 path's).
TEST(HalfCache, AttentionReadsHalfCachesOnEveryLevel) {
  const auto& doc = golden().doc;
  ASSERT_TRUE(doc.IsObject());
  const auto levels = test::fast_kernels_on_this_cpu("attention");
  ASSERT_EQ(doc["attention"].Size(), 8u);
  int checked = 0;
  for (int threads : {1, 2}) {
    cpu_fast::set_kernel_threads(threads);
    for (const auto& c : doc["attention"].GetArray()) {
      const std::string name = c["name"].GetString();
      const dtype t = *dtype_from_name(c["dtype"].GetString());
      const int heads = c["heads"].GetInt(), kvh = c["kvHeads"].GetInt(), hd = c["headDim"].GetInt(),
                vhd = c["vHeadDim"].GetInt();
      const std::int64_t rows = c["rows"].GetInt64(), keys = c["keys"].GetInt64();
      const tensor q = test::t32({rows, std::int64_t(heads) * hd}, f32_of(c, "qB64"));
      const tensor k = half_cache(t, keys, std::int64_t(kvh) * hd, f32_of(c, "kB64"));
      const tensor v = half_cache(t, keys, std::int64_t(kvh) * vhd, f32_of(c, "vB64"));
      const tensor kw = *to_f32(k), vw = *to_f32(v);
      const auto want = f32_of(c, "expectedB64");
      const std::string params = "{\"heads\":" + std::to_string(heads) + ",\"kvHeads\":" + std::to_string(kvh) + ",\"headDim\":" +
               std::to_string(hd) + ",\"vHeadDim\":" + std::to_string(vhd) + ",\"posOffset\":" +
               std::to_string(c["posOffset"].GetInt64()) +
               (c["window"].GetInt() ? ",\"window\":" + std::to_string(c["window"].GetInt()) : std::string()) + "}";
      {
        SCOPED_TRACE("reference " + name);
        auto got = test::run_op("attention", params, {q, k, v});
        ASSERT_TRUE(got.ok()) << got.err().message;
        test::expect_close(std::vector<float>(got->f32_span().begin(), got->f32_span().end()), want, 2e-5, 1e-4);
      }
      for (const auto& lk : levels) {
        SCOPED_TRACE(lk.level + " " + name + " threads " + std::to_string(threads));
        ASSERT_TRUE(lk.claims({q, k, v}, params)) << "the fast kernel should claim half caches";
        auto got = test::run_op("attention", params, {q, k, v}, lk.fn);
        ASSERT_TRUE(got.ok()) << got.err().message;
        const std::vector<float> g(got->f32_span().begin(), got->f32_span().end());
        test::expect_close(g, want, 2e-5, 1e-4);
        auto same = test::run_op("attention", params, {q, kw, vw}, lk.fn);
        ASSERT_TRUE(same.ok());
        ASSERT_EQ(0, std::memcmp(got->data(), same->data(), got->nbytes())) << "not the f32 path's bits";
        ++checked;
      }
    }
  }
  cpu_fast::set_kernel_threads(1);
  EXPECT_EQ(checked, 2 * 8 * int(levels.size()));
}

// ---- graphs ----

const char* alloc_graph = R"({"inputs":[],"steps":[
  {"op":"zeros","in":[],"out":"kc","params":{"shape":[8,4],"dtype":"bf16"}}],"retain":{"kc":"kc"}})";

result<std::unique_ptr<executable_graph>> build(const std::string& text, tensor_store& store, const std::string& session,
                                                bool compiled, bool server) {
  auto decl = parse_graph_text(text, compiled);
  if (!decl) return std::move(decl).err();
  tensor_store::source src(store, session.empty() ? std::vector<std::string>{} : std::vector<std::string>{session});
  static cpu_backend be;
  build_options o;
  o.compiled = compiled;
  o.server_params = server;
  return executable_graph::build(std::move(*decl), src, be, o);
}

TEST(HalfCache, ZerosDtypeIsForTheServersOwnGraphsOnly) {
  tensor_store store;
  store.session("s");
  // a client's graph: dtype is not a parameter of the catalogue's zeros
  auto client = build(alloc_graph, store, "s", false, false);
  ASSERT_FALSE(client.ok());
  EXPECT_NE(client.err().message.find("unknown parameter dtype"), std::string::npos) << client.err().message;
  auto server = build(alloc_graph, store, "s", false, true);
  ASSERT_TRUE(server.ok()) << server.err().message;
  EXPECT_EQ((*server)->desc("kc")->type, dtype::bf16);
  std::string bad = alloc_graph;
  bad.replace(bad.find("bf16"), 4, "int3");
  auto refused = build(bad, store, "s", false, true);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.err().message.find("parameter dtype must be f32, bf16 or f16, not \"int3\""), std::string::npos)
      << refused.err().message;
}

/// The chat's decode template is compiled once and serves sessions whatever their caches'
/// width; a template reading a session tensor where only f32 serves refuses a half one.
TEST(HalfCache, OneCompiledTemplateServesCachesOfEveryWidth) {
  tensor_store store;
  const char* tmpl = R"({"inputs":[{"name":"x","shape":[1,4],"bind":"x"},{"name":"kc","session":"kc","shape":[8,4]}],
    "steps":[{"op":"cache_write","in":["kc","x"],"out":"kc2","params":{"offset":{"$bind":"pos"}}},
             {"op":"attention","in":["x","kc2","kc2"],"out":"a","params":{"heads":1,"headDim":4,"posOffset":{"$bind":"pos"}}}],
    "outputs":["a"]})";
  std::vector<float> out[3];
  int i = 0;
  for (const char* t : {"f32", "bf16", "f16"}) {
    SCOPED_TRACE(t);
    const std::string s = std::string("s_") + t;
    store.session(s);
    std::string alloc = alloc_graph;
    alloc.replace(alloc.find("bf16"), 4, t);
    auto a = build(alloc, store, s, false, true);
    ASSERT_TRUE(a.ok()) << a.err().message;
    tensor_store::source src(store, {s});
    ASSERT_TRUE((*a)->run(src).ok());
    ASSERT_TRUE(store.apply_retain(**a, s, {{"kc", "kc"}}).ok());
    auto g = build(tmpl, store, "", true, false);
    ASSERT_TRUE(g.ok()) << g.err().message;
    for (int pos = 0; pos < 3; ++pos) {
      ASSERT_TRUE((*g)->bind_input("x", std::vector<float>{1.0f + float(pos), 0.1f, -2.0f / 3.0f, 0.3f}).ok());
      ASSERT_TRUE((*g)->bind_param("pos", pos).ok());
      auto st = (*g)->run(src);
      ASSERT_TRUE(st.ok()) << st.err().message;
    }
    const tensor* r = (*g)->value("a");
    out[i++] = std::vector<float>(r->f32_span().begin(), r->f32_span().end());
    EXPECT_EQ(store.session(s)["kc"].type(), *dtype_from_name(t));
  }
  // -2/3 and 0.3 are not exact in 16 bits: the half caches differ from f32 a little
  test::expect_close(out[1], out[0], 1e-2, 1e-2);
  test::expect_close(out[2], out[0], 1e-3, 1e-3);
  EXPECT_NE(out[1], out[0]);

  // read by an add: only f32 serves there
  const char* strict = R"({"inputs":[{"name":"kc","session":"kc","shape":[8,4]}],
    "steps":[{"op":"add","in":["kc","kc"],"out":"y"}],"outputs":["y"]})";
  auto g = build(strict, store, "", true, false);
  ASSERT_TRUE(g.ok()) << g.err().message;
  tensor_store::source src(store, {"s_bf16"});
  auto st = (*g)->run(src);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("is bf16 [8, 4] but the graph expects f32"), std::string::npos) << st.err().message;
}

}  // namespace
}  // namespace mpakt
