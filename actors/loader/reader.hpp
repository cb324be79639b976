#pragma once
/// Byte-range reads from where checkpoint files live: local files or a model host over HTTP.
///
/// Everything above this (inspect, stream) is written against `byte_reader`, so the same code
/// reads a local folder, the hub, or `mpakt host`, and tests can substitute a fake that counts
/// or fails requests. The HTTP reader is in its own file (http_reader.cpp) so code and tests
/// that only read local files do not link the HTTP client.
///
/// Thread-safety: a reader is used by one thread at a time (the loader's own thread; never an
/// I/O or actor scheduler thread — reads block). Lifecycle: created per load or inspect,
/// destroyed when it ends; an HTTP reader keeps one connection alive between its calls.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/status.hpp"

namespace mpakt::loader {

/// What a range read returned.
struct range_read {
  std::string bytes;                       ///< [first, first + bytes.size()) of the file
  std::optional<std::uint64_t> file_size;  ///< the whole file's size, when the source says
};

/// Called with a part's index as soon as that part of a read_range_into holds all its bytes,
/// in order, before any byte of a later part is written: a caller may name one buffer as
/// several parts in a row, using each up (converting it) before the next fills it.
using part_filled = std::function<void(std::size_t part)>;

class byte_reader {
 public:
  virtual ~byte_reader() = default;

  /// Reads bytes [first, first + length) of `location`; fewer only when the file ends first.
  /// Errors: errc::not_found when the file does not exist (404, no such file) — the caller
  /// decides whether that is an error; errc::invalid for a host that does not honour Range
  /// requests ("host <url> does not honour Range requests"); errc::unavailable / timeout when
  /// the host cannot be reached. Messages name the location.
  virtual result<range_read> read_range(const std::string& location, std::uint64_t first, std::uint64_t length) = 0;

  /// Reads bytes [first, first + total) of `location`, where total is the parts' sizes added
  /// up, straight into `parts` one after another: the buffers that then travel to a worker,
  /// with no copy on the way where the reader can avoid one (both of ours do). Returns the
  /// bytes read: fewer only when the file ends first. Errors as read_range; after an error
  /// the parts hold nothing to trust. `filled`, when set, hears of each part filled (never
  /// of a part the file ended in). This default reads with read_range and copies (fakes in
  /// tests).
  virtual result<std::uint64_t> read_range_into(const std::string& location, std::uint64_t first,
                                                std::span<const std::span<char>> parts, const part_filled& filled);

  /// Reads a whole small file (an index JSON) of at most `max_bytes`; errc::not_found as above,
  /// errc::too_large past the limit.
  virtual result<std::string> read_all(const std::string& location, std::size_t max_bytes) = 0;

  /// Requests made so far: HTTP requests for a remote reader, file opens for a local one.
  /// Tests use it to check that inspect reads a single-file header with one request (INS-03).
  virtual std::uint64_t requests() const = 0;

  /// The commit a Hugging Face hub resolved the source's revision to (its X-Repo-Commit
  /// header), from the first answer that carried one; empty when none did (a plain URL, a
  /// host that does not say, local files).
  virtual std::string repo_commit() const { return {}; }
};

/// Reads local files (absolute paths). With `allowed_dirs` (absolute, canonical), a file
/// whose real path (symbolic links followed) is outside all of them is refused
/// (errc::invalid) without being opened; empty: any file.
std::unique_ptr<byte_reader> make_local_reader(std::vector<std::string> allowed_dirs = {});

struct http_reader_options {
  int timeout_ms = 30000;    ///< per connect/read/write
  bool verify_tls = true;
  /// Whether URLs (and redirects) may lead to loopback, link-local or private addresses
  /// (http::client_options::allow_private_addresses); refused, they are the caller's error.
  bool allow_private = true;
  /// The operator's own model host (--hf-endpoint), as a URL or origin: exempt from
  /// `allow_private`, and the one host whose failures are the server's (503) rather than
  /// the caller's (400 naming the URL).
  std::string trusted_endpoint;
  /// Whether every host's failures keep their transient codes — errc::unavailable for a
  /// dropped connection or a 5xx answer, errc::timeout — as `trusted_endpoint`'s do, instead
  /// of becoming the caller's error (errc::invalid naming the URL). A worker's host fetcher
  /// sets it: each host it reads is one the coordinator sent it to (its header's digest
  /// checked), so a failure there is the grid's, and a dropped answer is asked for again
  /// (read_range_into_retrying) rather than ending the load. Reaching addresses is unchanged.
  bool every_host_transient = false;
  /// A Hugging Face token for gated or private repositories: sent as Authorization: Bearer to
  /// `trusted_endpoint`'s origin only (never to a URL source, nor to a host a redirect leads
  /// to). Never logged, never part of a message.
  std::string token;
};

/// Reads http:// and https:// URLs with range requests (http_reader.cpp; links the HTTP client).
std::unique_ptr<byte_reader> make_http_reader(const http_reader_options& opts = {});

}  // namespace mpakt::loader
