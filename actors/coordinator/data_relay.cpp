#include "actors/coordinator/data_relay.hpp"

namespace mpakt {

worker_actor spawn_data_relay(caf::actor_system& sys, worker_actor volunteer, std::shared_ptr<datalink::data_sender> link,
                              listener_grant grant) {
  auto relay = sys.spawn([volunteer, link, grant](caf::event_based_actor* self) -> caf::behavior {
    self->monitor(volunteer);
    self->set_down_handler([self, volunteer](caf::down_msg& m) {
      if (m.source == volunteer.address()) self->quit(m.reason);
    });
    if (link) self->attach_functor([link] { link->close("the volunteer left the grid"); });
    // Everything but the messages below goes to the volunteer as it is.
    self->set_default_handler([volunteer](caf::scheduled_actor* s, caf::message_view& x) -> caf::result<caf::message> {
      auto rp = s->make_response_promise();
      rp.delegate(caf::actor_cast<caf::actor>(volunteer), x.move_content_to_message());
      return rp;
    });
    return {
        [self, volunteer, grant](genstart_atom a, gen_request& r) -> caf::result<bool> {
          if (grant.allow && r.listener) {
            const std::uint64_t id = r.listener.id();
            grant.allow(id);
            if (grant.forget)
              caf::actor_cast<caf::abstract_actor*>(r.listener)->attach_functor([forget = grant.forget, id] { forget(id); });
          }
          return self->delegate(volunteer, a, std::move(r));
        },
        [self, volunteer, link](tpiece_atom a, tensor_piece& p) -> caf::result<std::uint64_t> {
          const std::uint64_t length = p.bytes.size();
          if (!link) return self->delegate(volunteer, a, std::move(p));
          if (auto seq = link->send(p.bytes))
            return self->delegate(volunteer, tpieceref_atom::value, tensor_piece_ref{p.model_id, p.name, p.offset, length, *seq});
          return self->delegate(volunteer, a, std::move(p));
        },
        [self, volunteer, link](status_atom a) -> caf::result<worker_status> {
          auto rp = self->make_response_promise<worker_status>();
          self->request(volunteer, std::chrono::seconds(30), a)
              .then(
                  [rp, link](worker_status& s) mutable {
                    if (link) {
                      s.data_link = link->describe();
                      s.data_link_bytes = link->bytes_sent();
                    }
                    rp.deliver(std::move(s));
                  },
                  [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
          return rp;
        },
    };
  });
  return caf::actor_cast<worker_actor>(relay);
}

}  // namespace mpakt
