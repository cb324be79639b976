#include "actors/worker/load_receiver.hpp"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <set>

#include "actors/errors.hpp"
#include "actors/loader/host_fetch.hpp"
#include "runtime/log.hpp"
#include "runtime/tensor_builder.hpp"

namespace mpakt {

namespace {

std::string mb(std::uint64_t bytes) { return std::to_string((bytes + 999999) / 1000000) + " MB"; }

struct receiver_state {
  std::shared_ptr<worker_shared> shared;
  compute_actor compute;
  /// A tensor being received, and the resident bytes set aside for it.
  struct incoming {
    tensor_builder builder;
    std::uint64_t resident = 0;
  };
  /// model -> tensor name -> tensor being received
  std::map<std::string, std::map<std::string, incoming>> loading;
  /// model -> names finished (so a second tbegin of one is refused); forgotten with the model
  std::map<std::string, std::set<std::string>> received;

  /// What waits, in order, behind a range still being read: that range first (`fetch`, its
  /// number; `over` once the fetcher said so), then anything but tbegin that came after it.
  struct waiting {
    std::string model;
    std::uint64_t fetch = 0;  ///< a range's number; 0 for anything else
    bool over = false;
    std::function<void()> run;               ///< does it and answers
    std::function<void(caf::error)> refuse;  ///< answers with an error instead
  };
  std::deque<waiting> queue;
  /// Ranges of stopped loads still being read: taken and dropped when they end.
  std::set<std::uint64_t> orphans;

  /// Runs what waits, up to the first range not over yet.
  void drain() {
    while (!queue.empty() && (queue.front().fetch == 0 || queue.front().over)) {
      auto run = std::move(queue.front().run);
      queue.pop_front();
      run();
    }
  }
  /// Answers whatever of `model` waits with an error; its ranges are dropped when they end.
  void refuse_waiting(const std::string& model) {
    for (auto it = queue.begin(); it != queue.end();) {
      if (it->model != model) {
        ++it;
        continue;
      }
      if (it->fetch != 0) {
        if (it->over) drop_range(it->fetch);
        else orphans.insert(it->fetch);
      }
      it->refuse(to_caf(errc::conflict, "the load of model " + model + " was stopped"));
      it = queue.erase(it);
    }
    drain();
  }
  void drop_range(std::uint64_t number) {
    if (auto got = shared->cfg.fetcher->take(number)) shared->cfg.fetcher->recycle(std::move(got->bytes));
  }
  /// A range that is over: its parts recorded in (or added to) their tensors, then the tensors
  /// that end with it ended.
  result<tensor_fetch_reply> finish_range(const tensor_fetch& f, std::uint64_t number) {
    tensor_fetch_reply out;
    auto added = add_range(f, number);
    if (!added) return std::move(added).err();
    out.bytes = *added;
    for (const auto& name : f.ends) {
      auto n = end(f.model_id, name);
      if (!n) return std::move(n).err();
      out.resident.push_back(*n);
    }
    return out;
  }
  result<std::uint64_t> add_range(const tensor_fetch& f, std::uint64_t number) {
    auto& fetcher = *shared->cfg.fetcher;
    auto got = fetcher.take(number);  // (over: this does not wait)
    if (!got) return std::move(got).err();
    status added = ok_status();
    for (std::size_t i = 0; i < f.parts.size() && added; ++i) {
      const auto& p = f.parts[i];
      if (got->in_place[i]) {
        added = wrote(f.model_id, p.name, p.offset, p.length);
      } else if (const std::uint64_t rows = got->converted[i]; rows > 0) {
        // the end of a row begun before, the rows the fetch converted, the start of the next
        const auto& head = got->bytes[i];
        auto r = add_bytes(f.model_id, p.name, p.offset, head);
        if (r) added = converted(f.model_id, p.name, p.offset + head.size(), rows);
        else added = std::move(r).err();
        if (added) {
          r = add_bytes(f.model_id, p.name, p.offset + head.size() + rows, got->tails[i]);
          if (!r) added = std::move(r).err();
        }
      } else {
        auto r = add_bytes(f.model_id, p.name, p.offset, std::string_view(got->bytes[i]).substr(0, std::size_t(p.length)));
        if (!r) added = std::move(r).err();
      }
    }
    fetcher.recycle(std::move(got->bytes));
    if (!added) return added.err();
    return f.length;
  }

  /// A tensor begins: its resident bytes drawn from the model's reservation or the free memory,
  /// its builder made.
  status begin(const tensor_begin_request& r) {
    auto& w = *shared;
    // Ranges of this tensor that the worker fetches itself wait to learn where its bytes
    // go: into the tensor (below), or, whatever went wrong here, a buffer.
    struct destined_t {
      loader::host_fetcher* fetcher;
      const tensor_begin_request& r;
      tensor where;
      row_converter rows;
      ~destined_t() {
        if (fetcher) fetcher->destine(r.model_id, r.name, std::move(where), std::move(rows));
      }
    } destined{w.cfg.fetcher.get(), r, tensor(), row_converter()};
    auto resident = dtype_from_name(r.resident);
    if (!resident) return invalid("unknown resident dtype " + r.resident);
    if (w.cfg.legacy) resident = dtype::f32;  // an old worker widens everything
    if (loading[r.model_id].count(r.name) || received[r.model_id].count(r.name))
      return make_error(errc::conflict, "tensor " + r.name + " of model " + r.model_id + " is already on worker " + w.cfg.worker_id);
    auto bytes = storage_bytes(*resident, shape_numel(r.shape));
    if (!bytes) return invalid("tensor " + r.name + " has an invalid shape");
    {
      // The model's reservation counts as free for its own tensors, and shrinks by each.
      std::lock_guard<std::mutex> lock(w.m);
      auto res = w.reserved.find(r.model_id);
      const std::uint64_t mine = res == w.reserved.end() ? 0 : res->second;
      const std::uint64_t avail = w.free_locked() + mine;
      if (*bytes > avail)
        return make_error(errc::unavailable, "tensor " + r.name + " needs " + mb(*bytes) + " but worker " + w.cfg.worker_id +
                                                 " has " + mb(avail) + " free");
      if (res != w.reserved.end()) res->second -= std::min(res->second, *bytes);
      w.loading += *bytes;
    }
    // (q8/q4 matrices are built in the form this worker's kernels read: lanes where they read them)
    auto [in, _] = loading[r.model_id].emplace(r.name, incoming{tensor_builder(r.file_dtype, r.shape, *resident, r.name, r.model_id, w.lanes), *bytes});
    destined.where = in->second.builder.destination();
    destined.rows = in->second.builder.conversion();
    return ok_status();
  }

  /// Bytes a fetch wrote straight into the tensor (host_fetch.hpp).
  status wrote(const std::string& model, const std::string& name, std::uint64_t offset, std::uint64_t n) {
    auto m = loading.find(model);
    if (m == loading.end() || !m->second.count(name))
      return make_error(errc::conflict, "tensor " + name + " of model " + model + " is not being loaded");
    return m->second.at(name).builder.wrote(offset, n);
  }
  /// Whole rows a fetch converted straight into the tensor (host_fetch.hpp).
  status converted(const std::string& model, const std::string& name, std::uint64_t offset, std::uint64_t n) {
    auto m = loading.find(model);
    if (m == loading.end() || !m->second.count(name))
      return make_error(errc::conflict, "tensor " + name + " of model " + model + " is not being loaded");
    return m->second.at(name).builder.converted(offset, n);
  }
  /// Adds a piece's bytes to its tensor; the answer is the tensor's bytes received so far.
  result<std::uint64_t> add_bytes(const std::string& model, const std::string& name, std::uint64_t offset,
                                  std::string_view bytes) {
    auto m = loading.find(model);
    if (m == loading.end() || !m->second.count(name))
      return make_error(errc::conflict, "tensor " + name + " of model " + model + " is not being loaded");
    auto& b = m->second.at(name).builder;
    MPAKT_TRY(b.add(offset, bytes));
    return b.received_bytes();
  }
  /// A piece whose bytes came on the data connection.
  result<std::uint64_t> add_piece_ref(const tensor_piece_ref& r) {
    auto& w = *shared;
    if (!w.cfg.pieces) return invalid("worker " + w.cfg.worker_id + " has no data connection");
    // (taken even for a tensor not being loaded: the inbox must drop it either way)
    auto bytes = w.cfg.pieces->take(r.seq, std::chrono::minutes(2));
    const std::string which = "the piece at byte " + std::to_string(r.offset) + " of tensor " + r.name + " of model " + r.model_id;
    if (!bytes) return make_error(errc::unavailable, which + ": " + bytes.err().message);
    if (bytes->size() != r.length)
      return invalid(which + " came with " + std::to_string(bytes->size()) + " bytes, not the " + std::to_string(r.length) +
                     " announced");
    auto added = add_bytes(r.model_id, r.name, r.offset, *bytes);
    w.cfg.pieces->recycle(std::move(*bytes));
    return added;
  }
  /// The tensor is complete: finished, and left for the compute side; the answer is its bytes.
  result<std::uint64_t> end(const std::string& model, const std::string& name) {
    auto m = loading.find(model);
    if (m == loading.end() || !m->second.count(name))
      return make_error(errc::conflict, "tensor " + name + " of model " + model + " is not being loaded");
    auto node = m->second.extract(name);
    if (m->second.empty()) loading.erase(m);
    if (shared->cfg.fetcher) shared->cfg.fetcher->forget(model, name);
    auto t = node.mapped().builder.finish();
    std::lock_guard<std::mutex> lock(shared->m);
    shared->loading -= std::min(shared->loading, node.mapped().resident);
    if (!t) return std::move(t).err();
    if (shared->cfg.corrupt_weights && t->nbytes() > 0)
      t->data()[t->nbytes() / 2] ^= std::byte{0x40};  // (--fault corrupt-weights)
    const std::uint64_t n = t->nbytes();
    shared->arrived += n;
    shared->inbox.push_back({model, name, std::move(*t)});
    received[model].insert(name);
    return n;
  }

  /// Forgets a model's tensors in progress and those not yet adopted, and answers what of it
  /// waits behind a range with an error.
  void forget(const std::string& model) {
    if (shared->cfg.fetcher) shared->cfg.fetcher->forget_model(model);
    {
      std::lock_guard<std::mutex> lock(shared->m);
      if (auto m = loading.find(model); m != loading.end()) {
        for (auto& [_, in] : m->second) shared->loading -= std::min(shared->loading, in.resident);
        loading.erase(m);
      }
      auto& inbox = shared->inbox;
      for (auto it = inbox.begin(); it != inbox.end();) {
        if (it->model != model) {
          ++it;
          continue;
        }
        shared->arrived -= std::min<std::uint64_t>(shared->arrived, it->t.nbytes());
        it = inbox.erase(it);
      }
      received.erase(model);
      shared->reserved.erase(model);
    }
    refuse_waiting(model);  // (outside the lock: what runs after them may take it)
  }
};

using receiver_pointer = load_receiver_actor::stateful_pointer<receiver_state>;

template <class T>
caf::result<T> answer(result<T> r) {
  if (!r) return to_caf(r.err());
  return std::move(*r);
}
template <class T>
void deliver(caf::typed_response_promise<T>& rp, result<T> r) {
  if (r) rp.deliver(std::move(*r));
  else rp.deliver(to_caf(r.err()));
}

/// Does `work` (-> result<std::uint64_t>) now when no range is still being read before it,
/// else answers when its turn comes.
template <class Work>
caf::result<std::uint64_t> in_turn(receiver_pointer self, const std::string& model, Work work) {
  auto& st = self->state;
  if (st.queue.empty()) return answer(work());
  auto rp = self->make_response_promise<std::uint64_t>();
  st.queue.push_back({model, 0, false, [rp, work]() mutable { deliver(rp, work()); },
                      [rp](caf::error e) mutable { rp.deliver(std::move(e)); }});
  return rp;
}

}  // namespace

load_receiver_actor spawn_load_receiver(caf::actor_system& sys, std::shared_ptr<worker_shared> shared, compute_actor compute) {
  return sys.spawn<caf::detached>([shared, compute](receiver_pointer self) -> load_receiver_actor::behavior_type {
    self->state.shared = shared;
    self->state.compute = compute;
    return {
        [=](tbegin_atom, tensor_begin_request& r) -> caf::result<bool> {
          if (auto ok = self->state.begin(r); !ok) return to_caf(ok.err());
          return true;
        },
        [=](tpiece_atom, tensor_piece& p) -> caf::result<std::uint64_t> {
          auto piece = std::make_shared<tensor_piece>(std::move(p));
          return in_turn(self, piece->model_id,
                         [self, piece] {
                           auto added = self->state.add_bytes(piece->model_id, piece->name, piece->offset, piece->bytes);
                           loader::give_back_piece(std::move(piece->bytes));  // (a piece relayed in this process)
                           return added;
                         });
        },
        [=](tpieceref_atom, tensor_piece_ref& r) -> caf::result<std::uint64_t> {
          return in_turn(self, r.model_id, [self, r] { return self->state.add_piece_ref(r); });
        },
        [=](dlink_atom, std::uint16_t port, const std::string& ticket) -> caf::result<bool> {
          auto& w = *self->state.shared;
          if (!w.cfg.open_data_link || !w.cfg.pieces)
            return to_caf(errc::invalid, "worker " + w.cfg.worker_id + " takes no data connection (it is not a volunteer)");
          auto opened = w.cfg.open_data_link(port, ticket);
          if (!opened) return to_caf(opened.err());
          return true;
        },
        [=](tprobe_atom, const std::string& location, std::uint64_t header_bytes, const std::string& sha) -> caf::result<bool> {
          auto& w = *self->state.shared;
          if (!w.cfg.fetcher) return to_caf(errc::invalid, "worker " + w.cfg.worker_id + " fetches no weights itself");
          if (auto ok = w.cfg.fetcher->probe(location, header_bytes, sha); !ok)
            return to_caf(ok.err().code, "worker " + w.cfg.worker_id + " does not fetch " + location + " itself: " + ok.err().message);
          log::line("info", "worker", "reads " + location + " from the model host itself");
          return w.cfg.fetch_converted;
        },
        [=](tfetch_atom, tensor_fetch& f, std::uint64_t number) -> caf::result<tensor_fetch_reply> {
          // (the front started it, so the fetcher exists) Its tensors begin now; the range is
          // waited for in turn, without blocking: the tbegins behind it run meanwhile
          // (load_receiver.hpp).
          auto& st = self->state;
          auto told = [me = self->address(), number] {
            if (auto h = caf::actor_cast<load_receiver_actor>(me)) caf::anon_send(h, tfetched_atom::value, number);
          };
          for (const auto& b : f.begins) {
            status ok = b.model_id == f.model_id ? st.begin(b)
                                                 : invalid("tensor " + b.name + " begins in a range of another model");
            if (!ok) {
              st.orphans.insert(number);  // (dropped when it ends)
              st.shared->cfg.fetcher->when_done(number, told);
              return to_caf(ok.err());
            }
          }
          auto rp = self->make_response_promise<tensor_fetch_reply>();
          auto range = std::make_shared<tensor_fetch>(std::move(f));
          st.queue.push_back({range->model_id, number, false,
                              [self, rp, range, number]() mutable { deliver(rp, self->state.finish_range(*range, number)); },
                              [rp](caf::error e) mutable { rp.deliver(std::move(e)); }});
          st.shared->cfg.fetcher->when_done(number, told);
          return rp;
        },
        [=](tfetched_atom, std::uint64_t number) {
          auto& st = self->state;
          if (st.orphans.erase(number)) return st.drop_range(number);
          for (auto& w : st.queue)
            if (w.fetch == number) w.over = true;
          st.drain();
        },
        [=](tend_atom, const std::string& model, const std::string& name) -> caf::result<std::uint64_t> {
          return in_turn(self, model, [self, model, name] { return self->state.end(model, name); });
        },
        [=](tabort_atom, const std::string& model) {
          self->state.forget(model);
          // What the compute side adopted already goes too (after what it is running now).
          caf::anon_send(self->state.compute, dropmodel_atom::value, model);
          return true;
        },
        [=](dropmodel_atom, const std::string& model) { self->state.forget(model); },
        [=](tdigest_atom a, const std::string& model, const std::string& name, const std::string& nonce) -> caf::result<std::string> {
          auto& st = self->state;
          if (st.queue.empty()) return self->delegate(st.compute, a, model, name, nonce);
          // after the tensors ended before it, which wait behind a range
          auto rp = self->make_response_promise<std::string>();
          st.queue.push_back({model, 0, false, [rp, compute = st.compute, a, model, name, nonce]() mutable {
                                rp.delegate(compute, a, model, name, nonce);
                              },
                              [rp](caf::error e) mutable { rp.deliver(std::move(e)); }});
          return rp;
        },
    };
  });
}

}  // namespace mpakt
