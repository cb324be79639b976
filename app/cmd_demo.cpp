// `mpakt demo`: greedy-decodes a story with a local model through the runtime
// (caches in a session, one compiled decode step per token) and prints it.

#include <rapidjson/document.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "app/commands.hpp"
#include "app/model_folder.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "runtime/json.hpp"
#include "runtime/models/arch.hpp"
#include "runtime/tensor_store.hpp"

namespace mpakt::app {

namespace {

/// Token pieces from tokenizer.json's vocab, for display only (the real tokenizer is a
/// separate component): SentencePiece's "▁" becomes a space, <0xNN> a byte.
std::vector<std::string> read_pieces(const std::string& path) {
  std::vector<std::string> pieces;
  const std::string text = slurp(path);
  auto parsed = parse_json(text, path);
  if (!parsed || !parsed->IsObject() || !parsed->HasMember("model") || !(*parsed)["model"].IsObject() ||
      !(*parsed)["model"].HasMember("vocab"))
    return pieces;
  const rapidjson::Document& d = *parsed;
  const auto& vocab = d["model"]["vocab"];
  if (!vocab.IsObject()) return pieces;
  pieces.resize(vocab.MemberCount());
  for (auto it = vocab.MemberBegin(); it != vocab.MemberEnd(); ++it) {
    if (!it->value.IsInt() || it->value.GetInt() < 0 || std::size_t(it->value.GetInt()) >= pieces.size()) continue;
    std::string p = it->name.GetString();
    if (p == "<s>" || p == "</s>" || p == "<unk>") p.clear();  // control tokens are not text
    if (p.size() == 6 && p.rfind("<0x", 0) == 0) p = std::string(1, char(std::stoi(p.substr(3, 2), nullptr, 16)));
    std::string out;
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (p.compare(i, 3, "\xe2\x96\x81") == 0) { out += ' '; i += 2; }
      else out += p[i];
    }
    pieces[std::size_t(it->value.GetInt())] = out;
  }
  return pieces;
}

}  // namespace

int cmd_demo(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help") {
    std::fputs("usage: mpakt demo MODEL_DIR [--tokens N]\n\nGreedy-decodes from \"<s>Once upon a time\" with a local model (any family in docs/architectures.md).\n",
               args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string dir = args[0];
  int new_tokens = 64;
  if (args.size() >= 3 && args[1] == "--tokens") new_tokens = std::max(1, std::atoi(args[2].c_str()));
  auto cfg = models::parse_arch_config(slurp(dir + "/config.json"));
  if (!cfg) return std::fprintf(stderr, "mpakt demo: %s\n", cfg.err().message.c_str()), 1;
  auto weights = load_folder(dir);
  if (!weights) return std::fprintf(stderr, "mpakt demo: %s\n", weights.err().message.c_str()), 1;
  const auto pieces = read_pieces(dir + "/tokenizer.json");

  tensor_store store;
  store.put_model("m_demo", std::move(*weights));
  cpu_backend be;
  tensor_store::source src(store, {"s_demo"});
  store.session("s_demo");
  const std::vector<int> prompt = {1, 403, 407, 261, 378};  // "<s>Once upon a time" in its vocabulary
  const int rows = int(prompt.size()) + new_tokens + 1;

  auto run_inline = [&](const std::string& json) -> std::unique_ptr<executable_graph> {
    auto decl = parse_graph_text(json, false);
    if (!decl) return std::fprintf(stderr, "mpakt demo: %s\n", decl.err().message.c_str()), nullptr;
    auto retain = decl->retain;
    auto g = executable_graph::build(std::move(*decl), src, be);
    if (!g) return std::fprintf(stderr, "mpakt demo: %s\n", g.err().message.c_str()), nullptr;
    if (auto st = (*g)->run(src); !st) return std::fprintf(stderr, "mpakt demo: %s\n", st.err().message.c_str()), nullptr;
    if (auto st = store.apply_retain(**g, "s_demo", retain); !st) return nullptr;
    return std::move(*g);
  };
  if (!run_inline(models::arch_cache_graph(*cfg, rows))) return 1;
  models::arch_graph_options o;
  o.model_id = "m_demo";
  o.use_cache = true;
  o.cache_rows = rows;
  o.ids = prompt;
  o.tokens = int(prompt.size());
  o.argmax = true;
  auto pre = run_inline(models::arch_graph(*cfg, o));
  if (!pre) return 1;
  int next = int(pre->value("tok")->f32()[prompt.size() - 1]);

  o.compiled = true;
  o.tokens = 1;
  auto decl = parse_graph_text(models::arch_graph(*cfg, o), true);
  build_options bo;
  bo.compiled = true;
  auto step = executable_graph::build(std::move(*decl), src, be, bo);
  if (!step) return std::fprintf(stderr, "mpakt demo: %s\n", step.err().message.c_str()), 1;

  auto show = [&](int id) {
    if (id >= 0 && std::size_t(id) < pieces.size()) std::fputs(pieces[std::size_t(id)].c_str(), stdout);
    std::fflush(stdout);
  };
  for (int id : prompt) show(id);
  const auto t0 = std::chrono::steady_clock::now();
  int produced = 0;
  for (int pos = int(prompt.size()); produced < new_tokens; ++pos) {
    show(next);
    ++produced;
    if (next == 2) break;  // </s>
    const float id = float(next);
    (void)(*step)->bind_input("ids", std::span<const float>(&id, 1));
    (void)(*step)->bind_param("pos", pos);
    if (auto st = (*step)->run(src); !st) return std::fprintf(stderr, "\nmpakt demo: %s\n", st.err().message.c_str()), 1;
    next = int((*step)->value("tok")->f32()[0]);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n\n[%d tokens, %.0f tokens/s, runtime on CPU; the HTTP server arrives with the coordinator]\n", produced,
              produced / std::max(s, 1e-9));
  return 0;
}

}  // namespace mpakt::app
