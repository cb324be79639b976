#include "http/api/routes.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "actors/errors.hpp"
#include "actors/ids.hpp"
#include "http/api/chat.hpp"
#include "http/api/generate.hpp"
#include "http/api/model_graph.hpp"
#include "http/url.hpp"
#include "runtime/schema.hpp"

namespace mpakt::http {

namespace {

using namespace std::chrono_literals;

struct context {
  caf::actor_system* sys;
  api_actors actors;
  api_config cfg;
  std::shared_ptr<chat_registry> chat = std::make_shared<chat_registry>();
};

using responder_ptr = std::shared_ptr<responder>;

void reply_json(const responder_ptr& res, int status, std::string body) {
  res->respond(response{status, "application/json", std::move(body), {}});
}

void reply_error(const responder_ptr& res, const error& e) { reply_json(res, http_status(e.code), error_json(e.message)); }
void reply_error(const responder_ptr& res, errc code, const std::string& msg) { reply_error(res, error{code, msg}); }

std::vector<std::string> segments(const std::string& path) {
  std::vector<std::string> out;
  std::stringstream ss(path);
  std::string s;
  while (std::getline(ss, s, '/'))
    if (!s.empty()) out.push_back(s);
  return out;
}

/// Sends one request to a coordinator-side actor on behalf of an HTTP request and answers
/// with its JSON reply (or its error).
template <class Handle, class... Ts>
void forward(caf::event_based_actor* self, const Handle& h, std::chrono::milliseconds timeout, responder_ptr res,
             int ok_status, Ts&&... xs) {
  self->request(h, timeout, std::forward<Ts>(xs)...)
      .then([res, ok_status](std::string& body) { reply_json(res, ok_status, std::move(body)); },
            [res](caf::error& e) { reply_error(res, from_caf(e)); });
}

/// A graph call on behalf of an HTTP request: a client that goes away before the answer stops
/// the graph on its worker (the coordinator knows the call by this actor).
void forward_graph(caf::event_based_actor* self, const coordinator_actor& coord, std::chrono::milliseconds timeout,
                   const responder_ptr& res, const caller& who, const std::string& body, std::int32_t version) {
  forward(self, coord, timeout, res, 200, graph_atom::value, who, body, version);
  res->on_disconnect([coord, requester = self->address()] { caf::anon_send(coord, cancel_atom::value, requester); });
}

/// Checks the request's x-api-key, then runs `then` in a short-lived actor.
void with_key(const std::shared_ptr<context>& ctx, const request& req, const responder_ptr& res,
              std::function<void(caf::event_based_actor*, const caller&, bool admin)> then) {
  const std::string* key = req.header("x-api-key");
  if (!key || key->empty()) return reply_error(res, errc::unauthorized, "missing x-api-key header: every API call needs a key");
  ctx->sys->spawn([ctx, res, k = *key, then](caf::event_based_actor* self) {
    self->request(ctx->actors.accounts, 30s, checkkey_atom::value, k)
        .then([self, then](caller& who, bool admin) { then(self, who, admin); },
              [res](caf::error& e) { reply_error(res, from_caf(e)); });
  });
}

/// Runs `f` in a short-lived actor (for calls that need no key).
void in_actor(const std::shared_ptr<context>& ctx, std::function<void(caf::event_based_actor*)> f) {
  ctx->sys->spawn([f](caf::event_based_actor* self) { f(self); });
}

result<rapidjson::Document> body_object(const request& req) {
  rapidjson::Document d;
  d.Parse(req.body.c_str(), req.body.size());
  if (d.HasParseError()) return invalid("request body is not valid JSON (error at byte " + std::to_string(d.GetErrorOffset()) + ")");
  if (!d.IsObject()) return invalid("request body must be a JSON object");
  return d;
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
    long long x = 0;
    auto r = std::from_chars(v->data(), v->data() + v->size(), x);
    if (r.ec != std::errc() || r.ptr != v->data() + v->size()) return invalid(std::string(name) + " must be an integer, not \"" + *v + "\"");
    return x;
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
  const fs::path p = fs::path(ctx.cfg.web_dir) / rel;
  std::ifstream f(p, std::ios::binary);
  if (!f || fs::is_directory(p)) return reply_error(res, errc::not_found, "no page at " + req.path);
  std::stringstream ss;
  ss << f.rdbuf();
  res->respond(response{200, content_type_of(p.string()), ss.str(), {}});
}

void dispatch(const std::shared_ptr<context>& ctx, request&& req_in, const responder_ptr& res) {
  auto req = std::make_shared<request>(std::move(req_in));
  const std::string& m = req->method;
  auto seg = segments(req->path);
  const auto timeout = ctx->cfg.request_timeout;
  const auto& coord = ctx->actors.coordinator;
  const auto& accts = ctx->actors.accounts;
  auto no_route = [&] { reply_error(res, errc::not_found, "no endpoint " + m + " " + req->path); };
  auto wrong_method = [&] { reply_error(res, errc::invalid, "method " + m + " is not allowed on " + req->path); };

  if (seg.empty() || seg[0] != "api") {
    if (req->path == "/llms.txt" && (m == "GET" || m == "HEAD"))
      return res->respond(response{200, "text/plain; charset=utf-8", m == "HEAD" ? "" : ctx->cfg.llms_txt, {}});
    if (m == "GET" || m == "HEAD") return static_file(*ctx, *req, res);
    return no_route();
  }
  // ---- no key needed ----
  if (seg.size() == 2 && seg[1] == "versions") {
    if (m != "GET") return wrong_method();
    return in_actor(ctx, [=](caf::event_based_actor* self) { forward(self, coord, 30s, res, 200, versions_atom::value); });
  }
  if (seg.size() == 2 && seg[1] == "ops") {
    if (m != "GET") return wrong_method();
    return reply_json(res, 200, schema::instance().ops_document());
  }
  // ---- accounts and keys (decisions.md Z-01) ----
  if (seg[1] == "accounts") {
    if (m != "POST") return wrong_method();
    auto d = body_object(*req);
    if (!d) return reply_error(res, d.err());
    auto user = body_string(*d, "username");
    if (!user) return reply_error(res, user.err());
    auto pass = body_string(*d, "password");
    if (!pass) return reply_error(res, pass.err());
    if (seg.size() == 2)
      return in_actor(ctx, [=](caf::event_based_actor* self) { forward(self, accts, 60s, res, 201, signup_atom::value, *user, *pass); });
    if (seg.size() == 3 && seg[2] == "login")
      return in_actor(ctx, [=](caf::event_based_actor* self) { forward(self, accts, 60s, res, 200, login_atom::value, *user, *pass); });
    return no_route();
  }
  if (seg[1] == "keys") {
    const std::string token = bearer(*req);
    if (token.empty())
      return reply_error(res, errc::unauthorized, "key management needs an Authorization: Bearer <token> header from POST /api/accounts/login");
    if (seg.size() == 2 && m == "POST") {
      std::string label;
      if (!req->body.empty()) {
        auto d = body_object(*req);
        if (!d) return reply_error(res, d.err());
        if (d->HasMember("label")) {
          auto l = body_string(*d, "label");
          if (!l) return reply_error(res, l.err());
          label = *l;
        }
      }
      return in_actor(ctx, [=](caf::event_based_actor* self) { forward(self, accts, 30s, res, 201, mkkey_atom::value, token, label); });
    }
    if (seg.size() == 2 && m == "GET")
      return in_actor(ctx, [=](caf::event_based_actor* self) { forward(self, accts, 30s, res, 200, keys_atom::value, token); });
    if (seg.size() == 3 && m == "DELETE")
      return in_actor(ctx, [=](caf::event_based_actor* self) { forward(self, accts, 30s, res, 200, rmkey_atom::value, token, seg[2]); });
    return seg.size() <= 3 ? wrong_method() : no_route();
  }
  if (seg[1] == "admin") {
    if (seg.size() == 5 && seg[2] == "accounts" && seg[4] == "approve" && m == "POST") {
      const std::string name = seg[3];
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller&, bool admin) {
        if (!admin) return reply_error(res, errc::forbidden, "approving accounts needs an operator's key");
        forward(self, accts, 30s, res, 200, approve_atom::value, name);
      });
    }
    return no_route();
  }
  // ---- versioned API: every call needs a key ----
  std::string version = seg[1];
  if (version == "v1") version = "v2";  // v1 is an alias of v2 (decisions.md)
  if (version == "v2") {
    if (seg.size() == 3 && seg[2] == "tensors") {
      if (m != "POST") return wrong_method();
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        forward(self, coord, timeout, res, 200, create_atom::value, tensors_atom::value, who, req->body);
      });
    }
    if (seg.size() == 4 && seg[2] == "tensors") {
      if (m != "DELETE") return wrong_method();
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        forward(self, coord, timeout, res, 200, delete_atom::value, tensors_atom::value, who, seg[3]);
      });
    }
    if (seg.size() == 3 && seg[2] == "graph") {
      if (m != "POST") return wrong_method();
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        forward_graph(self, coord, timeout, res, who, req->body, std::int32_t(2));
      });
    }
    return no_route();
  }
  if (version != "v3") return no_route();
  if (seg.size() < 3) return no_route();
  const std::string& what = seg[2];
  const std::size_t n = seg.size();

  if (what == "status" && n == 3) {
    if (m != "GET") return wrong_method();
    return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
      forward(self, coord, 30s, res, 200, status_atom::value, who);
    });
  }
  if (what == "random" && n == 3) {
    if (m != "GET") return wrong_method();
    return with_key(ctx, *req, res, [=](caf::event_based_actor*, const caller&, bool) { random_numbers(*req, res); });
  }
  if (what == "models") {
    if (n == 4 && seg[3] == "inspect") {
      if (m != "GET") return wrong_method();
      const std::string source = query_param(*req, "source").value_or("");
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        forward(self, coord, timeout, res, 200, inspect_atom::value, who, source);
      });
    }
    if (n == 3 && m == "POST")
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        self->request(coord, caf::infinite, load_atom::value, who, req->body)
            .then([res](std::string& body) { reply_json(res, 200, std::move(body)); },
                  [res](caf::error& e) { reply_error(res, from_caf(e)); });
      });
    if (n == 3 && m == "GET")
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        forward(self, coord, 30s, res, 200, list_atom::value, models_atom::value, who);
      });
    if (n == 4 && m == "DELETE")
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        forward(self, coord, 30s, res, 200, delete_atom::value, models_atom::value, who, seg[3]);
      });
    if (n == 5 && seg[4] == "graph") {
      if (m != "POST") return wrong_method();
      const std::string model_id = seg[3];
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        self->request(coord, 3min, files_atom::value, who, model_id)
            .then(
                [=](std::string& config, std::string&, std::string&, std::string&) {
                  auto body = build_model_graph(req->body, config, model_id);
                  if (!body) return reply_error(res, body.err());
                  reply_json(res, 200, std::move(*body));
                },
                [res](caf::error& e) { reply_error(res, from_caf(e)); });
      });
    }
    return n <= 5 ? wrong_method() : no_route();
  }
  if (what == "sessions") {
    if (n == 3 && m == "POST")
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        forward(self, coord, 30s, res, 200, create_atom::value, sessions_atom::value, who, req->body);
      });
    if (n == 4 && m == "GET")
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        forward(self, coord, 30s, res, 200, get_atom::value, sessions_atom::value, who, seg[3]);
      });
    if (n == 4 && m == "DELETE")
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        forward(self, coord, 30s, res, 200, delete_atom::value, sessions_atom::value, who, seg[3]);
      });
    if (n == 5 && (seg[4] == "checkpoint" || seg[4] == "restore")) {
      if (m != "POST") return wrong_method();
      const bool checkpoint = seg[4] == "checkpoint";
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        if (checkpoint) forward(self, coord, timeout, res, 200, checkpt_atom::value, who, seg[3]);
        else forward(self, coord, timeout, res, 200, restore_atom::value, who, seg[3]);
      });
    }
    return n <= 4 ? wrong_method() : no_route();
  }
  if (what == "graph" && n == 3) {
    if (m != "POST") return wrong_method();
    return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
      forward_graph(self, coord, timeout, res, who, req->body, std::int32_t(3));
    });
  }
  if (what == "graphs") {
    if (n == 3 && m == "POST")
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        forward(self, coord, timeout, res, 200, create_atom::value, graphs_atom::value, who, req->body);
      });
    if (n == 3 && m == "GET")
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        forward(self, coord, 30s, res, 200, list_atom::value, graphs_atom::value, who);
      });
    if (n == 4 && m == "DELETE")
      return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
        forward(self, coord, 30s, res, 200, delete_atom::value, graphs_atom::value, who, seg[3]);
      });
    return n <= 4 ? wrong_method() : no_route();
  }
  if (what == "chat" && n == 3) {
    if (m != "POST") return wrong_method();
    return with_key(ctx, *req, res, [=](caf::event_based_actor*, const caller& who, bool) {
      auto chat = parse_chat_request(req->body);
      if (!chat) return reply_error(res, chat.err());
      start_chat(*ctx->sys, coord, ctx->chat, who, std::move(*chat), res);
    });
  }
  if (what == "generate" && n == 3) {
    if (m != "POST") return wrong_method();
    return with_key(ctx, *req, res, [=](caf::event_based_actor* self, const caller& who, bool) {
      self->request(coord, 60s, generate_atom::value, who, req->body)
          .then([ctx, res, coord, who](gen_plan& plan) { start_generation(*ctx->sys, std::move(plan), res, coord, who); },
                [res](caf::error& e) { reply_error(res, from_caf(e)); });
    });
  }
  no_route();
}

}  // namespace

handler make_api_handler(caf::actor_system& sys, api_actors actors, api_config cfg) {
  auto ctx = std::make_shared<context>(context{&sys, std::move(actors), std::move(cfg), std::make_shared<chat_registry>()});
  return [ctx](request&& req, std::shared_ptr<responder> res) { dispatch(ctx, std::move(req), res); };
}

}  // namespace mpakt::http
