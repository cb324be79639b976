#pragma once
/// Errors crossing actor boundaries: mpakt::error <-> caf::error.
///
/// A caf::error in category "mpakt" carries our errc as its code and the message as its
/// context, so an error raised in a worker (possibly on another host) reaches the HTTP
/// layer with its status and its sentence intact. CAF's own errors (a timeout, a dead
/// actor) map to errc::timeout / errc::unavailable with a readable message.

#include <caf/error.hpp>

#include "runtime/status.hpp"

namespace mpakt {

/// The caf::error for one of ours.
caf::error to_caf(const error& e);
caf::error to_caf(errc code, std::string message);
/// Ours for any caf::error.
error from_caf(const caf::error& e);

/// Whether the error says the receiving actor is gone (its worker left the grid).
bool actor_gone(const caf::error& e);

/// What a call gets when `what` ("session s_…", "model m_…", "tensor t_…") was on a worker
/// that left the grid: a session's caches went with it (prefill again or restore a
/// checkpoint); a v2 tensor must be uploaded again; a model must be loaded again.
std::string lost_message(const std::string& what);

/// The HTTP status for an error code (decisions.md "Errors").
int http_status(errc code);

}  // namespace mpakt
