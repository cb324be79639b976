#include "http/api/chat.hpp"


#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "actors/errors.hpp"
#include "actors/generate/gen_loop.hpp"
#include "actors/generate/gen_values.hpp"
#include "actors/ids.hpp"
#include "actors/json_text.hpp"
#include "http/api/graph_calls.hpp"
#include "http/api/openai.hpp"
#include "runtime/metrics.hpp"

namespace mpakt::http {

std::shared_ptr<const chat_model> chat_registry::model(const std::string& model_id) const {
  std::lock_guard lock(mu_);
  auto it = models_.find(model_id);
  return it == models_.end() ? nullptr : it->second;
}

void chat_registry::put_model(const std::string& model_id, std::shared_ptr<const chat_model> m) {
  std::lock_guard lock(mu_);
  models_[model_id] = std::move(m);
}

std::optional<chat_graphs> chat_registry::graphs(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) return std::nullopt;
  return it->second;
}

void chat_registry::put_graphs(const std::string& key, chat_graphs g) {
  std::lock_guard lock(mu_);
  graphs_[key] = std::move(g);
}

void chat_registry::drop_graphs(const std::string& key) {
  std::lock_guard lock(mu_);
  graphs_.erase(key);
}

std::optional<cached_conversation> chat_registry::take_prefix(const std::string& account, const std::string& model_id,
                                                             const std::vector<std::int32_t>& prompt, std::size_t* common) {
  std::lock_guard lock(mu_);
  std::size_t best = 0, at = conversations_.size();
  for (std::size_t i = 0; i < conversations_.size(); ++i) {
    const auto& c = conversations_[i];
    if (c.account != account || c.model_id != model_id) continue;
    std::size_t n = 0;
    while (n < c.tokens.size() && n < prompt.size() && c.tokens[n] == prompt[n]) ++n;
    if (n > best) best = n, at = i;
  }
  if (best == 0) return std::nullopt;
  cached_conversation out = std::move(conversations_[at]);
  conversations_.erase(conversations_.begin() + std::ptrdiff_t(at));
  *common = best;
  return out;
}

std::vector<cached_conversation> chat_registry::put_conversation(cached_conversation c, std::size_t per_key) {
  std::lock_guard lock(mu_);
  c.used = ++clock_;
  const std::string key_id = c.key_id;
  conversations_.push_back(std::move(c));
  std::vector<cached_conversation> evicted;
  for (;;) {
    std::size_t count = 0, oldest = conversations_.size();
    for (std::size_t i = 0; i < conversations_.size(); ++i)
      if (conversations_[i].key_id == key_id) {
        ++count;
        if (oldest == conversations_.size() || conversations_[i].used < conversations_[oldest].used) oldest = i;
      }
    if (count <= per_key) break;
    evicted.push_back(std::move(conversations_[oldest]));
    conversations_.erase(conversations_.begin() + std::ptrdiff_t(oldest));
  }
  return evicted;
}

std::vector<cached_conversation> chat_registry::drop_key(const std::string& key_id) {
  std::lock_guard lock(mu_);
  std::vector<cached_conversation> out;
  for (auto it = conversations_.begin(); it != conversations_.end();)
    if (it->key_id == key_id) {
      out.push_back(std::move(*it));
      it = conversations_.erase(it);
    } else {
      ++it;
    }
  return out;
}

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;

/// Drafts per verify pass of chat's verify graphs (passes over k+1 positions).
constexpr int chat_drafts[] = {4, 2};

struct chat_state {
  coordinator_actor coordinator;
  std::shared_ptr<chat_registry> registry;
  caller who;
  chat_request req;
  std::shared_ptr<responder> res;
  std::shared_ptr<sse_stream> sse;

  std::string model_id, quantize = "none", session_id, gen_id;
  dtype kv_dtype = dtype::f32;  ///< the model's KV caches (its load's kvDtype)
  bool loaded_now = false;
  std::shared_ptr<const chat_model> model;
  chat_graphs graphs;
  std::vector<std::int32_t> prompt;
  std::uint32_t max_new = 0;
  std::unique_ptr<models::stream_decoder> decoder;
  std::string text;
  std::vector<std::int64_t> tokens;
  gen_plan plan;
  gen_runner runner;  ///< runs the decode loop: the plan's worker, or a gen_loop here
  bool generating = false, finished = false, cancelled = false, recompiled = false;
  bool speculative = false;  ///< asked for and possible for this model
  std::size_t cached = 0;    ///< prompt rows a cached conversation's session already held
  bool from_cache = false;   ///< the session came from the prefix cache
  bool fresh_retry = false;  ///< the cached session failed: a fresh one is being used
  clock_type::time_point started, prefill_started, decode_started;
  double prefill_ms = 0;
  std::shared_ptr<void> slot;  ///< one of the key's generations running at once, freed at the end
  // The OpenAI-compatible API's reply (req.api != mpakt).
  openai_meta oa;
  std::unique_ptr<reply_text> reply;       ///< text held back where a stop string may begin
  bool oa_first = true;                    ///< no chunk sent yet
  std::string oa_text;                     ///< text handed out (an answer that does not stream)
  std::vector<openai_token> oa_tokens;     ///< … and its tokens
  bool openai() const { return req.api != chat_api::mpakt; }
  describe_tally tally;
  /// Tokens of the reply so far, shared with what reports its end when the actor ends.
  std::shared_ptr<std::size_t> reply_tokens = std::make_shared<std::size_t>(0);
};

using chat_pointer = caf::stateful_actor<chat_state>*;

double ms_since(clock_type::time_point t) { return std::chrono::duration<double, std::milli>(clock_type::now() - t).count(); }

/// A JSON string literal.
std::string json_string(const std::string& s) {
  return json([&](json_writer& w) { str(w, s); });
}

/// Graph key in the registry: graphs belong to an account (the penalty is set per call).
std::string graphs_key(const chat_state& st) { return st.who.account + "/" + st.model_id; }

/// Deletes a session (fire and forget).
void delete_session(chat_pointer self, const std::string& id) {
  self->request(self->state.coordinator, 30s, delete_atom::value, sessions_atom::value, self->state.who, id)
      .then([](deleted_reply&) {}, [](caf::error&) {});
}

/// Deletes the conversation's session.
void drop_session(chat_pointer self) {
  auto& st = self->state;
  if (st.session_id.empty()) return;
  delete_session(self, st.session_id);
  st.session_id.clear();
}

/// Ends a reply that went well: its session joins the prefix cache for the next turn
/// (decisions.md, "Prefix cache"), and what that evicts is deleted. Models whose session
/// state cannot be rewound to a prefix (recurrent states, rope that follows the length) keep
/// nothing.
void keep_session(chat_pointer self) {
  auto& st = self->state;
  if (st.session_id.empty()) return;
  if (!st.model || !st.model->can_speculate || !st.req.cache) return drop_session(self);
  // Rows 0 … P−2 hold the prompt but its last token, fed with the reply's first pass; each
  // reply token but the last was then fed after it.
  cached_conversation c{st.session_id, st.who.account, st.who.key_id, st.model_id, st.prompt, 0};
  if (st.tokens.empty()) c.tokens.pop_back();
  for (std::size_t i = 0; i + 1 < st.tokens.size(); ++i) c.tokens.push_back(std::int32_t(st.tokens[i]));
  st.session_id.clear();
  for (const auto& old : st.registry->put_conversation(std::move(c))) delete_session(self, old.session_id);
}

/// Ends the request with an error: an HTTP error before the stream opened, an `error`
/// event after (OpenAI's API: its error shape, as a body or as the stream's last data line).
void fail(chat_pointer self, const error& e) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  if (st.generating) caf::anon_send(st.runner, gencancel_atom::value, st.gen_id);
  const int status = http_status(e.code);
  const std::string body = st.openai() ? openai_error_json(status, e.message) : error_json(e.message);
  if (st.sse) {
    if (!st.cancelled) {
      st.sse->send(st.openai() ? "" : "error", body);
      st.sse->close();
    }
  } else if (!st.cancelled) {
    st.res->respond(response{status, "application/json", body, {}});
  }
  drop_session(self);
  self->quit();
}

auto on_error(chat_pointer self) {
  return [self](caf::error& e) { fail(self, from_caf(e)); };
}

/// Opens the SSE stream of a streamed reply. mpakt's chat opens it as soon as there is
/// something to tell (loading, compiling); OpenAI's API only with the first chunk
/// (`first_output`), so that every refusal before it is an HTTP error.
void open_stream(chat_pointer self, bool first_output = false) {
  auto& st = self->state;
  if (!st.req.stream || st.sse || (st.openai() && !first_output)) return;
  st.sse = st.res->start_sse(200);
  auto me = caf::actor_cast<caf::actor>(self);
  st.sse->on_disconnect([me] { caf::anon_send(me, cancel_atom::value); });
}

/// An event of mpakt's chat stream (status, model, delta); OpenAI's stream has none of these.
void send_event(chat_pointer self, const char* event, const std::string& data) {
  auto& st = self->state;
  if (st.sse && !st.cancelled && !st.openai()) st.sse->send(event, data);
}

/// Runs a coordinator call and hands its typed reply (actors/replies.hpp) to `next`.
template <class Reply, class Next, class... Ts>
void call_coordinator(chat_pointer self, std::chrono::milliseconds timeout, Next next, Ts&&... xs) {
  self->request(self->state.coordinator, timeout, std::forward<Ts>(xs)...)
      .then(
          [self, next](Reply& r) {
            if (self->state.finished) return;
            if (self->state.cancelled) return fail(self, error{errc::invalid, "cancelled"});
            next(r);
          },
          on_error(self));
}

/// Runs a graph call (a JSON body, decoded as the API decodes it) and then `next`, or
/// `on_fail` with its error (by default the chat fails with it). `server_made`: a graph the
/// chat built naming server-only parameters (send_graph_call).
template <class Next, class OnFail>
void call_graph(chat_pointer self, std::string body, Next next, OnFail on_fail, bool server_made = false) {
  auto& st = self->state;
  send_graph_call(
      self, st.coordinator, st.who, std::make_shared<const std::string>(std::move(body)), 3, 5min,
      [self, next, on_fail](result<run_reply> r) {
        if (self->state.finished) return;
        if (self->state.cancelled) return fail(self, error{errc::invalid, "cancelled"});
        if (!r) return on_fail(r.err());
        next();
      },
      server_made);
}
template <class Next>
void call_graph(chat_pointer self, std::string body, Next next) {
  call_graph(self, std::move(body), next, [self](const error& e) { fail(self, e); });
}

/// A model's kvDtype, as its load answer or the model list says it (f32 when unknown).
dtype kv_dtype_of(const std::string& name) { return dtype_from_name(name).value_or(dtype::f32); }

void resolve_model(chat_pointer self);
void openai_emit(chat_pointer self, reply_text::part part, const char* finish);
/// Runs `work` (returning result<T>) on a helper thread of its own, then `then(T&)` back in
/// the chat actor, or fails the chat with the error. CPU work that grows with what a client
/// sent (rendering, tokenizing) or with a model's files (building its chat side) thus never
/// holds up the scheduler thread the coordinator's actors share.
template <class T, class Work, class Then>
void off_thread(chat_pointer self, Work work, Then then) {
  maybe_off_thread<result<T>>(self, true, std::move(work), [self, then](result<T>& r) {
    auto& st = self->state;
    if (st.finished) return;
    if (st.cancelled) return fail(self, error{errc::invalid, "cancelled"});
    if (!r) return fail(self, r.err());
    then(*r);
  });
}

void prepare_model(chat_pointer self);
void prepare_graphs(chat_pointer self, void (*then)(chat_pointer));
void start_session(chat_pointer self);
void prefill(chat_pointer self);
void generate(chat_pointer self);
void create_session(chat_pointer self, bool may_evict);

void resolve_model(chat_pointer self) {
  auto& st = self->state;
  call_coordinator<list_models_reply>(self, 30s, [self](list_models_reply& list) {
    auto& st = self->state;
    const bool by_source = st.req.model_id.empty();
    for (const auto& m : list.models)
      // a source is reused only where the account loaded all of it (not a few layers)
      if (by_source ? st.req.source == m.source && m.whole : st.req.model_id == m.model_id) {
        st.model_id = m.model_id;
        st.quantize = m.quantize;
        st.kv_dtype = kv_dtype_of(m.kv_dtype);
        return prepare_model(self);
      }
    if (!st.req.model_id.empty()) return fail(self, error{errc::not_found, "model " + st.req.model_id + " does not exist"});
    // Load it: q8 or q4 only when it does not otherwise fit.
    open_stream(self);
    send_event(self, "status", json([&](json_writer& w) {
      w.StartObject(); kv(w, "phase", "loading"); kv(w, "source", st.req.source); w.EndObject();
    }));
    load_call load;
    load.source = st.req.source;
    load.quantize = "auto";
    call_coordinator<load_model_reply>(self, std::chrono::hours(2), [self](load_model_reply& loaded) {
      auto& st = self->state;
      st.model_id = loaded.model_id;
      st.quantize = loaded.quantize;
      st.kv_dtype = kv_dtype_of(loaded.kv_dtype);
      st.loaded_now = true;
      prepare_model(self);
    }, load_atom::value, st.who, std::move(load));
  }, list_atom::value, models_atom::value, st.who);
}

void prepare_model(chat_pointer self) {
  auto& st = self->state;
  if ((st.model = st.registry->model(st.model_id))) return prepare_graphs(self, start_session);
  open_stream(self);
  send_event(self, "status", R"({"phase":"preparing"})");
  self->request(st.coordinator, 3min, files_atom::value, st.who, st.model_id)
      .then(
          [self](std::string& config, std::string& tok, std::string& tok_cfg, std::string& jinja) {
            auto& st = self->state;
            if (st.finished) return;
            if (st.cancelled) return fail(self, error{errc::invalid, "cancelled"});
            // Parsing tokenizer.json (megabytes for large vocabularies) and scanning its
            // vocabulary happen once per model, on a helper thread.
            off_thread<std::shared_ptr<const chat_model>>(
                self,
                [config = std::move(config), tok = std::move(tok), tok_cfg = std::move(tok_cfg), jinja = std::move(jinja)] {
                  return make_chat_model(config, tok, tok_cfg, jinja);
                },
                [self](std::shared_ptr<const chat_model>& m) {
                  auto& st = self->state;
                  st.registry->put_model(st.model_id, m);
                  st.model = m;
                  prepare_graphs(self, start_session);
                });
          },
          on_error(self));
}

std::string chat_graph(const chat_state& st, int tokens) {
  models::arch_graph_options o;
  o.model_id = st.model_id;
  o.tokens = tokens;
  o.use_cache = true;
  o.cache_rows = st.model->context;
  o.compiled = true;
  o.sample = true;
  // Any value keeps the token history; each call sets the request's penalty (see generate).
  o.repetition_penalty = 1.1;
  return models::arch_graph(st.model->config, o);
}

/// Compiles chat's graphs one after another (decode, then a verify pass per draft length);
/// `done` collects their ids. A failure deletes those already compiled, so nothing piles up.
void compile_chain(chat_pointer self, std::shared_ptr<std::vector<std::string>> done, void (*then)(chat_pointer)) {
  auto& st = self->state;
  const std::size_t i = done->size();
  if (i == 1 + std::size(chat_drafts)) {
    st.graphs.decode = (*done)[0];
    st.graphs.verify.assign(done->begin() + 1, done->end());
    st.registry->put_graphs(graphs_key(st), st.graphs);
    return then(self);
  }
  const int tokens = i == 0 ? 1 : chat_drafts[i - 1] + 1;
  const std::string label = (i == 0 ? "chat decode" : "chat verify " + std::to_string(tokens)) + " " + st.model_id;
  const std::string body = "{\"label\":" + json_string(label) + ",\"graph\":" + chat_graph(st, tokens) + "}";
  send_compile_call(self, st.coordinator, st.who, std::make_shared<const std::string>(body), 5min,
                    [self, done, then](result<compile_graph_reply> reply) {
                      if (!reply) {
                        for (const auto& id : *done)
                          caf::anon_send(self->state.coordinator, delete_atom::value, graphs_atom::value, self->state.who, id);
                        return fail(self, reply.err());
                      }
                      done->push_back(reply->graph_id);
                      if (self->state.finished) return;
                      if (self->state.cancelled) return fail(self, error{errc::invalid, "cancelled"});
                      compile_chain(self, done, then);
                    });
}

void prepare_graphs(chat_pointer self, void (*then)(chat_pointer)) {
  auto& st = self->state;
  if (auto g = st.registry->graphs(graphs_key(st))) {
    st.graphs = *g;
    return then(self);
  }
  open_stream(self);
  send_event(self, "status", R"({"phase":"compiling"})");
  compile_chain(self, std::make_shared<std::vector<std::string>>(), then);
}

void open_session(chat_pointer self);

/// Renders and tokenizes the conversation, then opens its session. The text is first bounded
/// by bytes (decisions.md, "Chat"); rendering and tokenizing then run on a helper thread of
/// their own, so a long conversation never holds up the coordinator's thread.
void start_session(chat_pointer self) {
  auto& st = self->state;
  std::size_t bytes = st.req.prompt_text.size() + st.req.tools_json.size();
  for (const auto& m : st.req.messages) bytes += m.content.size();
  if (bytes > st.model->max_message_bytes)
    return fail(self, error{errc::invalid, "the conversation's messages hold " + std::to_string(bytes) +
                                               " bytes of text, more than fits the model's context of " +
                                               std::to_string(st.model->context) + " tokens (at most " +
                                               std::to_string(st.model->max_message_bytes) + " bytes)"});
  off_thread<std::vector<std::int32_t>>(
      self,
      [model = st.model, has_prompt = st.req.has_prompt, text = st.req.prompt_text, ids = st.req.prompt_ids,
       messages = std::move(st.req.messages), tools = st.req.tools_json] {
        if (!has_prompt) return model->prompt(messages, tools);
        chat_request raw;
        raw.prompt_text = text;
        raw.prompt_ids = ids;
        return model->raw_prompt(raw);
      },
      [self](std::vector<std::int32_t>& ids) {
        self->state.prompt = std::move(ids);
        open_session(self);
      });
}

void open_session(chat_pointer self) {
  auto& st = self->state;
  const int context = st.model->context;
  st.speculative = st.req.speculative && st.model->can_speculate;
  const int margin = st.speculative ? chat_drafts[0] : 0;  // rows a last verify pass may write
  const int room = context - int(st.prompt.size()) - margin;
  if (room < 1)
    return fail(self, error{errc::invalid, std::string(st.req.has_prompt ? "the prompt is " : "the conversation is ") +
                                               std::to_string(st.prompt.size()) +
                                               " tokens, which leaves no room in the model's context of " +
                                               std::to_string(context) + " tokens"});
  st.max_new = std::min<std::uint32_t>(st.req.max_tokens, std::uint32_t(room));
  open_stream(self);
  send_event(self, "model", json([&](json_writer& w) {
    w.StartObject();
    kv(w, "modelId", st.model_id);
    key(w, "loaded"); w.Bool(st.loaded_now);
    kv(w, "quantize", st.quantize);
    kv(w, "kvDtype", std::string(dtype_name(st.kv_dtype)));
    kv(w, "format", std::string(st.model->format.format_name()));
    key(w, "promptTokens"); w.Uint64(st.prompt.size());
    key(w, "context"); w.Int(context);
    w.EndObject();
  }));
  // The prefix cache: the account's earlier conversation on this model that shares the
  // longest start with this prompt lends its session; only the rest is prefilled.
  if (st.model->can_speculate && st.req.cache && !st.fresh_retry) {
    std::size_t common = 0;
    if (auto c = st.registry->take_prefix(st.who.account, st.model_id, st.prompt, &common)) {
      st.session_id = std::move(c->session_id);
      st.cached = std::min(common, st.prompt.size() - 1);  // (generate feeds the last prompt token)
      st.from_cache = true;
      return prefill(self);
    }
  }
  create_session(self, true);
}

/// Opens a fresh session with the model's caches. A key at its session limit first gives back
/// the sessions its cached conversations hold (once).
void create_session(chat_pointer self, bool may_evict) {
  auto& st = self->state;
  self->request(st.coordinator, 30s, create_atom::value, sessions_atom::value, st.who, session_call{st.model_id, "chat"})
      .then(
          [self](open_session_reply& reply) {
            auto& st = self->state;
            st.session_id = reply.session_id;  // (first: an end below deletes it)
            if (st.finished) return drop_session(self);
            if (st.cancelled) return fail(self, error{errc::invalid, "cancelled"});
            // the KV caches at the model's kvDtype: zeros' server-only dtype, so the call is
            // marked as the server's own
            std::string alloc = models::arch_cache_graph(st.model->config, st.model->context, true, st.kv_dtype);
            alloc.insert(1, "\"session\":" + json_string(st.session_id) + ",");
            call_graph(self, "{\"graph\":" + alloc + "}", [self] { prefill(self); }, [self](const error& e) { fail(self, e); },
                       true);
          },
          [self, may_evict](caf::error& e) {
            auto& st = self->state;
            const error err = from_caf(e);
            if (err.code == errc::limit && may_evict && !st.finished) {
              auto evicted = st.registry->drop_key(st.who.key_id);
              if (!evicted.empty()) {
                // (sent before the retry, so the coordinator deletes them first)
                for (const auto& c : evicted) delete_session(self, c.session_id);
                return create_session(self, false);
              }
            }
            fail(self, err);
          });
}

/// Feeds every prompt token but the last (generate feeds that one) through the caches and
/// the token history, from the first row a cached session did not already hold.
void prefill(chat_pointer self) {
  auto& st = self->state;
  st.prefill_started = clock_type::now();
  if (st.prompt.size() < st.cached + 2) return generate(self);
  models::arch_graph_options o;
  o.model_id = st.model_id;
  o.ids.assign(st.prompt.begin() + std::ptrdiff_t(st.cached), st.prompt.end() - 1);
  o.pos = int(st.cached);
  o.tokens = int(o.ids.size());
  o.use_cache = true;
  o.cache_rows = st.model->context;
  o.argmax = true;     // a small output (generate feeds the last prompt token itself)
  o.last_only = true;  // and the head, the widest product, runs for one row only
  o.repetition_penalty = st.req.repetition_penalty;
  std::string graph = models::arch_graph(st.model->config, o);
  graph.insert(1, "\"session\":" + json_string(st.session_id) + ",");
  call_graph(self, "{\"graph\":" + graph + "}", [self] { generate(self); }, [self](const error& e) {
    auto& st = self->state;
    if (!st.from_cache) return fail(self, e);
    // The cached session is gone (its worker lost, or deleted): a fresh one.
    drop_session(self);
    st.from_cache = false;
    st.cached = 0;
    st.fresh_retry = true;
    create_session(self, true);
  });
}

void generate(chat_pointer self) {
  auto& st = self->state;
  st.prefill_ms = ms_since(st.prefill_started);
  if (st.cancelled) return fail(self, error{errc::invalid, "cancelled"});
  // (all but the last went through prefill; the loop feeds the last)
  metrics::m().prompt_tokens.with({"chat"}).inc(double(st.prompt.size()));
  generate_call call;
  call.graph_id = st.graphs.decode;
  call.session_id = st.session_id;
  call.ids.assign(st.prompt.begin(), st.prompt.end());
  call.start_pos = std::int64_t(st.prompt.size()) - 1;
  call.max_new = st.max_new;
  call.stop_ids.assign(st.model->stop_ids.begin(), st.model->stop_ids.end());
  call.sampling.emplace_back("temperature", st.req.temperature);
  if (st.req.top_p) call.sampling.emplace_back("topP", *st.req.top_p);
  if (st.req.top_k) call.sampling.emplace_back("topK", double(*st.req.top_k));
  call.has_seed = st.req.seed.has_value();
  call.seed = st.req.seed.value_or(0);
  call.worker_loop = true;
  if (st.speculative) {
    call.speculative = true;
    call.verify_graphs = st.graphs.verify;
  }
  self->request(st.coordinator, 60s, generate_atom::value, st.who, std::move(call))
      .then(
          [self](gen_plan& plan) {
            auto& st = self->state;
            if (st.finished) return;
            st.plan = std::move(plan);
            // The request's penalties, written into every sample step like the other settings.
            st.plan.sampling.emplace_back("repetitionPenalty", st.req.repetition_penalty);
            if (st.req.presence_penalty != 0) st.plan.sampling.emplace_back("presencePenalty", st.req.presence_penalty);
            if (st.req.frequency_penalty != 0) st.plan.sampling.emplace_back("frequencyPenalty", st.req.frequency_penalty);
            // (the reply's tokens sit in the history from the prompt's length on)
            if (!st.req.penalize_prompt) st.plan.sampling.emplace_back("penaltyStart", double(st.prompt.size()));
            if (st.req.logprobs >= 0 && !st.plan.worker_loop)
              return fail(self, error{errc::invalid, "logprobs are not available for model " + st.model_id +
                                                         ", which is spread over several workers"});
            st.gen_id = new_id("g_");
            st.decoder = std::make_unique<models::stream_decoder>(st.model->tokenizer, true);
            // A completion's text is what follows its prompt: the decoder starts after it.
            if (st.req.api == chat_api::openai_completion)
              for (auto id : st.prompt) st.decoder->push(id);
            gen_request r = start_request(st.plan, st.gen_id, caf::actor_cast<gen_listener>(self));
            r.logprobs = st.req.logprobs;
            if (st.req.echo) {  // (before the reply, and outside its stop strings' reach)
              std::vector<std::int32_t> ids(st.prompt.begin(), st.prompt.end());
              openai_emit(self, {st.req.prompt_text.empty() ? st.model->tokenizer.decode(ids, true) : st.req.prompt_text, {}},
                          nullptr);
            }
            st.decode_started = clock_type::now();
            st.generating = true;
            // The console hears of the reply's decoding (described while it runs) and, however
            // the actor ends, of its end.
            caf::anon_send(st.coordinator, gridevent_atom::value,
                           grid_event{0, unix_ms_now(), "started", "generation", st.gen_id, st.session_id},
                           caf::actor_cast<describable>(self));
            self->attach_functor([coordinator = st.coordinator, id = st.gen_id, tokens = st.reply_tokens] {
              caf::anon_send(coordinator, gridevent_atom::value,
                             grid_event{0, unix_ms_now(), "ended", "generation", id,
                                        "chat reply ended after " + std::to_string(*tokens) + " tokens"},
                             describable());
            });
            // The worker runs the loop, or (a model spread over several workers) a loop here.
            st.runner = runner_for(self->system(), st.plan, st.coordinator, st.who);
            if (st.plan.worker_loop) {
              // A worker that leaves the grid mid-reply sends no gendone: notice it directly.
              self->monitor(st.plan.worker);
              self->set_down_handler([self](caf::down_msg&) {
                fail(self, error{errc::unavailable, "the worker decoding this reply left the grid; send the conversation again"});
              });
            }
            self->request(st.runner, 60s, genstart_atom::value, std::move(r)).then([](bool) {}, on_error(self));
          },
          [self](caf::error& e) {
            // Graphs the account deleted meanwhile: compile them again, once.
            auto& st = self->state;
            const error err = from_caf(e);
            if (err.code == errc::not_found && err.message.rfind("graph ", 0) == 0 && !st.recompiled) {
              st.recompiled = true;
              st.registry->drop_graphs(graphs_key(st));
              return prepare_graphs(self, generate);
            }
            fail(self, err);
          });
}

std::string done_json(const chat_state& st, const gen_done& d) {
  const double decode_ms = ms_since(st.decode_started);
  const std::string reason = d.stopped == "stop token" ? "stop" : d.stopped == "max tokens" ? "length" : d.stopped;
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "ok"); w.Bool(d.stopped != "error");
    kv(w, "modelId", st.model_id);
    kv(w, "finishReason", reason);
    kv(w, "text", st.text);
    kv(w, "quantize", st.quantize);
    kv(w, "kvDtype", std::string(dtype_name(st.kv_dtype)));
    // the session the prefix cache keeps (keep_session): an ordinary session of the account,
    // which may read it, checkpoint it or delete it (the cache then forgets the conversation)
    if (d.stopped != "error" && !st.cancelled && st.model && st.model->can_speculate && st.req.cache)
      kv(w, "sessionId", st.session_id);
    key(w, "usage"); w.StartObject();
    key(w, "promptTokens"); w.Uint64(st.prompt.size());
    key(w, "completionTokens"); w.Uint64(st.tokens.size());
    key(w, "cachedTokens"); w.Uint64(st.cached);
    w.EndObject();
    key(w, "timing"); w.StartObject();
    key(w, "elapsedMs"); w.Int64(std::llround(ms_since(st.started)));
    key(w, "prefillMs"); w.Double(std::round(st.prefill_ms * 10) / 10);
    key(w, "tokensPerSecond"); w.Double(decode_ms > 0 ? std::round(double(st.tokens.size()) / decode_ms * 1e4) / 10 : 0.0);
    w.EndObject();
    key(w, "speculation");
    if (d.speculative) {
      w.StartObject();
      key(w, "verifies"); w.Uint64(d.verifies);
      key(w, "drafted"); w.Uint64(d.drafted);
      key(w, "accepted"); w.Uint64(d.accepted);
      key(w, "produced"); w.Uint64(d.produced);
      key(w, "plain"); w.Uint64(d.plain);
      key(w, "sharedVerifies"); w.Uint64(d.batched_verifies);
      key(w, "acceptance"); w.Double(d.drafted ? std::round(double(d.accepted) / double(d.drafted) * 1000) / 1000 : 0.0);
      w.EndObject();
    } else {
      w.Null();
    }
    key(w, "batched"); w.Uint64(d.batched);
    if (!d.error.empty()) kv(w, "error", d.error);
    w.EndObject();
  });
}

// ---- the OpenAI-compatible API's reply

/// Hands out what the reply holds now: a chunk when streaming, else kept for the answer.
void openai_emit(chat_pointer self, reply_text::part part, const char* finish) {
  auto& st = self->state;
  if (!st.req.stream) {
    st.oa_text += part.text;
    for (auto& t : part.tokens) st.oa_tokens.push_back(std::move(t));
    return;
  }
  if (part.text.empty() && part.tokens.empty() && !finish && !st.oa_first) return;
  open_stream(self, true);
  if (st.cancelled) return;
  st.sse->send("", openai_chunk(st.oa, part.text, part.tokens, st.oa_first, finish));
  st.oa_first = false;
}

/// A generated token: its text through the stop-string gate, then out.
void openai_token_in(chat_pointer self, const gen_token& t, const std::string& delta) {
  auto& st = self->state;
  const bool stop_id = std::find(st.model->stop_ids.begin(), st.model->stop_ids.end(), t.token) != st.model->stop_ids.end();
  std::optional<openai_token> shown;
  if (!stop_id) {  // (an end-of-turn token is not part of the reply)
    shown.emplace();
    shown->id = t.token;
    if (st.oa.logprobs) {
      shown->text = st.model->piece(std::int32_t(t.token));
      shown->logprob = t.logprob;
      for (std::size_t i = 0; i < t.top_ids.size() && i < t.top_logprobs.size(); ++i)
        shown->top.emplace_back(st.model->piece(std::int32_t(t.top_ids[i])), t.top_logprobs[i]);
    }
  }
  st.reply->add(delta, std::move(shown));
  openai_emit(self, st.reply->take(), nullptr);
}

/// The end of an OpenAI-style reply: its last text, the finish reason, the usage.
void openai_finish(chat_pointer self, const char* finish) {
  auto& st = self->state;
  st.finished = true;
  openai_emit(self, st.reply->finish(), finish);
  const openai_usage usage{st.prompt.size(), st.tokens.size(), st.cached};
  if (st.req.stream) {
    if (!st.cancelled) {
      if (st.oa.include_usage) st.sse->send("", openai_usage_chunk(st.oa, usage));
      st.sse->send("", "[DONE]");
      st.sse->close();
    }
  } else {
    st.res->respond(response{200, "application/json", openai_response(st.oa, st.oa_text, st.oa_tokens, finish, usage), {}});
  }
  if (st.cancelled) drop_session(self);
  else keep_session(self);
  self->quit();
}

}  // namespace

void start_chat(caf::actor_system& sys, coordinator_actor coordinator, std::shared_ptr<chat_registry> registry, caller who,
                chat_request req, std::shared_ptr<responder> res, std::shared_ptr<void> slot) {
  // (the slot moves into the state, which goes when the actor ends)
  sys.spawn([=, slot = std::move(slot)](chat_pointer self) mutable -> caf::behavior {
    auto& st = self->state;
    st.slot = std::move(slot);
    st.coordinator = coordinator;
    st.registry = registry;
    st.who = who;
    st.req = req;
    st.res = res;
    st.started = clock_type::now();
    if (st.openai()) {
      st.oa.chat = st.req.api == chat_api::openai_chat;
      st.oa.id = new_id(st.oa.chat ? "chatcmpl-" : "cmpl-");
      st.oa.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
      st.oa.model = st.req.model_name;
      st.oa.logprobs = st.req.logprobs >= 0;
      st.oa.include_usage = st.req.include_usage;
      st.reply = std::make_unique<reply_text>(st.req.stop);
    }
    // A client that goes away before the answer began stops the work (a stream has its own).
    auto me = caf::actor_cast<caf::actor>(self);
    st.res->on_disconnect([me] { caf::anon_send(me, cancel_atom::value); });
    resolve_model(self);
    return {
        [=](describe_atom) {
          auto& st = self->state;
          st.tally.count();
          actor_snapshot s;
          s.kind = "generation";
          s.id = st.gen_id;
          s.link("session", st.session_id);
          s.link("graph", st.plan.graph_id);
          const double secs = std::chrono::duration<double>(clock_type::now() - st.decode_started).count();
          s.number("tokens", double(st.tokens.size()));
          s.number("maxNewTokens", double(st.plan.max_new));
          s.number("promptTokens", double(st.prompt.size()));
          s.number("cachedTokens", double(st.cached));
          s.number("elapsedMs", std::round(ms_since(st.started)));
          s.number("tokensPerSecond", secs > 0 ? std::round(double(st.tokens.size()) / secs * 10) / 10 : 0.0);
          s.number("workerLoop", st.plan.worker_loop ? 1 : 0);
          s.number("speculative", st.speculative ? 1 : 0);
          s.text("api", st.req.api == chat_api::mpakt ? "chat" : st.oa.chat ? "openai chat" : "openai completion");
          s.text("model", st.model_id);
          s.text("owner", st.who.account);
          st.tally.fill(s, self->mailbox().size());
          return s;
        },
        [=](gentoken_atom, const std::string&, const gen_token& t) {
          auto& st = self->state;
          st.tally.count();
          if (st.finished) return;
          st.tokens.push_back(t.token);
          *st.reply_tokens = st.tokens.size();
          metrics::m().tokens_generated.with({"chat"}).inc();
          const std::string delta = st.decoder->push(std::int32_t(t.token));
          if (st.openai()) {
            openai_token_in(self, t, delta);
            if (st.reply->stopped()) {  // a stop string: the reply ends here
              caf::anon_send(st.runner, gencancel_atom::value, st.gen_id);
              st.generating = false;
              openai_finish(self, "stop");
            }
            return;
          }
          if (delta.empty()) return;
          st.text += delta;
          send_event(self, "delta", json([&](json_writer& w) { w.StartObject(); kv(w, "text", delta); w.EndObject(); }));
        },
        [=](gendone_atom, const std::string&, const gen_done& d) {
          auto& st = self->state;
          st.tally.count();
          if (!d.error.empty()) st.tally.failed(d.error);
          if (st.finished) return;
          st.generating = false;
          const std::string rest = st.decoder->finish();
          if (st.openai()) {
            if (d.stopped == "error") {
              st.generating = false;
              return fail(self, error{errc::internal, "the generation failed: " + d.error});
            }
            st.reply->add(rest, std::nullopt);
            const bool stop = st.reply->stopped() || d.stopped == "stop token";
            return openai_finish(self, stop ? "stop" : "length");
          }
          if (!rest.empty()) {
            st.text += rest;
            send_event(self, "delta", json([&](json_writer& w) { w.StartObject(); kv(w, "text", rest); w.EndObject(); }));
          }
          st.finished = true;
          metrics::m().drafts_proposed.with().inc(double(d.drafted));
          metrics::m().drafts_accepted.with().inc(double(d.accepted));
          if (d.stopped == "error" && st.sse) metrics::m().errors.with({"generation"}).inc();  // (the stream said 200)
          const std::string body = done_json(st, d);
          if (st.sse) {
            if (!st.cancelled) {
              st.sse->send("done", body);
              st.sse->close();
            }
          } else {
            st.res->respond(response{d.stopped == "error" ? 500 : 200, "application/json", body, {}});
          }
          if (d.stopped == "error" || st.cancelled) drop_session(self);
          else keep_session(self);
          self->quit();
        },
        [=](cancel_atom) {
          auto& st = self->state;
          st.tally.count();
          st.cancelled = true;
          // Before decoding starts, the step in flight sees the flag and stops there.
          if (st.generating) fail(self, error{errc::invalid, "cancelled"});
        },
    };
  });
}

}  // namespace mpakt::http
