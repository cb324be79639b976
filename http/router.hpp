#pragma once
/// Picking the route for a request's method and path from a route table (the API's is
/// http/api/route_table.hpp), apart from what the routes do, so that matching is tested and
/// fuzzed on its own (test/fuzz/fuzz_http_request.cpp).
///
/// A pattern is a path of segments; ":name" matches any one segment. Empty segments do not
/// count ("/api//v3/" is api, v3). Among the patterns that fit a path best (a literal
/// segment beats a :parameter, earlier segments first), the method picks the route; a path
/// that fits with other methods only is `wrong_method`, one that fits nothing `no_path`.
/// /api/v1/… is matched as /api/v2/… (v1 is an alias of v2, decisions.md).
///
/// A router is immutable once built and safe to use from any thread.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mpakt::http {

/// One row of a route table: a method ("GET") and a pattern ("/api/v3/models/:modelId").
/// The strings must outlive the router (the tables are static).
struct route_key {
  std::string_view method;
  std::string_view pattern;
};

struct route_match {
  enum class kind { found, wrong_method, no_path };
  kind k = kind::no_path;
  std::size_t index = 0;          ///< found: the route's row in the table
  std::vector<std::string> args;  ///< found: the values of the pattern's :parameters, in order
  std::string allowed;            ///< wrong_method: the methods the path takes ("GET, POST")
};

/// The non-empty segments of a path ("/api//v3/" → api, v3).
std::vector<std::string_view> path_segments(std::string_view path);

class router {
 public:
  explicit router(std::vector<route_key> table);
  route_match match(std::string_view method, std::string_view path) const;

 private:
  std::vector<route_key> table_;
  std::vector<std::vector<std::string_view>> patterns_;  ///< table_'s patterns, split once
};

}  // namespace mpakt::http
