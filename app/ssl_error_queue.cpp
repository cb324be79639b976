// OpenSSL's error queue, emptied before every TLS read, write and handshake step of this
// process.
//
// SSL_get_error() reports SSL_ERROR_SSL for any failed or would-block call while the calling
// thread's error queue holds an error, whichever connection left it there; OpenSSL asks callers
// to empty the queue before each I/O call. CAF 0.17's OpenSSL module (the cluster port) does not:
// it drains the queue only when its logger is on. All of a process's links share CAF's one I/O
// thread, so one volunteer whose connection ended without a TLS goodbye (killed, or its network
// gone), or one stranger sending bytes that are not TLS, left an error that made the next
// would-block read of *every other* volunteer's link look like a failure — and the coordinator
// dropped them all. These definitions take the place of OpenSSL's four calls for the whole
// process (the dynamic linker binds CAF's module to the executable's symbols first), empty the
// queue, and call OpenSSL's own. The HTTP client's TLS (Boost.Asio) goes through them too,
// which Asio already expects.

#include <dlfcn.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace {

template <class F>
F next_definition(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return real(ssl, buf, num);
}

int SSL_accept(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return real(ssl);
}

int SSL_connect(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return real(ssl);
}

}  // extern "C"
