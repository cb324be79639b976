#include "http/api/graph_calls.hpp"

#include "actors/errors.hpp"
#include "http/api/requests.hpp"

namespace mpakt::http {

namespace {

/// Decodes a body that reads tensorIds: once, then — when some name the caller's loaded
/// weights — again with those rewritten into {model, weight} (the coordinator's answer).
template <class Call, class Decode>
void decode_resolved(caf::event_based_actor* self, const coordinator_actor& coord, const caller& who,
                     std::shared_ptr<const std::string> body, Decode decode, std::function<void(result<Call>&)> k) {
  const bool heavy = body->size() >= off_thread_bytes;
  maybe_off_thread<result<Call>>(self, heavy, [body, decode] { return decode(*body, weight_aliases{}); },
                                 [self, coord, who, body, decode, heavy, k](result<Call>& call) {
    if (!call) return k(call);
    auto ids = tensor_ids(call->refs);
    if (ids.empty()) return k(call);
    // (the decoded call, as big as its body, waits for the answer behind a pointer: not copied)
    auto held = std::make_shared<result<Call>>(std::move(call));
    self->request(coord, std::chrono::seconds(30), resolve_atom::value, who, std::move(ids))
        .then(
            [self, body, decode, heavy, k, held](std::vector<std::string>& triples) mutable {
              if (triples.empty()) return k(*held);
              auto aliases = std::make_shared<weight_aliases>();
              for (std::size_t i = 0; i + 2 < triples.size(); i += 3) (*aliases)[triples[i]] = {triples[i + 1], triples[i + 2]};
              maybe_off_thread<result<Call>>(self, heavy, [body, decode, aliases] { return decode(*body, *aliases); }, k);
            },
            [k](caf::error& e) {
              result<Call> r = from_caf(e);
              k(r);
            });
  });
}

void graph_attempt(caf::event_based_actor* self, coordinator_actor coord, caller who, std::shared_ptr<const std::string> body,
                   std::int32_t version, std::chrono::milliseconds timeout, std::function<void(result<run_reply>)> done,
                   int retries_left, bool server_made) {
  auto decode = [version](const std::string& text, const weight_aliases& a) { return decode_graph_call(text, version, a); };
  decode_resolved<graph_call>(self, coord, who, body, decode,
                              [=](result<graph_call>& call) {
    if (!call) return done(std::move(call).err());
    call->server_params = server_made;
    self->request(coord, timeout, graph_atom::value, who, std::move(*call))
        .then([done](run_reply& r) { done(std::move(r)); },
              [=](caf::error& e) {
                auto err = from_caf(e);
                if (err.code == errc::retry && retries_left > 0)
                  return graph_attempt(self, coord, who, body, version, timeout, done, retries_left - 1, server_made);
                done(std::move(err));
              });
  });
}

}  // namespace

std::string graph_reply_json(const run_reply& r) {
  const std::string steps = std::to_string(r.steps);
  std::string out;
  out.reserve(r.outputs_json.size() + steps.size() + 24);
  out += "{\"outputs\":";
  out += r.outputs_json;
  out += ",\"steps\":";
  out += steps;
  out += '}';
  return out;
}

void send_graph_call(caf::event_based_actor* self, coordinator_actor coord, caller who, std::shared_ptr<const std::string> body,
                     std::int32_t version, std::chrono::milliseconds timeout, std::function<void(result<run_reply>)> done,
                     bool server_made) {
  graph_attempt(self, std::move(coord), std::move(who), std::move(body), version, timeout, std::move(done), 3, server_made);
}

void send_compile_call(caf::event_based_actor* self, coordinator_actor coord, caller who, std::shared_ptr<const std::string> body,
                       std::chrono::milliseconds timeout, std::function<void(result<compile_graph_reply>)> done) {
  auto decode = [](const std::string& text, const weight_aliases& a) { return decode_compile_call(text, a); };
  decode_resolved<compile_call>(self, coord, who, body, decode, [=](result<compile_call>& call) {
    if (!call) return done(std::move(call).err());
    self->request(coord, timeout, create_atom::value, graphs_atom::value, who, std::move(*call))
        .then([done](compile_graph_reply& r) { done(std::move(r)); }, [done](caf::error& e) { done(from_caf(e)); });
  });
}

void send_tensor_upload(caf::event_based_actor* self, coordinator_actor coord, caller who, std::shared_ptr<const std::string> body,
                        std::chrono::milliseconds timeout, std::function<void(result<upload_tensor_reply>)> done) {
  maybe_off_thread<result<tensor_call>>(self, body->size() >= off_thread_bytes, [body] { return decode_tensor_upload(*body); },
                                        [=](result<tensor_call>& t) {
    if (!t) return done(std::move(t).err());
    self->request(coord, timeout, create_atom::value, tensors_atom::value, who, std::move(*t))
        .then([done](upload_tensor_reply& r) { done(std::move(r)); }, [done](caf::error& e) { done(from_caf(e)); });
  });
}

}  // namespace mpakt::http
