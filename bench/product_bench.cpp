// mpakt_product_bench: one decode product's kernel alone — x [rows, K] against a weight
// [N, K] (transB), held as bf16, q8 or q4 — on the kernel the worker's CPU backend picks at
// the current level, from memory and from the CPU's caches, beside a plain read of the same
// number of bytes in the same run.
//
//   mpakt_product_bench [--dtype bf16|q8|q4] [--k K] [--n N] [--rows R] [--threads T]
//                       [--mb MB] [--repeats R] [--isa LEVEL]
//
// "From memory" cycles through enough separate weights to fill --mb megabytes (256 by default,
// far past any L3), as a decode step passes over a model's layers; "in cache" repeats one
// weight. Reported: GB/s of weight bytes (best of --repeats), and the read probe's GB/s.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/isa.hpp"
#include "bench/read_probe.hpp"
#include "bench/timing.hpp"
#include "runtime/graph.hpp"
#include "runtime/op.hpp"
#include "runtime/tensor_builder.hpp"

using namespace mpakt;
using namespace mpakt::bench;

namespace {

tensor random_weight(std::int64_t n, std::int64_t k, dtype type, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<std::uint16_t> v(std::size_t(n * k));  // published as bf16, as models are
  for (auto& x : v) x = f32_to_bf16(dist(rng));
  tensor_builder b("BF16", {n, k}, type, "w");
  if (auto st = b.add(0, std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * 2)); !st) {
    std::fprintf(stderr, "%s\n", st.err().message.c_str());
    std::exit(1);
  }
  auto t = b.finish();
  if (!t) {
    std::fprintf(stderr, "%s\n", t.err().message.c_str());
    std::exit(1);
  }
  return std::move(*t);
}

}  // namespace

int main(int argc, char** argv) {
  std::string type_name = "q4", isa;
  std::int64_t k = 1536, n = 576, rows = 1, mb = 256;
  int threads = 1, repeats = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--dtype") type_name = next();
    else if (a == "--k") k = std::stoll(next());
    else if (a == "--n") n = std::stoll(next());
    else if (a == "--rows") rows = std::stoll(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--mb") mb = std::stoll(next());
    else if (a == "--repeats") repeats = std::stoi(next());
    else if (a == "--isa") isa = next();
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const auto type = dtype_from_name(type_name);
  if (!type || (*type != dtype::bf16 && *type != dtype::q8 && *type != dtype::q4)) {
    std::fprintf(stderr, "--dtype: bf16, q8 or q4\n");
    return 2;
  }
  if (!isa.empty()) {
    auto l = cpu_isa::level_from_name(isa);
    if (!l || !cpu_isa::set_level(*l)) {
      std::fprintf(stderr, "--isa %s: not available here\n", isa.c_str());
      return 2;
    }
  }
  cpu_fast::set_kernel_threads(threads);
  std::printf("%s\n", cpu_isa::describe().c_str());

  tensor first = random_weight(n, k, *type, 1);
  // held as a worker of this level holds it (q4 in lanes where the kernels read that form)
  const bool lanes = cpu_backend{}.holds_in_lanes() && lanes_fit(first.type(), first.shape());
  if (lanes) (void)first.to_lanes16();
  const std::int64_t copies = std::max<std::int64_t>(1, mb * 1000000 / std::int64_t(first.nbytes()));
  std::vector<tensor> weights{first};
  for (std::int64_t c = 1; c < copies; ++c) {
    auto t = random_weight(n, k, *type, 1);
    if (lanes) (void)t.to_lanes16();
    weights.push_back(std::move(t));
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto x = tensor::make(dtype::f32, {rows, k});
  for (std::int64_t i = 0; i < rows * k; ++i) x->f32()[i] = dist(rng);
  auto y = tensor::make(dtype::f32, {rows, n});

  const op_def* def = find_op_def("matmul");
  auto pm = parse_params_text(R"({"transB": true})");
  auto params = def->parse(*pm);
  const tensor_desc descs[2] = {x->desc(), first.desc()};
  cpu_backend backend;
  const kernel_fn fn = backend.kernel("matmul", descs, **params);
  std::printf("kernel %s%s, %s [%lld, %lld] × x [%lld, %lld], %lld weights of %.2f MB, %d thread(s)\n",
              std::string(backend.variant("matmul", descs, **params)).c_str(), lanes ? " (weights in lanes)" : "",
              type_name.c_str(), (long long)n,
              (long long)k, (long long)rows, (long long)k, (long long)copies, double(first.nbytes()) / 1e6, threads);
  workspace ws;
  auto run = [&](tensor& w) {
    tensor* in[2] = {&*x, &w};
    kernel_call call{params->get(), in, &*y, &ws, 0b10};
    if (auto st = fn(call); !st) {
      std::fprintf(stderr, "%s\n", st.err().message.c_str());
      std::exit(1);
    }
  };
  double mem = 0, cache = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = clk::now();
    for (auto& w : weights) run(w);
    mem = std::max(mem, double(copies) * double(first.nbytes()) / seconds_since(t0));
    const int loops = int(std::max<std::int64_t>(copies, 64));
    t0 = clk::now();
    for (int i = 0; i < loops; ++i) run(weights[0]);
    cache = std::max(cache, double(loops) * double(first.nbytes()) / seconds_since(t0));
  }
  const double probe = bench::read_bandwidth(std::size_t(copies) * first.nbytes(), threads);
  std::printf("from memory %.1f GB/s (%.2f of the read probe's %.1f), in cache %.1f GB/s\n", mem / 1e9, mem / probe,
              probe / 1e9, cache / 1e9);
  return 0;
}
