// mpakt_step_bench: the worker's compute alone, in process — prefill and decode of a local
// model folder through the same executor, backend and graphs a worker runs, with the time
// of every op kind, beside the read bandwidth measured in the same run.
//
//   mpakt_step_bench MODEL_DIR [--quantize none|q8|q4] [--tokens N] [--prefill T]
//                    [--threads N] [--repeats R] [--profile] [--kv-dtype f32|bf16|f16]
//                    [--backend cpu|cuda] [--roofline-gbs G] [--peak-tflops P]
//                    [--sample TEMPERATURE[,TOP_P[,TOP_K]]] [--batch N]
//
// --batch N also decodes N conversations at once, as a worker's generations do when their
// steps share passes (runtime/batching.hpp): N sessions prefilled with prompts of their own,
// then --tokens passes of the template's batched form, against the one-conversation decode
// above (tokens/s of all N, the ratio, and with --profile the op kinds of a pass).
//
// --sample draws each decode step's token with a sample step (as a chat's generation does),
// at that temperature and, when given, topP and topK; the default is an argmax step.
//
// --backend cuda runs the steps on the GPU (a build with the CUDA backend; steps it lacks run
// on the CPU reference, as a GPU worker's do). Its decode roofline is then the device's read
// bandwidth, --roofline-gbs (e.g. 4800 for an H200's HBM), not the CPU probe's; prefill is
// also reported in TFLOP/s (2 × the product weights' elements × tokens), against --peak-tflops
// when given.
//
// The prefill runs as a worker runs a client's plain graph call: its rows need not keep the
// bits each gets alone (runtime/row_bits.hpp), so prompts of 16 to 32 tokens may take the
// many-row kernels; the decode steps keep each row's bits as a generation does.
//
// --kv-dtype holds the KV caches as a model loaded with that kvDtype does (a long --prefill
// makes decode read mostly cache: the comparison of docs/performance.md, "KV caches").
//
// It is the tool for working on kernels: no HTTP, no actors, so what it reports is the
// executor and the kernels. The whole-stack comparison with the peer is bench/README.md's.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "app/model_folder.hpp"
#include "bench/read_probe.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/isa.hpp"
#include "runtime/batching.hpp"
#include "runtime/models/arch.hpp"
#include "runtime/row_bits.hpp"
#if defined(MPAKT_HAS_CUDA)
#include "backends/cuda/cuda_backend.hpp"
#endif
#include "bench/timing.hpp"
#include "runtime/tensor_builder.hpp"
#include "runtime/tensor_store.hpp"

using namespace mpakt;
using namespace mpakt::bench;

namespace {

/// Read bandwidth of `threads` threads summing a 1 GiB buffer (best of 3), bytes/s.
double read_bandwidth(int threads) { return bench::read_bandwidth(std::size_t(1) << 30, threads); }

/// The dtype the loader's plan gives a Llama-style weight under "q8"/"q4" (the rules of
/// actors/loader/quantize_plan.hpp, for the names this benchmark's models use): matrices
/// with rows a multiple of 32 wide are quantized, norms kept; under q4 the embedding, the
/// head and the value and down projections stay q8.
std::optional<dtype> planned(const std::string& name, const tensor& t, const std::string& mode) {
  if (mode == "none" || t.shape().size() < 2 || t.cols() % 32 != 0 || t.numel() < 1024 ||
      name.find("norm") != std::string::npos)
    return std::nullopt;
  if (mode == "q8") return dtype::q8;
  for (const char* s : {"embed", "lm_head", "v_proj", "down_proj"})
    if (name.find(s) != std::string::npos) return dtype::q8;
  return dtype::q4;
}

/// Re-holds every weight as a worker would after a load with `quantize` (quantize-on-load).
status requantize(tensor_store::tensor_map& weights, const std::string& mode) {
  for (auto& [name, t] : weights) {
    auto target = planned(name, t, mode);
    if (!target || *target == t.type()) continue;
    const std::string file_dtype = t.type() == dtype::bf16 ? "BF16" : t.type() == dtype::f16 ? "F16" : "F32";
    tensor_builder b(file_dtype, t.shape(), *target, name);
    MPAKT_TRY(b.add(0, std::string_view(reinterpret_cast<const char*>(t.data()), t.nbytes())));
    auto q = b.finish();
    if (!q) return std::move(q).err();
    t = std::move(*q);
    if (cpu_backend{}.holds_in_lanes() && lanes_fit(t.type(), t.shape())) MPAKT_TRY(t.to_lanes16());
  }
  return {};
}

struct op_times {
  std::map<std::string, double> seconds;
  std::map<std::string, long> count;
  void add(const executable_graph& g, const std::vector<double>& ns) {
    for (std::size_t i = 0; i < ns.size(); ++i) {
      const std::string op(g.step_op(i));
      seconds[op] += ns[i] * 1e-9;
      count[op]++;
    }
  }
  double total_s() const {
    double t = 0;
    for (auto& [op, s] : seconds) t += s;
    return t;
  }
  void print(const char* what, double per) const {
    std::vector<std::pair<double, std::string>> v;
    double total = 0;
    for (auto& [op, s] : seconds) {
      v.emplace_back(s, op);
      total += s;
    }
    std::sort(v.rbegin(), v.rend());
    std::printf("  %s, per %s: %.3f ms of kernel CPU time\n", what, what[0] == 'd' ? "token" : "pass", total / per * 1e3);
    for (auto& [s, op] : v)
      std::printf("    %-12s %8.3f ms  %5.1f %%  (%ld steps)\n", op.c_str(), s / per * 1e3, 100 * s / total,
                  long(double(count.at(op)) / per));
  }
};

/// --batch: `n` conversations decoding at once in passes of the step's batched form
/// (runtime/batching.hpp, as a worker batches its generations' steps), each session first
/// given its cache (`allocate`) and a prompt of its own (`prompt_of`) through `pre`. Prints
/// the passes' tokens/s against `one_tps` (the one-conversation decode) and, with `profile`,
/// the op kinds of a pass.
template <class Prompt, class Allocate>
bool decode_batched(tensor_store& store, backend& be, executable_graph& pre, executable_graph& step, const std::string& step_json,
                    const std::vector<std::pair<std::string, double>>& sampling, int n, int prefill, int tokens, int repeats,
                    bool profile, Prompt&& prompt_of, Allocate&& allocate, double one_tps) {
  auto decl = parse_graph_text(step_json, true);
  if (!decl) return std::fprintf(stderr, "%s\n", decl.err().message.c_str()), false;
  auto meta = batch_graph(*decl, step, n);
  if (!meta) return std::fprintf(stderr, "batching: %s\n", meta.err().message.c_str()), false;
  build_options bo;
  bo.compiled = true;
  tensor_store::source none(store, std::vector<std::string>{});
  auto g = executable_graph::build(meta->decl, none, be, bo);
  if (!g) return std::fprintf(stderr, "batched build: %s\n", g.err().message.c_str()), false;
  executable_graph& pass = **g;
  std::vector<std::string> sessions;
  std::vector<float> next(std::size_t(n), 0.0f);
  for (int b = 0; b < n; ++b) sessions.push_back("batch" + std::to_string(b));
  op_times ops;
  std::vector<double> ns, pass_s;
  for (int rep = 0; rep < repeats + 1; ++rep) {  // the first repeat warms up
    for (int b = 0; b < n; ++b) {
      const std::string& sid = sessions[std::size_t(b)];
      store.drop_session(sid);
      store.session(sid);
      if (!allocate(sid)) return std::fprintf(stderr, "batch: allocating %s failed\n", sid.c_str()), false;
      const std::vector<float> ids = prompt_of(b);
      (void)pre.bind_input("ids", ids);
      (void)pre.bind_param("pos", 0);
      pre.set_profile(nullptr);
      tensor_store::source src(store, std::vector<std::string>{sid});
      const free_rows_scope plain_call(true);
      if (auto s = pre.run(src); !s) return std::fprintf(stderr, "batch prefill: %s\n", s.err().message.c_str()), false;
      next[std::size_t(b)] = pre.value("tok")->f32()[0];
    }
    pass.set_profile(profile && rep > 0 ? &ns : nullptr);
    const auto t0 = clk::now();
    for (int i = 0; i < tokens; ++i) {
      for (int b = 0; b < n; ++b) {
        (void)pass.bind_input(session_value_name("ids", b), std::span<const float>(&next[std::size_t(b)], 1));
        (void)pass.bind_param(session_value_name("pos", b), prefill + i);
      }
      pass.clear_overrides();
      if (!sampling.empty())
        for (int b = 0; b < n; ++b)
          for (std::size_t st : meta->session_steps[std::size_t(b)]) {
            for (const auto& [name, value] : sampling) (void)pass.override_step_param(st, "sample", name, value);
            (void)pass.override_step_param(st, "sample", "step", double(prefill + i));
          }
      tensor_store::source src(store, sessions.front(), sessions);
      if (auto s = pass.run(src); !s) return std::fprintf(stderr, "batched pass: %s\n", s.err().message.c_str()), false;
      if (profile && rep > 0) ops.add(pass, ns);
      for (int b = 0; b < n; ++b) next[std::size_t(b)] = pass.value(meta->session_outputs[std::size_t(b)].front())->f32()[0];
    }
    if (rep > 0) pass_s.push_back(seconds_since(t0));
  }
  std::sort(pass_s.begin(), pass_s.end());
  const double med = pass_s[pass_s.size() / 2], tps = double(n) * tokens / med;
  std::printf("%d conversations at once: %.2f ms a pass = %.1f tokens/s (best %.1f) = %.2fx one conversation's %.1f\n", n,
              med / tokens * 1e3, tps, double(n) * tokens / pass_s.front(), tps / one_tps, one_tps);
  if (profile) {
    std::printf("kernel CPU time (this thread): %.2f ms a pass of %.2f\n", ops.total_s() / (double(repeats) * tokens) * 1e3,
                med / tokens * 1e3);
    ops.print("batched pass", double(repeats) * tokens);
  }
  return true;
}

int usage() {
  std::fputs(
      "usage: mpakt_step_bench MODEL_DIR [--quantize none|q8|q4] [--tokens N] [--prefill T] [--threads N]\n"
      "                        [--repeats R] [--profile] [--isa NAME] [--kv-dtype f32|bf16|f16]\n"
      "                        [--backend cpu|cuda] [--roofline-gbs G] [--peak-tflops P]\n"
      "                        [--sample TEMPERATURE[,TOP_P[,TOP_K]]] [--batch N]\n",
      stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string dir = argv[1], quant = "none", isa_name, kv_name = "f32";
  int tokens = 128, prefill = 128, threads = 1, repeats = 3, batch = 0;
  bool profile = false;
  std::string backend_name = "cpu";
  double roofline_gbs = 0, peak_tflops = 0;
  std::vector<std::pair<std::string, double>> sampling;  // empty: argmax
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--quantize") quant = next();
    else if (a == "--tokens") tokens = std::atoi(next().c_str());
    else if (a == "--prefill") prefill = std::atoi(next().c_str());
    else if (a == "--threads") threads = std::atoi(next().c_str());
    else if (a == "--repeats") repeats = std::atoi(next().c_str());
    else if (a == "--profile") profile = true;
    else if (a == "--batch") batch = std::atoi(next().c_str());
    else if (a == "--isa") isa_name = next();
    else if (a == "--kv-dtype") kv_name = next();
    else if (a == "--backend") backend_name = next();
    else if (a == "--roofline-gbs") roofline_gbs = std::atof(next().c_str());
    else if (a == "--peak-tflops") peak_tflops = std::atof(next().c_str());
    else if (a == "--sample") {
      const std::string v = next();
      const char* names[] = {"temperature", "topP", "topK"};
      std::size_t at = 0;
      for (int f = 0; f < 3 && at <= v.size(); ++f) {
        const std::size_t comma = std::min(v.find(',', at), v.size());
        if (comma == at) return usage();
        sampling.emplace_back(names[f], std::atof(v.substr(at, comma - at).c_str()));
        at = comma + 1;
      }
      if (at <= v.size()) return usage();
    }
    else return usage();
  }
  if (!isa_name.empty()) {
    auto level = cpu_isa::level_from_name(isa_name);
    if (!level || !cpu_isa::set_level(*level)) return std::fprintf(stderr, "unknown or unsupported --isa %s\n", isa_name.c_str()), 2;
  }
  cpu_fast::set_kernel_threads(threads);
  std::shared_ptr<backend> device;
  if (backend_name == "cuda") {
#if defined(MPAKT_HAS_CUDA)
    auto gpu = cuda_backend::create();
    if (!gpu) return std::fprintf(stderr, "--backend cuda: %s\n", gpu.err().message.c_str()), 6;
    std::printf("backend cuda: GPU %d (%s); ops left to the CPU: %zu\n", (*gpu)->device(), (*gpu)->device_name().c_str(),
                (*gpu)->host_ops().size());
    (*gpu)->activate();
    device = std::move(*gpu);
#else
    return std::fprintf(stderr, "--backend cuda: this build has no CUDA backend\n"), 6;
#endif
  } else if (backend_name != "cpu") {
    return usage();
  }
  if (quant != "none" && quant != "q8" && quant != "q4") return usage();
  if (kv_name != "f32" && kv_name != "bf16" && kv_name != "f16") return usage();
  if (batch == 1 || batch < 0 || batch > 64) return usage();
  const dtype kv_type = *dtype_from_name(kv_name);

  auto cfg = models::parse_arch_config(app::slurp(dir + "/config.json"));
  if (!cfg) return std::fprintf(stderr, "%s\n", cfg.err().message.c_str()), 1;
  auto weights = app::load_folder(dir);
  if (!weights) return std::fprintf(stderr, "%s\n", weights.err().message.c_str()), 1;
  if (auto s = requantize(*weights, quant); !s) return std::fprintf(stderr, "%s\n", s.err().message.c_str()), 1;
  std::uint64_t resident = 0;
  for (auto& [_, t] : *weights) resident += t.nbytes();

  const double bw1 = read_bandwidth(1), bwn = threads > 1 ? read_bandwidth(threads) : bw1;
  std::printf("kernels: %s; threads %d; read bandwidth %.1f GB/s (1 thread), %.1f GB/s (%d)\n",
              cpu_isa::describe().c_str(), threads, bw1 / 1e9, bwn / 1e9, threads);
  std::printf("model %s, quantize %s: %.1f MB resident; KV caches %s\n", dir.c_str(), quant.c_str(), double(resident) / 1e6,
              kv_name.c_str());

  // A prefill's product FLOPs: 2 per weight element per row for the layers' matrices, and the
  // head (lm_head, or the tied table) once: the graph sends only the last row through it.
  double product_elems = 0, head_elems = 0;
  for (auto& [name, t] : *weights) {
    if (t.shape().size() != 2) continue;
    if (name.find("lm_head") != std::string::npos) head_elems = double(t.numel());
    else if (name.find("embed") != std::string::npos) head_elems = std::max(head_elems, double(t.numel()) * (cfg->tied_embeddings ? 1 : 0));
    else product_elems += double(t.numel());
  }
  tensor_store store;
  store.put_model("m", std::move(*weights));
  cpu_backend cpu_be;
  backend& be = device ? *device : static_cast<backend&>(cpu_be);
  const int rows = prefill + tokens + 8;
  std::mt19937 rng(1);
  std::vector<int> prompt(static_cast<std::size_t>(prefill));
  for (auto& id : prompt) id = int(rng() % std::uint32_t(cfg->vocab));

  // graphs on session `sid` ("s": the one-conversation runs')
  auto build = [&](const std::string& json, bool compiled, bool server = false,
                   const std::string& sid = "s") -> std::unique_ptr<executable_graph> {
    auto decl = parse_graph_text(json, compiled);
    if (!decl) return std::fprintf(stderr, "%s\n", decl.err().message.c_str()), nullptr;
    tensor_store::source src(store, std::vector<std::string>{sid});
    build_options bo;
    bo.compiled = compiled;
    bo.server_params = server;  // the cache allocation's dtype
    auto g = executable_graph::build(std::move(*decl), src, be, bo);
    if (!g) return std::fprintf(stderr, "%s\n", g.err().message.c_str()), nullptr;
    return std::move(*g);
  };
  auto run = [&](executable_graph& g, const std::vector<std::pair<std::string, std::string>>& retain,
                 const std::string& sid = "s") -> bool {
    tensor_store::source src(store, std::vector<std::string>{sid});
    if (auto s = g.run(src); !s) return std::fprintf(stderr, "%s\n", s.err().message.c_str()), false;
    if (!retain.empty())
      if (auto s = store.apply_retain(g, sid, retain); !s) return std::fprintf(stderr, "%s\n", s.err().message.c_str()), false;
    return true;
  };

  // a session's KV caches, as the server's allocation graph makes them
  auto allocate = [&](const std::string& sid) -> bool {
    const std::string alloc = models::arch_cache_graph(*cfg, rows, false, kv_type);
    auto decl = parse_graph_text(alloc, false);
    if (!decl) return std::fprintf(stderr, "%s\n", decl.err().message.c_str()), false;
    auto g = build(alloc, false, true, sid);
    return g && run(*g, decl->retain, sid);
  };
  store.session("s");
  if (!allocate("s")) return 1;
  models::arch_graph_options o;
  o.model_id = "m";
  o.use_cache = true;
  o.cache_rows = rows;
  o.compiled = true;
  o.argmax = true;
  o.tokens = prefill;
  o.last_only = true;  // as a prefill that only needs the next token (and as llama-bench's pp)
  auto pre = build(models::arch_graph(*cfg, o), true);
  o.tokens = 1;
  o.last_only = false;
  o.argmax = sampling.empty();
  o.sample = !sampling.empty();
  const std::string step_json = models::arch_graph(*cfg, o);
  auto step = build(step_json, true);
  if (!pre || !step) return 1;

  op_times pre_ops, dec_ops;
  std::vector<double> ns;
  std::vector<double> pre_s, dec_s;
  for (int rep = 0; rep < repeats + 1; ++rep) {  // the first repeat warms up
    std::vector<float> ids(prompt.begin(), prompt.end());
    (void)pre->bind_input("ids", ids);
    (void)pre->bind_param("pos", 0);
    pre->set_profile(profile && rep > 0 ? &ns : nullptr);
    auto t0 = clk::now();
    {
      const free_rows_scope plain_call(true);
      if (!run(*pre, {})) return 1;
    }
    if (rep > 0) pre_s.push_back(seconds_since(t0));
    if (profile && rep > 0) pre_ops.add(*pre, ns);
    float next = pre->value("tok")->f32()[0];
    step->set_profile(profile && rep > 0 ? &ns : nullptr);
    t0 = clk::now();
    for (int i = 0; i < tokens; ++i) {
      (void)step->bind_input("ids", std::span<const float>(&next, 1));
      (void)step->bind_param("pos", prefill + i);
      for (const auto& [name, value] : sampling) (void)step->override_param("sample", name, value);
      if (!sampling.empty()) (void)step->override_param("sample", "step", double(prefill + i));
      if (!run(*step, {})) return 1;
      if (profile && rep > 0) dec_ops.add(*step, ns);
      next = step->value("tok")->f32()[0];
    }
    if (rep > 0) dec_s.push_back(seconds_since(t0));
  }
  std::sort(pre_s.begin(), pre_s.end());
  std::sort(dec_s.begin(), dec_s.end());
  const double pre_med = pre_s[pre_s.size() / 2], dec_med = dec_s[dec_s.size() / 2];
  const double pre_best = pre_s.front(), dec_best = dec_s.front();  // the least disturbed run
  // Bytes a decode step reads: every weight once (the tied table serves the head too) plus
  // the KV rows at the mean position.
  const double kv = 2.0 * cfg->layers * (prefill + tokens / 2.0) * cfg->kv_heads * cfg->head_dim * (kv_type == dtype::f32 ? 4 : 2);
  const double per_token = double(resident) + kv;
  const double tps = tokens / dec_med;  // (also the --batch comparison's one conversation)
  std::printf("prefill %d tokens: %.1f ms = %.1f tokens/s (best %.1f)\n", prefill, pre_med * 1e3, prefill / pre_med,
              prefill / pre_best);
  const double tflops = 2.0 * (product_elems * prefill + head_elems) / pre_best / 1e12;
  if (device || peak_tflops > 0)
    std::printf("prefill (best): %.2f TFLOP/s in products%s\n", tflops,
                peak_tflops > 0 ? (", " + std::to_string(tflops / peak_tflops).substr(0, 5) + " of " +
                                   std::to_string(int(peak_tflops)) + " TFLOP/s")
                                      .c_str()
                                : "");
  // The roofline: the device's bandwidth when given, else the CPU probe's of these threads.
  const double bw = roofline_gbs > 0 ? roofline_gbs * 1e9 : bwn;
  const std::string of = roofline_gbs > 0 ? "the " + std::to_string(int(roofline_gbs)) + " GB/s"
                                          : "the " + std::to_string(threads) + "-thread";
  std::printf("decode %d tokens: %.2f ms/token = %.1f tokens/s (best %.1f); %.1f MB/token; %.2f of %s roofline (%.1f tok/s)\n",
              tokens, dec_med / tokens * 1e3, tps, tokens / dec_best, per_token / 1e6, tps * per_token / bw, of.c_str(),
              bw / per_token);
  if (batch > 1 && !decode_batched(store, be, *pre, *step, step_json, sampling, batch, prefill, tokens, repeats, profile,
                                     [&](int b) {
                                       std::mt19937 r(100 + unsigned(b));
                                       std::vector<float> ids(prompt.size());
                                       for (auto& id : ids) id = float(r() % std::uint32_t(cfg->vocab));
                                       return ids;
                                     },
                                     allocate, tps))
    return 1;
  if (profile) {
    // CPU time of the executing thread: with --threads 1, the speed a quiet core would give
    if (device)
      std::printf("(GPU: device kernels queue without waiting, so a step's time is its launch; a step that waits -\n"
                  " a host step bringing values back, the pass's last - carries the device work queued before it)\n");
    std::printf("kernel CPU time (this thread): prefill %.1f tokens/s, decode %.1f tokens/s\n",
                double(prefill) * repeats / pre_ops.total_s(), double(tokens) * repeats / dec_ops.total_s());
    pre_ops.print("prefill", repeats);
    dec_ops.print("decode", double(repeats) * tokens);
  }
  return 0;
}
