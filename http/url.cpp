#include "http/url.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

#include <boost/asio/ip/address.hpp>

namespace mpakt::http {

std::string url::host_header() const {
  const bool default_port = (scheme == "http" && port == 80) || (scheme == "https" && port == 443);
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;  // an IPv6 literal
  return default_port ? h : h + ":" + std::to_string(port);
}

std::string url::str() const { return scheme + "://" + host_header() + target; }

std::string url::origin() const {
  std::string h = host_header();
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return scheme + "://" + h;
}

namespace {

bool is_public_v4(std::uint32_t a) {
  const auto in = [a](std::uint32_t net, int bits) { return (a >> (32 - bits)) == (net >> (32 - bits)); };
  return !(in(0x00000000, 8) ||   // "this network", 0.0.0.0
           in(0x0A000000, 8) ||   // 10/8 private
           in(0x64400000, 10) ||  // 100.64/10 shared (carrier-grade NAT)
           in(0x7F000000, 8) ||   // loopback
           in(0xA9FE0000, 16) ||  // 169.254/16 link-local (cloud metadata services)
           in(0xAC100000, 12) ||  // 172.16/12 private
           in(0xC0000000, 24) ||  // 192.0.0/24 protocol assignments
           in(0xC0000200, 24) ||  // 192.0.2/24 documentation
           in(0xC0A80000, 16) ||  // 192.168/16 private
           in(0xC6120000, 15) ||  // 198.18/15 benchmarking
           in(0xC6336400, 24) ||  // 198.51.100/24 documentation
           in(0xCB007100, 24) ||  // 203.0.113/24 documentation
           in(0xE0000000, 4) ||   // multicast
           in(0xF0000000, 4));    // reserved, broadcast
}

std::uint32_t v4_at(const std::array<unsigned char, 16>& b, std::size_t i) {
  return std::uint32_t(b[i]) << 24 | std::uint32_t(b[i + 1]) << 16 | std::uint32_t(b[i + 2]) << 8 | b[i + 3];
}

}  // namespace

bool is_public_address(std::string_view ip) {
  boost::system::error_code ec;
  const auto a = boost::asio::ip::make_address(std::string(ip), ec);
  if (ec) return false;
  if (a.is_v4()) return is_public_v4(a.to_v4().to_uint());
  const auto b = a.to_v6().to_bytes();
  const auto zeros = [&](std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i)
      if (b[i] != 0) return false;
    return true;
  };
  if (zeros(0, 10) && b[10] == 0xFF && b[11] == 0xFF) return is_public_v4(v4_at(b, 12));  // ::ffff:a.b.c.d
  if (zeros(0, 12)) return false;  // ::, ::1 and the old IPv4-compatible form
  if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xFF && b[3] == 0x9B && zeros(4, 12)) return is_public_v4(v4_at(b, 12));  // NAT64
  if (b[0] == 0x20 && b[1] == 0x02) return is_public_v4(v4_at(b, 2));  // 6to4
  if ((b[0] & 0xFE) == 0xFC) return false;                             // fc00::/7 unique local
  if (b[0] == 0xFE && (b[1] & 0x80) == 0x80) return false;             // fe80::/10 link-local, fec0::/10 site-local
  if (b[0] == 0xFF) return false;                                      // multicast
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0D && b[3] == 0xB8) return false;  // documentation
  if (b[0] == 0x01 && b[1] == 0x00 && zeros(2, 8)) return false;       // 100::/64 discard
  return true;
}

std::optional<url> parse_url(std::string_view text) {
  url u;
  if (text.rfind("http://", 0) == 0) {
    u.scheme = "http";
    u.port = 80;
    text.remove_prefix(7);
  } else if (text.rfind("https://", 0) == 0) {
    u.scheme = "https";
    u.port = 443;
    text.remove_prefix(8);
  } else {
    return std::nullopt;
  }
  const auto slash = text.find_first_of("/?#");
  std::string_view authority = text.substr(0, slash);
  std::string_view rest = slash == std::string_view::npos ? std::string_view() : text.substr(slash);
  if (authority.empty() || authority.find('@') != std::string_view::npos) return std::nullopt;
  if (authority.front() == '[') {  // [v6]:port
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    u.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
  } else {
    const auto colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    authority = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
  }
  if (!authority.empty()) {
    if (authority.front() != ':' || authority.size() < 2) return std::nullopt;
    unsigned p = 0;
    auto r = std::from_chars(authority.data() + 1, authority.data() + authority.size(), p);
    if (r.ec != std::errc() || r.ptr != authority.data() + authority.size() || p == 0 || p > 65535) return std::nullopt;
    u.port = std::uint16_t(p);
  }
  if (u.host.empty()) return std::nullopt;
  const auto hash = rest.find('#');
  if (hash != std::string_view::npos) rest = rest.substr(0, hash);
  u.target = rest.empty() ? "/" : std::string(rest);
  if (u.target.front() == '?') u.target = "/" + u.target;
  return u;
}

namespace {

/// RFC 3986 5.2.4: removes "." and ".." segments from a path.
std::string remove_dot_segments(std::string_view in) {
  std::vector<std::string_view> out;
  const bool trailing = in.ends_with("/") || in.ends_with("/.") || in.ends_with("/..");
  std::size_t i = 0;
  while (i < in.size()) {
    const auto slash = in.find('/', i + 1);
    std::string_view seg = in.substr(i + 1, slash == std::string_view::npos ? std::string_view::npos : slash - i - 1);
    if (seg == "..") {
      if (!out.empty()) out.pop_back();
    } else if (seg != ".") {
      out.push_back(seg);
    }
    if (slash == std::string_view::npos) break;
    i = slash;
  }
  std::string path;
  for (const auto& seg : out) path.append("/").append(seg);
  if (trailing && (out.empty() || !out.back().empty())) path += "/";
  return path.empty() ? "/" : path;
}

}  // namespace

std::optional<url> resolve_location(const url& base, std::string_view location) {
  if (location.rfind("http://", 0) == 0 || location.rfind("https://", 0) == 0) return parse_url(location);
  if (location.rfind("//", 0) == 0) return parse_url(base.scheme + ":" + std::string(location));
  if (location.empty()) return std::nullopt;
  {  // "scheme:..." of another scheme (RFC 3986 3.1: a letter, then letters, digits, + - .)
    std::size_t i = 0;
    while (i < location.size() && (std::isalnum(static_cast<unsigned char>(location[i])) || location[i] == '+' ||
                                   location[i] == '-' || location[i] == '.'))
      ++i;
    if (i > 0 && i < location.size() && location[i] == ':' && std::isalpha(static_cast<unsigned char>(location[0])))
      return std::nullopt;
  }
  const auto hash = location.find('#');
  if (hash != std::string_view::npos) location = location.substr(0, hash);
  url u = base;
  const std::string_view base_target = base.target;
  const std::string_view base_path = base_target.substr(0, base_target.find('?'));
  if (location.front() == '?') {  // same path, new query
    u.target = std::string(base_path) + std::string(location);
    return u;
  }
  std::string_view rel_path = location.substr(0, location.find('?'));
  const std::string query = location.find('?') == std::string_view::npos ? "" : std::string(location.substr(location.find('?')));
  std::string merged;
  if (!rel_path.empty() && rel_path.front() == '/') {
    merged = std::string(rel_path);
  } else {  // relative to the base's directory
    merged = std::string(base_path.substr(0, base_path.rfind('/') + 1)) + std::string(rel_path);
  }
  u.target = remove_dot_segments(merged) + query;
  return u;
}

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
      return std::nullopt;
    out += char(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
    i += 2;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> parse_query(std::string_view q) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!q.empty()) {
    const auto amp = q.find('&');
    std::string_view part = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (part.empty()) continue;
    const auto eq = part.find('=');
    std::string k(part.substr(0, eq)), v(eq == std::string_view::npos ? "" : part.substr(eq + 1));
    for (auto& c : v) if (c == '+') c = ' ';
    auto dk = percent_decode(k), dv = percent_decode(v);
    out.emplace_back(dk.value_or(k), dv.value_or(v));
  }
  return out;
}

std::optional<request_target> parse_request_target(std::string_view target, std::string* why) {
  std::optional<url> absolute;
  if (!target.empty() && target.front() != '/') {
    absolute = parse_url(target);
    if (!absolute) {
      *why = "malformed request target \"" + std::string(target) + "\"";
      return std::nullopt;
    }
    target = absolute->target;
  }
  const auto q = target.find('?');
  auto path = percent_decode(target.substr(0, q));
  if (!path) {
    *why = "malformed percent-escape in \"" + std::string(target.substr(0, q)) + "\"";
    return std::nullopt;
  }
  request_target out{std::move(*path), {}};
  if (q != std::string_view::npos) out.query = std::string(target.substr(q + 1));
  return out;
}

}  // namespace mpakt::http
