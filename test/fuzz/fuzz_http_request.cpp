// libFuzzer target: bytes as they arrive on a connection, through what http/session.cpp does
// with them before a handler sees them — Beast's request parser with the server's limits
// (http/server.hpp: 64 KiB of header, a body limit), the request target (absolute form,
// percent-decoding, the query), header names — and then the API's router with its own table
// (http/api/route_table.hpp) and the query parser. Anything may be refused; nothing may crash.

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <boost/asio/buffer.hpp>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "http/api/route_table.hpp"
#include "http/router.hpp"
#include "http/url.hpp"

namespace bhttp = boost::beast::http;
using namespace mpakt::http;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(1 << 20);
  parser.eager(true);
  boost::beast::error_code ec;
  // The bytes arrive in two reads, split where the first byte says, as a slow client sends
  // them; what the parser has not consumed yet is offered again with the next read — only when
  // that read brought bytes: after need_more the parser must be given more than before, as
  // Beast's own reads (http/session.cpp) do (re-offering the same bytes trips its assertions).
  const std::size_t cut = size ? std::min<std::size_t>(data[0], size) : 0;
  std::string pending;
  for (auto [from, to] : {std::pair{std::size_t(0), cut}, std::pair{cut, size}}) {
    if (to == from) continue;
    pending.append(reinterpret_cast<const char*>(data + from), to - from);
    while (!pending.empty() && !parser.is_done()) {
      const std::size_t n = parser.put(boost::asio::buffer(pending), ec);
      pending.erase(0, n);
      if (ec == bhttp::error::need_more) {
        ec = {};
        break;
      }
      if (ec) return 0;
      if (n == 0) break;
    }
  }
  if (!parser.is_header_done()) return 0;
  const auto& msg = parser.get();
  std::string why;
  auto target = parse_request_target(msg.target(), &why);
  if (!target) return 0;
  for (const auto& f : msg) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  }
  auto m = api_router().match(msg.method_string(), target->path);
  if (m.k == route_match::kind::found) (void)parse_query(target->query);
  (void)path_segments(target->path);
  return 0;
}
