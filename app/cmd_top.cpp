// `mpakt top --url URL --key KEY`: the console's picture of a grid in a terminal, for operators
// over SSH. Every interval it reads GET /api/v3/admin/actors (an operator's key) and redraws
// tables of the workers, models, sessions, generations and loads, with a line of totals; the
// same numbers the console page and /api/v3/status show. `--once` prints one picture and exits
// (scripts); otherwise it redraws until interrupted.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "app/commands.hpp"
#include "http/client.hpp"
#include "http/url.hpp"
#include "runtime/json.hpp"

namespace mpakt::app {

namespace {

const char* top_usage =
    "usage: mpakt top --url URL --key KEY [--interval SECONDS] [--once]\n"
    "  the grid's actors in a terminal, redrawn every interval (default 1 s) until Ctrl-C:\n"
    "  workers (memory used of offered, models and sessions held, busy), models (placement,\n"
    "  resident bytes), sessions, generations (tokens, tokens/s) and loads in progress.\n"
    "  --url       the coordinator, e.g. http://127.0.0.1:8080\n"
    "  --key       an operator's API key (mpakt admin grant-admin NAME)\n"
    "  --once      print one picture and exit (0; 1 when the grid cannot be read)\n";

volatile sig_atomic_t stop_requested = 0;
void on_signal(int) { stop_requested = 1; }

/// One actor of the picture, as the JSON says.
struct actor {
  std::string kind, id;
  std::vector<std::string> links;  ///< "kind:id"
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> texts;
  bool answered = true;
  std::size_t errors = 0;

  double num(const std::string& k, double fallback = 0) const {
    auto it = numbers.find(k);
    return it == numbers.end() ? fallback : it->second;
  }
  std::string text(const std::string& k, const std::string& fallback = "-") const {
    auto it = texts.find(k);
    return it == texts.end() || it->second.empty() ? fallback : it->second;
  }
  std::vector<std::string> linked(const std::string& kind) const {
    std::vector<std::string> out;
    const std::string prefix = kind + ":";
    for (const auto& l : links)
      if (l.rfind(prefix, 0) == 0) out.push_back(l.substr(prefix.size()));
    return out;
  }
};

struct picture {
  std::string at;
  std::vector<actor> actors;
  std::vector<const actor*> of(const std::string& kind) const {
    std::vector<const actor*> out;
    for (const auto& a : actors)
      if (a.kind == kind) out.push_back(&a);
    std::sort(out.begin(), out.end(), [](const actor* x, const actor* y) { return x->id < y->id; });
    return out;
  }
};

result<picture> read_picture(const std::string& body) {
  auto doc = parse_json_object(body, "the grid's picture");
  if (!doc) return std::move(doc).err();
  picture p;
  if (doc->HasMember("at") && (*doc)["at"].IsString()) p.at = (*doc)["at"].GetString();
  if (!doc->HasMember("actors") || !(*doc)["actors"].IsArray())
    return make_error(errc::invalid, "the grid's picture has no actors list");
  for (const auto& v : (*doc)["actors"].GetArray()) {
    if (!v.IsObject()) continue;
    actor a;
    if (v.HasMember("kind") && v["kind"].IsString()) a.kind = v["kind"].GetString();
    if (v.HasMember("id") && v["id"].IsString()) a.id = v["id"].GetString();
    if (v.HasMember("links") && v["links"].IsArray())
      for (const auto& l : v["links"].GetArray())
        if (l.IsString()) a.links.emplace_back(l.GetString());
    if (v.HasMember("state") && v["state"].IsObject())
      for (const auto& m : v["state"].GetObject()) {
        if (m.value.IsNumber()) a.numbers[m.name.GetString()] = m.value.GetDouble();
        else if (m.value.IsString()) a.texts[m.name.GetString()] = m.value.GetString();
      }
    if (v.HasMember("answered") && v["answered"].IsBool()) a.answered = v["answered"].GetBool();
    if (v.HasMember("errors") && v["errors"].IsArray()) a.errors = v["errors"].GetArray().Size();
    p.actors.push_back(std::move(a));
  }
  return p;
}

std::string bytes_text(double b) {
  const char* units[] = {"B", "K", "M", "G", "T"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : "%.1f%s", b, units[u]);
  return buf;
}

/// A bar of `width` cells, `used` of `total` filled.
std::string bar(double used, double total, int width = 12) {
  const int fill = total > 0 ? int(std::lround(std::clamp(used / total, 0.0, 1.0) * width)) : 0;
  return "[" + std::string(std::size_t(fill), '#') + std::string(std::size_t(width - fill), '.') + "]";
}

std::string fit(std::string s, std::size_t w) {
  if (s.size() > w) s = s.substr(0, w - 1) + "~";
  return s;
}

std::string render(const std::string& url, const picture& p) {
  std::string out;
  char line[512];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    out += line;
  };
  const auto workers = p.of("worker"), models = p.of("model"), sessions = p.of("session"), gens = p.of("generation"),
             loads = p.of("load"), pipelines = p.of("pipeline");
  int busy = 0, silent = 0;
  for (const auto* w : workers) {
    busy += w->num("busy") > 0 || w->num("generations") > 0;
    silent += !w->answered;
  }
  add("mpakt top  %s  at %s\n", url.c_str(), p.at.c_str());
  add("grid: %zu workers (%d busy, %d not answering), %zu models, %zu sessions, %zu generations, %zu loads\n\n",
      workers.size(), busy, silent, models.size(), sessions.size(), gens.size(), loads.size());

  add("WORKERS  %-18s %-8s %-14s %-21s %6s %8s  %s\n", "id", "backend", "memory", "used / offered", "models", "sessions",
      "state");
  for (const auto* w : workers) {
    const double total = w->num("totalBytes"), free = w->num("freeBytes");
    std::string state = !w->answered ? "NOT ANSWERING" : w->num("busy") > 0 ? "busy: " + w->text("busyGraph") : "idle";
    if (w->answered && w->num("generations") > 0) state += ", generating";
    const std::string used = bytes_text(total - free) + " / " + bytes_text(total);
    add("         %-18s %-8s %-14s %-21s %6zu %8zu  %s\n", fit(w->id, 18).c_str(), fit(w->text("backend"), 8).c_str(),
        bar(total - free, total).c_str(), used.c_str(), w->linked("model").size(), w->linked("session").size(),
        state.c_str());
  }
  for (const auto* pl : pipelines)
    add("         %-18s pipeline over %s\n", fit(pl->id, 18).c_str(), [&] {
      std::string parts;
      for (const auto& w : pl->linked("worker")) parts += (parts.empty() ? "" : ", ") + w;
      return parts;
    }().c_str());

  add("\nMODELS   %-26s %-24s %10s  %s\n", "id", "placement", "resident", "source");
  for (const auto* m : models)
    add("         %-26s %-24s %10s  %s\n", fit(m->id, 26).c_str(), fit(m->text("placement"), 24).c_str(),
        bytes_text(m->num("residentBytes")).c_str(), m->text("source").c_str());

  add("\nSESSIONS %-26s %-18s %-26s %6s %s\n", "id", "worker", "model", "steps", "");
  for (const auto* s : sessions) {
    std::string notes;
    if (s->num("generating") > 0) notes += " generating";
    if (s->num("checkpointed") > 0) notes += " checkpointed";
    if (s->num("lost") > 0) notes += " LOST";
    add("         %-26s %-18s %-26s %6.0f%s\n", fit(s->id, 26).c_str(), fit(s->text("worker"), 18).c_str(),
        fit(s->text("model"), 26).c_str(), s->num("steps"), notes.c_str());
  }

  add("\nGENERATIONS %-23s %-26s %8s %8s\n", "id", "session", "tokens", "tok/s");
  for (const auto* g : gens) {
    const auto sess = g->linked("session");
    std::string note;
    if (g->texts.count("waiting")) {
      note = "  waiting for its session's recovery";
    } else if (g->num("speculative") > 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "  acceptance %.2f of %.0f drafts", g->num("acceptance"), g->num("drafted"));
      note = buf;
    }
    add("            %-23s %-26s %5.0f/%-3.0f %8.1f%s\n", fit(g->id, 23).c_str(),
        fit(sess.empty() ? "-" : sess.front(), 26).c_str(), g->num("tokens"), g->num("maxNewTokens"),
        g->num("tokensPerSecond"), note.c_str());
  }

  if (!loads.empty()) {
    add("\nLOADS    %-26s %-10s %12s %s\n", "id", "phase", "tensors", "transferred");
    for (const auto* l : loads)
      add("         %-26s %-10s %5.0f/%-6.0f %s of %s\n", fit(l->id, 26).c_str(), l->text("phase").c_str(),
          l->num("tensorsDone"), l->num("tensors"), bytes_text(l->num("transferredBytes")).c_str(),
          bytes_text(l->num("publishedBytes")).c_str());
  }
  return out;
}

}  // namespace

int cmd_top(const std::vector<std::string>& args) {
  std::string url, key;
  double interval = 1.0;
  bool once = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= args.size()) return std::nullopt;
      return args[++i];
    };
    std::optional<std::string> v;
    if (a == "--help" || a == "-h") {
      std::fputs(top_usage, stdout);
      return 0;
    } else if (a == "--url") {
      if (!(v = value())) return std::fputs("mpakt top: --url needs a URL\n", stderr), 2;
      url = *v;
    } else if (a == "--key") {
      if (!(v = value())) return std::fputs("mpakt top: --key needs an API key\n", stderr), 2;
      key = *v;
    } else if (a == "--interval") {
      char* end = nullptr;
      if (!(v = value()) || (interval = std::strtod(v->c_str(), &end), *end != '\0') || !(interval >= 0.1 && interval <= 3600))
        return std::fputs("mpakt top: --interval takes seconds, from 0.1 to 3600\n", stderr), 2;
    } else if (a == "--once") {
      once = true;
    } else {
      std::fprintf(stderr, "mpakt top: unknown option %s\n%s", a.c_str(), top_usage);
      return 2;
    }
  }
  if (url.empty() || key.empty()) {
    std::fprintf(stderr, "mpakt top: --url and --key are needed\n%s", top_usage);
    return 2;
  }
  while (!url.empty() && url.back() == '/') url.pop_back();
  auto parsed = http::parse_url(url);
  if (!parsed) {
    std::fprintf(stderr, "mpakt top: %s is not an http(s) URL\n", url.c_str());
    return 2;
  }
  http::client_options o;
  o.timeout = std::chrono::milliseconds(10000);
  o.bearer_origin = parsed->origin();
  o.origin_headers = {{"x-api-key", key}};
  http::client c(o);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  const bool tty = isatty(STDOUT_FILENO) == 1;
  while (!stop_requested) {
    std::string frame;
    auto r = c.get(url + "/api/v3/admin/actors");
    if (!r) {
      frame = "mpakt top: cannot read " + url + ": " + r.err().message + "\n";
    } else if (r->status != 200) {
      // the server's own words: 401 (no such key), 403 (not an operator), …
      std::string message = r->body;
      if (auto d = parse_json_object(r->body, "the answer"); d && d->HasMember("error") && (*d)["error"].IsString())
        message = (*d)["error"].GetString();
      std::fprintf(stderr, "mpakt top: %s answered %d: %s\n", url.c_str(), r->status, message.c_str());
      return 1;
    } else if (auto p = read_picture(r->body); !p) {
      frame = "mpakt top: " + p.err().message + "\n";
    } else {
      frame = render(url, *p);
    }
    if (once) {
      std::fputs(frame.c_str(), r && r->status == 200 ? stdout : stderr);
      return r && r->status == 200 && frame.rfind("mpakt top:", 0) != 0 ? 0 : 1;
    }
    // home, then the frame with each line cleared to its end (blank lines too) and the screen
    // below it cleared: no flicker of a blank screen between frames, nothing left of the last
    if (tty) {
      std::string drawn = "\x1b[H";
      for (char ch : frame) drawn += ch == '\n' ? std::string("\x1b[K\n") : std::string(1, ch);
      std::fputs((drawn + "\x1b[J").c_str(), stdout);
    } else {
      std::fputs((frame + "\n").c_str(), stdout);
    }
    std::fflush(stdout);
    for (double waited = 0; waited < interval && !stop_requested; waited += 0.1)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

}  // namespace mpakt::app
