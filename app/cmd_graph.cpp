// `mpakt graph`: prints the v3 graph the runtime builds for a model's config.json, to read,
// edit or send to a grid.

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "app/commands.hpp"
#include "app/model_folder.hpp"
#include "runtime/models/arch.hpp"

namespace mpakt::app {

namespace {
const char* graph_usage =
    "usage: mpakt graph CONFIG.json [--model-id ID] [--ids 1,2,3 | --tokens T] [--pos P]\n"
    "                   [--cache ROWS] [--compiled] [--argmax | --sample] [--last] [--penalty P]\n"
    "                   [--alloc-cache ROWS [--history]]\n"
    "\n"
    "Prints a v3 graph for a model's config.json (any family in docs/architectures.md): a\n"
    "pass over the given ids (or T bound ids with --compiled, positions bound as\n"
    "{\"$bind\": \"pos\"}), reading and writing the session's caches with --cache ROWS.\n"
    "--argmax ends in the greedy token, --sample in a\n"
    "sample step (temperature 0 unless a call or generate sets it; its RNG step bound to pos).\n"
    "--last sends only the last row through the head (a prefill that needs only the next\n"
    "token: one logits row or token instead of one per row).\n"
    "--penalty P keeps the fed ids in the session's token history \"hist\" and has the sample\n"
    "step penalise repeats (repetitionPenalty P; one sample step per row).\n"
    "--alloc-cache ROWS prints instead the graph that allocates those caches in a session\n"
    "(and the token history with --history).\n";

std::vector<int> parse_ids(const std::string& s) {
  std::vector<int> ids;
  std::stringstream ss(s);
  std::string tok;
  while (std::getline(ss, tok, ',')) ids.push_back(std::atoi(tok.c_str()));
  return ids;
}
}  // namespace

int cmd_graph(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help") {
    std::fputs(graph_usage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  auto cfg = models::parse_arch_config(slurp(args[0]));
  if (!cfg) {
    std::fprintf(stderr, "mpakt graph: %s: %s\n", args[0].c_str(), cfg.err().message.c_str());
    return 1;
  }
  models::arch_graph_options o;
  o.model_id = "m_local";
  int alloc_rows = 0;
  bool history = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--model-id" && has_value) o.model_id = args[++i];
    else if (a == "--ids" && has_value) o.ids = parse_ids(args[++i]);
    else if (a == "--tokens" && has_value) o.tokens = std::atoi(args[++i].c_str());
    else if (a == "--pos" && has_value) o.pos = std::atoi(args[++i].c_str());
    else if (a == "--cache" && has_value) { o.use_cache = true; o.cache_rows = std::atoi(args[++i].c_str()); }
    else if (a == "--alloc-cache" && has_value) alloc_rows = std::atoi(args[++i].c_str());
    else if (a == "--compiled") o.compiled = true;
    else if (a == "--argmax") o.argmax = true;
    else if (a == "--last") o.last_only = true;
    else if (a == "--sample") o.sample = true;
    else if (a == "--penalty" && has_value) o.repetition_penalty = std::atof(args[++i].c_str());
    else if (a == "--history") history = true;
    else {
      std::fprintf(stderr, "mpakt graph: unknown or incomplete option %s\n\n%s", a.c_str(), graph_usage);
      return 2;
    }
  }
  if (alloc_rows > 0) {
    std::printf("%s\n", models::arch_cache_graph(*cfg, alloc_rows, history).c_str());
    return 0;
  }
  if (!o.compiled) {
    if (o.ids.empty()) {
      std::fprintf(stderr, "mpakt graph: give --ids, or --compiled with --tokens\n");
      return 2;
    }
    o.tokens = int(o.ids.size());
  }
  if (o.tokens <= 0 || (o.use_cache && o.cache_rows <= 0)) {
    std::fprintf(stderr, "mpakt graph: --tokens and --cache must be positive\n");
    return 2;
  }
  std::printf("%s\n", models::arch_graph(*cfg, o).c_str());
  return 0;
}

}  // namespace mpakt::app
