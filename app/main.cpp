// mpakt: one binary, one subcommand per role (see docs/architecture.md).

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "runtime/registry_check.hpp"

namespace {

void usage(FILE* out) {
  std::fputs(
      "usage: mpakt <command> [options]\n"
      "\n"
      "commands:\n"
      "  serve               run the coordinator: the v3 HTTP API with an embedded worker; see `mpakt serve --help`\n"
      "  worker --join H:P   run a volunteer worker that joins a coordinator's --cluster-port; see `mpakt worker --help`\n"
      "  ops                 print the op catalogue (the GET /api/ops document)\n"
      "  run GRAPH.json      validate and run a graph on this machine's CPU; see `mpakt run --help`\n"
      "  graph CONFIG.json   print the v3 graph for a model's config.json; see `mpakt graph --help`\n"
      "  demo MODEL_DIR      greedy-decode a story with a local model through the runtime\n"
      "  admin COMMAND       manage accounts and API keys; see `mpakt admin --help`\n"
      "  host DIR --port N   serve a folder of checkpoints in the Hugging Face hub's URL layout\n"
      "  top --url U --key K the grid's workers, models, sessions and generations in a terminal\n"
      "  help                this text\n",
      out);
}

/// The allocator's thresholds fixed for processes that load models (serve, worker). glibc
/// starts by mapping every block of 128 KB or more from the kernel and raises that threshold
/// with each such block freed, so a process's first loads took their tensors fresh from the
/// kernel twice over — the first as separate mappings, the second from a heap grown anew —
/// page-faulting every byte both times (a volunteer's second load: 52,000 faults and a
/// quarter of the speed of later ones). Fixed, blocks below 4 MB (tensors and all) come from
/// the heap from the first load on and a freed model's memory serves the next one; blocks of
/// 4 MB and more — larger tensors (runtime/tensor.cpp maps those itself), 16 MB pieces and
/// buffers — are mapped and returned when freed, so a load's transient pieces never stay in
/// the heap; at most 64 MB of free heap top is kept (glibc's own bound once its thresholds
/// have moved).
void fix_allocator_thresholds() {
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    usage(args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  // The op schema, the op definitions and the kernels must agree before anything runs.
  const auto problems = mpakt::check_registry();
  if (!problems.empty()) {
    for (const auto& p : problems) std::fprintf(stderr, "mpakt: %s\n", p.c_str());
    std::fprintf(stderr, "mpakt: refusing to start: the op registry does not match schemas/ops.json\n");
    return 1;
  }
  // Kernel threads: MPAKT_THREADS for every command (serve also takes --threads).
  if (const char* t = std::getenv("MPAKT_THREADS"); t && std::atoi(t) > 0) mpakt::cpu_fast::set_kernel_threads(std::atoi(t));
  const std::string cmd = args[0];
  args.erase(args.begin());
  if (cmd == "serve" || cmd == "worker") fix_allocator_thresholds();
  if (cmd == "ops") return mpakt::app::cmd_ops(args);
  if (cmd == "serve") return mpakt::app::cmd_serve(args);
  if (cmd == "run") return mpakt::app::cmd_run(args);
  if (cmd == "graph") return mpakt::app::cmd_graph(args);
  if (cmd == "demo") return mpakt::app::cmd_demo(args);
  if (cmd == "host") return mpakt::app::cmd_host(args);
  if (cmd == "admin") return mpakt::app::cmd_admin(args);
  if (cmd == "worker") return mpakt::app::cmd_worker(args);
  if (cmd == "top") return mpakt::app::cmd_top(args);
  std::fprintf(stderr, "mpakt: unknown command \"%s\"\n\n", cmd.c_str());
  usage(stderr);
  return 2;
}
