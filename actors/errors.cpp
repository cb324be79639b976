#include "actors/errors.hpp"

#include <caf/atom.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace mpakt {

namespace {
constexpr caf::atom_value category = caf::atom("mpakt");
}

// CAF treats code 0 as "no error", so our codes travel shifted by one.
caf::error to_caf(errc code, std::string message) {
  return caf::error(static_cast<std::uint8_t>(static_cast<int>(code) + 1), category, caf::make_message(std::move(message)));
}

caf::error to_caf(const error& e) { return to_caf(e.code, e.message); }

error from_caf(const caf::error& e) {
  if (!e) return error{errc::internal, "internal error: an empty error reached the API"};
  if (e.category() == category) {
    std::string msg;
    if (e.context().match_elements<std::string>()) msg = e.context().get_as<std::string>(0);
    return error{static_cast<errc>(e.code() - 1), msg};
  }
  if (e.category() == caf::atom("system")) {
    switch (static_cast<caf::sec>(e.code())) {
      case caf::sec::request_timeout:
        return error{errc::timeout, "the request timed out"};
      case caf::sec::request_receiver_down:
      case caf::sec::no_route_to_receiving_node:
      case caf::sec::cannot_forward_to_invalid_actor:
      case caf::sec::socket_disconnected:
        return error{errc::unavailable, "a worker went away while handling the request"};
      default:
        break;
    }
  }
  return error{errc::internal, "internal error: " + caf::to_string(e)};
}

bool actor_gone(const caf::error& e) {
  if (e.category() != caf::atom("system")) return false;
  switch (static_cast<caf::sec>(e.code())) {
    case caf::sec::request_receiver_down:
    case caf::sec::no_route_to_receiving_node:
    case caf::sec::cannot_forward_to_invalid_actor:
    case caf::sec::socket_disconnected:
      return true;
    default:
      return false;
  }
}

int http_status(errc code) {
  switch (code) {
    case errc::invalid: return 400;
    case errc::unauthorized: return 401;
    case errc::forbidden: return 403;
    case errc::not_found: return 404;
    case errc::conflict: return 409;
    case errc::too_large: return 413;
    case errc::limit: return 429;
    case errc::unavailable: return 503;
    case errc::timeout: return 504;
    case errc::internal: return 500;
    case errc::retry: return 503;
  }
  return 500;
}

std::string lost_message(const std::string& what) {
  if (what.rfind("session ", 0) == 0)
    return what + " was held by a worker that left the grid, and its caches went with it: open a new session and "
                  "prefill it again (or restore a checkpoint)";
  if (what.rfind("tensor ", 0) == 0)  // a v2 upload: the coordinator keeps no copy of it
    return what + " was held by a worker that left the grid and went with it: upload it again (POST /api/v2/tensors)";
  return what + " was on a worker that left the grid: load it again";
}

}  // namespace mpakt
