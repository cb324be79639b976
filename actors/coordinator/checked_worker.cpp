#include "actors/coordinator/checked_worker.hpp"
#include "actors/coordinator/product_check.hpp"
#include "actors/coordinator/check_windows.hpp"

#include <rapidjson/document.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <utility>

#include "actors/digest.hpp"
#include "actors/errors.hpp"
#include "actors/off_thread.hpp"
#include "actors/ids.hpp"
#include "actors/generate/gen_values.hpp"
#include "actors/worker/worker_actor.hpp"
#include "backends/cpu/isa.hpp"
#include "runtime/dtype.hpp"
#include "runtime/graph.hpp"
#include "runtime/json.hpp"
#include "runtime/log.hpp"
#include "runtime/metrics.hpp"
#include "runtime/tensor.hpp"

namespace mpakt {

// ------------------------------------------------------------------ the registry

void quarantine_registry::add(entry e) {
  std::lock_guard<std::mutex> lock(m_);
  entries_.push_back(std::move(e));
}

std::vector<quarantine_registry::entry> quarantine_registry::list() const {
  std::lock_guard<std::mutex> lock(m_);
  return entries_;
}

bool quarantine_registry::has_digest(const std::string& digest) const {
  std::lock_guard<std::mutex> lock(m_);
  return std::any_of(entries_.begin(), entries_.end(), [&](const entry& e) { return e.token_digest == digest; });
}

bool verify_budget::take(std::uint64_t n, bool copy) {
  std::lock_guard<std::mutex> lock(m_);  // (the copies' count beside the bytes)
  auto cur = used_.load();
  do {
    if ((cur + n > total_ && !(copy && copies_ == 0)) || cur + n < cur) return false;
  } while (!used_.compare_exchange_weak(cur, cur + n));
  if (copy) ++copies_;
  return true;
}

void verify_budget::give(std::uint64_t n) {
  auto cur = used_.load();
  while (!used_.compare_exchange_weak(cur, cur - std::min(cur, n))) {
  }
}

void verify_budget::give_copy(std::uint64_t n) {
  std::lock_guard<std::mutex> lock(m_);
  if (copies_ > 0) --copies_;
  give(n);
}

verify_room::~verify_room() {
  if (all_) all_->give(held_);  // (passes and answers still queued; no copy outlives its room)
}

bool verify_room::take(std::uint64_t n, bool copy) {
  std::lock_guard<std::mutex> lock(m_);
  if ((held_ + n > own_ && !(copy && copies_ == 0)) || held_ + n < held_) return false;
  if (all_ && !(copy ? all_->take_copy(n) : all_->take(n))) return false;
  held_ += n;
  if (copy) ++copies_;
  return true;
}

void verify_room::give(std::uint64_t n, bool copy) {
  std::lock_guard<std::mutex> lock(m_);
  n = std::min(held_, n);  // (only what this room held)
  held_ -= n;
  if (copy && copies_ > 0) --copies_;
  if (all_) copy ? all_->give_copy(n) : all_->give(n);
}

bool verify_room::take(std::uint64_t n) { return take(n, false); }
bool verify_room::take_copy(std::uint64_t n) { return take(n, true); }
void verify_room::give(std::uint64_t n) { give(n, false); }
void verify_room::give_copy(std::uint64_t n) { give(n, true); }
std::uint64_t verify_room::held() const {
  std::lock_guard<std::mutex> lock(m_);
  return held_;
}

// ------------------------------------------------------------------ comparing answers

namespace {

/// Where the volunteer's values `theirs` first differ from the verifier's `mine` (as long):
/// "NAME[i] is X where the verifier has Y (…)", or empty when they agree — exactly when
/// `tolerance` ≤ 0 (the same kernel path), else within `tolerance` times the largest finite
/// magnitude of `mine` (plus 1e-5); NaN agrees with NaN.
std::string first_difference(const std::string& name, std::span<const float> theirs, std::span<const float> mine,
                             float tolerance) {
  const bool exact = tolerance <= 0;
  float scale = 0;
  for (float v : mine)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  const float tol = exact ? 0.0f : tolerance * scale + 1e-5f;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const bool same = (std::isnan(theirs[i]) && std::isnan(mine[i])) || theirs[i] == mine[i] ||
                      (!exact && std::fabs(theirs[i] - mine[i]) <= tol);
    if (!same)
      return name + "[" + std::to_string(i) + "] is " + std::to_string(theirs[i]) + " where the verifier has " +
             std::to_string(mine[i]) +
             (exact ? " (same kernel path: must be equal)" : " (another kernel path: within " + std::to_string(tol) + ")");
  }
  return {};
}

}  // namespace

bool sessions_agree(const session_dump& a, const session_dump& b, float tolerance, std::string* why) {
  auto say = [&](std::string text) {
    if (why) *why = std::move(text);
    return false;
  };
  if (a.tensors.size() != b.tensors.size()) return say("it holds another set of tensors");
  std::map<std::string_view, const tensor_blob*> theirs;
  for (const auto& t : a.tensors) theirs[t.name] = &t;
  for (const auto& mine : b.tensors) {
    auto it = theirs.find(mine.name);
    if (it == theirs.end()) return say("tensor " + mine.name + " is missing");
    const tensor_blob& t = *it->second;
    if (t.shape != mine.shape || t.dtype != mine.dtype || t.bytes.size() != mine.bytes.size())
      return say("tensor " + mine.name + " has another shape or dtype");
    if (t.bytes == mine.bytes) continue;
    // float tensors (f32, and the bf16/f16 caches rounded from f32 values) compare widened
    const auto type = dtype_from_name(mine.dtype);
    const bool floats = type && (*type == dtype::f32 || *type == dtype::bf16 || *type == dtype::f16);
    const std::size_t elem = !floats ? 1 : *type == dtype::f32 ? 4 : 2;
    if (tolerance <= 0 || !floats || mine.bytes.size() % elem != 0)
      return say("tensor " + mine.name + " differs" + (tolerance <= 0 ? " (same kernel path: must be equal)" : ""));
    const std::size_t n = mine.bytes.size() / elem;
    std::vector<float> va(n), vb(n);
    dequantize_row(*type, t.bytes.data(), va.data(), std::int64_t(n));
    dequantize_row(*type, mine.bytes.data(), vb.data(), std::int64_t(n));
    if (auto d = first_difference(mine.name, va, vb, tolerance); !d.empty()) return say("tensor " + d);
  }
  return true;
}

float path_tolerance(std::string_view resident) {
  if (resident == "q8" || resident == "q4") return 8e-2f;
  return resident == "bf16" ? 3e-2f : 1e-3f;
}

/// The tolerance of a graph's text: the widest of the models it names (float's when none).
float tolerance_in(const std::map<std::string, float>& model_tolerance, const std::string& graph_json) {
  float t = path_tolerance("f32");
  for (const auto& [model, tol] : model_tolerance)
    if (graph_json.find(model) != std::string::npos) t = std::max(t, tol);
  return t;
}

/// A product of a graph's text the verifier can redo: one of a weight it holds of a model it
/// holds in part (the last: the output head, nearest the answers).
std::optional<product_probe> probe_in(const std::set<std::string>& partial,
                                      const std::map<std::string, std::set<std::string>>& copied, const std::string& text) {
  auto found = products_to_probe(text, [&](const std::string& model, const std::string& weight) {
    auto it = copied.find(model);
    return partial.count(model) && it != copied.end() && it->second.count(weight);
  });
  if (found.empty()) return std::nullopt;
  return found.back();
}

bool answers_agree(const std::string& a, const std::string& b, float tolerance, std::string* why) {
  if (a == b) return true;
  auto say = [&](std::string text) {
    if (why) *why = std::move(text);
    return false;
  };
  // (a volunteer's answer is untrusted text: the depth-limited parser, never a recursive one)
  auto pa = parse_json_object(a, "the volunteer's answer");
  auto pb = parse_json_object(b, "the verifier's answer");
  if (!pa || !pb) return say("an answer is not an outputs object");
  const rapidjson::Document& da = *pa;
  const rapidjson::Document& db = *pb;
  if (da.MemberCount() != db.MemberCount()) return say("the answers name different outputs");
  for (auto it = db.MemberBegin(); it != db.MemberEnd(); ++it) {
    const std::string name(it->name.GetString(), it->name.GetStringLength());
    auto other = da.FindMember(it->name);
    if (other == da.MemberEnd()) return say("output " + name + " is missing");
    std::vector<std::int64_t> sa, sb;
    std::vector<float> va, vb;
    if (!output_values_of(other->value, sa, va) || !output_values_of(it->value, sb, vb)) return say("output " + name + " is unreadable");
    if (sa != sb || va.size() != vb.size()) return say("output " + name + " has another shape");
    if (auto d = first_difference(name, va, vb, tolerance); !d.empty()) return say("output " + d);
  }
  return true;
}

// ------------------------------------------------------------------ the checked worker

namespace {

using namespace std::chrono_literals;

/// What the checked worker and its generation comparers count (read by status).
struct verify_counts {
  std::atomic<std::uint32_t> passes{0};        ///< passes seen (not the pool's probes)
  std::atomic<std::uint32_t> checked{0};       ///< compared and agreed
  std::atomic<std::uint32_t> unchecked{0};     ///< chosen, but the verifier could not run them
  std::atomic<std::uint32_t> inconclusive{0};  ///< generations whose tokens parted on different kernel paths
  std::atomic<std::uint32_t> weights_checked{0};    ///< weights whose digest challenge was answered right
  std::atomic<std::uint32_t> weights_unchecked{0};  ///< converted weights the verifier holds no copy of
  std::atomic<bool> quarantined{false};
};

/// Everything a quarantine needs, shared by the checked worker and its comparers.
struct verify_shared {
  checked_volunteer v;
  verify_config cfg;
  std::shared_ptr<quarantine_registry> registry;
  verify_counts counts;
  std::string worker_id;  ///< the volunteer's, from its first status
  caf::actor_addr self;   ///< the checked worker

  /// Sessions opened or restored on the volunteer through the checked worker and not closed:
  /// it holds them, so denying a copy of one is a wrong answer. The checked worker writes, its
  /// comparers read (a copy asked for as a generation ended).
  void hold(const std::string& s) {
    std::lock_guard l(held_m_);
    held_.insert(s);
  }
  void release(const std::string& s) {
    std::lock_guard l(held_m_);
    held_.erase(s);
  }
  bool holds(const std::string& s) const {
    std::lock_guard l(held_m_);
    return held_.count(s) > 0;
  }

 private:
  mutable std::mutex held_m_;
  std::set<std::string> held_;
};

/// Ends the volunteer and the checked worker, and records why (once).
void quarantine(caf::local_actor* by, const std::shared_ptr<verify_shared>& sh, const std::string& reason) {
  if (sh->counts.quarantined.exchange(true)) return;
  const auto now_ms = std::uint64_t(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  sh->registry->add({sh->worker_id, sh->v.name, reason, now_ms, sh->v.token_digest});
  log::line("warn", "checks",
            "quarantined volunteer " + sh->v.name + " (" + sh->worker_id + "): " + reason + "; ending it, its work goes elsewhere",
            {{"worker", sh->worker_id}, {"volunteer", sh->v.name}});
  metrics::m().errors.with({"quarantine"}).inc();
  by->send_exit(sh->v.own ? sh->v.own : sh->v.worker, caf::exit_reason::kill);
  if (auto me = caf::actor_cast<caf::actor>(sh->self)) by->send_exit(me, caf::exit_reason::user_shutdown);
}

/// Quarantines the volunteer when its copy `d` of session `s` is one no worker writes
/// (malformed_copy); whether it did.
bool quarantined_if_malformed(caf::local_actor* by, const std::shared_ptr<verify_shared>& sh, const std::string& s,
                              const session_dump& d) {
  const std::string why = malformed_copy(d);
  if (!why.empty()) quarantine(by, sh, "its copy of session " + s + " is malformed: " + why);
  return !why.empty();
}

/// The volunteer answered a copy of session `s`, which it holds (opened or restored through
/// this stand-in and not closed), with an error: it hides the state a window starts or ends
/// from, and is quarantined — unless it is gone meanwhile (its relay removes a volunteer that
/// leaves a copy unanswered and answers so), so it is judged only if it still answers.
/// `judged` is called once that is decided (the asking actor must live until then).
template <class Self>
void denied_session(Self self, const std::shared_ptr<verify_shared>& sh, const std::string& s, const caf::error& e,
                    std::function<void()> judged = [] {}) {
  if (actor_gone(e)) return judged();
  const std::string why = from_caf(e).message;
  self->request(sh->v.worker, std::chrono::seconds(30), status_atom::value)
      .then(
          [self, sh, s, why, judged](worker_status&) {
            if (!sh->counts.quarantined) quarantine(self, sh, "it would not show session " + s + ", which it holds: " + why);
            judged();
          },
          [judged](caf::error&) { judged(); });
}

// ---- a checked generation: both loops' tokens compared, the verifier's streamed

struct comparer_state {
  std::shared_ptr<verify_shared> sh;
  gen_listener listener;
  std::string id;
  bool exact = true;
  bool verifier = true;  ///< false: the verifier could not run it; the volunteer's tokens go through
  std::vector<std::int64_t> mine, theirs;  ///< the verifier's tokens, the volunteer's
  std::vector<gen_token> withheld;         ///< the volunteer's, not passed on while a verifier runs
  std::optional<gen_done> withheld_done;
  std::size_t compared = 0;
  bool stopped = false;  ///< a mismatch was found (or tokens parted): comparing ends
  bool done_mine = false, done_theirs = false;
  /// The verifier's end, held on the same path until the volunteer's came: the client may go
  /// on with the session only once the volunteer was asked for its copy.
  std::optional<gen_done> mine_done;
  /// The session as both loops left it (asked for as each ended), compared when every token agreed.
  float tolerance = 0;
  std::string session;
  std::optional<session_dump> their_dump, my_dump;
  bool asked_theirs = false, asked_mine = false, dump_failed = false, judging = false;
  worker_actor verifier_worker;
  std::function<void()> end_if_done;  ///< ends the comparer once everything it waits for came
};

using comparer_actor = gen_listener::extend<caf::reacts_to<caf::atom_constant<caf::atom("absent")>>>;

comparer_actor::behavior_type comparer(comparer_actor::stateful_pointer<comparer_state> self, std::shared_ptr<verify_shared> sh,
                                       worker_actor verifier, std::string session, gen_listener listener, std::string id,
                                       float tolerance) {
  auto& st = self->state;
  st.sh = std::move(sh);
  // (the verifier's copy of the session goes with this actor, however it ends)
  self->attach_functor([v = verifier, s = session] { caf::anon_send(v, sclose_atom::value, s); });
  st.listener = std::move(listener);
  st.id = std::move(id);
  st.exact = tolerance <= 0;
  st.tolerance = tolerance;
  st.session = std::move(session);
  st.verifier_worker = std::move(verifier);
  // (it ends with the checked worker, whose verifier and volunteer send no more)
  if (auto checked = caf::actor_cast<caf::actor>(st.sh->self)) self->monitor(checked);
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  auto compare = [self] {
    auto& st = self->state;
    if (!st.verifier) return;
    while (!st.stopped && st.compared < std::min(st.mine.size(), st.theirs.size())) {
      const std::size_t i = st.compared++;
      if (st.mine[i] == st.theirs[i]) continue;
      st.stopped = true;
      if (st.exact) {
        quarantine(self, st.sh,
                   "generated token " + std::to_string(i) + " was " + std::to_string(st.theirs[i]) + " where the verifier drew " +
                       std::to_string(st.mine[i]) + " (same kernel path: must be equal)");
        // The verifier's end, held for the session comparison this makes moot, goes out as
        // it would have on arrival: every token the client has is a verified one.
        if (st.mine_done) self->send(st.listener, gendone_atom::value, st.id, *std::exchange(st.mine_done, std::nullopt));
      } else {
        st.sh->counts.inconclusive++;
      }
    }
  };
  // Asks one side for the session as its loop left it; the volunteer's is asked for before its
  // end (or the verifier's, on the same path) goes to the client, so no later call of the
  // client's reaches the volunteer first.
  auto ask_dump = [self](bool volunteer, std::function<void()> then) {
    auto& st = self->state;
    (volunteer ? st.asked_theirs : st.asked_mine) = true;
    self->request(volunteer ? st.sh->v.worker : st.verifier_worker, caf::infinite, sdump_atom::value, st.session)
        .then(
            [self, volunteer, then](session_dump& d) {
              (volunteer ? self->state.their_dump : self->state.my_dump) = std::move(d);
              then();
            },
            [self, volunteer, then](caf::error& e) {
              auto& st = self->state;
              st.dump_failed = true;  // (not comparable: judged by its tokens alone)
              // The volunteer ran the generation on a session it holds and then denies its copy:
              // it hides the state the generation left, judged as any copy denied (a session
              // the client closed meanwhile is rightly gone: no longer held). The generation
              // counts as checked no more, and the comparer ends once that is decided and the
              // verifier's end went out.
              if (volunteer && st.sh->holds(st.session)) {
                st.judging = true;
                return denied_session(self, st.sh, st.session, e, [self] {
                  self->state.judging = false;
                  self->state.stopped = true;
                  self->state.end_if_done();
                });
              }
              then();
            });
  };
  st.end_if_done = [self, ask_dump] {
    auto& st = self->state;
    if (!(st.done_mine || !st.verifier) || !st.done_theirs || st.judging) return;
    const bool agreed = st.verifier && !st.stopped;
    // Every token agreed: the sessions must too — a volunteer could draw the right tokens and
    // keep wrong caches, which only later calls would show.
    if (agreed && st.mine == st.theirs && st.asked_theirs && !st.dump_failed) {
      if (!st.asked_mine) return ask_dump(false, [self] { self->state.end_if_done(); });
      if (!st.their_dump || !st.my_dump) return;
      st.judging = true;
      const std::size_t bytes = st.their_dump->bytes + st.my_dump->bytes;
      maybe_off_thread<result<std::string>>(
          self, bytes >= off_thread_bytes,
          [theirs = std::move(*st.their_dump), mine = std::move(*st.my_dump), tolerance = st.tolerance] {
            std::string why;
            return result<std::string>(sessions_agree(theirs, mine, tolerance, &why) ? std::string() : why);
          },
          [self](result<std::string>& why) {
            auto& st = self->state;
            if (!st.verifier) return self->quit();  // (a call raced it on its session: not judged)
            if (why && why->empty()) st.sh->counts.checked++;
            else if (why && !st.sh->counts.quarantined)
              quarantine(self, st.sh, "a generation drew the verifier's tokens but left session " + st.session +
                                          " unlike the verifier's: " + *why);
            self->quit();  // (a comparison that could not run judges nothing)
          });
      return;
    }
    if (agreed) st.sh->counts.checked++;
    self->quit();
  };
  auto end_if_done = [self] { self->state.end_if_done(); };
  return {
      // The client sees the verifier's tokens when both run the same kernel path; else (and
      // when the verifier could not start) the volunteer's, which its session goes on from.
      [=](gentoken_atom, const std::string& from, const gen_token& t) {
        auto& st = self->state;
        // After a quarantine nothing more goes out: the generation goes on from what its
        // listener has, where the coordinator restores the session.
        if (st.sh->counts.quarantined) return;
        const bool volunteer = from != st.id;
        (volunteer ? st.theirs : st.mine).push_back(t.token);
        if (volunteer && st.verifier && st.exact) st.withheld.push_back(t);
        else if (volunteer || (st.verifier && st.exact)) self->send(st.listener, gentoken_atom::value, st.id, t);
        compare();
      },
      [=](gendone_atom, const std::string& from, const gen_done& d) {
        auto& st = self->state;
        if (st.sh->counts.quarantined) return self->quit();
        const bool volunteer = from != st.id;
        (volunteer ? st.done_theirs : st.done_mine) = true;
        compare();
        if (volunteer && st.verifier && !st.stopped) ask_dump(true, end_if_done);
        if (volunteer && st.verifier && st.exact) {
          st.withheld_done = d;
          if (st.mine_done) self->send(st.listener, gendone_atom::value, st.id, *std::exchange(st.mine_done, std::nullopt));
        } else if (volunteer) {
          self->send(st.listener, gendone_atom::value, st.id, d);
        } else if (st.verifier && st.exact) {
          if (st.done_theirs) self->send(st.listener, gendone_atom::value, st.id, d);
          else st.mine_done = d;
        }
        end_if_done();
      },
      [=](caf::atom_constant<caf::atom("absent")>) {
        // The verifier could not start: the volunteer's stream goes through unchecked.
        auto& st = self->state;
        if (!st.verifier) return;
        st.verifier = false;
        st.sh->counts.unchecked++;
        if (st.exact) {
          for (auto& t : st.withheld) self->send(st.listener, gentoken_atom::value, st.id, std::move(t));
          if (st.withheld_done) self->send(st.listener, gendone_atom::value, st.id, *st.withheld_done);
        }
        st.withheld.clear();
        end_if_done();
      },
  };
}

// ---- the checked worker

/// A weight on its way to the volunteer: the digest of its published bytes under a fresh
/// nonce, as they pass.
struct arriving_weight {
  std::string nonce;
  std::shared_ptr<weight_mac> mac;
  bool same_bytes = false;  ///< kept as published (no conversion): the stream's digest is the answer
};

/// A response the checked worker owes its caller while it waits on the volunteer or the
/// verifier. Every one still open is answered with an error when the volunteer goes, so no
/// caller waits out its own timeout for an actor that has ended.
struct owed_base {
  virtual ~owed_base() = default;
  virtual bool open() const = 0;
  virtual void fail(const caf::error& e) = 0;
};

template <class... Ts>
struct owed final : owed_base {
  caf::typed_response_promise<Ts...> rp;
  explicit owed(caf::typed_response_promise<Ts...> p) : rp(std::move(p)) {}
  bool open() const override { return rp.pending(); }
  void fail(const caf::error& e) override {
    if (rp.pending()) rp.deliver(e);
  }
  template <class... Us>
  void deliver(Us&&... xs) {
    if (rp.pending()) rp.deliver(std::forward<Us>(xs)...);
  }
};

/// A worker's kernel path for the spot-checks: its backend and its CPU kernels. A GPU volunteer
/// whose host CPU runs the verifier's kernel level still computes its products on another
/// path (cuBLAS, the CUDA kernels' own sums), so it is compared within the tolerance.
std::string kernel_path(std::string_view backend, std::string_view cpu_kernels) {
  return std::string(backend.empty() ? "cpu" : backend) + " / " + std::string(cpu_kernels);
}

struct checked_state {
  std::shared_ptr<verify_shared> sh;
  std::vector<std::shared_ptr<owed_base>> owed_now;  ///< responses not yet given (answered ones are pruned)
  std::map<std::pair<std::string, std::string>, arriving_weight> arriving;  ///< (model, name)
  std::map<std::string, std::set<std::string>> held;  ///< weights the volunteer holds, by model
  worker_actor verifier;
  /// Kernel paths, as kernel_path() writes them: equal only when both compute on the same
  /// backend with the same CPU kernels.
  std::string verifier_kernels;
  std::string volunteer_kernels;
  std::set<std::string> unshadowed;  ///< models whose weights the verifier does not hold
  /// Models too large for the verifiers' room: their output head alone is copied, and checked
  /// passes redo one product (product_check.hpp).
  std::set<std::string> partial;
  std::set<std::pair<std::string, std::string>> skipped;  ///< (model, weight) of those not copied
  /// Models held in part whose load is on (reserved, not yet released): while one is, the
  /// volunteer reads nothing from the model host itself (its probes are refused).
  std::set<std::string> loading_partial;
  std::map<std::string, std::set<std::string>> copied;    ///< weights the verifier holds, by model
  /// Compiled templates, by id (shared: a probed pass reads one on a helper thread).
  std::map<std::string, std::shared_ptr<const std::string>> graph_text;
  /// Bytes taken from the budget, by model (shared with the functor that gives them back when
  /// this actor ends, after its state is gone).
  std::shared_ptr<std::map<std::string, std::uint64_t>> charged = std::make_shared<std::map<std::string, std::uint64_t>>();

  /// The verifier stops holding `model` (it did not fit, or it failed there): its copy goes.
  void unshadow(const std::string& model) {
    unshadowed.insert(model);
    caf::anon_send(verifier, tabort_atom::value, model);
    release(model);
  }
  /// The model left the volunteer (aborted or dropped): nothing of it is kept here.
  void forget(const std::string& model) {
    unshadowed.erase(model);
    held.erase(model);
    partial.erase(model);
    loading_partial.erase(model);
    copied.erase(model);
    std::erase_if(skipped, [&](const auto& k) { return k.first == model; });
    release(model);
  }
  /// Whether the verifier takes (model, name) as it arrives.
  bool copying(const std::string& model, const std::string& name) const {
    return !unshadowed.count(model) && !skipped.count({model, name});
  }
  /// A product of `r` the verifier can redo, when a model it names is held in part.
  std::optional<product_probe> probe_for(const run_request& r) const {
    if (partial.empty()) return std::nullopt;
    const std::string* text = &r.graph_json;
    if (!r.graph_id.empty()) {
      auto it = graph_text.find(r.graph_id);
      if (it == graph_text.end()) return std::nullopt;
      text = it->second.get();
    }
    return probe_in(partial, copied, *text);
  }
  /// What a check of an inline graph needs to know of this state, copied for a helper thread.
  struct view {
    bool exact = false;
    std::set<std::string> partial;
    std::map<std::string, std::set<std::string>> copied;
    std::map<std::string, float> model_tolerance;
    std::optional<product_probe> probe(const std::string& graph_json) const {
      return partial.empty() ? std::nullopt : probe_in(partial, copied, graph_json);
    }
    float tolerance(const std::string& graph_json) const { return exact ? 0 : tolerance_in(model_tolerance, graph_json); }
  };
  view for_helper() const {
    view v{exact(), partial, {}, model_tolerance};
    for (const auto& m : partial)
      if (auto it = copied.find(m); it != copied.end()) v.copied.insert(*it);
    return v;
  }
  void release(const std::string& model) {
    auto it = charged->find(model);
    if (it == charged->end()) return;
    if (sh->cfg.budget) sh->cfg.budget->give(it->second);
    charged->erase(it);
  }
  std::set<std::string> checked_gens;  ///< generations started checked (their cancels reach both loops)
  std::mt19937_64 rng;

  worker_actor volunteer() const { return sh->v.worker; }
  bool exact() const { return !volunteer_kernels.empty() && volunteer_kernels == verifier_kernels; }
  /// Per model it was sent, the widest path tolerance of its weights' resident dtypes; per
  /// compiled graph, that of the models its text names.
  std::map<std::string, float> model_tolerance, graph_tolerance;
  /// The tolerance of a graph's text: the widest of the models it names (float's when none).
  float tolerance_of_text(const std::string& graph_json) const { return tolerance_in(model_tolerance, graph_json); }
  /// What a pass is compared with: 0 (exactly) on the same kernel path, else its tolerance.
  float tolerance(const run_request& r) const {
    if (exact()) return 0;
    if (r.graph_id.empty()) return tolerance_of_text(r.graph_json);
    return tolerance_of_graph(r.graph_id);
  }
  /// The same for a compiled template (a generation's).
  float tolerance_of_graph(const std::string& graph_id) const {
    if (exact()) return 0;
    if (auto it = graph_tolerance.find(graph_id); it != graph_tolerance.end()) return it->second;
    float t = path_tolerance("f32");  // (a template compiled before: the widest it could need)
    for (const auto& [_, tol] : model_tolerance) t = std::max(t, tol);
    return t;
  }
  /// Counts a pass; whether it is one of the first, each checked as it runs.
  bool first_pass() { return ++sh->counts.passes <= sh->cfg.first_passes; }
  /// A draw of `fraction` (the passes on a model held in part, probed one by one).
  bool draw() { return std::uniform_real_distribution<double>(0, 1)(rng) < sh->cfg.fraction; }

  /// The later passes' windows (check_windows.hpp); absent when `fraction` is 0.
  std::optional<check_windows> windows;
  /// The verifier's work for checked windows, one task at a time in the order given (each
  /// calls its argument when done), so copies, passes and comparisons reach it in order.
  std::deque<std::function<void(std::function<void()>)>> verifier_tasks;
  bool verifier_busy = false;
  /// What those tasks hold: the passes, the volunteer's answers and its session copies (a copy
  /// until the last task holding it lets it go, on whichever thread).
  std::shared_ptr<verify_room> room;
  /// Passes waiting for windows to close (admitted again, in order, after each turnover), and
  /// the sessions they wait on: a later pass on one of those waits behind them.
  std::deque<std::function<void()>> parked;
  std::multiset<std::string> parked_sessions;
  /// Sessions with a windowed generation running on the volunteer: a pass sent to one of them
  /// meanwhile runs between the loop's steps there, an order the verifier cannot follow.
  std::map<std::string, std::uint32_t> generating;
  /// The comparers of the first passes' generations still running, by session.
  std::multimap<std::string, comparer_actor> first_gens;
  void generation_begun(const std::string& s) { generating[s]++; }
  void generation_over(const std::string& s) {
    if (auto it = generating.find(s); it != generating.end() && --it->second == 0) generating.erase(it);
  }
  bool generating_on(const std::vector<std::string>& sessions) const {
    return std::any_of(sessions.begin(), sessions.end(), [&](const std::string& s) { return generating.count(s) > 0; });
  }
};

using checked_pointer = worker_actor::stateful_pointer<checked_state>;

/// A response promise for the current request, kept until answered (see owed_base).
template <class... Ts>
std::shared_ptr<owed<Ts...>> owe(checked_pointer self) {
  auto& v = self->state.owed_now;
  v.erase(std::remove_if(v.begin(), v.end(), [](const auto& o) { return !o->open(); }), v.end());
  auto o = std::make_shared<owed<Ts...>>(self->make_response_promise<Ts...>());
  v.push_back(o);
  return o;
}

/// The sessions a run reads and writes.
std::vector<std::string> sessions_of(const run_request& r) {
  std::vector<std::string> out;
  if (!r.session.empty()) out.push_back(r.session);
  for (const auto& s : r.sessions)
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  return out;
}

/// Copies `sessions` from the volunteer into the verifier, then calls `then(ok)`. The dumps
/// are asked for now, so they sit in the volunteer's mailbox ahead of whatever is sent next.
void snapshot(checked_pointer self, std::vector<std::string> sessions, std::function<void(bool)> then) {
  if (sessions.empty()) return then(true);
  struct progress {
    std::vector<std::optional<session_dump>> dumps;
    std::size_t left = 0;
    bool failed = false;
  };
  auto p = std::make_shared<progress>();
  p->dumps.resize(sessions.size());
  p->left = sessions.size();
  auto load_all = [self, sessions, p, then]() {
    if (p->failed) return then(false);
    auto i = std::make_shared<std::size_t>(0);
    auto next = std::make_shared<std::function<void()>>();
    *next = [self, sessions, p, then, i, next]() {
      if (*i == sessions.size()) return then(true);
      const std::size_t k = (*i)++;
      self->request(self->state.verifier, caf::infinite, sload_atom::value, sessions[k], std::move(*p->dumps[k]))
          .then([next](bool) { (*next)(); }, [then](caf::error&) { then(false); });
    };
    (*next)();
  };
  for (std::size_t k = 0; k < sessions.size(); ++k)
    self->request(self->state.volunteer(), caf::infinite, sdump_atom::value, sessions[k])
        .then(
            [self, s = sessions[k], p, k, load_all](session_dump& d) {
              if (quarantined_if_malformed(self, self->state.sh, s, d)) p->failed = true;
              else p->dumps[k] = std::move(d);
              if (--p->left == 0) load_all();
            },
            [self, s = sessions[k], p, load_all](caf::error& e) {
              if (self->state.sh->holds(s)) denied_session(self, self->state.sh, s, e);
              p->failed = true;
              if (--p->left == 0) load_all();
            });
}

/// Drops the verifier's copies of `sessions`.
void drop_copies(checked_pointer self, const std::vector<std::string>& sessions) {
  for (const auto& s : sessions) caf::anon_send(self->state.verifier, sclose_atom::value, s);
}

/// Challenges the volunteer for weight (model, name) with `nonce`: its digest must equal
/// `expected`, or — when `expected` is empty — the verifier's answer to the same challenge.
/// `done(outcome)`: 1 agreed, 0 unchecked (no verifier copy to ask), -1 differed (quarantined).
void challenge(checked_pointer self, const std::string& model, const std::string& name, const std::string& nonce,
               std::string expected, std::function<void(int)> done) {
  auto compare = [self, model, name, done](const std::string& want, const std::string& got) {
    if (want == got) return done(1);
    quarantine(self, self->state.sh,
               "weight " + name + " of model " + model + " differs from what it was sent (its digest under a fresh nonce is " +
                   got.substr(0, 16) + "…, expected " + want.substr(0, 16) + "…)");
    done(-1);
  };
  self->request(self->state.volunteer(), caf::infinite, tdigest_atom::value, model, name, nonce)
      .then(
          [self, model, name, nonce, expected, compare, done](std::string& got) {
            if (!expected.empty()) return compare(expected, got);
            if (self->state.unshadowed.count(model)) return done(0);
            self->request(self->state.verifier, caf::infinite, tdigest_atom::value, model, name, nonce)
                .then([compare, got](std::string& want) { compare(want, got); }, [done](caf::error&) { done(0); });
          },
          [self, model, name, done](caf::error& e) {
            // A model deleted (or its load ended) while the challenge was on its way left the
            // volunteer first: the weight is rightly gone, and nothing is judged.
            const auto held = self->state.held.find(model);
            if (held == self->state.held.end() || !held->second.count(name)) return done(0);
            // A weight the volunteer says it does not hold, right after it took it, is a wrong answer too.
            quarantine(self, self->state.sh, "weight " + name + " of model " + model + " could not be checked: " + from_caf(e).message);
            done(-1);
          });
}

/// After a checked pass: asks the volunteer and the verifier for `sessions` as the pass left
/// them (now, so the volunteer's dumps come before anything sent later), and returns what to
/// call once the answers were compared: when they agreed, the sessions must agree too — a
/// volunteer could answer right and keep wrong caches, which only later answers would show —
/// else the volunteer is quarantined; then the verifier's copies go.
std::function<void(bool)> compare_sessions_after(checked_pointer self, std::vector<std::string> sessions, float tolerance) {
  struct pair_of_dumps {
    std::optional<session_dump> theirs, mine;
  };
  struct state_t {
    std::vector<pair_of_dumps> dumps;
    std::size_t left = 0;  ///< dumps not yet answered
    bool failed = false, compare = false, decided = false;
  };
  auto p = std::make_shared<state_t>();
  p->dumps.resize(sessions.size());
  p->left = 2 * sessions.size();
  auto settle = [self, p, sessions, tolerance]() {
    if (p->left > 0 || !p->decided) return;
    auto& st = self->state;
    if (p->compare && !p->failed && !st.sh->counts.quarantined) {
      std::size_t bytes = 0;
      for (const auto& d : p->dumps) bytes += d.theirs->bytes + d.mine->bytes;
      maybe_off_thread<result<std::string>>(
          self, bytes >= off_thread_bytes,
          [p, sessions, tolerance] {
            for (std::size_t k = 0; k < sessions.size(); ++k) {
              if (std::string why = malformed_copy(*p->dumps[k].theirs); !why.empty())
                return result<std::string>("its copy of session " + sessions[k] + " is malformed: " + why);
              std::string why;
              if (!sessions_agree(*p->dumps[k].theirs, *p->dumps[k].mine, tolerance, &why))
                return result<std::string>("a graph call answered right but left its session unlike the verifier's: session " +
                                           sessions[k] + " after the pass: " + why);
            }
            return result<std::string>(std::string());
          },
          [self](result<std::string>& why) {
            if (!why || !why->empty())
              quarantine(self, self->state.sh,
                         why ? *why : "a graph call answered right but its session could not be compared: " + why.err().message);
          });
    }
    drop_copies(self, sessions);
  };
  for (std::size_t k = 0; k < sessions.size(); ++k) {
    for (bool volunteer : {true, false}) {
      const worker_actor& from = volunteer ? self->state.volunteer() : self->state.verifier;
      self->request(from, caf::infinite, sdump_atom::value, sessions[k])
          .then(
              [p, k, volunteer, settle](session_dump& d) {
                (volunteer ? p->dumps[k].theirs : p->dumps[k].mine) = std::move(d);
                --p->left;
                settle();
              },
              [self, s = sessions[k], volunteer, p, settle](caf::error& e) {
                if (volunteer && self->state.sh->holds(s)) denied_session(self, self->state.sh, s, e);
                p->failed = true;  // (not comparable: left unjudged)
                --p->left;
                settle();
              });
    }
  }
  return [p, settle](bool answers_agreed) {
    p->compare = answers_agreed;
    p->decided = true;
    settle();
  };
}

void checked_run_with(checked_pointer self, std::shared_ptr<owed<run_reply>> rp, run_request r, float tolerance);

caf::result<run_reply> checked_run(checked_pointer self, run_request r) {
  auto rp = owe<run_reply>(self);
  const float tolerance = self->state.tolerance(r);
  checked_run_with(self, rp, std::move(r), tolerance);
  return rp->rp;
}

/// checked_run with its promise and tolerance found.
void checked_run_with(checked_pointer self, std::shared_ptr<owed<run_reply>> rp, run_request r, float tolerance) {
  struct outcome {
    std::optional<run_reply> mine, theirs;
    std::optional<caf::error> their_error;
    bool mine_done = false, theirs_done = false;
  };
  auto o = std::make_shared<outcome>();
  const auto sessions = sessions_of(r);
  auto finish = [self, rp, o, sessions, tolerance]() mutable {
    if (!o->mine_done || !o->theirs_done) return;
    auto& st = self->state;
    if (o->their_error || !o->mine) drop_copies(self, sessions);
    if (o->their_error) {
      rp->deliver(*o->their_error);
      return;
    }
    if (!o->mine) {
      st.sh->counts.unchecked++;
      rp->deliver(std::move(*o->theirs));
      return;
    }
    // The sessions as the pass left them on both, asked for now: ahead, in the volunteer's
    // mailbox, of any call the answer below lets its client make.
    auto after = compare_sessions_after(self, sessions, tolerance);
    // Equal text agrees at once; otherwise the answers are read as numbers — on a helper
    // thread when large, as this actor shares the coordinator's scheduler thread.
    const bool heavy = o->mine->outputs_json.size() + o->theirs->outputs_json.size() >= off_thread_bytes &&
                       o->mine->outputs_json != o->theirs->outputs_json;
    maybe_off_thread<result<std::string>>(
        self, heavy,
        [o, tolerance] {
          std::string why;
          return answers_agree(o->theirs->outputs_json, o->mine->outputs_json, tolerance, &why) ? result<std::string>(std::string())
                                                                                             : result<std::string>(why);
        },
        [self, rp, o, after](result<std::string>& why) mutable {
          auto& st = self->state;
          const bool agreed = why && why->empty();
          if (agreed) st.sh->counts.checked++;
          else quarantine(self, st.sh, "a graph call's answer differs from the verifier's: " + (why ? *why : why.err().message));
          rp->deliver(std::move(*o->mine));  // the verified answer
          after(agreed);
        });
  };
  // The verifier's copy of the call, made once: the callbacks that carry it until the sessions
  // are copied share it (a call may hold an inline body of hundreds of MB).
  auto mine = std::make_shared<run_request>(r);
  auto on_verifier = [self, o, finish, mine](bool copied) mutable {
    if (!copied) {  // (a session it could not copy: unchecked)
      o->mine_done = true;
      return finish();
    }
    self->request(self->state.verifier, caf::infinite, run_atom::value, std::move(*mine))
        .then(
            [o, finish](run_reply& x) mutable {
              o->mine = std::move(x);
              o->mine_done = true;
              finish();
            },
            [o, finish](caf::error&) mutable {
              o->mine_done = true;  // (weights or a template it lacks: unchecked)
              finish();
            });
  };
  snapshot(self, sessions, on_verifier);
  self->request(self->state.volunteer(), caf::infinite, run_atom::value, std::move(r))
      .then(
          [o, finish](run_reply& x) mutable {
            o->theirs = std::move(x);
            o->theirs_done = true;
            finish();
          },
          [o, finish](caf::error& e) mutable {
            o->their_error = std::move(e);
            o->theirs_done = true;
            finish();
          });
}

/// A checked pass of a model the verifier holds in part: the volunteer is asked for the
/// activation entering product `p` and the product too, the verifier multiplies the same
/// activation by its copy of the weight, and the products (and any token an argmax drew from
/// it) must agree. The caller gets the volunteer's answer without the extra values; a
/// mismatch quarantines the volunteer, and the call is answered from the verifier's product
/// when all it asked for is that product or tokens drawn from it, else it fails.
void probed_send(checked_pointer self, std::shared_ptr<owed<run_reply>> rp, run_request r, product_probe p, float tolerance,
                 std::vector<std::string> asked, std::vector<std::string> extra);

void probed_run_with(checked_pointer self, std::shared_ptr<owed<run_reply>> rp, run_request r, product_probe p,
                     float tolerance);

caf::result<run_reply> probed_run(checked_pointer self, run_request r, product_probe p) {
  auto rp = owe<run_reply>(self);
  const float tolerance = self->state.tolerance(r);
  probed_run_with(self, rp, std::move(r), std::move(p), tolerance);
  return rp->rp;
}

/// probed_run with its promise and tolerance found.
void probed_run_with(checked_pointer self, std::shared_ptr<owed<run_reply>> rp, run_request r, product_probe p,
                     float tolerance) {
  auto& st = self->state;
  // What the call asks for, and the call rewritten to ask for the probe's two values too: the
  // graph's text is read (and an inline one written again), on a helper thread when large, as
  // this actor shares the coordinator's scheduler thread.
  struct plan {
    std::vector<std::string> asked, extra;
    bool rewritten = true;
  };
  auto held = std::make_shared<run_request>(std::move(r));
  auto pl = std::make_shared<plan>();
  const bool inline_graph = held->graph_id.empty();
  std::shared_ptr<const std::string> text = std::make_shared<const std::string>();
  if (auto it = st.graph_text.find(held->graph_id); !inline_graph && it != st.graph_text.end()) text = it->second;
  const bool heavy = (inline_graph ? held->graph_json.size() : text->size()) >= off_thread_bytes;
  maybe_off_thread<status>(
      self, heavy,
      [held, pl, p, text]() -> status {
        auto& r = *held;
        pl->asked = r.graph_id.empty() || r.outputs.empty() ? declared_outputs(r.graph_id.empty() ? r.graph_json : *text)
                                                            : r.outputs;
        for (const auto& n : {p.x, p.out})
          if (std::find(pl->asked.begin(), pl->asked.end(), n) == pl->asked.end()) pl->extra.push_back(n);
        if (r.graph_id.empty()) {
          auto more = with_outputs(r.graph_json, pl->extra);
          if (!more) {
            pl->rewritten = false;
            return status{};
          }
          r.graph_json = std::move(*more);
        } else {
          r.outputs = pl->asked;
          r.outputs.insert(r.outputs.end(), pl->extra.begin(), pl->extra.end());
        }
        return status{};
      },
      [self, rp, held, pl, p, tolerance](status&) mutable {
        if (!pl->rewritten) {  // (a graph it cannot add outputs to: passed on as it is)
          self->request(self->state.volunteer(), caf::infinite, run_atom::value, std::move(*held))
              .then([rp](run_reply& x) mutable { rp->deliver(std::move(x)); }, [rp](caf::error& e) mutable { rp->deliver(std::move(e)); });
          return;
        }
        probed_send(self, rp, std::move(*held), p, tolerance, std::move(pl->asked), std::move(pl->extra));
      });
}

/// probed_run's pass, the call asking for the probe's values: the volunteer's answer, the
/// verifier's product from its activation, and the verdict.
void probed_send(checked_pointer self, std::shared_ptr<owed<run_reply>> rp, run_request r, product_probe p, float tolerance,
                 std::vector<std::string> asked, std::vector<std::string> extra) {
  auto& st = self->state;
  struct outcome {
    run_reply theirs;
    rapidjson::Document answer;       ///< the volunteer's, parsed once
    std::vector<std::int64_t> shape;  ///< the product's
    std::string probe;                ///< the graph the verifier runs
    std::optional<std::string> verified;  ///< on a mismatch: the caller's answer from the verifier's product
    /// The answer as the caller asked for it: without the extra values.
    void strip(const std::vector<std::string>& extra) {
      if (!extra.empty()) theirs.outputs_json = without_outputs(answer, extra);
    }
  };
  const bool base64 = r.base64;
  const bool free_rows = r.free_rows;  // (the probe's product takes the kernels the call's did)
  self->request(st.volunteer(), caf::infinite, run_atom::value, std::move(r))
      .then(
          [self, rp, p, extra, tolerance, asked, base64, free_rows](run_reply& x) mutable {
            auto o = std::make_shared<outcome>();
            o->theirs = std::move(x);
            // (the answer is untrusted text, read once with the depth-limited parser, on a
            // helper thread when large)
            maybe_off_thread<status>(
                self, o->theirs.outputs_json.size() >= off_thread_bytes,
                [o, p]() -> status {
                  auto doc = parse_json_object(o->theirs.outputs_json, "the volunteer's answer");
                  if (!doc) return status(doc.err());
                  o->answer = std::move(*doc);
                  std::vector<std::int64_t> xs;
                  std::vector<float> xv;
                  if (!output_of(o->answer, p.x, xs, xv) || xs.empty())
                    return status(invalid("the activation " + p.x + " it was asked for is missing or unreadable"));
                  std::vector<float> yv;
                  if (!output_of(o->answer, p.out, o->shape, yv))
                    return status(invalid("the product " + p.out + " it was asked for is missing or unreadable"));
                  o->probe = probe_graph(p, xs, xv);
                  return status{};
                },
                [self, rp, o, p, extra, tolerance, asked, base64, free_rows](status& readable) mutable {
                  auto& st = self->state;
                  if (!readable) {
                    quarantine(self, st.sh, "a checked graph call's answer lacks what it was asked for: " + readable.err().message);
                    return rp->deliver(to_caf(errc::unavailable, "the volunteer running this call answered malformed outputs and "
                                                                 "was quarantined; send the call again"));
                  }
                  run_request mine;
                  mine.graph_json = std::move(o->probe);
                  mine.base64 = true;
                  mine.free_rows = free_rows;
                  self->request(st.verifier, caf::infinite, run_atom::value, std::move(mine))
                      .then(
                          [self, rp, o, p, extra, tolerance, asked, base64](run_reply& y) mutable {
                            auto why = std::make_shared<std::string>();
                            maybe_off_thread<status>(
                                self, o->theirs.outputs_json.size() + y.outputs_json.size() >= off_thread_bytes,
                                [o, p, extra, tolerance, asked, base64, why, verified = std::move(y.outputs_json)]() -> status {
                                  std::vector<std::int64_t> ys;
                                  std::vector<float> yv;
                                  if (!output_of(verified, "y", ys, yv)) return status(invalid("the verifier's product is unreadable"));
                                  *why = probe_difference(p, o->answer, yv, o->shape, tolerance, first_difference);
                                  if (!why->empty()) o->verified = verified_answer(p, asked, yv, ys, base64);
                                  else o->strip(extra);
                                  return status{};
                                },
                                [self, rp, o, why](status& done) mutable {
                                  auto& st = self->state;
                                  if (!done) {  // (the verifier's side failed: judged nothing)
                                    st.sh->counts.unchecked++;
                                    return rp->deliver(to_caf(errc::internal, "checking the answer failed: " + done.err().message));
                                  }
                                  if (why->empty()) {
                                    st.sh->counts.checked++;
                                    return rp->deliver(std::move(o->theirs));
                                  }
                                  quarantine(self, st.sh, "a graph call's " + *why);
                                  if (o->verified) {  // (every output asked for is the product or drawn from it)
                                    o->theirs.outputs_json = std::move(*o->verified);
                                    return rp->deliver(std::move(o->theirs));
                                  }
                                  rp->deliver(to_caf(errc::unavailable, "the volunteer running this call answered wrongly and was "
                                                                       "quarantined; send the call again"));
                                });
                          },
                          [self, rp, o, extra](caf::error&) mutable {
                            // (the verifier could not redo it: unchecked, the answer as asked for)
                            self->state.sh->counts.unchecked++;
                            o->strip(extra);
                            rp->deliver(std::move(o->theirs));
                          });
                });
          },
          [rp](caf::error& e) mutable { rp->deliver(std::move(e)); });
}

/// A pass not chosen for a check: the volunteer's answer as it is — once it reads as an outputs
/// object (its text reaches the client inside the reply; the depth-limited parser, on a helper
/// thread when large). An answer that does not quarantines the volunteer; the call fails.
void unchecked_run_with(checked_pointer self, std::shared_ptr<owed<run_reply>> rp, run_request r,
                        std::function<void(bool, const run_reply*)> after = {});

caf::result<run_reply> unchecked_run(checked_pointer self, run_request r) {
  auto rp = owe<run_reply>(self);
  unchecked_run_with(self, rp, std::move(r));
  return rp->rp;
}

/// unchecked_run with its promise; `after(answered, reply)` runs once the caller has its answer
/// (`reply`: the volunteer's well-formed answer, else null).
void unchecked_run_with(checked_pointer self, std::shared_ptr<owed<run_reply>> rp, run_request r,
                        std::function<void(bool, const run_reply*)> after) {
  self->request(self->state.volunteer(), caf::infinite, run_atom::value, std::move(r))
      .then(
          [self, rp, after](run_reply& x) mutable {
            auto reply = std::make_shared<run_reply>(std::move(x));
            maybe_off_thread<status>(
                self, reply->outputs_json.size() >= off_thread_bytes,
                [reply]() -> status {
                  auto d = parse_json_object(reply->outputs_json, "the volunteer's answer");
                  if (!d) return status(d.err());
                  for (auto it = d->MemberBegin(); it != d->MemberEnd(); ++it)
                    if (!it->value.IsObject() || !it->value.HasMember("shape")) return status(invalid("an output is not {shape, data}"));
                  return status{};
                },
                [self, rp, reply, after](status& ok) mutable {
                  if (ok) {
                    // (the comparison's copy, taken only when a window's check wants it)
                    if (after) after(true, reply.get());
                    rp->deliver(std::move(*reply));
                    return;
                  }
                  quarantine(self, self->state.sh, "a graph call's answer is not an outputs object: " + ok.err().message);
                  rp->deliver(to_caf(errc::unavailable, "the volunteer running this call answered malformed outputs and was "
                                                       "quarantined; send the call again"));
                  if (after) after(false, nullptr);
                });
          },
          [rp, after](caf::error& e) mutable {
            rp->deliver(std::move(e));
            if (after) after(false, nullptr);
          });
}

// ---- later passes: windows whose checks the volunteer cannot see (check_windows.hpp)

/// The tap put between a volunteer's generation in a window and its listener: passes everything
/// on (to `down`, when there is one), keeps the tokens when asked to, and answers `genended`
/// with them and the end once the generation ended. Without `down` it collects the verifier's
/// run of the same generation.
using genended_atom = caf::atom_constant<caf::atom("genended")>;
using gen_tap_actor = gen_listener::extend<caf::replies_to<genended_atom>::with<std::vector<gen_token>, gen_done>>;

struct gen_tap_state {
  gen_listener down;
  bool keep = false;
  std::vector<gen_token> tokens;
  std::optional<gen_done> done;
  std::vector<caf::typed_response_promise<std::vector<gen_token>, gen_done>> waiting;
};

gen_tap_actor::behavior_type gen_tap(gen_tap_actor::stateful_pointer<gen_tap_state> self, gen_listener down, bool keep,
                                     caf::actor watched) {
  self->state.down = std::move(down);
  self->state.keep = keep;
  // (it ends with the checked worker, whose volunteer then sends no more)
  if (watched) self->monitor(watched);
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  return {
      [=](gentoken_atom a, const std::string& id, const gen_token& t) {
        auto& st = self->state;
        if (st.done) return;  // (nothing after the end: the listener has ended it)
        if (st.keep) st.tokens.push_back(t);
        if (st.down) self->send(st.down, a, id, t);
      },
      [=](gendone_atom a, const std::string& id, const gen_done& d) {
        auto& st = self->state;
        if (st.done) return;
        st.done = d;
        if (st.down) self->send(st.down, a, id, d);
        for (auto& rp : st.waiting) rp.deliver(st.tokens, d);
        if (!st.waiting.empty()) self->quit();
      },
      [=](genended_atom) -> caf::result<std::vector<gen_token>, gen_done> {
        auto& st = self->state;
        if (st.done) {
          self->quit();
          return {std::move(st.tokens), *st.done};
        }
        st.waiting.push_back(self->make_response_promise<std::vector<gen_token>, gen_done>());
        return st.waiting.back();
      },
  };
}

/// Runs the verifier's tasks in order: each starts once the one before called its `next`.
void run_verifier_tasks(checked_pointer self) {
  auto& st = self->state;
  st.verifier_busy = true;
  while (!st.verifier_tasks.empty()) {
    auto task = std::move(st.verifier_tasks.front());
    st.verifier_tasks.pop_front();
    auto phase = std::make_shared<int>(0);  // 0: running, 1: finished at once, 2: waiting on an answer
    task([self, phase] {
      if (*phase == 0) *phase = 1;
      else run_verifier_tasks(self);
    });
    if (*phase == 1) continue;
    *phase = 2;
    return;
  }
  st.verifier_busy = false;
}

/// Most verifier tasks waiting at once, beside the bytes of the passes they carry and of the
/// volunteer's answers they hold (`verify_config::queue_bytes`): past either a checked window
/// stops being followed (a volunteer far faster than its verifier must not make the
/// coordinator hold its passes and answers without bound).
constexpr std::size_t max_verifier_tasks = 4096;

void to_verifier(checked_pointer self, std::function<void(std::function<void()>)> task) {
  auto& st = self->state;
  st.verifier_tasks.push_back(std::move(task));
  if (!st.verifier_busy) run_verifier_tasks(self);
}

/// Drops the verifier's copy of session `s` once what is queued before it is done.
void drop_copy_in_turn(checked_pointer self, const std::string& s) {
  to_verifier(self, [self, s](std::function<void()> next) {
    caf::anon_send(self->state.verifier, sclose_atom::value, s);
    next();
  });
}

/// Whether the verifier's queue has room for `bytes` more (a queued pass's answer); takes them if so.
bool verifier_bytes_room(checked_pointer self, std::uint64_t bytes) { return self->state.room->take(bytes); }

/// Lets go of `bytes` of the verifier's queue (a pass and its answer, once the verifier is done).
void verifier_bytes_free(checked_pointer self, std::uint64_t bytes) { self->state.room->give(bytes); }

/// The volunteer's copy `d` of a session, held for the verifier within the same room as the
/// passes and answers — its bytes counted until the last holder lets it go —, or null when
/// there is no room (verify_room::take_copy): a verifier far behind a fast volunteer would
/// otherwise hold a copy of each session for every checked window between them, however large
/// the caches.
std::shared_ptr<session_dump> held_copy(checked_pointer self, session_dump&& d) {
  const std::uint64_t n = d.carried();
  if (!self->state.room->take_copy(n)) return nullptr;
  return std::shared_ptr<session_dump>(new session_dump(std::move(d)), [room = self->state.room, n](session_dump* p) {
    delete p;
    room->give_copy(n);
  });
}

/// Whether the verifier's queue has room for a pass of `bytes`; takes them if so.
bool verifier_room(checked_pointer self, std::uint64_t bytes) {
  return self->state.verifier_tasks.size() < max_verifier_tasks && verifier_bytes_room(self, bytes);
}

/// A value from the volunteer that a verifier task, queued in the volunteer's order when the
/// request went out, waits for (all on the checked worker's thread).
template <class T>
struct awaited {
  std::optional<T> value;
  std::optional<caf::error> error;
  bool ready() const { return value.has_value() || error.has_value(); }
  void set(T v) {
    value = std::move(v);
    wake();
  }
  void fail(caf::error e) {
    error = std::move(e);
    wake();
  }
  void when(std::function<void()> f) {
    if (ready()) f();
    else waiters.push_back(std::move(f));
  }

 private:
  void wake() {
    auto now = std::move(waiters);
    waiters.clear();
    for (auto& f : now) f();
  }
  std::vector<std::function<void()>> waiters;
};

/// The verifier stops following `w` (it could not run one of its passes, or lost track): its
/// passes from now on are not judged, its copies go. Counted once as unchecked.
void break_window(checked_pointer self, const check_windows::ptr& w) {
  if (!w->checked || w->broken) return;
  w->broken = true;
  self->state.sh->counts.unchecked++;
  for (const auto& s : w->sessions) drop_copy_in_turn(self, s);
}

void admit_parked(checked_pointer self);

std::string passes_text(std::uint32_t n) { return std::to_string(n) + (n == 1 ? " pass" : " passes"); }

/// Whether a pass on `sessions` races a generation running on one of them (it would run
/// between the loop's steps on the volunteer, an order no verifier can follow); a first pass's
/// generation it races is then not judged.
bool on_race(checked_pointer self, const std::vector<std::string>& sessions) {
  auto& st = self->state;
  if (!st.generating_on(sessions)) return false;
  for (const auto& s : sessions) {
    auto [from, to] = st.first_gens.equal_range(s);
    for (auto it = from; it != to; ++it) self->send(it->second, caf::atom_constant<caf::atom("absent")>::value);
  }
  return true;
}

/// After a window's last answer, or before the pass that opened a window: the volunteer is
/// asked for each session of the opened window now — ahead, in its mailbox, of anything sent
/// later. Those copies end the closed windows (a checked one's sessions compared with the
/// verifier's, which has done its passes again) and begin the opened one (a checked one's loaded
/// into the verifier). The volunteer is asked the same whether any of them is checked. The
/// verifier's side is queued now, in the volunteer's order, each part waiting for its copy.
void turn_windows(checked_pointer self, const check_windows::turnover& t) {
  auto& st = self->state;
  struct pair_of_dumps {
    std::optional<session_dump> mine;
    std::optional<caf::error> mine_failed;
    bool mine_in = false;
  };
  using their_dump = awaited<std::shared_ptr<session_dump>>;
  std::map<std::string, check_windows::ptr> closed_of;
  for (const auto& c : t.closed)
    for (const auto& s : c->sessions) closed_of[s] = c;
  // A checked window's sessions the opened window does not go on with: the verifier's copies go.
  if (!t.opened)
    for (const auto& c : t.closed)
      if (c->checked && !c->broken)
        for (const auto& s : c->sessions) drop_copy_in_turn(self, s);
  if (!t.opened) return;
  const auto opened = t.opened;
  for (const auto& s : opened->sessions) {
    auto c = closed_of.count(s) ? closed_of[s] : nullptr;
    auto theirs = std::make_shared<their_dump>();
    if (c && c->checked && !c->broken) {
      // The verifier's copy as the closed window's passes left it (after them in its order),
      // compared with the volunteer's once both came (on a helper thread when large); then
      // dropped, unless the opened window is checked too (its first copy replaces it).
      auto pair = std::make_shared<pair_of_dumps>();
      auto judge = [self, s, c, pair, theirs] {
        if (!pair->mine_in || !theirs->ready()) return;
        auto& st = self->state;
        if (st.sh->counts.quarantined) return;
        if (theirs->error) return;  // (judged or counted where it came: denied_session, no room)
        if (pair->mine_failed) {  // (the verifier lost its copy: nothing to judge)
          st.sh->counts.unchecked++;
          return;
        }
        auto copy = *theirs->value;
        maybe_off_thread<result<std::string>>(
            self, copy->bytes + pair->mine->bytes >= off_thread_bytes,
            [pair, copy, tolerance = c->tolerance] {
              std::string why;
              return result<std::string>(sessions_agree(*copy, *pair->mine, tolerance, &why) ? std::string() : why);
            },
            [self, s, c](result<std::string>& why) {
              if (why && why->empty()) return;
              quarantine(self, self->state.sh,
                         "its session " + s + " at the end of a checked window of " + passes_text(c->passes) +
                             " (answered before the check) is unlike the verifier's: " + (why ? *why : why.err().message));
            });
      };
      const bool keep = opened->checked;
      to_verifier(self, [self, s, pair, keep, judge](std::function<void()> next) {
        auto came = [self, s, pair, keep, judge, next] {
          pair->mine_in = true;
          if (!keep) caf::anon_send(self->state.verifier, sclose_atom::value, s);
          judge();
          next();
        };
        self->request(self->state.verifier, caf::infinite, sdump_atom::value, s)
            .then(
                [pair, came](session_dump& d) {
                  pair->mine = std::move(d);
                  came();
                },
                [pair, came](caf::error& e) {
                  pair->mine_failed = std::move(e);
                  came();
                });
      });
      theirs->when(judge);
    }
    if (opened->checked) {
      // The opened window's first copy: the verifier starts from it.
      to_verifier(self, [self, s, opened, theirs, copy_it = bool(c && c->checked && !c->broken)](std::function<void()> next) {
        theirs->when([self, s, opened, theirs, copy_it, next] {
          if (opened->broken) return next();
          if (theirs->error) {
            // (no such session there: the verifier holds none either; anything else ends the check)
            if (from_caf(*theirs->error).code == errc::not_found) caf::anon_send(self->state.verifier, sclose_atom::value, s);
            else break_window(self, opened);
            return next();
          }
          session_dump mine = copy_it ? **theirs->value : std::move(**theirs->value);
          self->request(self->state.verifier, caf::infinite, sload_atom::value, s, std::move(mine))
              .then([next](bool) { next(); },
                    [self, opened, next](caf::error&) {
                      break_window(self, opened);
                      next();
                    });
        });
      });
    }
    // (held for the verifier when it judges the closed window or starts the opened one from it)
    const bool judged = c && c->checked && !c->broken;
    self->request(st.volunteer(), caf::infinite, sdump_atom::value, s)
        .then(
            [self, s, theirs, judged, opened](session_dump& d) {
              if (quarantined_if_malformed(self, self->state.sh, s, d))
                return theirs->fail(to_caf(errc::invalid, "a malformed copy"));
              if (!judged && !opened->checked) return theirs->set(std::make_shared<session_dump>(std::move(d)));
              if (auto held = held_copy(self, std::move(d))) return theirs->set(std::move(held));
              // No room: the closed window goes unjudged, the opened one unchecked (break_window).
              if (judged) self->state.sh->counts.unchecked++;
              theirs->fail(to_caf(errc::limit, "no room to hold the session's copy for the verifier"));
            },
            [self, s, theirs](caf::error& e) {
              if (self->state.sh->holds(s)) denied_session(self, self->state.sh, s, e);
              theirs->fail(std::move(e));
            });
  }
}

/// Sends a pass through the windows: `go(window)` once its sessions' windows let it (at once,
/// or after the turnover it waits for).
void admit_windowed(checked_pointer self, std::vector<std::string> sessions, std::function<void(check_windows::ptr)> go) {
  auto& st = self->state;
  if (st.sh->counts.quarantined) return go(st.windows->single());  // (its answer fails anyway)
  const bool behind = std::any_of(sessions.begin(), sessions.end(), [&](const std::string& s) { return st.parked_sessions.count(s) > 0; });
  auto a = behind ? check_windows::admission{} : st.windows->admit(sessions);
  if (!a.into) {
    for (const auto& s : sessions) st.parked_sessions.insert(s);
    st.parked.push_back([self, sessions = std::move(sessions), go = std::move(go)]() mutable {
      admit_windowed(self, std::move(sessions), std::move(go));
    });
    return;
  }
  if (a.turned) turn_windows(self, *a.turned);
  go(a.into);
}

/// A pass of `w` was answered: the window closes when that was its last.
void window_pass_done(checked_pointer self, const check_windows::ptr& w) {
  if (w->sessions.empty() && w->in_flight == 0) return;  // (a single pass, or every session left)
  auto t = self->state.windows->answered(w);
  if (!t) return;
  turn_windows(self, *t);
  admit_parked(self);
}

void admit_parked(checked_pointer self) {
  auto waiting = std::move(self->state.parked);
  self->state.parked.clear();
  self->state.parked_sessions.clear();
  for (auto& f : waiting) f();
}

/// Passes that skip the windows (probed ones, of a model held in part) on sessions in a checked
/// window: the verifier could not follow them, so the window's check ends.
void break_windows_of(checked_pointer self, const std::vector<std::string>& sessions) {
  if (!self->state.windows) return;
  for (const auto& s : sessions)
    if (auto w = self->state.windows->of(s)) break_window(self, w);
}

/// A session closed or restored leaves its window; a checked window's copy of it goes after
/// what the verifier still has to do with it.
/// Returns whether the verifier's copy is dropped that way (else the caller drops any at once).
bool leave_window(checked_pointer self, const std::string& sid) {
  auto& st = self->state;
  if (!st.windows) return false;
  auto w = st.windows->leave(sid);
  if (!w || !w->checked || w->broken) return false;
  drop_copy_in_turn(self, sid);
  return true;
}

/// The tolerance a window's pass is compared with: exact on the same path; a large inline
/// graph's text is not searched here (this actor shares the scheduler thread), the widest
/// of the models sent is taken.
float window_tolerance(const checked_state& st, const run_request& r) {
  if (st.exact()) return 0;
  if (r.graph_id.empty() && r.graph_json.size() >= off_thread_bytes) return st.tolerance_of_graph("");
  return st.tolerance(r);
}

/// The verdict on a generation the verifier ran again (shadow_generation).
void judge_generation(checked_pointer self, const check_windows::ptr& w, const std::vector<gen_token>& theirs,
                      const gen_done& their_end, bool natural, const std::vector<gen_token>& ours, const gen_done& our_end) {
  auto& st = self->state;
  if (st.sh->counts.quarantined) return;
  if (!our_end.error.empty()) return break_window(self, w);
  const bool exact = st.exact();
  const std::size_t n = std::min(theirs.size(), ours.size());
  std::size_t i = 0;
  while (i < n && theirs[i].token == ours[i].token) ++i;
  if (i < n || theirs.size() != ours.size()) {
    if (!exact) {
      st.sh->counts.inconclusive++;
      return break_window(self, w);
    }
    const std::string what = i < n ? "generated token " + std::to_string(i) + " was " + std::to_string(theirs[i].token) +
                                         " where the verifier drew " + std::to_string(ours[i].token)
                                   : "its generation gave " + std::to_string(theirs.size()) + " tokens where the verifier's gave " +
                                         std::to_string(ours.size());
    return quarantine(self, st.sh, what + " (a checked window, after the client had them; same kernel path: must be equal)");
  }
  if (their_end.next_pos != our_end.next_pos) {
    if (exact && natural)
      return quarantine(self, st.sh,
                        "its generation ended at position " + std::to_string(their_end.next_pos) + " where the verifier's ended at " +
                            std::to_string(our_end.next_pos) + " (a checked window)");
    return break_window(self, w);
  }
  st.sh->counts.checked++;
}

/// A later graph call: sent to the volunteer at once, its answer given to the caller at once;
/// in a checked window the verifier runs it too — queued now, in the volunteer's order, run
/// once the volunteer answered (a call that failed applies nothing, on either side: skipped) —
/// and the answers are compared then.
void windowed_run_with(checked_pointer self, std::shared_ptr<owed<run_reply>> rp, run_request r) {
  auto held = std::make_shared<run_request>(std::move(r));
  auto sessions = sessions_of(*held);
  auto go = [self, rp, held, sessions](check_windows::ptr w) {
    auto& st = self->state;
    using answer = awaited<std::shared_ptr<const std::string>>;
    std::shared_ptr<answer> theirs;
    auto answer_bytes = std::make_shared<std::uint64_t>(0);  // (the held answer's, once it came)
    if (on_race(self, sessions)) break_window(self, w);
    if (w->checked && !w->broken) {
      const std::uint64_t bytes = held->graph_json.size() + held->bind_json.size();
      if (!verifier_room(self, bytes)) {
        break_window(self, w);
      } else {
        const float tolerance = window_tolerance(st, *held);
        w->tolerance = std::max(w->tolerance, tolerance);
        auto mine = std::make_shared<run_request>(*held);
        mine->run_id.clear();  // (a caller's cancel reaches the volunteer's run only)
        mine->timeout_ms = 0;  // (the volunteer ran it within the limit; the verifier may take longer)
        theirs = std::make_shared<answer>();
        to_verifier(self, [self, w, mine, theirs, tolerance, bytes, answer_bytes](std::function<void()> next) {
          theirs->when([self, w, mine, theirs, tolerance, bytes, answer_bytes, next] {
            auto done = [self, bytes, answer_bytes, next] {
              verifier_bytes_free(self, bytes + *answer_bytes);
              next();
            };
            if (w->broken || theirs->error || self->state.sh->counts.quarantined) return done();
            auto their_text = *theirs->value;
            self->request(self->state.verifier, caf::infinite, run_atom::value, std::move(*mine))
                .then(
                    [self, their_text, tolerance, done](run_reply& x) {
                      auto ours = std::make_shared<std::string>(std::move(x.outputs_json));
                      maybe_off_thread<result<std::string>>(
                          self, *their_text != *ours && their_text->size() + ours->size() >= off_thread_bytes,
                          [their_text, ours, tolerance] {
                            std::string why;
                            return answers_agree(*their_text, *ours, tolerance, &why) ? result<std::string>(std::string())
                                                                                     : result<std::string>(why);
                          },
                          [self, done](result<std::string>& why) {
                            auto& st = self->state;
                            if (why && why->empty()) st.sh->counts.checked++;
                            else if (!st.sh->counts.quarantined)
                              quarantine(self, st.sh,
                                         "a graph call's answer, checked after it was given, differs from the verifier's: " +
                                             (why ? *why : why.err().message));
                            done();
                          });
                    },
                    [self, w, done](caf::error&) {
                      break_window(self, w);  // (weights or a template it lacks)
                      done();
                    });
          });
        });
      }
    }
    unchecked_run_with(self, rp, std::move(*held), [self, w, theirs, answer_bytes](bool answered, const run_reply* reply) {
      if (theirs) {
        // (the answer is held until the verifier's turn, within the same room as the passes)
        if (answered && verifier_bytes_room(self, reply->outputs_json.size())) {
          *answer_bytes = reply->outputs_json.size();
          theirs->set(std::make_shared<const std::string>(reply->outputs_json));
        } else if (answered) {
          break_window(self, w);
          theirs->fail(to_caf(errc::limit, "no room to hold the answer for the verifier"));
        } else {
          theirs->fail(to_caf(errc::invalid, "the call failed"));
        }
      }
      window_pass_done(self, w);
    });
  };
  if (sessions.empty()) return go(self->state.windows->single());
  admit_windowed(self, std::move(sessions), std::move(go));
}

caf::result<run_reply> windowed_run(checked_pointer self, run_request r) {
  auto rp = owe<run_reply>(self);
  windowed_run_with(self, rp, std::move(r));
  return rp->rp;
}

/// What a volunteer's generation sent: its tokens and its end.
struct generation_record {
  std::vector<gen_token> tokens;
  gen_done end;
  bool started = true;  ///< false: the volunteer refused it (nothing ran, nothing to run again)
};

/// The verifier's run of a generation the volunteer ran in a checked window — queued when the
/// generation started, run once it ended, after the window's earlier passes, from the same
/// session state — and the two compared: the same tokens and the same end position on the same
/// kernel path (a generation cut short by a cancel or an error is run to as many tokens as the
/// volunteer sent); tokens parting on another path are inconclusive and end the window's check.
void shadow_generation(checked_pointer self, check_windows::ptr w, std::shared_ptr<gen_request> mine,
                       std::shared_ptr<awaited<generation_record>> theirs) {
  to_verifier(self, [self, w, mine, theirs](std::function<void()> next) {
    theirs->when([self, w, mine, theirs, next] {
      auto& st = self->state;
      if (w->broken || st.sh->counts.quarantined) return next();
      if (theirs->error) {  // (its end never came: what it fed is unknown)
        break_window(self, w);
        return next();
      }
      if (!theirs->value->started) return next();
      auto t = std::make_shared<std::vector<gen_token>>(std::move(theirs->value->tokens));
      const gen_done their_end = theirs->value->end;
      const bool natural = their_end.error.empty() && (their_end.stopped == "max tokens" || their_end.stopped == "stop token");
      if (!natural) {
        if (t->empty()) {  // (what it fed before it was cut is unknown)
          break_window(self, w);
          return next();
        }
        mine->max_new = std::uint32_t(t->size());
      }
      auto collector = self->home_system().spawn(gen_tap, gen_listener{}, true, caf::actor_cast<caf::actor>(self));
      mine->gen_id += "~check";
      mine->listener = caf::actor_cast<gen_listener>(collector);
      self->request(st.verifier, caf::infinite, genstart_atom::value, *mine)
          .then(
              [self, w, t, their_end, natural, collector, next](bool) {
                self->request(collector, caf::infinite, genended_atom::value)
                    .then(
                        [self, w, t, their_end, natural, next](std::vector<gen_token>& ours, gen_done& our_end) {
                          judge_generation(self, w, *t, their_end, natural, ours, our_end);
                          next();
                        },
                        [self, w, next](caf::error&) {
                          break_window(self, w);
                          next();
                        });
              },
              [self, w, collector, next](caf::error&) {
                self->send_exit(collector, caf::exit_reason::user_shutdown);
                break_window(self, w);
                next();
              });
    });
  });
}

/// A later worker-side generation: it runs on the volunteer as asked, its tokens streamed to
/// the client as they come (through a tap that tells its end, checked window or not); in a
/// checked window the verifier runs it again once it ended (shadow_generation).
caf::result<bool> windowed_generation(checked_pointer self, gen_request r) {
  auto rp = owe<bool>(self);
  auto held = std::make_shared<gen_request>(std::move(r));
  admit_windowed(self, {held->session}, [self, rp, held](check_windows::ptr w) {
    auto& st = self->state;
    std::shared_ptr<awaited<generation_record>> theirs;
    if (on_race(self, {held->session})) break_window(self, w);
    st.generation_begun(held->session);
    if (w->checked && !w->broken) {
      if (!verifier_room(self, 0)) {
        break_window(self, w);
      } else {
        w->tolerance = std::max(w->tolerance, st.tolerance_of_graph(held->graph_id));
        theirs = std::make_shared<awaited<generation_record>>();
        shadow_generation(self, w, std::make_shared<gen_request>(*held), theirs);
      }
    }
    auto tap = self->home_system().spawn(gen_tap, held->listener, bool(theirs), caf::actor_cast<caf::actor>(self));
    held->listener = caf::actor_cast<gen_listener>(tap);
    auto over = [self, session = held->session] { self->state.generation_over(session); };
    auto ended = [self, w, theirs, tap, over] {
      self->request(tap, caf::infinite, genended_atom::value)
          .then(
              [self, w, theirs, over](std::vector<gen_token>& tokens, gen_done& end) {
                over();
                if (theirs) theirs->set(generation_record{std::move(tokens), std::move(end)});
                window_pass_done(self, w);
              },
              [self, w, theirs, over](caf::error& e) {
                over();
                if (theirs) theirs->fail(std::move(e));
                window_pass_done(self, w);
              });
    };
    self->request(st.volunteer(), caf::infinite, genstart_atom::value, std::move(*held))
        .then(
            [rp, ended](bool ok) mutable {
              rp->deliver(ok);
              ended();
            },
            [self, rp, w, theirs, tap, over](caf::error& e) mutable {
              over();
              self->send_exit(tap, caf::exit_reason::user_shutdown);
              if (theirs) theirs->set(generation_record{{}, {}, false});
              rp->deliver(std::move(e));
              window_pass_done(self, w);
            });
  });
  return rp->rp;
}

caf::result<bool> checked_generation(checked_pointer self, gen_request r) {
  auto& st = self->state;
  auto rp = owe<bool>(self);
  auto cmp = self->home_system().spawn(comparer, st.sh, st.verifier, r.session, r.listener, r.gen_id, st.tolerance_of_graph(r.graph_id));
  if (st.checked_gens.size() >= 4096) st.checked_gens.clear();  // (ended long ago: a late cancel reaches the volunteer only)
  st.checked_gens.insert(r.gen_id);
  // (a call on its session while it runs ends its check: on_race)
  st.first_gens.emplace(r.session, cmp);
  st.generation_begun(r.session);
  self->monitor(cmp);
  gen_request theirs = r;
  theirs.gen_id = r.gen_id + "~volunteer";
  theirs.listener = caf::actor_cast<gen_listener>(cmp);
  gen_request mine = r;
  mine.listener = caf::actor_cast<gen_listener>(cmp);
  const std::vector<std::string> sessions{r.session};
  snapshot(self, sessions, [self, mine, cmp](bool copied) mutable {
    // (the comparer drops the verifier's copy of the session when it ends)
    auto absent = [self, cmp] { self->send(cmp, caf::atom_constant<caf::atom("absent")>::value); };
    if (!copied) return absent();
    self->request(self->state.verifier, caf::infinite, genstart_atom::value, std::move(mine))
        .then([](bool) {}, [absent](caf::error&) { absent(); });
  });
  self->request(st.volunteer(), caf::infinite, genstart_atom::value, std::move(theirs))
      .then([rp](bool ok) mutable { rp->deliver(ok); },
            [self, rp, cmp, id = r.gen_id](caf::error& e) mutable {
              caf::anon_send(self->state.verifier, gencancel_atom::value, id);
              self->send_exit(cmp, caf::exit_reason::user_shutdown);
              rp->deliver(std::move(e));
            });
  return rp->rp;
}

// ---- a checked generation of a model held in part: one of its steps done again, probed

/// Passes the volunteer's tokens through, and when its loop ends — before its end goes on, so
/// that the request reaches the volunteer ahead of the client's next call — has one of its
/// steps, drawn at random, done again as a graph call through the checked worker, which
/// probes the output head's product (probed_run). With an argmax template the token that call
/// draws must be the one the loop sent. Doing a step again writes the same cache row with the
/// same bits (a row's arithmetic does not depend on the pass it is in).
struct rerun_state {
  std::shared_ptr<verify_shared> sh;
  gen_request req;  ///< (its listener: the client's)
  std::vector<gen_token> tokens;
};
using rerun_actor = gen_listener;

rerun_actor::behavior_type rerun_checker(rerun_actor::stateful_pointer<rerun_state> self, std::shared_ptr<verify_shared> sh,
                                         worker_actor checked, gen_request req, product_probe probe) {
  self->state.sh = std::move(sh);
  self->state.req = std::move(req);
  if (auto c = caf::actor_cast<caf::actor>(checked)) self->monitor(c);
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  return {
      [=](gentoken_atom a, const std::string&, const gen_token& t) {
        auto& st = self->state;
        st.tokens.push_back(t);
        self->send(st.req.listener, a, st.req.gen_id, t);
      },
      [=](gendone_atom a, const std::string&, const gen_done& d) {
        auto& st = self->state;
        if (st.tokens.empty() || !d.error.empty() || st.sh->counts.quarantined) {
          if (!st.sh->counts.quarantined) st.sh->counts.unchecked++;
          self->send(st.req.listener, a, st.req.gen_id, d);
          return self->quit();
        }
        std::mt19937_64 rng(std::random_device{}());
        const std::size_t k = std::uniform_int_distribution<std::size_t>(0, st.tokens.size() - 1)(rng);
        const std::int64_t fed = k == 0 ? st.req.first_id : st.tokens[k - 1].token;
        const gen_call call = make_gen_call(st.req.bindings, {fed}, st.tokens[k].pos, st.req.sampling);
        run_request r;
        r.graph_id = st.req.graph_id;
        r.bind_json = call.bind_json;
        r.overrides = call.overrides;
        r.session = st.req.session;
        r.run_id = rerun_run_id;
        const std::int64_t sent = st.tokens[k].token;
        self->request(checked, caf::infinite, run_atom::value, std::move(r))
            .then(
                [self, probe, k, sent](run_reply& x) {
                  auto& st = self->state;
                  std::vector<std::int64_t> shape;
                  std::vector<float> drawn;
                  if (!probe.argmax_out.empty() && output_of(x.outputs_json, probe.argmax_out, shape, drawn) && drawn.size() == 1 &&
                      std::int64_t(drawn[0]) != sent && !st.sh->counts.quarantined)
                    quarantine(self, st.sh,
                               "generated token " + std::to_string(k) + " was " + std::to_string(sent) + " where the same step, done " +
                                   "again and checked on the output head, draws " + std::to_string(std::int64_t(drawn[0])));
                  self->quit();
                },
                [self](caf::error&) { self->quit(); });  // (the probed call judged it, or could not run)
        self->send(st.req.listener, a, st.req.gen_id, d);  // (after the request: see above)
      },
  };
}

caf::result<bool> rerun_checked_generation(checked_pointer self, gen_request r) {
  auto& st = self->state;
  run_request step;
  step.graph_id = r.graph_id;
  auto probe = st.probe_for(step);
  auto checker = self->home_system().spawn(rerun_checker, st.sh, caf::actor_cast<worker_actor>(self), r, *probe);
  r.listener = caf::actor_cast<gen_listener>(checker);
  return caf::result<bool>(self->delegate(st.volunteer(), genstart_atom::value, std::move(r)));
}

worker_actor::behavior_type checked_behavior(checked_pointer self, std::shared_ptr<verify_shared> sh) {
  auto& st = self->state;
  st.sh = std::move(sh);
  st.sh->self = self->address();
  st.rng.seed(std::random_device{}());
  st.verifier_kernels = kernel_path("cpu", cpu_isa::describe());
  if (st.sh->cfg.fraction > 0) st.windows.emplace(st.sh->cfg.fraction, st.sh->cfg.window_passes, st.rng());
  st.room = std::make_shared<verify_room>(st.sh->cfg.queue_bytes, st.sh->cfg.queue_budget);
  worker_config wc;
  wc.worker_id = "verifier of " + st.sh->v.name;
  wc.memory_bytes = st.sh->cfg.memory;  // (the shared budget binds first)
  // (reading the model host as the volunteer does, when it may: a volunteer that fetches its
  // own weights is then checked against the verifier's copy of the same bytes)
  if (st.sh->cfg.fetch) wc.fetcher = std::make_shared<loader::host_fetcher>(*st.sh->cfg.fetch);
  st.verifier = spawn_worker(self->home_system(), wc);
  // What its copies took from the shared budget goes back when it ends.
  self->attach_functor([charged = st.charged, budget = st.sh->cfg.budget] {
    if (budget)
      for (const auto& [_, n] : *charged) budget->give(n);
  });
  self->link_to(st.verifier);  // (it ends with this actor)
  // This stand-in ends with the volunteer (exit, crash, lost link, revocation).
  self->monitor(st.volunteer());
  self->set_down_handler([self](caf::down_msg& dm) {
    if (dm.source != self->state.volunteer().address()) {
      // (a first pass's generation ended its comparison)
      auto& st = self->state;
      for (auto it = st.first_gens.begin(); it != st.first_gens.end(); ++it)
        if (it->second.address() == dm.source) {
          st.generation_over(it->first);
          st.first_gens.erase(it);
          break;
        }
      return;
    }
    // What it still waits on from the volunteer will not come (an answer racing this message
    // would reach an ended actor): its callers hear now.
    const auto gone = to_caf(errc::unavailable, "volunteer " + self->state.sh->v.name + " left the grid");
    for (auto& o : self->state.owed_now) o->fail(gone);
    self->state.owed_now.clear();
    self->quit(caf::exit_reason::user_shutdown);
  });
  // Ending otherwise (a quarantine ends it at once, its verifier may end): what it still owes
  // its callers is answered now, never left hanging.
  self->set_exit_handler([self](caf::exit_msg& m) {
    auto& sh = *self->state.sh;
    const auto why = to_caf(errc::unavailable, "volunteer " + sh.v.name +
                                                   (sh.counts.quarantined ? " was quarantined" : " left the grid"));
    for (auto& o : self->state.owed_now) o->fail(why);
    self->state.owed_now.clear();
    self->quit(m.reason);
  });
  self->request(st.volunteer(), 30s, status_atom::value).then([self](worker_status& s) {
    self->state.volunteer_kernels = kernel_path(s.backend, s.kernels);
    self->state.sh->worker_id = s.worker_id;
  }, [](caf::error&) {});
  auto V = [self] { return self->state.volunteer(); };
  auto shadowed = [self](const std::string& model) { return self->state.unshadowed.count(model) == 0; };
  // A weight begins: its model's tolerance, whether the verifier's room takes a copy of it,
  // and — when its bytes pass through here (`passing`) — its digest as they pass (a fresh
  // nonce first, for the check at its end).
  auto begin_weight = [self, shadowed](const tensor_begin_request& r, bool passing) {
    auto& tol = self->state.model_tolerance[r.model_id];
    tol = std::max(tol, path_tolerance(r.resident));
    if (passing) {
      auto& w = self->state.arriving[{r.model_id, r.name}];
      w.nonce = new_nonce();
      w.mac = std::make_shared<weight_mac>(w.nonce);
      std::string published = r.file_dtype;
      for (auto& c : published) c = char(std::tolower(static_cast<unsigned char>(c)));
      w.same_bytes = published == r.resident;
    }
    auto& budget = self->state.sh->cfg.budget;
    if (self->state.partial.count(r.model_id) && shadowed(r.model_id)) {
      // (held in part: its head if it fits, nothing else)
      if (!is_head_weight(r.name) || (budget && !budget->take(r.published_bytes))) self->state.skipped.insert({r.model_id, r.name});
      else if (budget) (*self->state.charged)[r.model_id] += r.published_bytes;
    } else if (shadowed(r.model_id) && budget && !budget->take(r.published_bytes)) {
      self->state.unshadow(r.model_id);
    } else if (shadowed(r.model_id) && budget) {
      (*self->state.charged)[r.model_id] += r.published_bytes;
    }
  };
  return {
      [=](status_atom) -> caf::result<worker_status> {
        auto rp = owe<worker_status>(self);
        self->request(V(), 30s, status_atom::value)
            .then(
                [self, rp](worker_status& s) mutable {
                  auto& st = self->state;
                  st.volunteer_kernels = kernel_path(s.backend, s.kernels);
                  st.sh->worker_id = s.worker_id;
                  auto& c = st.sh->counts;
                  s.checked = true;
                  s.checks_passed = c.checked;
                  s.checks_unchecked = c.unchecked;
                  s.checks_inconclusive = c.inconclusive;
                  const auto passes = c.passes.load();
                  s.checks_first_left = passes >= st.sh->cfg.first_passes ? 0 : st.sh->cfg.first_passes - passes;
                  s.checks_exact = st.exact();
                  s.weights_checked = c.weights_checked;
                  s.weights_unchecked = c.weights_unchecked;
                  rp->deliver(std::move(s));
                },
                [rp](caf::error& e) mutable { rp->deliver(std::move(e)); });
        return rp->rp;
      },
      // The volunteer's front describes the worker; this stand-in adds its spot-checks.
      [=](describe_atom a) -> caf::result<actor_snapshot> {
        auto rp = owe<actor_snapshot>(self);
        const auto mine = self->mailbox().size();
        self->request(V(), 5s, a)
            .then(
                [self, rp, mine](actor_snapshot& s) mutable {
                  auto& c = self->state.sh->counts;
                  s.text("volunteer", self->state.sh->v.name);
                  s.number("checked", 1);
                  s.number("checksPassed", double(c.checked));
                  s.number("checksUnchecked", double(c.unchecked));
                  s.number("checksInconclusive", double(c.inconclusive));
                  s.number("standInMailbox", double(mine));
                  rp->deliver(std::move(s));
                },
                [rp](caf::error& e) mutable { rp->deliver(std::move(e)); });
        return rp->rp;
      },
      [=](reserve_atom a, const std::string& model, std::uint64_t bytes) {
        // A model larger than the verifiers' room has its output head copied, no more.
        auto& st = self->state;
        const std::uint64_t room = st.sh->cfg.budget ? st.sh->cfg.budget->free() : st.sh->cfg.memory;
        if (bytes == 0) st.loading_partial.erase(model);  // (the load ended)
        else if (bytes > room) st.partial.insert(model), st.loading_partial.insert(model);
        return self->delegate(V(), a, model, bytes);
      },
      [=](runcancel_atom a, const std::string& id) {
        caf::anon_send(self->state.verifier, a, id);
        self->send(V(), a, id);
      },
      // ---- loading: the verifier takes a copy while it has room
      [=](tbegin_atom a, tensor_begin_request& r) {
        begin_weight(r, true);
        if (self->state.copying(r.model_id, r.name)) {
          self->request(self->state.verifier, caf::infinite, a, r)
              .then([](bool) {}, [self, model = r.model_id](caf::error&) { self->state.unshadow(model); });
        }
        return self->delegate(V(), a, std::move(r));
      },
      [=](tpiece_atom a, tensor_piece& p) {
        if (auto it = self->state.arriving.find({p.model_id, p.name}); it != self->state.arriving.end()) it->second.mac->add(p.bytes);
        if (self->state.copying(p.model_id, p.name))
          self->request(self->state.verifier, caf::infinite, a, p).then([](std::uint64_t) {}, [](caf::error&) {});
        return self->delegate(V(), a, std::move(p));
      },
      [=](tend_atom a, const std::string& model, const std::string& name) {
        if (self->state.copying(model, name))
          self->request(self->state.verifier, caf::infinite, a, model, name)
              .then([self, model, name](std::uint64_t) { self->state.copied[model].insert(name); },
                    [self, model](caf::error&) { self->state.unshadow(model); });
        // Then a challenge (behind the end in the volunteer's mailbox): the weight it now holds
        // must hash as what passed through here, or as the verifier's copy when converted.
        if (auto it = self->state.arriving.find({model, name}); it != self->state.arriving.end()) {
          auto w = std::move(it->second);
          self->state.arriving.erase(it);
          self->state.held[model].insert(name);
          std::string expected = w.same_bytes ? w.mac->hex() : std::string();
          auto answered = self->delegate(V(), a, model, name);
          challenge(self, model, name, w.nonce, std::move(expected), [self](int outcome) {
            if (outcome == 1) self->state.sh->counts.weights_checked++;
            else if (outcome == 0) self->state.sh->counts.weights_unchecked++;
          });
          return answered;
        }
        return self->delegate(V(), a, model, name);
      },
      // (the load job sends pieces whole; the relay behind this stand-in makes references)
      [=](tpieceref_atom, const tensor_piece_ref&) -> caf::result<std::uint64_t> {
        return to_caf(errc::invalid, "volunteer " + self->state.sh->v.name + "'s stand-in takes pieces whole (tpiece)");
      },
      [=](dlink_atom a, std::uint16_t port, const std::string& ticket) { return self->delegate(V(), a, port, ticket); },
      // A volunteer may read its weights from the model host itself (its weights then do not
      // cross the coordinator's uplink) when the verifier reads the same ranges there: each
      // weight is then checked on arrival against the verifier's copy of the same bytes. Not
      // while a model too large for the verifier's room loads (its weights pass through here,
      // to be hashed on their way), nor without a verifier that reads the host.
      [=](tprobe_atom a, const std::string& location, std::uint64_t header_bytes,
          const std::string& sha) -> caf::result<bool> {
        auto& st = self->state;
        const std::string who = "volunteer " + st.sh->v.name;
        if (!st.sh->cfg.fetch)
          return to_caf(errc::invalid, who + " is spot-checked and its verifier does not read the model host: its weights "
                                             "pass through the coordinator to be hashed");
        if (!st.loading_partial.empty())
          return to_caf(errc::invalid, who + " is spot-checked and model " + *st.loading_partial.begin() +
                                           " is too large to copy for its checks: its weights pass through the coordinator "
                                           "to be hashed");
        auto rp = self->make_response_promise<bool>();
        self->request(V(), caf::infinite, a, location, header_bytes, sha)
            .then(
                [self, rp, a, location, header_bytes, sha, who](bool converted_too) mutable {
                  self->request(self->state.verifier, caf::infinite, a, location, header_bytes, sha)
                      .then([rp, converted_too](bool) mutable { rp.deliver(converted_too); },
                            [rp, who](caf::error& e) mutable {
                              rp.deliver(to_caf(errc::invalid, who + "'s verifier cannot read the file there: " +
                                                                   from_caf(e).message));
                            });
                },
                [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [=](tfetch_atom a, tensor_fetch& f) -> caf::result<tensor_fetch_reply> {
        auto& st = self->state;
        for (const auto& b : f.begins) begin_weight(b, false);  // (its bytes do not pass here)
        // Every weight of the range is on the verifier, or none (a model it stopped holding).
        const bool copy = !st.unshadowed.count(f.model_id) &&
                          std::none_of(f.begins.begin(), f.begins.end(),
                                       [&](const tensor_begin_request& b) { return !st.copying(b.model_id, b.name); });
        if (!copy) st.unshadow(f.model_id);
        struct both {
          bool answered = false;  ///< the volunteer's answer came: `theirs`, or `failed`
          tensor_fetch_reply theirs;
          caf::error failed;
          std::optional<bool> mine;  ///< the verifier read it
        };
        auto p = std::make_shared<both>();
        auto rp = self->make_response_promise<tensor_fetch_reply>();
        const std::string model = f.model_id;
        auto ends = f.ends;
        auto settle = [self, p, rp, model, ends, copy]() mutable {
          if (!p->answered || !p->mine) return;
          if (copy && !*p->mine) self->state.unshadow(model);  // (the verifier failed to read it)
          if (p->failed) {
            rp.deliver(std::move(p->failed));
            return;
          }
          // Each weight that ended: the volunteer's copy challenged against the verifier's.
          for (const auto& n : ends) {
            self->state.held[model].insert(n);
            if (*p->mine) self->state.copied[model].insert(n);
            challenge(self, model, n, new_nonce(), std::string(), [self](int outcome) {
              if (outcome == 1) self->state.sh->counts.weights_checked++;
              else if (outcome == 0) self->state.sh->counts.weights_unchecked++;
            });
          }
          rp.deliver(std::move(p->theirs));
        };
        if (copy)
          self->request(st.verifier, caf::infinite, a, f)
              .then([p, settle](tensor_fetch_reply&) mutable { p->mine = true, settle(); },
                    [p, settle](caf::error&) mutable { p->mine = false, settle(); });
        else
          p->mine = false;
        self->request(V(), caf::infinite, a, std::move(f))
            .then([p, settle](tensor_fetch_reply& r) mutable { p->answered = true, p->theirs = std::move(r), settle(); },
                  [p, settle](caf::error& e) mutable { p->answered = true, p->failed = std::move(e), settle(); });
        return rp;
      },
      [=](tabort_atom a, const std::string& model) {
        caf::anon_send(self->state.verifier, a, model);
        self->state.forget(model);
        return self->delegate(V(), a, model);
      },
      [=](dropmodel_atom a, const std::string& model) {
        caf::anon_send(self->state.verifier, a, model);
        self->state.forget(model);
        return self->delegate(V(), a, model);
      },
      // ---- sessions live on the volunteer; the verifier gets copies for a check
      [=](sopen_atom a, const std::string& sid) {
        self->state.sh->hold(sid);
        return self->delegate(V(), a, sid);
      },
      [=](sclose_atom a, const std::string& sid) {
        self->state.sh->release(sid);
        if (!leave_window(self, sid)) caf::anon_send(self->state.verifier, a, sid);
        return self->delegate(V(), a, sid);
      },
      [=](sinfo_atom a, const std::string& sid) { return self->delegate(V(), a, sid); },
      [=](sdump_atom a, const std::string& sid) { return self->delegate(V(), a, sid); },
      // (a restore replaces the session: its window ends for it, and a later pass opens another)
      [=](sload_atom a, const std::string& sid, session_dump& d) {
        leave_window(self, sid);
        self->state.sh->hold(sid);
        return self->delegate(V(), a, sid, std::move(d));
      },
      // ---- graphs
      [=](run_atom a, run_request& r) -> caf::result<run_reply> {
        // (the pool's probe calls time the link; they are neither counted nor checked)
        if (r.run_id == probe_run_id) return caf::result<run_reply>(self->delegate(V(), a, std::move(r)));
        if (r.run_id == rerun_run_id) {  // (a generation's step done again: always probed, not a pass)
          if (auto probe = self->state.probe_for(r)) return probed_run(self, std::move(r), std::move(*probe));
          return unchecked_run(self, std::move(r));
        }
        auto& st = self->state;
        const bool first = st.first_pass();
        if (first && on_race(self, sessions_of(r))) return unchecked_run(self, std::move(r));
        if (!first && !st.windows) return unchecked_run(self, std::move(r));
        if (!first && st.partial.empty()) return windowed_run(self, std::move(r));
        // (a model held in part is probed pass by pass: its passes are drawn one by one)
        const bool drawn = first || st.draw();
        if (r.graph_id.empty() && r.graph_json.size() >= off_thread_bytes) {
          // A big inline graph's text is searched for the models it names (the tolerance) and
          // parsed for a product to probe on a helper thread, as this actor shares the
          // coordinator's scheduler thread; then it is checked as any other.
          auto rp = owe<run_reply>(self);
          auto held = std::make_shared<run_request>(std::move(r));
          auto v = std::make_shared<const checked_state::view>(self->state.for_helper());
          struct plan {
            std::optional<product_probe> probe;
            float tolerance = 0;
          };
          maybe_off_thread<result<plan>>(
              self, true, [held, v] { return result<plan>(plan{v->probe(held->graph_json), v->tolerance(held->graph_json)}); },
              [self, rp, held, first, drawn](result<plan>& p) mutable {
                if (!p) return rp->deliver(to_caf(p.err()));
                if (p->probe) {
                  if (!first) break_windows_of(self, sessions_of(*held));
                  if (!drawn) return unchecked_run_with(self, rp, std::move(*held));
                  return probed_run_with(self, rp, std::move(*held), std::move(*p->probe), p->tolerance);
                }
                if (!first) return windowed_run_with(self, rp, std::move(*held));
                checked_run_with(self, rp, std::move(*held), p->tolerance);
              });
          return rp->rp;
        }
        if (auto probe = st.probe_for(r)) {
          if (!first) break_windows_of(self, sessions_of(r));
          if (!drawn) return unchecked_run(self, std::move(r));
          return probed_run(self, std::move(r), std::move(*probe));
        }
        if (!first) return windowed_run(self, std::move(r));
        return checked_run(self, std::move(r));
      },
      [=](compile_atom a, compile_request& r) {
        self->state.graph_tolerance[r.graph_id] = self->state.tolerance_of_text(r.graph_json);
        self->state.graph_text[r.graph_id] = std::make_shared<const std::string>(r.graph_json);
        self->request(self->state.verifier, caf::infinite, a, r).then([](compile_reply&) {}, [](caf::error&) {});
        return self->delegate(V(), a, std::move(r));
      },
      [=](dropgraph_atom a, const std::string& id) {
        self->state.graph_tolerance.erase(id);
        self->state.graph_text.erase(id);
        caf::anon_send(self->state.verifier, a, id);
        return self->delegate(V(), a, id);
      },
      [=](gencheck_atom a, const std::string& id, bool sampling, bool verify) {
        return self->delegate(V(), a, id, sampling, verify);
      },
      [=](genstart_atom a, gen_request& r) -> caf::result<bool> {
        auto& st = self->state;
        const bool first = st.first_pass();
        if (first && on_race(self, {r.session})) return caf::result<bool>(self->delegate(V(), a, std::move(r)));
        if (!first && !st.windows) return caf::result<bool>(self->delegate(V(), a, std::move(r)));
        run_request step;
        step.graph_id = r.graph_id;
        if (st.probe_for(step)) {
          if (!first) break_windows_of(self, {r.session});
          if (!first && !st.draw()) return caf::result<bool>(self->delegate(V(), a, std::move(r)));
          return rerun_checked_generation(self, std::move(r));
        }
        if (!first) return windowed_generation(self, std::move(r));
        return checked_generation(self, std::move(r));
      },
      [=](genstep_atom a) { self->send(V(), a); },
      [=](gencancel_atom a, const std::string& id) {
        auto& st = self->state;
        if (st.checked_gens.erase(id)) {
          caf::anon_send(st.verifier, a, id);
          self->send(V(), a, id + "~volunteer");
        } else {
          self->send(V(), a, id);
        }
      },
      // ---- v2 tensors
      [=](tput_atom a, tensor_upload& u) {
        caf::anon_send(self->state.verifier, a, u);
        return self->delegate(V(), a, std::move(u));
      },
      [=](tdrop_atom a, const std::string& id) {
        caf::anon_send(self->state.verifier, a, id);
        return self->delegate(V(), a, id);
      },
      [=](tdigest_atom a, const std::string& model, const std::string& name, const std::string& nonce) {
        return self->delegate(V(), a, model, name, nonce);
      },
      [=](recheck_atom) -> caf::result<recheck_reply> {
        // Every weight the volunteer holds, challenged afresh against the verifier's copy.
        auto& st = self->state;
        auto rp = owe<recheck_reply>(self);
        struct tally {
          std::size_t left = 0, agreed = 0, unchecked = 0, differed = 0;
          bool reported = false;
        };
        auto t = std::make_shared<tally>();
        std::vector<std::pair<std::string, std::string>> weights;
        for (const auto& [model, names] : st.held)
          for (const auto& n : names) weights.emplace_back(model, n);
        auto report = [self, rp, t]() mutable {
          if (std::exchange(t->reported, true)) return;
          auto& st = self->state;
          rp->deliver(recheck_reply{st.sh->worker_id, st.sh->v.name, t->agreed, t->unchecked, t->differed, t->left,
                                    st.sh->counts.quarantined.load()});
        };
        if (weights.empty()) {
          report();
          return rp->rp;
        }
        t->left = weights.size();
        for (const auto& [model, name] : weights)
          challenge(self, model, name, new_nonce(), "", [t, report](int outcome) mutable {
            (outcome == 1 ? t->agreed : outcome == 0 ? t->unchecked : t->differed)++;
            --t->left;
            // A weight that differs quarantines the volunteer, which ends this actor: the
            // report comes at once, with the weights not yet answered counted apart.
            if (t->left == 0 || outcome < 0) report();
          });
        return rp->rp;
      },
  };
}

}  // namespace

worker_actor spawn_checked_worker(caf::actor_system& sys, checked_volunteer v, verify_config cfg,
                                  std::shared_ptr<quarantine_registry> registry) {
  auto sh = std::make_shared<verify_shared>();
  sh->v = std::move(v);
  sh->cfg = cfg;
  sh->registry = std::move(registry);
  return sys.spawn(checked_behavior, std::move(sh));
}

}  // namespace mpakt
