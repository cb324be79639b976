// `mpakt worker --join HOST:PORT --token TOKEN`: a volunteer. Its worker actor joins the
// coordinator's pool over CAF's middleman (presented to the cluster port's gate with its join
// token) and then receives weights, sessions and graphs like the embedded one; it leaves when
// stopped (SIGINT/SIGTERM), when the coordinator goes away (status 3) or when the
// coordinator refuses or disconnects it (status 4).

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "actors/cluster.hpp"
#include "actors/cluster_tls.hpp"
#include "actors/errors.hpp"
#include "actors/coordinator/load_job.hpp"
#include "actors/loader/host_fetch.hpp"
#include "actors/worker/worker_actor.hpp"
#include "app/backend_choice.hpp"
#include "app/commands.hpp"
#include "app/process.hpp"
#include "app/sizes.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/isa.hpp"
#include "runtime/log.hpp"

namespace mpakt::app {

namespace {

const char* worker_usage =
    "usage: mpakt worker --join HOST:PORT --token TOKEN (--coordinator-fingerprint HEX | --ca FILE)\n"
    "                    [--id NAME] [--memory SIZE] [--threads N]\n"
    "                    [--join-timeout-ms MS] [--legacy] [--reference] [--without OPS]\n"
    "                    [--delay-ms MS] [--backend cpu|cuda|auto] [--host-fetch public|any|off]\n"
    "                    [--fault WHAT]\n"
    "\n"
    "Runs a volunteer: a worker that joins the coordinator started with\n"
    "`mpakt serve --cluster-port PORT` and holds weights and sessions for the grid.\n"
    "  --token TOKEN       the join token the operator gave (`mpakt admin volunteer-token`),\n"
    "                      or $MPAKT_VOLUNTEER_TOKEN; without a valid one the coordinator refuses\n"
    "                      the volunteer and it exits with status 4 (3: the coordinator went away)\n"
    "  --coordinator-fingerprint HEX\n"
    "                      the SHA-256 fingerprint of the coordinator's certificate (its banner\n"
    "                      prints it): the link is TLS, and a coordinator presenting another\n"
    "                      certificate is refused before anything is sent (exit status 5)\n"
    "  --ca FILE           instead of a fingerprint: trust the CA certificates in FILE (PEM), for\n"
    "                      a coordinator started with --cluster-cert from that CA\n"
    "  --id NAME           how the pool shows it (default w_<host>_<pid>)\n"
    "  --memory SIZE       memory it offers, e.g. 8G, 512M (default 8G)\n"
    "  --threads N         threads a kernel may use (default: the machine's cores)\n"
    "  --join-timeout-ms   how long to keep trying to reach the coordinator (default 30000)\n"
    "  --legacy            behave like a worker that predates packed weights and quantize-on-load\n"
    "  --reference         run only the reference kernels\n"
    "  --without OPS       ops or features (comma-separated) to leave out, like an older volunteer;\n"
    "                      graphs using them are never given to it\n"
    "  --backend B         what it computes on: cpu; cuda (the GPU, or nothing: without a usable\n"
    "                      one it says why and exits with status 6); auto (the default: the GPU\n"
    "                      where this build has CUDA and a usable GPU exists, else the CPU, saying\n"
    "                      why in its banner and in the pool's status). On the GPU, steps its\n"
    "                      kernels lack run on the CPU reference kernels\n"
    "  --cpu               the same as --backend cpu\n"
    "  --fault corrupt-results:P\n"
    "                      a testing aid: change one value of a fraction P of its graph answers\n"
    "                      and replace a fraction P of the tokens its decode loops draw, like a\n"
    "                      volunteer that lies (the coordinator's spot-checks catch it)\n"
    "  --fault corrupt-weights\n"
    "                      a testing aid: change one byte of every weight received (the\n"
    "                      coordinator's weight checks catch it)\n"
    "  --fault corrupt-weights-later\n"
    "                      a testing aid: receive weights intact, then change one byte of each\n"
    "                      right after its first check (an operator's re-check catches it)\n"
    "  --fault corrupt-caches\n"
    "                      a testing aid: answer graph calls right but change a value of the\n"
    "                      session's caches after each (the spot-checks compare sessions too)\n"
    "  --fault corrupt-generation-caches\n"
    "                      a testing aid: the same after each worker-side generation only\n"
    "  --fault corrupt-generation-tokens\n"
    "                      a testing aid: alter every token of worker-side generations only\n"
    "  --fault malformed-answers\n"
    "                      a testing aid: answer every graph call with text that is not JSON\n"
    "  --fault forge-messages\n"
    "                      a testing aid: send the pool's add, with its own worker, to every\n"
    "                      actor of the coordinator that asks it something (the coordinator's\n"
    "                      cluster port cuts it)\n"
    "  --fault unanswered-calls\n"
    "                      a testing aid: take every graph call and compile and never answer\n"
    "                      them, while answering the pool's probes (the coordinator removes it\n"
    "                      once one is 15 s past the limit)\n"
    "  --fault silent-generations\n"
    "                      a testing aid: accept every worker-side generation and never send\n"
    "                      a token (the coordinator removes it 15 s past the step limit)\n"
    "  --fault bloated-status\n"
    "                      a testing aid: list 20,000 features in its status (the coordinator\n"
    "                      removes it at its first status)\n"
    "  --fault flood-tokens\n"
    "                      a testing aid: send each token of a worker-side generation 101\n"
    "                      times (the coordinator removes it past the tokens asked for)\n"
    "  --fault cheat-unless-dumped\n"
    "                      a testing aid: answer a call or generation on a session right only\n"
    "                      when the session was copied since its last pass, else lie (the\n"
    "                      spot-checks' windows catch it)\n"
    "  --fault unanswered-dumps\n"
    "                      a testing aid: never answer a copy of a session (the coordinator\n"
    "                      removes it 15 s past the limit)\n"
    "  --fault refused-dumps\n"
    "                      a testing aid: deny every copy of a session as if it were not there\n"
    "                      (the spot-checks' windows catch it)\n"
    "  --fault refused-dumps-after-generations\n"
    "                      a testing aid: deny the first copy of a session asked for after a\n"
    "                      generation on it began (a checked generation's end asks for one)\n"
    "  --fault malformed-dumps\n"
    "                      a testing aid: every copy of a session a byte short (one no worker\n"
    "                      writes; the spot-checks catch it)\n"
    "  --fault no-data-link\n"
    "                      a testing aid: never reach the coordinator's data port (as behind a\n"
    "                      firewall that blocks it): weights then come over the cluster link\n"
    "  --host-fetch W      whether it reads its weights from the model host itself when the\n"
    "                      coordinator asks (it then proves it reads the same file there; the\n"
    "                      coordinator's verifier reads it too): public (default) from public\n"
    "                      addresses only; any also from loopback and private ones (a host on\n"
    "                      this machine or this network); off never. Otherwise, or when it\n"
    "                      cannot, its weights come through the coordinator\n"
    "  --delay-ms MS       answer every graph call MS late, like a slow or distant volunteer\n"
    "                      (the pool measures it and ranks it below faster workers)\n";

std::atomic<bool> coordinator_gone{false};
/// The coordinator ended this volunteer's worker: its token was revoked, replaced or expired.
std::atomic<bool> disconnected{false};

/// Exit statuses beyond 0 (stopped), 1 (cannot reach the coordinator) and 2 (bad arguments).
constexpr int exit_coordinator_gone = 3;
constexpr int exit_refused = 4;
constexpr int exit_untrusted = 5;  ///< the coordinator's certificate is not the one pinned, or no TLS

}  // namespace

int cmd_worker(const std::vector<std::string>& args) {
  log::set_program("mpakt worker");
  std::string join, id, token, pinned, ca_file;
  if (const char* t = std::getenv("MPAKT_VOLUNTEER_TOKEN")) token = t;
  worker_config wc;
  bool no_data_link = false;
  std::string host_fetch = "public";
  int threads = std::max(1u, std::thread::hardware_concurrency());
  if (const char* t = std::getenv("MPAKT_THREADS"); t && std::atoi(t) > 0) threads = std::atoi(t);
  long patience_ms = 30000;
  backend_kind backend_asked = backend_kind::automatic;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    const std::string* v = nullptr;
    auto bad = [&](const char* what) {
      std::fprintf(stderr, "mpakt worker: %s\n\n%s", what, worker_usage);
      return 2;
    };
    if (a == "--help" || a == "-h") { std::fputs(worker_usage, stdout); return 0; }
    else if (a == "--join") { if (!(v = value())) return bad("--join needs HOST:PORT"); join = *v; }
    else if (a == "--token") { if (!(v = value()) || v->empty()) return bad("--token needs the join token"); token = *v; }
    else if (a == "--coordinator-fingerprint") {
      if (!(v = value())) return bad("--coordinator-fingerprint needs the hex digits the coordinator's banner prints");
      auto fp = tls::normalize_fingerprint(*v);
      if (!fp) return bad(fp.err().message.c_str());
      pinned = *fp;
    } else if (a == "--ca") { if (!(v = value()) || v->empty()) return bad("--ca needs a PEM file"); ca_file = *v; }
    else if (a == "--id") { if (!(v = value()) || v->empty()) return bad("--id needs a name"); id = *v; }
    else if (a == "--memory") {
      auto s = (v = value()) ? parse_size(*v) : std::nullopt;
      if (!s || *s == 0) return bad("--memory takes a size such as 8G");
      wc.memory_bytes = *s;
    } else if (a == "--threads") {
      if (!(v = value()) || std::atoi(v->c_str()) <= 0) return bad("--threads takes a positive number");
      threads = std::atoi(v->c_str());
    } else if (a == "--join-timeout-ms") {
      if (!(v = value()) || std::atol(v->c_str()) < 0) return bad("--join-timeout-ms takes a number");
      patience_ms = std::atol(v->c_str());
    } else if (a == "--host-fetch") {
      if (!(v = value()) || (*v != "public" && *v != "any" && *v != "off")) return bad("--host-fetch takes public, any or off");
      host_fetch = *v;
    } else if (a == "--delay-ms") {
      if (!(v = value()) || std::atoi(v->c_str()) < 0) return bad("--delay-ms takes a number of milliseconds");
      wc.delay_ms = std::atoi(v->c_str());
    } else if (a == "--fault") {
      const std::string prefix = "corrupt-results:";
      if ((v = value()) && *v == "no-data-link") {
        no_data_link = true;
        continue;
      }
      if (v && (*v == "corrupt-weights" || *v == "corrupt-weights-later" || *v == "corrupt-caches" ||
                            *v == "corrupt-generation-caches" || *v == "corrupt-generation-tokens" ||
                            *v == "malformed-answers" || *v == "forge-messages" || *v == "unanswered-calls" ||
                            *v == "silent-generations" || *v == "bloated-status" ||
                            *v == "flood-tokens" || *v == "cheat-unless-dumped" || *v == "unanswered-dumps" ||
                            *v == "refused-dumps" || *v == "refused-dumps-after-generations" ||
                            *v == "malformed-dumps")) {
        (*v == "corrupt-weights"             ? wc.corrupt_weights
         : *v == "corrupt-weights-later"     ? wc.corrupt_weights_later
         : *v == "corrupt-caches"            ? wc.corrupt_caches
         : *v == "corrupt-generation-caches" ? wc.corrupt_generation_caches
         : *v == "corrupt-generation-tokens" ? wc.corrupt_generation_tokens
         : *v == "forge-messages"            ? wc.forge_messages
         : *v == "unanswered-calls"          ? wc.unanswered_calls
         : *v == "silent-generations"        ? wc.silent_generations
         : *v == "bloated-status"            ? wc.bloated_status
         : *v == "flood-tokens"              ? wc.flood_tokens
         : *v == "cheat-unless-dumped"       ? wc.cheat_unless_dumped
         : *v == "unanswered-dumps"          ? wc.unanswered_dumps
         : *v == "refused-dumps"             ? wc.refused_dumps
         : *v == "refused-dumps-after-generations" ? wc.refused_dumps_after_generations
         : *v == "malformed-dumps"           ? wc.malformed_dumps
                                             : wc.malformed_answers) = true;
        continue;
      }
      if (!v || v->rfind(prefix, 0) != 0)
        return bad("--fault takes corrupt-results:P (P from 0 to 1), corrupt-weights, corrupt-weights-later, "
                   "corrupt-caches, corrupt-generation-caches, corrupt-generation-tokens, malformed-answers, forge-messages, "
                   "unanswered-calls, silent-generations, bloated-status, flood-tokens, cheat-unless-dumped, unanswered-dumps, refused-dumps, refused-dumps-after-generations, malformed-dumps or no-data-link");
      char* end = nullptr;
      const double p = std::strtod(v->c_str() + prefix.size(), &end);
      if (*end != '\0' || !(p >= 0 && p <= 1)) return bad("--fault takes corrupt-results:P (P from 0 to 1)");
      wc.corrupt_results = p;
    } else if (a == "--cpu") backend_asked = backend_kind::cpu;
    else if (a == "--backend") {
      auto k = (v = value()) ? parse_backend_kind(*v) : std::nullopt;
      if (!k) return bad("--backend takes cpu, cuda or auto");
      backend_asked = *k;
    }
    else if (a == "--legacy") wc.legacy = true;
    else if (a == "--reference") wc.reference_only = true;
    else if (a == "--without") {
      if (!(v = value()) || v->empty()) return bad("--without takes ops or features, comma-separated");
      std::size_t start = 0;
      while (start <= v->size()) {
        const std::size_t comma = v->find(',', start);
        const std::string item = v->substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!item.empty()) wc.lacks.push_back(item);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    else return bad(("unknown option " + a).c_str());
  }
  if (join.empty()) { std::fprintf(stderr, "mpakt worker: --join HOST:PORT is required\n\n%s", worker_usage); return 2; }
  auto where = parse_host_port(join);
  if (!where) { std::fprintf(stderr, "mpakt worker: %s\n", where.err().message.c_str()); return 2; }
  if (id.empty()) {
    char host[128] = "host";
    gethostname(host, sizeof host - 1);
    id = "w_" + std::string(host) + "_" + std::to_string(getpid());
  }
  wc.worker_id = id;
  cpu_fast::set_kernel_threads(threads);
  if (wc.reference_only) {
    if (backend_asked == backend_kind::cuda) {
      std::fprintf(stderr, "mpakt worker: --reference runs the CPU reference kernels: it cannot go with --backend cuda\n");
      return 2;
    }
    backend_asked = backend_kind::cpu;
  }
  auto chosen = choose_backend(backend_asked);
  if (!chosen) {
    std::fprintf(stderr, "mpakt worker: --backend cuda: %s; not starting (--backend auto would compute on the CPU)\n",
                 chosen.err().message.c_str());
    return exit_no_cuda;
  }
  wc.device = chosen->device;
  wc.backend_note = chosen->note;

  if (pinned.empty() == ca_file.empty()) {
    std::fprintf(stderr, "mpakt worker: give the coordinator's certificate fingerprint (--coordinator-fingerprint HEX, "
                         "printed in its banner) or a CA to trust (--ca FILE), one of them: the cluster link is TLS\n");
    return 2;
  }
  // The link's files live in a private folder of this process's own, gone when it ends.
  char dir_template[] = "/tmp/mpakt-volunteer-XXXXXX";
  if (!mkdtemp(dir_template)) { std::fprintf(stderr, "mpakt worker: cannot make a private folder in /tmp\n"); return 1; }
  const std::string link_dir = dir_template;
  struct remove_dir {
    std::string path;
    ~remove_dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } cleanup{link_dir};
  std::string trusted;
  if (!ca_file.empty()) {
    std::ifstream in(ca_file, std::ios::binary);
    if (!in) { std::fprintf(stderr, "mpakt worker: cannot read --ca %s\n", ca_file.c_str()); return 2; }
    trusted.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // What the port presents, checked before anything of ours travels (actors/cluster_tls.hpp).
  auto pem = tls::fetch_certificate(where->first, where->second, std::chrono::milliseconds(patience_ms));
  if (!pem) {
    std::fprintf(stderr, "mpakt worker: %s\n", pem.err().message.c_str());
    return pem.err().code == errc::unauthorized ? exit_untrusted : 1;
  }
  // One check for the cluster port here and, later, the data port the coordinator offers: the
  // pinned fingerprint, or issued by a CA of --ca for the host joined (the link CAF makes
  // checks the chain only: the name it was issued for is checked here).
  auto check_peer = [pinned, ca = trusted, host = where->first](const std::string& peer) -> status {
    if (pinned.empty()) return tls::check_issued_for(peer, ca, host);
    auto fp = tls::fingerprint_of(peer);
    if (!fp || *fp != pinned)
      return make_error(errc::unauthorized, "presents a certificate with fingerprint " + (fp ? *fp : std::string("(unreadable)")) +
                                                ", not the pinned " + pinned);
    return ok_status();
  };
  if (auto ok = check_peer(*pem); !ok) {
    if (pinned.empty())
      std::fprintf(stderr, "mpakt worker: %s: refusing to join\n", ok.err().message.c_str());
    else
      std::fprintf(stderr, "mpakt worker: the cluster port at %s %s: refusing to join (check the coordinator's banner; "
                           "someone may be in between)\n", join.c_str(), ok.err().message.c_str());
    return ok.err().code == errc::invalid ? 2 : exit_untrusted;
  }
  if (!pinned.empty()) trusted = std::move(*pem);
  auto files = tls::volunteer_files(link_dir, trusted);
  if (!files) { std::fprintf(stderr, "mpakt worker: %s\n", files.err().message.c_str()); return 1; }
  // Weights' bytes arrive on a connection of their own (actors/data_link.hpp), opened when the
  // coordinator offers one; the connection lives as long as the worker's configuration.
  wc.pieces = std::make_shared<datalink::piece_inbox>();
  auto data_client = std::make_shared<std::unique_ptr<datalink::data_client>>();
  wc.open_data_link = [data_client, check_peer, inbox = wc.pieces, host = where->first, no_data_link](
                          std::uint16_t port, const std::string& ticket) -> status {
    if (no_data_link)
      return make_error(errc::unavailable, "cannot connect to the data port " + std::to_string(port) + " (--fault no-data-link)");
    data_client->reset();  // (an earlier connection ends first: it closes the inbox as it goes)
    auto c = datalink::data_client::connect(host, port, ticket, check_peer, inbox);
    if (!c) return std::move(c).err();
    *data_client = std::move(*c);
    return ok_status();
  };

  sigset_t stop_signals = block_stop_signals();
  // (after the stop signals are blocked: its threads inherit the mask, so a stop signal goes to
  // the thread that waits for it and never ends the process on a fetch thread)
  if (host_fetch != "off") {
    loader::host_fetcher::options fo;
    fo.allow_private = host_fetch == "any";
    wc.fetcher = std::make_shared<loader::host_fetcher>(fo);
  }
  caf::actor_system_config cfg;
  configure_actor_system(cfg, true);
  tls::configure_link(cfg, *files);
  auto sys = std::make_unique<caf::actor_system>(cfg);
  int exit_code = 0;
  {
    auto gate = connect_gate(*sys, where->first, where->second, std::chrono::milliseconds(patience_ms));
    if (!gate) {
      std::fprintf(stderr, "mpakt worker: %s\n", gate.err().message.c_str());
      return 1;
    }
    {  // (the link is up: its files are read when a connection opens, and no other will)
      std::error_code ec;
      std::filesystem::remove_all(link_dir, ec);
    }
    auto worker = spawn_worker(*sys, wc);
    // Presents the worker with the token; nothing reaches it before the gate admits it.
    std::string refusal, admitted_as;
    {
      caf::scoped_actor s{*sys};
      s->request(*gate, std::chrono::seconds(30), join_atom::value, token, worker)
          .receive([&](std::string& name) { admitted_as = std::move(name); },
                   [&](caf::error& e) { refusal = from_caf(e).message; });
    }
    if (!refusal.empty()) {
      std::fprintf(stderr, "mpakt worker: the coordinator at %s refused this volunteer: %s\n", join.c_str(),
                   token.empty() ? "no --token given (ask the grid's operator for one)" : refusal.c_str());
      std::fflush(stderr);
      std::_Exit(exit_refused);  // (nothing was admitted: no orderly shutdown to wait for)
    }
    // Leaves when the coordinator does (its gate going down), or when the coordinator ends the
    // worker (its token revoked).
    auto watcher = sys->spawn([g = *gate, worker](caf::event_based_actor* self) -> caf::behavior {
      self->monitor(g);
      self->monitor(worker);
      self->set_down_handler([self, worker](caf::down_msg& dm) {
        if (dm.source == worker.address()) disconnected = true;
        else coordinator_gone = true;
        kill(getpid(), SIGTERM);
      });
      return {[](caf::exit_msg&) {}};
    });
    std::printf("mpakt worker: %s joined %s as volunteer %s (%s offered, %d kernel threads)\n", id.c_str(), join.c_str(),
                admitted_as.c_str(), (std::to_string(wc.memory_bytes >> 20) + " MiB").c_str(), threads);
    std::printf("  computes on: %s\n", chosen->describe().c_str());
    std::printf("  CPU kernels: %s (%s)\n", cpu_isa::describe().c_str(), cpu_isa::detected().model.c_str());
    for (const auto& w : cpu_isa::setting_problems()) std::printf("  warning: %s\n", w.c_str());
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (disconnected)
      std::fprintf(stderr, "mpakt worker: the coordinator disconnected this volunteer (its token was revoked, replaced or "
                           "expired, or it was quarantined or removed: the coordinator's log says why); stopping\n");
    std::printf("mpakt worker: %s\n", coordinator_gone ? "the coordinator went away; stopping" : "stopping");
    std::fflush(stdout);
    exit_code = disconnected ? exit_refused : coordinator_gone ? exit_coordinator_gone : 0;
    // A volunteer keeps nothing worth saving (the coordinator re-places what it held), so an
    // orderly shutdown of the actor system is bounded: past 3 s the process just ends.
    std::thread([code = exit_code] {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      std::fflush(stdout);
      std::_Exit(code);
    }).detach();
    caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(watcher, caf::exit_reason::user_shutdown);
    // Sending the worker to the coordinator registered it for remote lookups; that reference
    // would keep its thread (and this process) alive after it quits.
    sys->registry().erase(worker->id());
  }
  sys.reset();
  return exit_code;
}

}  // namespace mpakt::app
