#pragma once
/// Blocks SIGPIPE on the calling thread while alive, and discards one that a write to a
/// closed connection raised meanwhile: for the system calls that have no MSG_NOSIGNAL
/// (sendfile(2), OpenSSL's socket writes) in a process that has not chosen to ignore SIGPIPE,
/// which it would otherwise end. Scope it to the calls (a coroutine may resume on another
/// thread), or to a thread of one's own for its whole life.

#include <pthread.h>
#include <signal.h>

namespace mpakt::http {

class sigpipe_guard {
 public:
  sigpipe_guard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~sigpipe_guard() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec now{0, 0};
      sigtimedwait(&pipe_, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

 private:
  sigset_t pipe_{}, old_{};
  bool was_pending_ = false;
};

}  // namespace mpakt::http
