#pragma once
/// `mpakt host ARGS...` as a child process for tests: stdout on a pipe, ready once its
/// "serving … :PORT" line appears (the port is read from it); killed when destroyed.

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

extern char** environ;

namespace mpakt::test {

class host_process {
 public:
  explicit host_process(const std::vector<std::string>& args) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    std::vector<std::string> argv_s{MPAKT_BINARY, "host"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, MPAKT_BINARY, &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    out_ = fds[0];
    if (pid_ > 0) wait_for_serving();
  }
  ~host_process() {
    stop(SIGKILL);
    if (out_ >= 0) ::close(out_);
  }

  std::uint16_t port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& first_line() const { return line_; }

  /// Sends `sig` and returns the exit status (as waitpid gives it), -1 if not running.
  int stop(int sig = SIGTERM) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  void wait_for_serving() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::string got;
    while (got.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) break;  // exited
      got.append(buf, std::size_t(n));
    }
    line_ = got.substr(0, got.find('\n'));
    const auto colon = line_.rfind(':');
    if (line_.find("serving") != std::string::npos && colon != std::string::npos)
      port_ = std::uint16_t(std::stoi(line_.substr(colon + 1)));
  }

  pid_t pid_ = -1;
  int out_ = -1;
  std::uint16_t port_ = 0;
  std::string line_;
};

}  // namespace mpakt::test
