// `mpakt serve`: the coordinator — the HTTP API, the accounts database and the actors —
// plus, by default, one embedded CPU worker so a single command serves.

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include <boost/asio/ip/address.hpp>

#include "actors/accounts/accounts_actor.hpp"
#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/coordinator/gate_actor.hpp"
#include "actors/coordinator/pool_actor.hpp"
#include "actors/loader/host_fetch.hpp"
#include "actors/worker/worker_actor.hpp"
#include "actors/cluster.hpp"
#include "actors/cluster_tls.hpp"
#include "app/backend_choice.hpp"
#include "app/commands.hpp"
#include "app/process.hpp"
#include "app/sizes.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/isa.hpp"
#include "http/api/routes.hpp"
#include "runtime/log.hpp"

namespace mpakt {
std::string_view embedded_api_reference();
}

namespace mpakt::app {

namespace {

/// Whether `address` (what --address names) only listens on this machine.
bool loopback_address(const std::string& address) {
  if (address == "localhost") return true;
  boost::system::error_code ec;
  const auto ip = boost::asio::ip::make_address(address, ec);
  return !ec && ip.is_loopback();
}

const char* serve_usage =
    "usage: mpakt serve --port N --data-dir DIR [--dev] [--hf-endpoint URL] [--hf-token-file FILE] [--workers N]\n"
    "                   [--default-quantize none|q8|q4|auto] [--kv-dtype f32|bf16|f16] [--address ADDR]\n"
    "                   [--worker-memory SIZE] [--graph-timeout-ms MS] [--body-limit SIZE]\n"
    "                   [--durable-budget SIZE] [--v2-quota SIZE] [--graph-budget SIZE]\n"
    "                   [--threads N] [--web DIR]\n"
    "                   [--cluster-port N] [--worker-fetch on|off] [--backend cpu|cuda|auto]\n"
    "                   [--allow-local DIR]... [--allow-private-sources]\n"
    "                   [--max-connections N] [--max-connections-per-address N]\n"
    "                   [--header-timeout-ms MS] [--body-timeout-ms MS] [--generations-per-key N]\n"
    "                   [--login-failures-per-user N] [--login-failures-per-address N] [--login-window-s S]\n"
    "                   [--join-failures-per-address N] [--log-format json|text] [--metrics-open]\n"
    "\n"
    "Runs the coordinator: the v3 HTTP API, accounts (SQLite in DIR) and the actors, with\n"
    "N embedded workers (default 1; 0 = only remote volunteers).\n"
    "  --backend B         what the embedded workers compute on (default cpu): cuda (the GPU, or\n"
    "                      nothing: without a usable one serve says why and exits with status 6;\n"
    "                      with several GPUs the workers take turns over them) or auto (the GPU\n"
    "                      where one is usable, else the CPU, saying why in the banner and the\n"
    "                      pool's status)\n"
    "  --dev               approve sign-ups at once (a one-person machine)\n"
    "  --hf-endpoint URL   where hf: sources resolve (default https://huggingface.co, or\n"
    "                      $MPAKT_HF_ENDPOINT); point it at `mpakt host` for offline grids.\n"
    "                      It is trusted: it may be on a private address\n"
    "  --hf-token-file FILE  a Hugging Face token for gated and private repositories (or\n"
    "                      $HF_TOKEN), sent to the hf-endpoint only; a load's own token wins\n"
    "  --allow-local DIR   let sources name local paths inside DIR (repeatable); without it,\n"
    "                      local paths are refused\n"
    "  --allow-private-sources  let URL sources (and their redirects) reach loopback,\n"
    "                      link-local and private addresses; refused by default\n"
    "  --worker-memory     memory each embedded worker offers, e.g. 8G, 512M (default 8G)\n"
    "  --graph-timeout-ms  how long one graph may run before 504 (default 300000)\n"
    "  --body-limit        largest request body, e.g. 256M (default 256M)\n"
    "  --durable-budget    per-key room for session checkpoints on the coordinator and the calls\n"
    "                      journaled since them (default 1G)\n"
    "  --v2-quota SIZE     per-key room for v2 tensor uploads (default 128000000 bytes)\n"
    "  --graph-budget SIZE per-key room for the text of compiled graphs (default 256M)\n"
    "  --threads N         threads a kernel may use (default: the machine's cores, or $MPAKT_THREADS)\n"
    "  --cluster-port N    accept volunteers (`mpakt worker --join ADDR:N --token TOKEN`) on\n"
    "                      --address, port N; tokens from `mpakt admin volunteer-token`\n"
    "                      (with --dev on a loopback --address, a token named dev is made at\n"
    "                      start and printed). The\n"
    "                      port speaks TLS only; the banner prints the certificate's fingerprint\n"
    "                      that volunteers pin (--coordinator-fingerprint)\n"
    "  --verify-fraction F spot-checks of volunteers: the fraction of their passes (graph calls\n"
    "                      and generations) re-run on a verifier and compared (default 0.02):\n"
    "                      after the first passes, the fraction of windows of passes checked\n"
    "  --verify-first N    a new volunteer's first N passes are all checked (default 8); with\n"
    "                      --verify-fraction 0 and --verify-first 0 nothing is checked\n"
    "  --verify-window N   the mean number of passes in a window (default 64): a volunteer's\n"
    "                      sessions are copied from it once a window, checked or not\n"
    "  --verify-memory SIZE room in this process for the verifiers' copies of volunteers' weights,\n"
    "                      all volunteers together (default 2G); passes on weights beyond it go\n"
    "                      unchecked\n"
    "  --verify-queue SIZE  room per volunteer for what its checked windows hold while they wait\n"
    "                      for its verifier — passes, its answers, its copies of the sessions\n"
    "                      (default 256M); past it the window goes unchecked\n"
    "  --verify-queue-total SIZE\n"
    "                      the same room, all volunteers together (default 1G)\n"
    "  --cluster-reply-budget SIZE\n"
    "                      room for volunteers' large answers (graph outputs, checkpoints),\n"
    "                      which the cluster port holds until each is whole, all volunteers\n"
    "                      together (default: a quarter of this machine's memory); an answer\n"
    "                      larger closes its volunteer's link\n"
    "  --data-port N|off   where volunteers' weights travel, beside the cluster port (TLS with\n"
    "                      its certificate; each volunteer is offered a one-time ticket over the\n"
    "                      cluster link). Default: the cluster port + 1 (any free port when that\n"
    "                      is 0); off: weights go over the cluster link\n"
    "  --worker-fetch on|off\n"
    "                      on (default): the embedded workers and the volunteers read their\n"
    "                      weights from the model host themselves (straight into the tensors\n"
    "                      they keep as published), for each file they prove to read the same\n"
    "                      there (a volunteer: where it may, see `mpakt worker --host-fetch`;\n"
    "                      a spot-checked one beside its verifier here, unless the model is too\n"
    "                      large to copy); off, or a load that sends a hub token: every byte\n"
    "                      comes through this process\n"
    "  --cluster-cert FILE the cluster port's certificate (PEM) and its key; by default a key\n"
    "  --cluster-key FILE  pair and self-signed certificate made in DIR/cluster on first start\n"
    "  --log-format F      stderr log lines: text, or json (one object per line); default text\n"
    "                      when stderr is a terminal, json otherwise. The banner stays on stdout\n"
    "  --metrics-open      serve GET /metrics to anyone who reaches --address (default: an\n"
    "                      operator's key in x-api-key or Authorization: Bearer)\n"
    "Abuse limits (0 = none):\n"
    "  --max-connections N             open HTTP connections in all (default 1024; 503 past it)\n"
    "  --max-connections-per-address N ... from one client address (default 256; 429 past it)\n"
    "  --header-timeout-ms MS          a request's header must arrive within MS of its first byte (default 10000)\n"
    "  --body-timeout-ms MS            its body within MS of the header (default 300000); slower clients are dropped\n"
    "  --generations-per-key N         generate and chat requests one key may run at once (default 8; 429 past it)\n"
    "  --login-failures-per-user N     failed logins per username in the window before 429 (default 10)\n"
    "  --login-failures-per-address N  failed logins per client address in the window (default 50)\n"
    "  --login-window-s S              the window of the two above, in seconds (default 300)\n"
    "  --join-failures-per-address N   failed volunteer joins per address in a minute before its\n"
    "                                  joins are refused unchecked for the rest of it (default 10)\n";

}  // namespace

int cmd_serve(const std::vector<std::string>& args) {
  std::string data_dir, address = "127.0.0.1", web_dir;
  int port = -1, workers = 1, cluster_port = -1;
  int data_port = -2;  // (-2: the cluster port + 1; -1: off)
  backend_kind backend_asked = backend_kind::cpu;
  std::string cluster_cert, cluster_key;
  // Kernel threads per worker: by default the machine's cores (the embedded worker is the
  // only heavy computation; CAF's scheduler and the HTTP thread mostly wait).
  int threads = std::max(1u, std::thread::hardware_concurrency());
  if (const char* t = std::getenv("MPAKT_THREADS"); t && std::atoi(t) > 0) threads = std::atoi(t);
  bool dev = false, metrics_open = false;
  log::format log_format = isatty(STDERR_FILENO) ? log::format::text : log::format::json;
  coordinator_config ccfg;
  if (const char* env = std::getenv("MPAKT_HF_ENDPOINT"); env && *env) ccfg.load.hf_endpoint = env;
  if (const char* env = std::getenv("HF_TOKEN"); env && *env) ccfg.load.hf_token = env;
  std::uint64_t worker_memory = std::uint64_t(8) << 30, body_limit = std::uint64_t(256) << 20;
  http::server_config scfg;
  http::abuse_config abuse;
  gate_config gcfg;
  cluster_guard::limits guard_limits;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    const std::string* v = nullptr;
    auto bad = [&](const char* what) {
      std::fprintf(stderr, "mpakt serve: %s\n\n%s", what, serve_usage);
      return 2;
    };
    if (a == "--help" || a == "-h") { std::fputs(serve_usage, stdout); return 0; }
    else if (a == "--dev") dev = true;
    else if (a == "--metrics-open") metrics_open = true;
    else if (a == "--log-format") {
      if (!(v = value()) || (*v != "json" && *v != "text")) return bad("--log-format takes json or text");
      log_format = *v == "json" ? log::format::json : log::format::text;
    }
    else if (a == "--port") { if (!(v = value())) return bad("--port needs a number"); port = std::atoi(v->c_str()); }
    else if (a == "--data-dir") { if (!(v = value())) return bad("--data-dir needs a folder"); data_dir = *v; }
    else if (a == "--address") { if (!(v = value())) return bad("--address needs an address"); address = *v; }
    else if (a == "--hf-endpoint") { if (!(v = value())) return bad("--hf-endpoint needs a URL"); ccfg.load.hf_endpoint = *v; }
    else if (a == "--hf-token-file") {
      if (!(v = value())) return bad("--hf-token-file needs a file holding the token");
      std::ifstream f(*v);
      std::string token;
      if (!f || !std::getline(f, token)) return bad(("--hf-token-file: cannot read " + *v).c_str());
      while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
      if (token.empty()) return bad(("--hf-token-file: " + *v + " holds no token").c_str());
      ccfg.load.hf_token = token;
    }
    else if (a == "--backend") {
      auto k = (v = value()) ? parse_backend_kind(*v) : std::nullopt;
      if (!k) return bad("--backend takes cpu, cuda or auto");
      backend_asked = *k;
    }
    else if (a == "--workers") { if (!(v = value())) return bad("--workers needs a number"); workers = std::atoi(v->c_str()); }
    else if (a == "--web") { if (!(v = value())) return bad("--web needs a folder"); web_dir = *v; }
    else if (a == "--allow-private-sources") ccfg.load.allow_private_sources = true;
    else if (a == "--allow-local") {
      if (!(v = value())) return bad("--allow-local needs a folder");
      // Kept as its real path, so that links cannot make a path look inside it.
      std::error_code ec;
      const auto dir = std::filesystem::canonical(*v, ec);
      if (ec || !std::filesystem::is_directory(dir)) return bad(("--allow-local " + *v + " is not a folder").c_str());
      ccfg.load.local_dirs.push_back(dir.string());
    }
    else if (a == "--cluster-port") {
      if (!(v = value()) || std::atoi(v->c_str()) < 0 || std::atoi(v->c_str()) > 65535) return bad("--cluster-port needs a port");
      cluster_port = std::atoi(v->c_str());
    }
    else if (a == "--data-port") {
      if (!(v = value())) return bad("--data-port needs a port or off");
      if (*v == "off") data_port = -1;
      else if (v->empty() || v->find_first_not_of("0123456789") != std::string::npos || std::atoi(v->c_str()) > 65535)
        return bad("--data-port takes a port (0: any free one) or off");
      else data_port = std::atoi(v->c_str());
    }
    else if (a == "--worker-fetch") {
      if (!(v = value()) || (*v != "on" && *v != "off")) return bad("--worker-fetch takes on or off");
      ccfg.load.worker_fetch = *v == "on";
    }
    else if (a == "--cluster-cert") { if (!(v = value()) || v->empty()) return bad("--cluster-cert needs a PEM file"); cluster_cert = *v; }
    else if (a == "--cluster-key") { if (!(v = value()) || v->empty()) return bad("--cluster-key needs a PEM file"); cluster_key = *v; }
    else if (a == "--default-quantize") {
      if (!(v = value()) || (*v != "none" && *v != "q8" && *v != "q4" && *v != "auto"))
        return bad("--default-quantize takes none, q8, q4 or auto");
      ccfg.load.default_quantize = *v;
    } else if (a == "--kv-dtype") {
      if (!(v = value()) || (*v != "f32" && *v != "bf16" && *v != "f16")) return bad("--kv-dtype takes f32, bf16 or f16");
      ccfg.load.default_kv_dtype = *v;
    } else if (a == "--worker-memory") {
      auto s = (v = value()) ? parse_size(*v) : std::nullopt;
      if (!s || *s == 0) return bad("--worker-memory takes a size such as 8G or 512M");
      worker_memory = *s;
    } else if (a == "--threads") {
      if (!(v = value()) || std::atoi(v->c_str()) < 1) return bad("--threads takes a positive number");
      threads = std::atoi(v->c_str());
    } else if (a == "--verify-fraction") {
      char* end = nullptr;
      const double f = (v = value()) ? std::strtod(v->c_str(), &end) : -1;
      if (!v || *end != '\0' || !(f >= 0 && f <= 1)) return bad("--verify-fraction takes a number from 0 to 1");
      gcfg.checks.fraction = f;
    } else if (a == "--verify-first") {
      if (!(v = value()) || std::atol(v->c_str()) < 0) return bad("--verify-first takes a number of passes");
      gcfg.checks.first_passes = std::uint32_t(std::atol(v->c_str()));
    } else if (a == "--verify-window") {
      char* end = nullptr;
      const double n = (v = value()) ? std::strtod(v->c_str(), &end) : -1;
      if (!v || *end != '\0' || !(n >= 1 && n <= 1e6)) return bad("--verify-window takes a number of passes from 1 to 1000000");
      gcfg.checks.window_passes = n;
    } else if (a == "--verify-memory") {
      auto s = (v = value()) ? parse_size(*v) : std::nullopt;
      if (!s) return bad("--verify-memory takes a size such as 2G");
      gcfg.checks.memory = *s;
    } else if (a == "--verify-queue") {
      auto s = (v = value()) ? parse_size(*v) : std::nullopt;
      if (!s || *s == 0) return bad("--verify-queue takes a size such as 256M");
      gcfg.checks.queue_bytes = *s;
    } else if (a == "--verify-queue-total") {
      auto s = (v = value()) ? parse_size(*v) : std::nullopt;
      if (!s || *s == 0) return bad("--verify-queue-total takes a size such as 1G");
      gcfg.checks.queue_total = *s;
    } else if (a == "--cluster-reply-budget") {
      auto s = (v = value()) ? parse_size(*v) : std::nullopt;
      if (!s || *s < (1u << 20)) return bad("--cluster-reply-budget takes a size of at least 1M, such as 4G");
      guard_limits.reply_budget = *s;
    } else if (a == "--durable-budget") {
      auto s = (v = value()) ? parse_size(*v) : std::nullopt;
      if (!s) return bad("--durable-budget takes a size such as 1G");
      ccfg.durable_budget_bytes = *s;
    } else if (a == "--graph-budget") {
      auto s = (v = value()) ? parse_size(*v) : std::nullopt;
      if (!s) return bad("--graph-budget takes a size such as 256M");
      ccfg.graph_budget_bytes = *s;
    } else if (a == "--v2-quota") {
      auto s = (v = value()) ? parse_size(*v) : std::nullopt;
      if (!s) return bad("--v2-quota takes a size such as 128M");
      ccfg.v2_quota_bytes = *s;
    } else if (a == "--body-limit") {
      auto s = (v = value()) ? parse_size(*v) : std::nullopt;
      if (!s || *s == 0) return bad("--body-limit takes a size such as 256M");
      body_limit = *s;
    } else if (a == "--max-connections" || a == "--max-connections-per-address" || a == "--header-timeout-ms" ||
               a == "--body-timeout-ms" || a == "--generations-per-key" || a == "--login-failures-per-user" ||
               a == "--login-failures-per-address" || a == "--login-window-s" || a == "--join-failures-per-address") {
      const bool positive = a == "--header-timeout-ms" || a == "--body-timeout-ms" || a == "--login-window-s";
      if (!(v = value()) || v->empty() || v->find_first_not_of("0123456789") != std::string::npos || v->size() > 9 ||
          (positive && std::atoll(v->c_str()) == 0))
        return bad((a + (positive ? " takes a positive whole number" : " takes a whole number (0 = no limit)")).c_str());
      const long long n = std::atoll(v->c_str());
      if (a == "--max-connections") scfg.max_connections = std::size_t(n);
      else if (a == "--max-connections-per-address") scfg.max_connections_per_address = std::size_t(n);
      else if (a == "--header-timeout-ms") scfg.header_timeout = std::chrono::milliseconds(n);
      else if (a == "--body-timeout-ms") scfg.body_timeout = std::chrono::milliseconds(n);
      else if (a == "--generations-per-key") abuse.generations_per_key = int(n);
      else if (a == "--join-failures-per-address") gcfg.max_failures = n == 0 ? 1 << 30 : int(n);
      else if (a == "--login-failures-per-user") abuse.login_failures_per_user = int(n);
      else if (a == "--login-failures-per-address") abuse.login_failures_per_address = int(n);
      else abuse.login_window = std::chrono::seconds(n);
    } else if (a == "--graph-timeout-ms") {
      if (!(v = value()) || std::atoll(v->c_str()) <= 0) return bad("--graph-timeout-ms takes a positive number");
      ccfg.timeouts.graph = std::chrono::milliseconds(std::atoll(v->c_str()));
    } else {
      return bad(("unknown option " + a).c_str());
    }
  }
  cpu_fast::set_kernel_threads(threads);
  log::set_format(log_format);
  if (port < 0 || port > 65535) { std::fprintf(stderr, "mpakt serve: --port N is required\n\n%s", serve_usage); return 2; }
  if (data_dir.empty()) { std::fprintf(stderr, "mpakt serve: --data-dir DIR is required\n\n%s", serve_usage); return 2; }
  if (workers < 0) { std::fprintf(stderr, "mpakt serve: --workers must be 0 or more\n"); return 2; }
  // What the embedded workers compute on, opened before anything starts: a GPU asked for and
  // not there ends the program here, saying why.
  std::vector<chosen_backend> backends_chosen;
  for (int i = 0; i < workers; ++i) {
    auto c = choose_backend(backend_asked, i);
    if (!c) {
      std::fprintf(stderr, "mpakt serve: --backend cuda: %s; not starting (--backend auto would compute on the CPU)\n",
                   c.err().message.c_str());
      return exit_no_cuda;
    }
    backends_chosen.push_back(std::move(*c));
  }
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) { std::fprintf(stderr, "mpakt serve: cannot create %s: %s\n", data_dir.c_str(), ec.message().c_str()); return 1; }
  const std::string accounts_path = (std::filesystem::path(data_dir) / accounts::accounts_file_name).string();
  auto store = accounts::accounts_store::open(accounts_path);
  if (!store) { std::fprintf(stderr, "mpakt serve: %s\n", store.err().message.c_str()); return 1; }
  // The cluster port's gate checks join tokens on a connection of its own to the same file.
  std::unique_ptr<accounts::accounts_store> gate_store;
  if (cluster_port >= 0) {
    auto g = accounts::accounts_store::open(accounts_path);
    if (!g) { std::fprintf(stderr, "mpakt serve: %s\n", g.err().message.c_str()); return 1; }
    gate_store = std::move(*g);
  }
  if (web_dir.empty() && std::filesystem::exists(std::string(MPAKT_SOURCE_DIR) + "/web/index.html"))
    web_dir = std::string(MPAKT_SOURCE_DIR) + "/web";

  // This thread waits for the stop signals below.
  sigset_t stop_signals = block_stop_signals();
  caf::actor_system_config cfg;
  configure_actor_system(cfg, cluster_port >= 0);
  // The cluster port speaks TLS with the coordinator's certificate (actors/cluster_tls.hpp).
  std::string fingerprint;
  // (CAF's middleman serves the gate on loopback only; volunteers reach it through the
  // cluster port's front, which speaks TLS with these files: actors/cluster_guard.hpp)
  tls::link_files link_files;
  auto guard = std::make_shared<cluster_guard>(guard_limits);
  std::shared_ptr<datalink::data_server> data_server;
  std::string data_line;
  if (cluster_port >= 0) {
    auto files = tls::coordinator_files((std::filesystem::path(data_dir) / "cluster").string(), cluster_cert, cluster_key,
                                        &fingerprint);
    if (!files) { std::fprintf(stderr, "mpakt serve: the cluster port's certificate: %s\n", files.err().message.c_str()); return 1; }
    link_files = *files;
    // Volunteers' weights travel on connections of their own (actors/data_link.hpp); without
    // the port they go over the cluster link, slower but the same.
    if (data_port != -1) {
      const int wanted = data_port >= 0 ? data_port : cluster_port == 0 ? 0 : std::min(cluster_port + 1, 65535);
      auto started = datalink::data_server::start(address, std::uint16_t(wanted), files->certificate, files->key);
      if (started) {
        data_server = std::move(*started);
        data_line = "  data port:   " + std::to_string(data_server->port()) + " (volunteers' weights; TLS, same certificate)\n";
      } else {
        std::fprintf(stderr, "mpakt serve: no data port (%s): volunteers' weights travel over the cluster link\n",
                     started.err().message.c_str());
      }
    }
  }
  auto sys = std::make_unique<caf::actor_system>(cfg);

  int exit_code = 0;
  {
    // Every actor handle and the server live in this scope: the actor system waits for
    // detached actors (workers, accounts) until the last handle to them is gone.
    auto pool = spawn_pool(*sys);
    std::vector<worker_actor> local_workers;
    for (int i = 0; i < workers; ++i) {
      worker_config wc;
      wc.worker_id = "w_local" + std::to_string(i);
      wc.memory_bytes = worker_memory;
      wc.device = backends_chosen[std::size_t(i)].device;
      wc.backend_note = backends_chosen[std::size_t(i)].note;
      if (ccfg.load.worker_fetch) {
        // The coordinator's own rules for what it may read (it probes only files it inspected
        // under them); its threads start after the stop signals are blocked.
        loader::host_fetcher::options fo;
        fo.allow_private = ccfg.load.allow_private_sources;
        fo.trusted_endpoint = ccfg.load.hf_endpoint;
        fo.verify_tls = ccfg.load.verify_tls;
        wc.fetcher = std::make_shared<loader::host_fetcher>(fo);
      }
      local_workers.push_back(spawn_worker(*sys, wc));
      caf::anon_send(pool, add_atom::value, local_workers.back());
    }
    std::string cluster_line;
    gate_actor gate;
    if (cluster_port >= 0) {
      std::string token_hint = "--token TOKEN   (mpakt admin volunteer-token NAME --data-dir " + data_dir + ")";
      if (dev && loopback_address(address)) {
        // one machine, no ceremony: a fresh token named "dev" at every start
        auto t = gate_store->create_volunteer_token("dev", 0, 0);
        if (t) token_hint = "--token " + t->token;
        else std::fprintf(stderr, "mpakt serve: no dev volunteer token: %s\n", t.err().message.c_str());
      } else if (dev) {
        // a port others can reach: whoever joins needs a token an operator made for them
        std::fprintf(stderr,
                     "mpakt serve: --dev makes no volunteer token: the cluster port listens on %s, beyond "
                     "loopback\n",
                     address.c_str());
      }
      gcfg.verify = gcfg.checks.fraction > 0 || gcfg.checks.first_passes > 0;
      gcfg.checks.budget = std::make_shared<verify_budget>(gcfg.checks.memory);  // (all verifiers together)
      gcfg.checks.queue_budget = std::make_shared<verify_budget>(gcfg.checks.queue_total);
      if (ccfg.load.worker_fetch) {
        // (a verifier reads the model host under the coordinator's own rules, as its embedded
        // workers do: its volunteer may then read its weights there too)
        loader::host_fetcher::options fo;
        fo.allow_private = ccfg.load.allow_private_sources;
        fo.trusted_endpoint = ccfg.load.hf_endpoint;
        fo.verify_tls = ccfg.load.verify_tls;
        gcfg.checks.fetch = fo;
      }
      gcfg.data = data_server;
      gcfg.guard = guard;
      gcfg.step_limit = ccfg.timeouts.graph;
      gate = spawn_gate(*sys, pool, std::move(gate_store), gcfg);
      auto bound = publish_gate(*sys, gate, address, std::uint16_t(cluster_port), *guard, link_files);
      if (!bound) {
        std::fprintf(stderr, "mpakt serve: %s\n", bound.err().message.c_str());
        caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
        caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
        for (auto& w : local_workers) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
        return 1;
      }
      cluster_line = "  volunteers:  mpakt worker --join " + address + ":" + std::to_string(*bound) + " --coordinator-fingerprint " +
                     fingerprint + " " + token_hint + "\n" + "  cluster port: TLS only; its certificate's SHA-256 fingerprint is " +
                     fingerprint + "\n" + data_line;
    }
    ccfg.quarantine = gcfg.quarantine;  // (the status shows who was quarantined)
    auto coordinator = spawn_coordinator(*sys, ccfg, pool);
    accounts_config acfg;
    acfg.approve_sign_ups = dev;
    auto accounts = spawn_accounts(*sys, std::move(*store), acfg);

    scfg.address = address;
    scfg.port = std::uint16_t(port);
    scfg.threads = 1;
    scfg.body_limit = body_limit;
    http::api_config api;
    api.llms_txt = std::string(embedded_api_reference());
    api.web_dir = web_dir;
    api.request_timeout = ccfg.timeouts.graph + std::chrono::seconds(10);
    api.abuse = abuse;
    api.metrics_open = metrics_open;
    auto server = http::server::start(scfg, http::make_api_handler(*sys, {coordinator, accounts}, api));
    auto stop_actors = [&] {
      caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(accounts, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
      if (gate) caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
      for (auto& w : local_workers) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    };
    if (!server) {
      std::fprintf(stderr, "mpakt serve: %s\n", server.err().message.c_str());
      stop_actors();
      exit_code = 1;
    } else {
    const std::string base = "http://" + address + ":" + std::to_string((*server)->port());
    std::printf("mpakt serve: listening on %s (%d embedded worker%s, data in %s%s)\n", base.c_str(), workers,
                workers == 1 ? "" : "s", data_dir.c_str(), dev ? ", dev mode: sign-ups approved at once" : "");
    for (int i = 0; i < workers; ++i)
      std::printf("  worker w_local%d computes on: %s\n", i, backends_chosen[std::size_t(i)].describe().c_str());
    std::printf("  models resolve hf: sources at %s\n", ccfg.load.hf_endpoint.c_str());
    std::printf("  CPU kernels: %s, %d thread%s (%s)\n", cpu_isa::describe().c_str(), threads, threads == 1 ? "" : "s",
                cpu_isa::detected().model.c_str());
    for (const auto& w : cpu_isa::setting_problems()) std::printf("  warning: %s\n", w.c_str());
    for (const auto& d : ccfg.load.local_dirs) std::printf("  local sources may be read from %s\n", d.c_str());
    if (ccfg.load.allow_private_sources) std::printf("  URL sources may reach private addresses\n");
    std::printf("  first call:  curl %s/api/versions\n", base.c_str());
    std::printf("  sign up:     curl -X POST %s/api/accounts -d '{\"username\":\"alice\",\"password\":\"a long password\"}'\n", base.c_str());
    std::printf("  reference:   %s/llms.txt\n", base.c_str());
    std::printf("%s", cluster_line.c_str());
    std::fflush(stdout);

    int sig = 0;
    sigwait(&stop_signals, &sig);
    std::printf("mpakt serve: stopping (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    std::fflush(stdout);
    (*server)->stop();
    // The coordinator's entity actors are linked to it and end with it.
    stop_actors();
    }
  }
  sys.reset();
  return exit_code;
}

}  // namespace mpakt::app
