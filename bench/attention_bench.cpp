// mpakt_attention_bench: one decode step's attention kernel alone (its chunks' partials and
// their fold, as the step runs them), on one thread or split over --threads, over layers
// of KV caches (f32, or bf16/f16 with --kv) laid out as a worker's are ([keys, kvHeads × headDim] per layer), beside
// plain reads of the same bytes in two orders — every cache row whole and in turn, and each kv
// head's slice of every row, a head at a time (the order the kernel reads them in). With
// enough layers the caches no longer fit the CPU's caches and the step reads memory.
//
//   mpakt_attention_bench [--keys N] [--layers L] [--heads H] [--kv-heads G] [--head-dim D]
//                         [--kv f32|bf16|f16] [--repeats R] [--threads T]
//
// Defaults: the SmolLM2-135M shape (9 heads, 3 kv heads of 64) at 1,000 keys over 30 layers.
// Reports the best of R runs: ns per key and kv head, and GB/s of cache read.

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/fast/isa_kernels.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/isa.hpp"
#include "bench/timing.hpp"
#include "runtime/dtype.hpp"

using namespace mpakt;
using namespace mpakt::bench;

namespace {

struct options {
  long keys = 1000;
  int layers = 30, heads = 9, kv_heads = 3, head_dim = 64, repeats = 15, threads = 1;
  std::string kv = "f32";  ///< the caches' element: f32, bf16 or f16
  int elem() const { return kv == "f32" ? 4 : 2; }
};

/// Sums of the caches' bytes, taken as floats, read in one of two orders (so the reads cannot
/// be dropped; a half-width cache's bytes are summed as floats too: only the reads count).
__attribute__((target("avx2"))) float read_rows(const std::vector<std::vector<float>>& k,
                                                const std::vector<std::vector<float>>& v) {
  __m256 acc = _mm256_setzero_ps();
  for (std::size_t l = 0; l < k.size(); ++l)
    for (std::size_t i = 0; i + 8 <= k[l].size(); i += 8)
      acc = _mm256_add_ps(acc, _mm256_add_ps(_mm256_loadu_ps(k[l].data() + i), _mm256_loadu_ps(v[l].data() + i)));
  float out[8];
  _mm256_storeu_ps(out, acc);
  return out[0] + out[7];
}

__attribute__((target("avx2"))) float read_head_slices(const std::vector<std::vector<float>>& k,
                                                       const std::vector<std::vector<float>>& v, const options& o) {
  __m256 acc = _mm256_setzero_ps();
  const long slice = long(o.head_dim) * o.elem() / 4, row = o.kv_heads * slice;  // in floats
  for (std::size_t l = 0; l < k.size(); ++l)
    for (int g = 0; g < o.kv_heads; ++g)
      for (long j = 0; j < o.keys; ++j) {
        const float* kr = k[l].data() + j * row + g * slice;
        const float* vr = v[l].data() + j * row + g * slice;
        for (long i = 0; i < slice; i += 8)
          acc = _mm256_add_ps(acc, _mm256_add_ps(_mm256_loadu_ps(kr + i), _mm256_loadu_ps(vr + i)));
      }
  float out[8];
  _mm256_storeu_ps(out, acc);
  return out[0] + out[7];
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long n = std::atol(argv[i + 1]);
    if (a == "--kv") o.kv = argv[i + 1];
    else if (a == "--keys") o.keys = n;
    else if (a == "--layers") o.layers = int(n);
    else if (a == "--heads") o.heads = int(n);
    else if (a == "--kv-heads") o.kv_heads = int(n);
    else if (a == "--head-dim") o.head_dim = int(n);
    else if (a == "--repeats") o.repeats = int(n);
    else if (a == "--threads") o.threads = int(n);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const auto level = cpu_isa::best();
  cpu_fast::set_kernel_threads(std::max(1, o.threads));
  if (level < cpu_isa::level::avx2 || o.keys < 1 || o.layers < 1 || o.kv_heads < 1 || o.heads % o.kv_heads != 0 ||
      o.head_dim % 16 != 0 || o.head_dim > 256 || (o.kv != "f32" && o.kv != "bf16" && o.kv != "f16")) {
    std::fprintf(stderr, "needs AVX2, keys and layers >= 1, heads a multiple of kv heads, a head dim that is a "
                         "multiple of 16 up to 256, --kv f32, bf16 or f16\n");
    return 2;
  }
  const long row = long(o.kv_heads) * o.head_dim;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  // each layer's cache as its bytes (held in floats: aligned for every element type)
  std::vector<std::vector<float>> k(std::size_t(o.layers)), v(std::size_t(o.layers));
  for (int l = 0; l < o.layers; ++l)
    for (auto* c : {&k[std::size_t(l)], &v[std::size_t(l)]}) {
      c->resize(std::size_t(o.keys * row * o.elem() / 4));
      auto* half = reinterpret_cast<std::uint16_t*>(c->data());
      for (long i = 0; i < o.keys * row; ++i) {
        const float x = u(rng);
        if (o.kv == "f32") (*c)[std::size_t(i)] = x;
        else half[i] = o.kv == "bf16" ? f32_to_bf16(x) : f32_to_f16(x);
      }
    }
  std::vector<float> q(std::size_t(o.heads) * std::size_t(o.head_dim)), out(q.size());
  for (auto& x : q) x = u(rng);

  const bool wide = level >= cpu_isa::level::avx512;
  std::vector<float> ml, acc;
  std::vector<cpu_fast::attention_partial> parts(std::size_t(o.kv_heads));
  float sink = 0;
  auto args_of = [&](int l) {
    cpu_fast::attention_args a;
    a.kv = o.kv == "f32"    ? cpu_fast::attention_args::kv_type::f32
           : o.kv == "bf16" ? cpu_fast::attention_args::kv_type::bf16
                            : cpu_fast::attention_args::kv_type::f16;
    a.q = q.data();
    a.k = k[std::size_t(l)].data();
    a.v = v[std::size_t(l)].data();
    a.out = out.data();
    a.q_stride = a.out_stride = std::int64_t(o.heads) * o.head_dim;
    a.k_stride = a.v_stride = row;
    a.rows = 1;
    a.keys = o.keys;
    a.heads = o.heads;
    a.kv_heads = o.kv_heads;
    a.head_dim = a.v_head_dim = o.head_dim;
    a.pos_offset = o.keys - 1;
    a.scale = 1.0f / float(o.head_dim);
    return a;
  };
  const double attention_s = best_of(o.repeats, [&] {
    for (int l = 0; l < o.layers; ++l) {
      const cpu_fast::attention_args a = args_of(l);
      // as a decode step runs it: every chunk's partials — split over the threads by chunk and
      // by slices of the kv heads as attention_kernel splits them — then their fold per kv head
      const std::int64_t chunks = wide ? cpu_fast::avx512::attention_chunks(a) : cpu_fast::avx2::attention_chunks(a);
      const std::int64_t per_g = std::int64_t(o.heads / o.kv_heads) * chunks;
      ml.resize(std::size_t(2 * o.kv_heads * per_g));
      acc.resize(std::size_t(o.kv_heads * per_g * o.head_dim));
      for (int g = 0; g < o.kv_heads; ++g)
        parts[std::size_t(g)] = {ml.data() + g * per_g, ml.data() + (o.kv_heads + g) * per_g, acc.data() + g * per_g * o.head_dim};
      const std::int64_t slices = cpu_fast::attention_slices(o.threads, chunks, o.kv_heads);
      cpu_fast::parallel_for(int(chunks * slices), [&](int j) {
        const std::int64_t c = j / slices, sl = j % slices;
        const int g0 = int(o.kv_heads * sl / slices), g1 = int(o.kv_heads * (sl + 1) / slices);
        if (wide) cpu_fast::avx512::attention_partials(a, 0, 1, g0, g1, c, c + 1, parts.data());
        else cpu_fast::avx2::attention_partials(a, 0, 1, g0, g1, c, c + 1, parts.data());
      });
      for (int g = 0; g < o.kv_heads; ++g) {
        if (wide) cpu_fast::avx512::attention_fold(a, 0, 1, g, parts[std::size_t(g)]);
        else cpu_fast::avx2::attention_fold(a, 0, 1, g, parts[std::size_t(g)]);
      }
      sink += out[0];
    }
  });
  // The other kernel a decode row can take: attention_rows, each kv head's query heads through
  // that head's slices of the rows (one kv head's slice of every row, a row apart), the kv
  // heads dealt to the threads.
  const double by_head_s = best_of(o.repeats, [&] {
    for (int l = 0; l < o.layers; ++l) {
      const cpu_fast::attention_args a = args_of(l);
      const int group = o.heads / o.kv_heads;
      cpu_fast::parallel_for(o.kv_heads, [&](int g) {
        if (wide) cpu_fast::avx512::attention_rows(a, 0, 1, g, 0, group);
        else cpu_fast::avx2::attention_rows(a, 0, 1, g, 0, group);
      });
      sink += out[0];
    }
  });
  const double rows_s = best_of(o.repeats, [&] { sink += read_rows(k, v); });
  const double slices_s = best_of(o.repeats, [&] { sink += read_head_slices(k, v, o); });

  const double bytes = 2.0 * o.layers * double(o.keys) * double(row) * o.elem();
  std::printf("kernels: %s; %d layers of %ld keys, %d heads, %d kv heads of %d: %.1f MB of %s cache\n",
              std::string(cpu_isa::level_name(wide ? cpu_isa::level::avx512 : cpu_isa::level::avx2)).c_str(), o.layers,
              o.keys, o.heads, o.kv_heads, o.head_dim, bytes / 1e6, o.kv.c_str());
  auto line = [&](const char* what, double s) {
    std::printf("  %-34s %8.3f ms  %6.1f ns per key and kv head  %5.1f GB/s\n", what, s * 1e3,
                s * 1e9 / (double(o.layers) * double(o.keys) * o.kv_heads), bytes / s / 1e9);
  };
  line("attention (one decode row)", attention_s);
  line("attention, a kv head at a time", by_head_s);
  line("read: rows whole, in turn", rows_s);
  line("read: a kv head's slices, per head", slices_s);
  std::printf("(checksum %g)\n", double(sink));
  return 0;
}
