#pragma once
/// URLs as the HTTP client and the model loader need them.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mpakt::http {

struct url {
  std::string scheme;  ///< "http" or "https"
  std::string host;
  std::uint16_t port = 0;
  std::string target;  ///< path and query, always starting with '/'

  bool tls() const { return scheme == "https"; }
  /// "host" or "host:port" when the port is not the scheme's default.
  std::string host_header() const;
  std::string str() const;
  /// "scheme://host[:port]" with the host in lower case: what identifies a server.
  std::string origin() const;
};

/// Parses http:// and https:// URLs; nullopt for anything else (no user-info, no fragments).
std::optional<url> parse_url(std::string_view text);
/// Resolves a redirect Location against the URL it came from: absolute, scheme-relative
/// ("//host/x"), absolute-path ("/x") or relative ("x", "../x", "?q"), dot segments removed
/// (RFC 3986 5.2). nullopt for other schemes.
std::optional<url> resolve_location(const url& base, std::string_view location);

/// Whether `ip` (an IPv4 or IPv6 address in text) is a public unicast address: not
/// loopback, unspecified, link-local, private (RFC 1918, RFC 4193 unique local), shared
/// (100.64/10), multicast, reserved, or for documentation and benchmarks; IPv4 addresses
/// mapped or embedded in IPv6 (::ffff:a.b.c.d, 64:ff9b::/96, 2002::/16) are judged as IPv4.
/// False for text that is not an address.
bool is_public_address(std::string_view ip);

/// Percent-decodes a path or query component ('+' stays '+'); nullopt on bad escapes.
std::optional<std::string> percent_decode(std::string_view s);
/// Splits "a=1&b=two" into decoded pairs (query strings of requests).
std::vector<std::pair<std::string, std::string>> parse_query(std::string_view query);

/// A request's target, split: the percent-decoded path and the raw query (after '?').
struct request_target {
  std::string path;
  std::string query;
};
/// Reads the target of a request line: origin-form ("/a/b?x=1") or absolute-form
/// ("http://host/a/b?x=1", as proxies send it). The message names what is wrong: a
/// malformed target or a malformed percent-escape in the path.
std::optional<request_target> parse_request_target(std::string_view target, std::string* why);

}  // namespace mpakt::http
