// The HTTP byte reader: range requests to a model host, checked before any byte is used.
//
// Every range read is one GET with "Range: bytes=first-last", streamed into a buffer capped at
// the length asked for. A host that ignores Range answers 200 with the whole file; the cap
// makes us stop reading after `length + 1` bytes instead of downloading the file, and the
// answer is refused naming the URL (decisions.md: 400). A 206 must carry a Content-Range that
// matches what was asked and what arrived. Only then are the bytes handed on, so nothing read
// from a misbehaving host ever reaches a worker.

#include <charconv>

#include "actors/loader/reader.hpp"
#include "http/client.hpp"
#include "http/url.hpp"

namespace mpakt::loader {

namespace {

/// Chunks the client hands the sink; bounded so a refused answer costs at most this much.
constexpr std::size_t stream_chunk = std::size_t(1) << 20;

struct content_range {
  std::uint64_t first = 0, last = 0;
  std::optional<std::uint64_t> total;
  bool unsatisfied = false;  ///< "bytes */N" (with 416)
};

bool parse_u64(std::string_view s, std::uint64_t& v) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

/// Parses "bytes a-b/total", "bytes a-b/*" and "bytes */total".
std::optional<content_range> parse_content_range(std::string_view v) {
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  if (v.rfind("bytes ", 0) != 0) return std::nullopt;
  v.remove_prefix(6);
  const auto slash = v.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  content_range cr;
  const std::string_view range = v.substr(0, slash), total = v.substr(slash + 1);
  if (total != "*") {
    std::uint64_t t;
    if (!parse_u64(total, t)) return std::nullopt;
    cr.total = t;
  }
  if (range == "*") {
    cr.unsatisfied = true;
    return cr;
  }
  const auto dash = range.find('-');
  if (dash == std::string_view::npos || !parse_u64(range.substr(0, dash), cr.first) ||
      !parse_u64(range.substr(dash + 1), cr.last) || cr.last < cr.first)
    return std::nullopt;
  return cr;
}

error no_range(const std::string& url, std::string_view detail) {
  return invalid("host " + url + " does not honour Range requests (" + std::string(detail) + ")");
}

/// Maps an HTTP error status to an error naming the URL. A server error is the server's
/// own (503) only from the operator's model host; a host the caller named is the caller's.
error status_error(const std::string& url, int status, bool trusted) {
  const std::string s = std::to_string(status);
  if (status == 404 || status == 410) return make_error(errc::not_found, url + " was not found (HTTP " + s + ")");
  if (status == 401 || status == 403)
    return invalid("host refused " + url + " (HTTP " + s + "): the model does not exist there, or is gated or private");
  if (status >= 500 && trusted) return make_error(errc::unavailable, "host answered HTTP " + s + " for " + url);
  return invalid("host answered HTTP " + s + " for " + url);
}

/// The client's error for `url`, naming it. A source that cannot be reached, or leads to an
/// address this server does not fetch from, is the caller's error (400); only the operator's
/// own model host being unreachable is the server's (503, 504).
error client_error(const std::string& url, error e, bool trusted) {
  if (e.code == errc::forbidden) {
    e.code = errc::invalid;
    e.message += "; this server fetches sources only from public addresses (mpakt serve --allow-private-sources)";
  } else if (!trusted && (e.code == errc::unavailable || e.code == errc::timeout)) {
    e.code = errc::invalid;
    e.message = "cannot reach source " + url + ": " + e.message;
  }
  if (e.message.find(url) == std::string::npos) e.message = "reading " + url + ": " + e.message;
  return e;
}

class http_reader final : public byte_reader {
 public:
  explicit http_reader(const http_reader_options& opts)
      : client_([&] {
          http::client_options o;
          o.timeout = std::chrono::milliseconds(opts.timeout_ms);
          o.verify_tls = opts.verify_tls;
          o.allow_private_addresses = opts.allow_private;
          if (auto u = http::parse_url(opts.trusted_endpoint)) {
            o.trusted_origins.push_back(u->origin());
            if (!opts.token.empty()) {
              o.bearer_token = opts.token;
              o.bearer_origin = u->origin();
            }
          }
          return o;
        }()),
        trusted_origin_([&]() -> std::string {
          auto u = http::parse_url(opts.trusted_endpoint);
          return u ? u->origin() : "";
        }()),
        every_host_transient_(opts.every_host_transient) {}

  /// Whether `url`'s failures are the server's (transient, asked for again): the operator's
  /// own model host, or any host for a worker's fetcher (http_reader_options).
  bool trusted(const std::string& url) const {
    if (every_host_transient_) return true;
    auto u = http::parse_url(url);
    return u && !trusted_origin_.empty() && u->origin() == trusted_origin_;
  }

  /// Checks an answer to a range request of which `got` body bytes arrived: a 206 whose
  /// Content-Range matches what was asked and what arrived, or a 416 (asked past the end,
  /// e.g. an empty file: nothing to read). Returns the file's size when the host said.
  result<std::optional<std::uint64_t>> check_answer(const std::string& url, const http::byte_range& range,
                                                    const http::client_response& r, std::uint64_t got) const {
    const auto* cr_text = r.header("content-range");
    if (r.status == 416) {
      if (cr_text)
        if (auto cr = parse_content_range(*cr_text); cr && cr->unsatisfied) return cr->total;
      return std::optional<std::uint64_t>();
    }
    if (r.status == 200) return no_range(url, "it answered a range request with 200 and the whole file");
    if (r.status != 206) return status_error(url, r.status, trusted(url));
    if (!cr_text) return no_range(url, "its 206 answer has no Content-Range");
    auto cr = parse_content_range(*cr_text);
    if (!cr || cr->unsatisfied) return no_range(url, "its Content-Range \"" + *cr_text + "\" cannot be read");
    if (cr->first != range.first || cr->last > range.last || cr->last - cr->first + 1 != got)
      return no_range(url, "it answered bytes " + std::to_string(range.first) + "-" + std::to_string(range.last) +
                               " with Content-Range \"" + *cr_text + "\" and " + std::to_string(got) + " bytes");
    return cr->total;
  }

  result<range_read> read_range(const std::string& url, std::uint64_t first, std::uint64_t length) override {
    range_read out;
    if (length == 0) return out;
    ++requests_;
    out.bytes.reserve(std::size_t(length));  // one allocation per piece, bounded by what we ask for
    const http::byte_range range{first, first + length - 1};
    bool overflow = false;
    auto r = client_.get_stream(url, range, std::min<std::uint64_t>(length, stream_chunk),
                                [&](std::string_view chunk) {
                                  if (out.bytes.size() + chunk.size() > length) {
                                    overflow = true;  // more than asked for: Range was ignored
                                    return false;
                                  }
                                  out.bytes.append(chunk);
                                  return true;
                                });
    if (overflow) return no_range(url, "it sent more bytes than the range asked for");
    if (!r) return client_error(url, std::move(r).err(), trusted(url));
    note_commit(*r);
    auto checked = check_answer(url, range, *r, out.bytes.size());
    if (!checked) return std::move(checked).err();
    if (r->status == 416) out.bytes.clear();
    out.file_size = *checked;
    return out;
  }

  result<std::uint64_t> read_range_into(const std::string& url, std::uint64_t first,
                                        std::span<const std::span<char>> parts, const part_filled& filled) override {
    std::uint64_t length = 0;
    for (const auto& p : parts) length += p.size();
    if (length == 0) return std::uint64_t(0);
    ++requests_;
    const http::byte_range range{first, first + length - 1};
    std::uint64_t got = 0;
    auto r = client_.get_range_into(url, range, parts, got, filled ? &filled : nullptr);
    if (!r && r.err().code == errc::conflict) return no_range(url, "it sent more bytes than the range asked for");
    if (!r) return client_error(url, std::move(r).err(), trusted(url));
    note_commit(*r);
    auto checked = check_answer(url, range, *r, got);
    if (!checked) return std::move(checked).err();
    return r->status == 416 ? 0 : got;
  }

  result<std::string> read_all(const std::string& url, std::size_t max_bytes) override {
    ++requests_;
    std::string body;
    bool overflow = false;
    auto r = client_.get_stream(url, std::nullopt, stream_chunk, [&](std::string_view chunk) {
      if (body.size() + chunk.size() > max_bytes) {
        overflow = true;
        return false;
      }
      body.append(chunk);
      return true;
    });
    if (overflow)
      return make_error(errc::too_large, url + " is larger than the " + std::to_string(max_bytes) + " bytes accepted");
    if (!r) return client_error(url, std::move(r).err(), trusted(url));
    note_commit(*r);
    if (r->status != 200) return status_error(url, r->status, trusted(url));
    return body;
  }

  std::uint64_t requests() const override { return requests_; }
  std::string repo_commit() const override { return commit_; }

 private:
  /// Keeps the first commit an answer named (one load reads one revision).
  void note_commit(const http::client_response& r) {
    if (commit_.empty() && r.status < 300) commit_ = r.repo_commit;
  }

  http::client client_;
  std::string trusted_origin_;
  bool every_host_transient_ = false;
  std::uint64_t requests_ = 0;
  std::string commit_;
};

}  // namespace

std::unique_ptr<byte_reader> make_http_reader(const http_reader_options& opts) {
  return std::make_unique<http_reader>(opts);
}

}  // namespace mpakt::loader
