#pragma once
/// Errors as values for the whole project.
///
/// Every fallible function returns `result<T>` (or `status` for no value). An error
/// carries a domain code, which the HTTP layer maps to a status code in one place, and
/// a one-sentence message that names the offending thing (step, op, input, field).
/// Nothing in runtime/ or backends/ throws across its API or calls exit().

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace mpakt {

/// Domain error codes. The HTTP front end maps them to statuses (see docs/api-decisions.md).
enum class errc {
  invalid,        ///< malformed or invalid request (400)
  unauthorized,   ///< no or bad key (401)
  forbidden,      ///< not allowed (403)
  not_found,      ///< unknown id (404)
  conflict,       ///< conflicting state (409)
  too_large,      ///< body or budget too large (413)
  limit,          ///< per-key limit reached (429)
  unavailable,    ///< no worker can take it now (503)
  timeout,        ///< past the graph timeout (504)
  internal,       ///< a bug or a device fault (500)
  retry,          ///< between actors only: send the request again (its worker was lost; 503 if it ever reaches a client)
};

/// An error value: a code and a message naming the offending thing.
struct error {
  errc code = errc::invalid;
  std::string message;
};

inline error make_error(errc code, std::string message) { return error{code, std::move(message)}; }
inline error invalid(std::string message) { return error{errc::invalid, std::move(message)}; }

/// A value or an error. Minimal on purpose: construct from either, test with ok().
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  result(error err) : v_(std::in_place_index<1>, std::move(err)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const error& err() const& { assert(!ok()); return std::get<1>(v_); }
  error&& err() && { assert(!ok()); return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, error> v_;
};

/// Success or an error, with no value.
class [[nodiscard]] status {
 public:
  status() = default;
  status(error err) : err_(std::move(err)), failed_(true) {}

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const error& err() const& { assert(failed_); return err_; }
  error&& err() && { assert(failed_); return std::move(err_); }

 private:
  error err_;
  bool failed_ = false;
};

inline status ok_status() { return {}; }

}  // namespace mpakt

/// Propagate an error from an expression yielding status or result<T>.
#define MPAKT_TRY(expr)                              \
  do {                                               \
    auto&& mpakt_try_r_ = (expr);                    \
    if (!mpakt_try_r_.ok()) return std::move(mpakt_try_r_).err(); \
  } while (0)
