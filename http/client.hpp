#pragma once
/// A blocking HTTP/1.1 client for model hosts: GET (optionally with Range), HEAD, and GET
/// streamed to a sink in bounded chunks so a multi-gigabyte tensor never sits in memory.
/// http:// and https:// (OpenSSL, SNI, host-name verification against the system CA
/// store); follows redirects (the hub answers with redirects to its CDN).
///
/// Thread-safety: one object per thread; an object keeps one connection alive between calls
/// to the same host. Meant for the loader, which runs on its own thread, never an I/O or
/// actor scheduler thread.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "http/server.hpp"
#include "runtime/status.hpp"

namespace mpakt::http {

struct client_response {
  int status = 0;
  header_list headers;    ///< names lower-case
  std::string body;       ///< empty for streamed GETs and HEAD
  std::string final_url;  ///< after redirects
  /// The X-Repo-Commit header of the first answer in the redirect chain that had one: the
  /// commit a Hugging Face hub resolved a revision to (its CDN's final answer lacks it).
  std::string repo_commit;

  const std::string* header(std::string_view lower_name) const;
};

/// Inclusive byte range, as in "Range: bytes=first-last".
struct byte_range {
  std::uint64_t first = 0;
  std::uint64_t last = 0;
};

struct client_options {
  std::chrono::milliseconds timeout{30000};  ///< per connect/read/write operation
  int max_redirects = 5;
  std::size_t max_body = std::size_t(64) << 20;  ///< for get(); larger bodies are an error
  bool verify_tls = true;
  /// A PEM file of extra trusted certificates (a private host's own CA), on top of the
  /// system store. Host names are still verified. Empty: the system store only.
  std::string ca_file;
  /// Whether a host may resolve to an address that is not public (http::is_public_address:
  /// loopback, link-local, private ranges…). When false, such a request is refused
  /// (errc::forbidden, naming the host and the address) before connecting, for the URL
  /// asked for and for every redirect. The check and the connection use one resolution: the
  /// connection goes to exactly the addresses checked, so a name cannot answer differently
  /// in between.
  bool allow_private_addresses = true;
  /// Origins ("http://127.0.0.1:8081", url::origin()) exempt from that rule: the operator's
  /// own model host.
  std::vector<std::string> trusted_origins;
  /// Sent as "Authorization: Bearer <token>" to `bearer_origin` (url::origin()) only — never
  /// to another host a redirect leads to (the hub's signed CDN URLs need none).
  std::string bearer_token;
  std::string bearer_origin;
  /// More request headers for `bearer_origin` only, as the bearer token (an API key's
  /// x-api-key for mpakt's own API).
  std::vector<std::pair<std::string, std::string>> origin_headers;
};

class client {
 public:
  explicit client(client_options opts = {});
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// Errors: errc::invalid for a malformed URL, errc::unavailable when the host cannot be
  /// reached (naming it), errc::timeout, errc::too_large past max_body. HTTP error statuses
  /// are not errors: check `status`. Redirects keep the Range header; more than
  /// max_redirects is errc::unavailable. A kept-alive connection the server has closed
  /// meanwhile is reopened once, transparently.
  result<client_response> get(const std::string& url, std::optional<byte_range> range = std::nullopt);
  result<client_response> head(const std::string& url);
  /// Streams the body to `sink` in order, in chunks of at most `chunk_bytes`; `sink`
  /// returning false aborts with errc::conflict. The response's body stays empty.
  /// Every chunk but the last is exactly `chunk_bytes` long; only `chunk_bytes` (plus Beast's
  /// 64 KiB read buffer) is ever held, whatever the length or transfer coding.
  /// Only the body asked for reaches the sink: a 2xx answer, and with a range only 206. A 200
  /// to a range request (a host that ignores Range) or an error status comes back with
  /// `status` set, the sink untouched and `body` holding up to 64 KiB of the answer (for
  /// messages); check `status` before trusting what the sink got. An error mid-body comes
  /// after the sink has seen part of it: discard that part.
  result<client_response> get_stream(const std::string& url, std::optional<byte_range> range, std::size_t chunk_bytes,
                                     const std::function<bool(std::string_view chunk)>& sink);
  /// A range GET whose body goes straight into `parts`, filled one after another (their
  /// sizes add up to at most the range's length): no chunk buffer and no copy on the way
  /// for a body with a Content-Length, which is read from the socket with large reads — the
  /// fast path for weights. `received` is set to the bytes written. Only a 206 answer fills
  /// the parts; anything else comes back as get_stream's would (status set, parts untouched).
  /// A body longer than the parts is errc::conflict ("more bytes than asked for") and the
  /// parts are not to be trusted; so is anything read before an error mid-body. `filled`,
  /// when given, is called with a part's index once it holds all its bytes, before any byte
  /// of a later part is written (so one buffer may be named as several parts in a row).
  result<client_response> get_range_into(const std::string& url, byte_range range, std::span<const std::span<char>> parts,
                                         std::uint64_t& received,
                                         const std::function<void(std::size_t)>* filled = nullptr);

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace mpakt::http
