#include "http/api/routes.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "actors/errors.hpp"
#include "actors/ids.hpp"
#include "actors/json_text.hpp"
#include "http/api/chat.hpp"
#include "http/api/console.hpp"
#include "http/api/generate.hpp"
#include "http/api/graph_calls.hpp"
#include "http/api/model_graph.hpp"
#include "http/api/openai.hpp"
#include "http/api/render.hpp"
#include "http/api/request_log.hpp"
#include "http/api/requests.hpp"
#include "http/api/route_table.hpp"
#include "http/router.hpp"
#include "http/url.hpp"
#include "runtime/json.hpp"
#include "runtime/metrics.hpp"
#include "runtime/schema.hpp"

namespace mpakt::http {

namespace {

using namespace std::chrono_literals;

struct context {
  caf::actor_system* sys;
  api_actors actors;
  api_config cfg;
  std::shared_ptr<chat_registry> chat = std::make_shared<chat_registry>();
  std::shared_ptr<login_limiter> logins = std::make_shared<login_limiter>(cfg.abuse);
  std::shared_ptr<generation_slots> generations = std::make_shared<generation_slots>(cfg.abuse.generations_per_key);
};

using responder_ptr = std::shared_ptr<responder>;

/// An inspect answer of this many tensors or more (some 100 bytes of JSON each) is written on
/// a helper thread, as a large graph reply is.
constexpr std::size_t inspect_off_thread_tensors = off_thread_bytes / 100;

void reply_json(const responder_ptr& res, int status, std::string body) {
  res->respond(response{status, "application/json", std::move(body), {}});
}

void reply_error(const responder_ptr& res, const error& e) { reply_json(res, http_status(e.code), error_json(e.message)); }
void reply_error(const responder_ptr& res, errc code, const std::string& msg) { reply_error(res, error{code, msg}); }

/// Sends one request to a coordinator-side actor on behalf of an HTTP request and answers
/// with its typed reply written as JSON (http/api/render.hpp), or its error.
template <class Reply, class Handle, class... Ts>
void forward(caf::event_based_actor* self, const Handle& h, std::chrono::milliseconds timeout, responder_ptr res,
             int ok_status, Ts&&... xs) {
  self->request(h, timeout, std::forward<Ts>(xs)...)
      .then([res, ok_status](Reply& r) { reply_json(res, ok_status, render(r)); },
            [res](caf::error& e) { reply_error(res, from_caf(e)); });
}

result<rapidjson::Document> body_object(const request& req) { return parse_json_object(req.body, "request body"); }

/// The request's body, shared with it (no copy).
std::shared_ptr<const std::string> shared_body(const std::shared_ptr<const request>& req) {
  return std::shared_ptr<const std::string>(req, &req->body);
}

/// Answers with a coordinator's typed answer written as JSON, or its error.
template <class Reply>
std::function<void(result<Reply>)> json_answer(const responder_ptr& res) {
  return [res](result<Reply> r) {
    if (!r) return reply_error(res, r.err());
    reply_json(res, 200, render(*r));
  };
}

result<std::string> body_string(const rapidjson::Document& d, const char* k) {
  auto it = d.FindMember(k);
  if (it == d.MemberEnd()) return invalid(std::string("request body lacks \"") + k + "\"");
  if (!it->value.IsString()) return invalid(std::string("\"") + k + "\" must be a string");
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

std::string bearer(const request& req) {
  const std::string* h = req.header("authorization");
  if (!h || h->rfind("Bearer ", 0) != 0) return {};
  return h->substr(7);
}

std::optional<std::string> query_param(const request& req, const std::string& name) {
  for (auto& [k, v] : parse_query(req.query))
    if (k == name) return v;
  return std::nullopt;
}

/// GET /api/v3/random: true random integers from the OS, uniform on [min, max].
void random_numbers(const request& req, const responder_ptr& res) {
  auto num = [&](const char* name, long long fallback) -> result<long long> {
    auto v = query_param(req, name);
    if (!v) return fallback;
    const char* end = v->data() + v->size();
    long long x = 0;
    if (auto r = std::from_chars(v->data(), end, x); r.ec == std::errc() && r.ptr == end) return x;
    // 41.0 is 41, as in JSON bodies (runtime/json.hpp).
    double d = 0;
    if (auto r = std::from_chars(v->data(), end, d); r.ec == std::errc() && r.ptr == end && std::isfinite(d) &&
                                                     d == std::floor(d) && d >= -9.2e18 && d <= 9.2e18)
      return static_cast<long long>(d);
    return invalid(std::string(name) + " must be an integer, not \"" + *v + "\"");
  };
  auto lo = num("min", 84), hi = num("max", 2147483646), count = num("count", 1);
  for (auto* r : {&lo, &hi, &count})
    if (!*r) return reply_error(res, r->err());
  if (*count < 1 || *count > 10000) return reply_error(res, errc::invalid, "count must be between 1 and 10000, not " + std::to_string(*count));
  if (*lo > *hi) return reply_error(res, errc::invalid, "min (" + std::to_string(*lo) + ") is greater than max (" + std::to_string(*hi) + ")");
  const unsigned __int128 span = static_cast<unsigned __int128>(*hi - static_cast<__int128>(*lo)) + 1;
  std::string out = "{\"numbers\":[";
  for (long long i = 0; i < *count; ++i) {
    std::uint64_t x;
    // Rejection sampling: no modulo bias.
    const unsigned __int128 limit = (static_cast<unsigned __int128>(1) << 64) / span * span;
    do os_random(&x, sizeof x);
    while (span <= (static_cast<unsigned __int128>(1) << 64) && static_cast<unsigned __int128>(x) >= limit);
    const long long v = static_cast<long long>(static_cast<__int128>(*lo) + static_cast<__int128>(static_cast<unsigned __int128>(x) % span));
    out += (i ? "," : "") + std::to_string(v);
  }
  out += "],\"min\":" + std::to_string(*lo) + ",\"max\":" + std::to_string(*hi) + ",\"source\":\"os\"}";
  reply_json(res, 200, std::move(out));
}

const char* content_type_of(const std::string& path) {
  auto ends = [&](const char* e) { return path.size() >= std::strlen(e) && path.compare(path.size() - std::strlen(e), std::strlen(e), e) == 0; };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  if (ends(".json")) return "application/json";
  return "text/plain; charset=utf-8";
}

void static_file(const context& ctx, const request& req, const responder_ptr& res) {
  namespace fs = std::filesystem;
  if (ctx.cfg.web_dir.empty()) {
    res->respond(response{200, "text/plain; charset=utf-8",
                          "mpakt: the mPAKT Grid AI API v3 is served here under /api/. See /llms.txt for the reference.\n", {}});
    return;
  }
  std::string rel = req.path == "/" ? "index.html" : req.path.substr(1);
  if (rel.find("..") != std::string::npos) return reply_error(res, errc::not_found, "no such page");
  fs::path p = fs::path(ctx.cfg.web_dir) / rel;
  // A page is asked for without its extension (/console serves console.html). (The
  // error_code forms: a name too long for the file system is a missing page, not a throw.)
  std::error_code ec;
  if (!p.has_extension() && !fs::is_regular_file(p, ec) && fs::is_regular_file(fs::path(p).concat(".html"), ec)) p.concat(".html");
  std::ifstream f(p, std::ios::binary);
  if (!f || fs::is_directory(p)) return reply_error(res, errc::not_found, "no page at " + req.path);
  std::stringstream ss;
  ss << f.rdbuf();
  res->respond(response{200, content_type_of(p.string()), ss.str(), {}});
}

// ---- the route table ----

/// Who may call a route: anyone; a logged-in account (Authorization: Bearer <token> from
/// POST /api/accounts/login); any approved key (x-api-key); an operator's key; for
/// `metrics`, an operator's key in x-api-key or Authorization: Bearer (what Prometheus sends),
/// or anyone when `mpakt serve --metrics-open` was given.
/// `openai`: any approved key, in Authorization: Bearer (as OpenAI's clients send it) or
/// x-api-key.
enum class auth { none, login, key, operator_key, metrics, openai };

/// One request on its way through a route's handler. Handlers run in a short-lived actor
/// (`self`), after the route's auth level was checked.
struct call {
  std::shared_ptr<context> ctx;
  std::shared_ptr<const request> req;
  responder_ptr res;
  std::vector<std::string> args;  ///< the pattern's :parameters, in order
  caf::event_based_actor* self = nullptr;
  caller who;         ///< auth::key and auth::operator_key
  std::string token;  ///< auth::login
  std::shared_ptr<request_record> rec;  ///< its id, log line and metrics

  const coordinator_actor& coord() const { return ctx->actors.coordinator; }
  const accounts_actor& accounts() const { return ctx->actors.accounts; }
  std::chrono::milliseconds timeout() const { return ctx->cfg.request_timeout; }
  const std::string& body() const { return req->body; }
};

struct route {
  const char* method;
  /// Path segments; ":name" matches any one segment and is passed in call::args.
  const char* pattern;
  auth level;
  void (*handle)(const call&);
};

/// A graph call on behalf of an HTTP request (decoded and answered at the edge:
/// http/api/graph_calls.hpp). A client that goes away before the answer stops the graph on
/// its worker (the coordinator knows the call by this actor).
void forward_graph(const call& c, std::int32_t version) {
  auto* self = c.self;
  auto res = c.res;
  send_graph_call(self, c.coord(), c.who, shared_body(c.req), version, c.timeout(), [self, res](result<run_reply> r) {
    if (!r) return reply_error(res, r.err());
    auto reply = std::make_shared<run_reply>(std::move(*r));
    maybe_off_thread<result<std::string>>(self, reply->outputs_json.size() >= off_thread_bytes,
                                          [reply] { return result<std::string>(graph_reply_json(*reply)); },
                                          [res](result<std::string>& body) {
                                            if (!body) return reply_error(res, body.err());
                                            reply_json(res, 200, std::move(*body));
                                          });
  });
  res->on_disconnect([coord = c.coord(), requester = self->address()] { caf::anon_send(coord, cancel_atom::value, requester); });
}

// Handlers, in the order of the table below.

void on_versions(const call& c) { forward<versions_reply>(c.self, c.coord(), 30s, c.res, 200, versions_atom::value); }
void on_ops(const call& c) { reply_json(c.res, 200, schema::instance().ops_document()); }
void on_llms_txt(const call& c) {
  c.res->respond(response{200, "text/plain; charset=utf-8", c.req->method == "HEAD" ? "" : c.ctx->cfg.llms_txt, {}});
}

/// Sign-up and login share their body: {username, password}.
void on_credentials(const call& c, bool login) {
  auto d = body_object(*c.req);
  if (!d) return reply_error(c.res, d.err());
  auto user = body_string(*d, "username");
  if (!user) return reply_error(c.res, user.err());
  auto pass = body_string(*d, "password");
  if (!pass) return reply_error(c.res, pass.err());
  if (!login) return forward<account_reply>(c.self, c.accounts(), 60s, c.res, 201, signup_atom::value, *user, *pass);
  // Guessing passwords: past the failed-login limit for this username or this address, the
  // attempt is refused before the password is checked (docs/operators.md, "Abuse limits").
  const std::string address = c.req->remote.substr(0, c.req->remote.rfind(':'));
  auto logins = c.ctx->logins;
  if (auto wait = logins->blocked(*user, address)) {
    const auto& a = c.ctx->cfg.abuse;
    return c.res->respond(response{
        429, "application/json",
        error_json("too many failed logins for this username or from this address (at most " +
                   std::to_string(a.login_failures_per_user) + " per username and " +
                   std::to_string(a.login_failures_per_address) + " per address in " +
                   std::to_string(a.login_window.count()) + " s); try again in " + std::to_string(wait->count()) + " s"),
        {{"Retry-After", std::to_string(wait->count())}}});
  }
  auto res = c.res;
  c.self->request(c.accounts(), 60s, login_atom::value, *user, *pass)
      .then([res](login_reply& r) { reply_json(res, 200, render(r)); },
            [res, logins, name = *user, address](caf::error& e) {
              const error err = from_caf(e);
              if (err.code == errc::unauthorized) logins->failed(name, address);
              reply_error(res, err);
            });
}
void on_sign_up(const call& c) { on_credentials(c, false); }
void on_login(const call& c) { on_credentials(c, true); }

void on_make_key(const call& c) {
  std::string label;
  if (!c.body().empty()) {
    auto d = body_object(*c.req);
    if (!d) return reply_error(c.res, d.err());
    if (d->HasMember("label")) {
      auto l = body_string(*d, "label");
      if (!l) return reply_error(c.res, l.err());
      label = *l;
    }
  }
  forward<key_reply>(c.self, c.accounts(), 30s, c.res, 201, mkkey_atom::value, c.token, label);
}
void on_list_keys(const call& c) {
  forward<keys_reply>(c.self, c.accounts(), 30s, c.res, 200, keys_atom::value, c.token);
}
void on_revoke_key(const call& c) {
  forward<deleted_reply>(c.self, c.accounts(), 30s, c.res, 200, rmkey_atom::value, c.token, c.args[0]);
}
void on_approve(const call& c) {
  forward<account_reply>(c.self, c.accounts(), 30s, c.res, 200, approve_atom::value, c.args[0]);
}

void on_status(const call& c) { forward<status_reply>(c.self, c.coord(), 30s, c.res, 200, status_atom::value, c.who); }
void on_inspect(const call& c) {
  // (a gated repository's token: the query's `token`, or the x-hf-token header)
  std::string token = query_param(*c.req, "token").value_or("");
  if (const std::string* h = c.req->header("x-hf-token"); token.empty() && h) token = *h;
  // (a checkpoint of many thousands of tensors is written as JSON on a helper thread)
  auto self = c.self;
  auto res = c.res;
  self->request(c.coord(), c.timeout(), inspect_atom::value, c.who, query_param(*c.req, "source").value_or(""), token)
      .then(
          [self, res](inspect_model_reply& r) {
            auto reply = std::make_shared<inspect_model_reply>(std::move(r));
            maybe_off_thread<result<std::string>>(self, reply->tensors.size() >= inspect_off_thread_tensors,
                                                  [reply] { return result<std::string>(render(*reply)); },
                                                  [res](result<std::string>& body) {
                                                    if (!body) return reply_error(res, body.err());
                                                    reply_json(res, 200, std::move(*body));
                                                  });
          },
          [res](caf::error& e) { reply_error(res, from_caf(e)); });
}
void on_load(const call& c) {
  auto call = decode_load_call(c.body());
  if (!call) return reply_error(c.res, call.err());
  // A load takes as long as the transfer; the load job bounds each piece instead.
  auto res = c.res;
  c.self->request(c.coord(), caf::infinite, load_atom::value, c.who, std::move(*call))
      .then([res](load_model_reply& r) { reply_json(res, 200, render(r)); },
            [res](caf::error& e) { reply_error(res, from_caf(e)); });
}
void on_list_models(const call& c) {
  forward<list_models_reply>(c.self, c.coord(), 30s, c.res, 200, list_atom::value, models_atom::value, c.who);
}
void on_delete_model(const call& c) {
  forward<deleted_reply>(c.self, c.coord(), 30s, c.res, 200, delete_atom::value, models_atom::value, c.who, c.args[0]);
}
void on_model_graph(const call& c) {
  auto req = c.req;
  auto res = c.res;
  const std::string model_id = c.args[0];
  c.self->request(c.coord(), 3min, files_atom::value, c.who, model_id)
      .then(
          [req, res, model_id](std::string& config, std::string&, std::string&, std::string&) {
            auto body = build_model_graph(req->body, config, model_id);
            if (!body) return reply_error(res, body.err());
            reply_json(res, 200, std::move(*body));
          },
          [res](caf::error& e) { reply_error(res, from_caf(e)); });
}
void on_open_session(const call& c) {
  auto call = decode_session_call(c.body());
  if (!call) return reply_error(c.res, call.err());
  forward<open_session_reply>(c.self, c.coord(), 30s, c.res, 200, create_atom::value, sessions_atom::value, c.who,
                              std::move(*call));
}
void on_get_session(const call& c) {
  forward<session_state_reply>(c.self, c.coord(), 30s, c.res, 200, get_atom::value, sessions_atom::value, c.who, c.args[0]);
}
void on_close_session(const call& c) {
  forward<deleted_reply>(c.self, c.coord(), 30s, c.res, 200, delete_atom::value, sessions_atom::value, c.who, c.args[0]);
}
void on_checkpoint(const call& c) {
  forward<checkpoint_reply>(c.self, c.coord(), c.timeout(), c.res, 200, checkpt_atom::value, c.who, c.args[0]);
}
void on_restore(const call& c) {
  forward<checkpoint_reply>(c.self, c.coord(), c.timeout(), c.res, 200, restore_atom::value, c.who, c.args[0]);
}
void on_graph_v3(const call& c) { forward_graph(c, 3); }
void on_compile(const call& c) {
  send_compile_call(c.self, c.coord(), c.who, shared_body(c.req), c.timeout(), json_answer<compile_graph_reply>(c.res));
}
void on_list_graphs(const call& c) { forward<list_graphs_reply>(c.self, c.coord(), 30s, c.res, 200, list_atom::value, graphs_atom::value, c.who); }
void on_delete_graph(const call& c) {
  forward<deleted_reply>(c.self, c.coord(), 30s, c.res, 200, delete_atom::value, graphs_atom::value, c.who, c.args[0]);
}
/// A slot among the generations the caller's key may run at once, or null after answering 429.
std::shared_ptr<void> generation_slot(const std::shared_ptr<context>& ctx, const caller& who, const responder_ptr& res) {
  auto slot = ctx->generations->acquire(who.key_id);
  if (!slot)
    reply_error(res, errc::limit,
                "this key already runs " + std::to_string(ctx->generations->per_key()) +
                    " generations (generate or chat) at once, the limit; wait for one to end");
  return slot;
}
std::shared_ptr<void> generation_slot(const call& c) { return generation_slot(c.ctx, c.who, c.res); }
void on_chat(const call& c) {
  auto chat = parse_chat_request(c.body());
  if (!chat) return reply_error(c.res, chat.err());
  auto slot = generation_slot(c);
  if (!slot) return;
  start_chat(*c.ctx->sys, c.coord(), c.ctx->chat, c.who, std::move(*chat), c.res, std::move(slot));
}
void on_generate(const call& c) {
  auto ctx = c.ctx;
  auto res = c.res;
  auto who = c.who;
  auto self = c.self;
  auto coord = c.coord();
  auto req = c.req;
  // (up to 16 MiB of ids: decoded on a helper thread when large)
  maybe_off_thread<result<generate_call>>(self, req->body.size() >= off_thread_bytes,
                                          [req] { return decode_generate_call(req->body); },
                                          [ctx, res, who, self, coord](result<generate_call>& call) {
    if (!call) return reply_error(res, call.err());
    auto slot = generation_slot(ctx, who, res);
    if (!slot) return;
    self->request(coord, 60s, generate_atom::value, who, std::move(*call))
        .then([ctx, res, who, slot](gen_plan& plan) {
                start_generation(*ctx->sys, std::move(plan), res, ctx->actors.coordinator, who, slot);
              },
              [res](caf::error& e) { reply_error(res, from_caf(e)); });
  });
}
void on_random(const call& c) { random_numbers(*c.req, c.res); }
void on_check_worker(const call& c) {
  // (a volunteer's weights challenged afresh: as long as hashing what it holds takes)
  forward<recheck_reply>(c.self, c.coord(), std::chrono::minutes(10), c.res, 200, recheck_atom::value, c.who, c.args[0]);
}

// The console (operators): the grid's picture and its events (http/api/console.hpp).

/// Refuses a query string on a route that takes none, naming what was sent.
bool no_query(const call& c) {
  const auto q = parse_query(c.req->query);
  if (q.empty()) return true;
  reply_error(c.res, errc::invalid,
              c.req->method + " " + c.req->path + " takes no query parameters (got \"" + q.front().first + "\")");
  return false;
}

/// Asks the coordinator for every actor's snapshot, then the accounts actor for its own (it
/// answers the edge, not the coordinator), and hands the picture on; `fail` on an error.
void gather_picture(caf::event_based_actor* self, const std::shared_ptr<context>& ctx,
                    std::function<void(std::vector<actor_snapshot>)> done, std::function<void(const caf::error&)> fail) {
  self->request(ctx->actors.coordinator, 10s, actors_atom::value)
      .then(
          [self, ctx, done](std::vector<actor_snapshot>& all) {
            auto picture = std::make_shared<std::vector<actor_snapshot>>(std::move(all));
            self->request(ctx->actors.accounts, 1500ms, describe_atom::value)
                .then(
                    [picture, done](actor_snapshot& a) {
                      picture->push_back(std::move(a));
                      done(std::move(*picture));
                    },
                    [picture, done](caf::error& e) {
                      actor_snapshot a;
                      a.kind = a.id = "accounts";
                      a.answered = false;
                      a.errors.push_back(from_caf(e).message);
                      picture->push_back(std::move(a));
                      done(std::move(*picture));
                    });
          },
          [fail](caf::error& e) { fail(e); });
}

void on_admin_actors(const call& c) {
  if (!no_query(c)) return;
  auto res = c.res;
  gather_picture(
      c.self, c.ctx, [res](std::vector<actor_snapshot> all) { reply_json(res, 200, actors_json(unix_ms_now(), all)); },
      [res](const caf::error& e) { reply_error(res, from_caf(e)); });
}

using tick_atom = caf::atom_constant<caf::atom("tick")>;

/// GET /api/v3/admin/actors/stream: an actor of its own for as long as the client listens,
/// subscribed to the coordinator's grid events (sent as `grid` events as they come) and
/// sending a `snapshot` event every second (the next one is asked for once the last came,
/// so a slow picture never piles up).
void on_admin_actors_stream(const call& c) {
  if (!no_query(c)) return;
  auto ctx = c.ctx;
  auto res = c.res;
  c.ctx->sys->spawn([ctx, res](caf::event_based_actor* self) -> caf::behavior {
    auto sse = res->start_sse(200);
    auto me = caf::actor_cast<caf::actor>(self);
    sse->on_disconnect([me] { caf::anon_send_exit(me, caf::exit_reason::user_shutdown); });
    caf::anon_send(ctx->actors.coordinator, subscribe_atom::value, caf::actor_cast<grid_listener>(self));
    self->send(self, tick_atom::value);
    return {
        [=](tick_atom) {
          if (sse->closed()) return self->quit();
          gather_picture(
              self, ctx,
              [self, sse](std::vector<actor_snapshot> all) {
                if (!sse->send("snapshot", actors_json(unix_ms_now(), all))) return self->quit();
                self->delayed_send(self, 1s, tick_atom::value);
              },
              [self, sse](const caf::error& e) {
                if (!sse->send("error", error_json(from_caf(e).message))) return self->quit();
                self->delayed_send(self, 1s, tick_atom::value);
              });
        },
        [=](gridevent_atom, const grid_event& e, const describable&) {
          if (!sse->send("grid", event_json(e))) self->quit();
        },
    };
  });
}

// The OpenAI-compatible API (docs/api-reference.md, "OpenAI-compatible API").

void reply_openai_refusal(const responder_ptr& res, const openai_refusal& why) {
  const int status = http_status(why.err.code);
  reply_json(res, status, openai_error_json(status, why.err.message, why.param));
}

void start_openai(const call& c, std::optional<chat_request> req, const openai_refusal& why) {
  if (!req) return reply_openai_refusal(c.res, why);
  auto slot = generation_slot(c);
  if (!slot) return;
  start_chat(*c.ctx->sys, c.coord(), c.ctx->chat, c.who, std::move(*req), c.res, std::move(slot));
}
void on_openai_chat(const call& c) {
  openai_refusal why;
  auto req = parse_openai_chat(c.body(), &why);
  start_openai(c, std::move(req), why);
}
void on_openai_completion(const call& c) {
  openai_refusal why;
  auto req = parse_openai_completion(c.body(), &why);
  start_openai(c, std::move(req), why);
}

/// The account's models as OpenAI lists them: one entry per modelId, with its source.
void openai_models(const call& c, std::optional<std::string> one) {
  auto res = c.res;
  c.self->request(c.coord(), 30s, list_atom::value, models_atom::value, c.who)
      .then(
          [res, one](list_models_reply& list) {
            const auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
            auto entry = [&](json_writer& w, const model_view& m) {
              w.StartObject();
              kv(w, "id", m.model_id);
              kv(w, "object", "model");
              key(w, "created"); w.Int64(now);
              kv(w, "owned_by", "mpakt");
              kv(w, "source", m.source);
              w.EndObject();
            };
            if (one) {
              for (const auto& m : list.models)
                if (*one == m.model_id || *one == m.source) return reply_json(res, 200, json([&](json_writer& w) { entry(w, m); }));
              return reply_json(res, 404, openai_error_json(404, "The model '" + *one + "' does not exist", "model"));
            }
            reply_json(res, 200, json([&](json_writer& w) {
              w.StartObject();
              kv(w, "object", "list");
              key(w, "data");
              w.StartArray();
              for (const auto& m : list.models) entry(w, m);
              w.EndArray();
              w.EndObject();
            }));
          },
          [res](caf::error& e) { reply_error(res, from_caf(e)); });
}
void on_openai_models(const call& c) { openai_models(c, std::nullopt); }
void on_openai_model(const call& c) { openai_models(c, c.args[0]); }
void on_upload_tensor(const call& c) {
  send_tensor_upload(c.self, c.coord(), c.who, shared_body(c.req), c.timeout(), json_answer<upload_tensor_reply>(c.res));
}
void on_delete_tensor(const call& c) {
  forward<deleted_reply>(c.self, c.coord(), c.timeout(), c.res, 200, delete_atom::value, tensors_atom::value, c.who, c.args[0]);
}
void on_graph_v2(const call& c) { forward_graph(c, 2); }

/// GET /metrics: the gauges of what the grid holds are set from the coordinator's answer
/// (counts of its maps, and the pool's status of every worker, answered by the workers'
/// fronts), then every metric is rendered. Without that answer within 5 s the counters are
/// served alone (the gauges keep their last values).
void on_metrics(const call& c) {
  auto res = c.res;
  auto serve = [res] { res->respond(response{200, metrics::content_type, metrics::render(), {}}); };
  c.self->request(c.coord(), 5s, metrics_atom::value)
      .then(
          [serve](std::uint64_t sessions, std::uint64_t graphs, std::uint64_t models, std::vector<worker_status>& ws) {
            auto& m = metrics::m();
            m.sessions.with().set(double(sessions));
            m.graphs.with().set(double(graphs));
            m.models.with().set(double(models));
            m.workers.clear();
            m.worker_offered.clear();
            m.worker_resident.clear();
            m.worker_generations.clear();
            for (const auto& w : ws) {
              const bool busy = w.busy_since_ms != 0 || w.generations > 0;
              m.workers.with({w.backend, busy ? "busy" : "idle"}).add(1);
              m.worker_offered.with({w.worker_id, w.backend}).set(double(w.total_bytes));
              m.worker_resident.with({w.worker_id, w.backend}).set(double(w.total_bytes - std::min(w.free_bytes, w.total_bytes)));
              m.worker_generations.with({w.worker_id, w.backend}).set(double(w.generations));
            }
            serve();
          },
          [serve](caf::error&) { serve(); });
}

/// The API's routes (http/api/route_table.hpp), with their handlers.
const route routes[] = {
#define MPAKT_ROUTE(method, pattern, level, handler) {method, pattern, auth::level, handler},
    MPAKT_API_ROUTES(MPAKT_ROUTE)
#undef MPAKT_ROUTE
};

/// The largest body a route takes, for routes whose bodies are small by nature: they are
/// parsed on the scheduler thread the coordinator shares (or by the coordinator itself), so
/// a body of hundreds of megabytes, which --body-limit lets through for graphs and uploads,
/// is refused before any of it is read as JSON (docs/decisions.md, "Body sizes"). 0 = only
/// --body-limit (graph calls, templates and uploads are decoded on threads of their own;
/// chat has its own cap).
std::size_t body_cap(const route& r) {
  constexpr std::size_t kib = 1024, mib = kib * 1024;
  const auto h = r.handle;
  if (h == on_sign_up || h == on_login || h == on_make_key) return 64 * kib;
  if (h == on_open_session || h == on_load) return 1 * mib;
  if (h == on_generate || h == on_model_graph) return 16 * mib;
  return 0;
}

/// Checks the route's body cap and auth level, then runs its handler in a short-lived actor.
void run_route(const route& r, call c) {
  const auto& res = c.res;
  if (const std::size_t cap = body_cap(r); cap && c.req->body.size() > cap)
    return reply_error(res, errc::too_large,
                       c.req->method + " " + r.pattern + " takes a body of at most " + std::to_string(cap) +
                           " bytes; this one has " + std::to_string(c.req->body.size()));
  switch (r.level) {
    case auth::none:
      break;
    case auth::login:
      c.token = bearer(*c.req);
      if (c.token.empty())
        return reply_error(res, errc::unauthorized,
                           "key management needs an Authorization: Bearer <token> header from POST /api/accounts/login");
      break;
    case auth::metrics:
      if (c.ctx->cfg.metrics_open) break;
      [[fallthrough]];
    case auth::key:
    case auth::openai:
    case auth::operator_key: {
      const std::string* key = c.req->header("x-api-key");
      std::string from_bearer;
      if ((!key || key->empty()) && (r.level == auth::metrics || r.level == auth::openai) &&
          !(from_bearer = bearer(*c.req)).empty())
        key = &from_bearer;
      if (!key || key->empty())
        return reply_error(res, errc::unauthorized,
                           r.level == auth::metrics
                               ? "GET /metrics needs an operator's key (x-api-key or Authorization: Bearer), or serve --metrics-open"
                           : r.level == auth::openai ? "missing API key: send it as Authorization: Bearer mpk_… (or x-api-key)"
                                                     : "missing x-api-key header: every API call needs a key");
      const bool need_operator = r.level == auth::operator_key || r.level == auth::metrics;
      auto handle = r.handle;
      c.ctx->sys->spawn([c = std::move(c), k = *key, need_operator, handle](caf::event_based_actor* self) mutable {
        c.self = self;
        self->request(c.accounts(), 30s, checkkey_atom::value, k)
            .then(
                [c, need_operator, handle](caller& who, bool admin) mutable {
                  if (need_operator && !admin)
                    return reply_error(c.res, errc::forbidden, c.req->method + " " + c.req->path + " needs an operator's key");
                  c.who = std::move(who);
                  c.who.request_id = c.rec->id();
                  c.rec->set_key_id(c.who.key_id);
                  handle(c);
                },
                [res = c.res](caf::error& e) { reply_error(res, from_caf(e)); });
      });
      return;
    }
  }
  auto handle = r.handle;
  c.ctx->sys->spawn([c = std::move(c), handle](caf::event_based_actor* self) mutable {
    c.self = self;
    handle(c);
  });
}

/// The OpenAI-compatible API's responder: every error body in OpenAI's shape, whichever part
/// of the server answered it (the router, auth, the coordinator, chat).
class openai_errors final : public responder {
 public:
  explicit openai_errors(responder_ptr inner) : inner_(std::move(inner)) {}
  void respond(response r) override {
    if (r.status >= 400) r.body = openai_error_body(r.status, r.body);
    inner_->respond(std::move(r));
  }
  std::shared_ptr<sse_stream> start_sse(int status, header_list headers) override {
    return inner_->start_sse(status, std::move(headers));
  }
  void respond_stream(response head, std::optional<std::uint64_t> content_length, body_source source) override {
    inner_->respond_stream(std::move(head), content_length, std::move(source));
  }
  void on_disconnect(std::function<void()> f) override { inner_->on_disconnect(std::move(f)); }

 private:
  responder_ptr inner_;
};

void dispatch(const std::shared_ptr<context>& ctx, request&& req_in, const responder_ptr& server_res) {
  auto req = std::make_shared<const request>(std::move(req_in));
  auto rec = std::make_shared<request_record>(request_id_of(*req), req->method, req->remote);
  responder_ptr res = observe(server_res, rec);
  if (req->path == "/v1" || req->path.rfind("/v1/", 0) == 0) res = std::make_shared<openai_errors>(res);
  auto m = api_router().match(req->method, req->path);  // (its indexes are routes[]'s: the same table)
  switch (m.k) {
    case route_match::kind::found:
      rec->set_route(routes[m.index].pattern);
      return run_route(routes[m.index], call{ctx, req, res, std::move(m.args), nullptr, {}, {}, rec});
    case route_match::kind::wrong_method:
      return reply_error(res, errc::invalid,
                         "method " + req->method + " is not allowed on " + req->path + " (it takes " + m.allowed + ")");
    case route_match::kind::no_path:
      break;
  }
  const auto path = path_segments(req->path);
  if ((path.empty() || (path[0] != "api" && path[0] != "v1")) && (req->method == "GET" || req->method == "HEAD")) {
    rec->set_route("static");
    return static_file(*ctx, *req, res);
  }
  reply_error(res, errc::not_found, "no endpoint " + req->method + " " + req->path);
}
}  // namespace

handler make_api_handler(caf::actor_system& sys, api_actors actors, api_config cfg) {
  auto ctx = std::make_shared<context>(context{&sys, std::move(actors), std::move(cfg)});
  return [ctx](request&& req, std::shared_ptr<responder> res) { dispatch(ctx, std::move(req), res); };
}

}  // namespace mpakt::http
