// `mpakt host DIR --port N [--address A] [--no-range]`: serves a folder of checkpoints in the
// Hugging Face hub's URL layout, so tests and private deployments can load models without
// the hub:
//
//   GET|HEAD /{org}/{model}/resolve/main/{path...}   → DIR/{org}/{model}/{path}
//   GET|HEAD /{org}/{model}/resolve/{rev}/{path...}  → DIR/{org}/{model}/revisions/{rev}/{path}
//   GET /                                            → "org/model" lines, plain text
//
// As the hub does for gated and private repositories, a model folder holding a `.gated` file
// (one accepted token per line) answers 401 unless the request carries
// "Authorization: Bearer <one of them>". Answers name the commit a revision stands for in
// X-Repo-Commit, as the hub does: the revision folder's `.commit` file (DIR/{org}/{model}/.commit
// for main), or the revision's own name when it is a 40-hex-digit commit id; a commit id also
// finds the folder whose `.commit` names it. Files whose names begin with "." are never served.
//
// Files are streamed from disk a chunk at a time (responder::respond_file), single byte
// ranges are honoured (206/416) unless --no-range, and nothing outside DIR is ever served.

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "http/range.hpp"
#include "http/server.hpp"

namespace mpakt::app {

namespace {

namespace fs = std::filesystem;

struct host_options {
  std::string dir;
  std::string address = "127.0.0.1";
  int port = -1;
  bool ranges = true;
};

const char* host_usage =
    "usage: mpakt host DIR --port N [--address A] [--no-range]\n"
    "\n"
    "Serves DIR in the Hugging Face hub's layout: GET/HEAD /{org}/{model}/resolve/{rev}/{file}\n"
    "reads DIR/{org}/{model}/{file} for rev \"main\", DIR/{org}/{model}/revisions/{rev}/{file}\n"
    "otherwise. --port 0 picks a free port. --no-range ignores Range headers (a host that does\n"
    "not honour them, for tests). A model folder with a .gated file (tokens, one per line) needs\n"
    "Authorization: Bearer <token>; a revision's .commit file names its commit (X-Repo-Commit).\n";

http::response json_error(int status, const std::string& message) {
  http::response r;
  r.status = status;
  r.body = http::error_json(message);
  return r;
}

/// True when `p` is `root` or below it (both canonical).
bool is_within(const fs::path& p, const fs::path& root) {
  auto [r, q] = std::mismatch(root.begin(), root.end(), p.begin(), p.end());
  return r == root.end();
}

/// A path segment a client may name: not empty, not "." or "..", no NUL.
bool safe_segment(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('\0') == std::string::npos;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> out;
  std::size_t i = 1;  // past the leading '/'
  while (i <= path.size()) {
    const auto slash = path.find('/', i);
    out.push_back(path.substr(i, slash == std::string::npos ? std::string::npos : slash - i));
    if (slash == std::string::npos) break;
    i = slash + 1;
  }
  return out;
}

/// The first line of a small file, trimmed; empty when there is none.
std::string first_line(const fs::path& p) {
  std::FILE* f = std::fopen(p.c_str(), "rb");
  if (!f) return {};
  char buf[256] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string s(buf, n);
  s = s.substr(0, s.find('\n'));
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

/// Whether a gated model folder accepts the request's bearer token.
bool admitted(const fs::path& model_dir, const http::request& req) {
  std::FILE* f = std::fopen((model_dir / ".gated").c_str(), "rb");
  if (!f) return true;  // not gated
  std::string tokens;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) tokens.append(buf, n);
  std::fclose(f);
  const std::string* h = req.header("authorization");
  if (!h || h->rfind("Bearer ", 0) != 0 || h->size() == 7) return false;
  const std::string given = h->substr(7);
  std::size_t start = 0;
  while (start < tokens.size()) {
    std::size_t end = tokens.find('\n', start);
    if (end == std::string::npos) end = tokens.size();
    std::string line = tokens.substr(start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty() && line == given) return true;
    start = end + 1;
  }
  return false;
}

bool is_commit_id(const std::string& s) {
  return s.size() == 40 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

/// The folder of revision `rev` of a model: the model's own for "main", revisions/{rev} for a
/// branch or tag, and for a commit id the folder whose .commit names it (as the hub resolves
/// any commit it has).
std::optional<fs::path> revision_dir(const fs::path& model_dir, const std::string& rev) {
  std::error_code ec;
  if (rev == "main") return model_dir;
  if (fs::is_directory(model_dir / "revisions" / rev, ec)) return model_dir / "revisions" / rev;
  if (!is_commit_id(rev)) return std::nullopt;
  if (first_line(model_dir / ".commit") == rev) return model_dir;
  for (const auto& e : fs::directory_iterator(model_dir / "revisions", ec))
    if (e.is_directory(ec) && first_line(e.path() / ".commit") == rev) return e.path();
  return std::nullopt;
}

/// "org/model" for every DIR/org/model folder.
std::string listing(const fs::path& root) {
  std::vector<std::string> lines;
  std::error_code ec;
  for (const auto& org : fs::directory_iterator(root, ec)) {
    if (!org.is_directory() || org.path().filename().string().starts_with(".")) continue;
    for (const auto& model : fs::directory_iterator(org.path(), ec))
      if (model.is_directory() && !model.path().filename().string().starts_with("."))
        lines.push_back(org.path().filename().string() + "/" + model.path().filename().string());
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

class file_host {
 public:
  file_host(fs::path root, bool ranges) : root_(std::move(root)), ranges_(ranges) {}

  void on_request(http::request&& req, const std::shared_ptr<http::responder>& res) const {
    if (req.method != "GET" && req.method != "HEAD") {
      auto r = json_error(405, "method " + req.method + " is not allowed: this host serves GET and HEAD");
      r.headers.emplace_back("allow", "GET, HEAD");
      return res->respond(std::move(r));
    }
    if (req.path == "/") {
      http::response r;
      r.content_type = "text/plain; charset=utf-8";
      r.body = listing(root_);
      return res->respond(std::move(r));
    }
    const auto parts = split_path(req.path);
    if (parts.size() < 5 || parts[2] != "resolve")
      return res->respond(json_error(404, "no such path " + req.path + " (want /{org}/{model}/resolve/{rev}/{file})"));
    for (const auto& seg : parts)
      if (!safe_segment(seg)) return res->respond(json_error(400, "path " + req.path + " has an empty, \".\" or \"..\" segment"));

    fs::path dir = root_ / parts[0] / parts[1];
    if (!admitted(dir, req))
      return res->respond(json_error(401, "Access to model " + parts[0] + "/" + parts[1] +
                                              " is restricted: it is gated; send Authorization: Bearer with a token"));
    const std::string& rev = parts[3];
    auto found = revision_dir(dir, rev);
    if (!found) return res->respond(json_error(404, "unknown revision " + rev + " of " + parts[0] + "/" + parts[1]));
    dir = *found;
    std::string commit = first_line(dir / ".commit");
    if (commit.empty() && is_commit_id(rev)) commit = rev;
    fs::path file = dir;
    for (std::size_t i = 4; i < parts.size(); ++i) file /= parts[i];
    if (parts.back().front() == '.') return res->respond(json_error(404, "no such file " + req.path));

    // Symlinks are followed, but the real file must still be inside DIR.
    std::error_code ec;
    const fs::path real = fs::canonical(file, ec);
    if (ec || !is_within(real, root_) || !fs::is_regular_file(real, ec))
      return res->respond(json_error(404, "no such file " + req.path));
    const std::uint64_t size = fs::file_size(real, ec);
    if (ec) return res->respond(json_error(404, "no such file " + req.path));

    http::response head;
    head.content_type = "application/octet-stream";
    if (!commit.empty()) head.headers.emplace_back("x-repo-commit", commit);
    if (ranges_) head.headers.emplace_back("accept-ranges", "bytes");
    const auto mtime = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::file_clock::to_sys(fs::last_write_time(real, ec)).time_since_epoch())
                           .count();
    head.headers.emplace_back("etag", "\"" + std::to_string(size) + "-" + std::to_string(mtime) + "\"");

    http::range_answer range;
    if (const auto* h = req.header("range"); h && ranges_) range = http::evaluate_range(*h, size);
    if (range.k == http::range_answer::kind::unsatisfiable) {
      auto r = json_error(416, "range \"" + *req.header("range") + "\" is outside " + req.path + " (" +
                                   std::to_string(size) + " bytes)");
      r.headers.emplace_back("content-range", range.content_range(size));
      return res->respond(std::move(r));
    }
    std::uint64_t first = 0, length = size;
    if (range.k == http::range_answer::kind::partial) {
      head.status = 206;
      head.headers.emplace_back("content-range", range.content_range(size));
      first = range.first;
      length = range.length;
    }
    if (auto st = res->respond_file(real.string(), first, length, std::move(head)); !st)
      res->respond(json_error(404, st.err().message));
  }

 private:
  fs::path root_;
  bool ranges_;
};

}  // namespace

int cmd_host(const std::vector<std::string>& args) {
  host_options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(host_usage, stdout);
      return 0;
    } else if (a == "--port" && i + 1 < args.size()) {
      char* end = nullptr;
      const long p = std::strtol(args[++i].c_str(), &end, 10);
      if (*end != '\0' || p < 0 || p > 65535) {
        std::fprintf(stderr, "mpakt host: --port %s is not a port number\n", args[i].c_str());
        return 2;
      }
      o.port = int(p);
    } else if (a == "--address" && i + 1 < args.size()) {
      o.address = args[++i];
    } else if (a == "--no-range") {
      o.ranges = false;
    } else if (!a.starts_with("--") && o.dir.empty()) {
      o.dir = a;
    } else {
      std::fprintf(stderr, "mpakt host: unexpected argument \"%s\"\n\n%s", a.c_str(), host_usage);
      return 2;
    }
  }
  if (o.dir.empty() || o.port < 0) {
    std::fputs(host_usage, stderr);
    return 2;
  }
  std::error_code ec;
  const fs::path root = fs::canonical(o.dir, ec);
  if (ec || !fs::is_directory(root)) {
    std::fprintf(stderr, "mpakt host: %s is not a folder\n", o.dir.c_str());
    return 1;
  }

  // Block the stop signals before the I/O threads start (they inherit the mask), so only
  // sigwait below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  http::server_config cfg;
  cfg.address = o.address;
  cfg.port = std::uint16_t(o.port);
  cfg.threads = 4;          // file reads happen on the I/O threads: a slow disk stalls only one
  cfg.body_limit = 1 << 16;  // GET and HEAD only: no request needs a body
  auto host = std::make_shared<file_host>(root, o.ranges);
  auto srv = http::server::start(cfg, [host](http::request&& req, std::shared_ptr<http::responder> res) {
    host->on_request(std::move(req), res);
  });
  if (!srv) {
    std::fprintf(stderr, "mpakt host: %s\n", srv.err().message.c_str());
    return 1;
  }
  const std::string shown_address = o.address.find(':') != std::string::npos ? "[" + o.address + "]" : o.address;
  std::printf("mpakt host: serving %s at http://%s:%u\n", o.dir.c_str(), shown_address.c_str(), unsigned((*srv)->port()));
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  (*srv)->stop();
  std::printf("mpakt host: stopped (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
  return 0;
}

}  // namespace mpakt::app
