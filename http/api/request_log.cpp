#include "http/api/request_log.hpp"

#include <cstdio>

#include "actors/ids.hpp"
#include "runtime/log.hpp"
#include "runtime/metrics.hpp"

namespace mpakt::http {

namespace {

/// The error code behind an error status (the inverse of http_status, actors/errors.cpp).
const char* error_code_of(int status) {
  switch (status) {
    case 400: return "invalid";
    case 401: return "unauthorized";
    case 403: return "forbidden";
    case 404: return "not_found";
    case 409: return "conflict";
    case 413: return "too_large";
    case 429: return "limit";
    case 503: return "unavailable";
    case 504: return "timeout";
    default: return "internal";
  }
}

class observed_responder final : public responder {
 public:
  observed_responder(std::shared_ptr<responder> inner, std::shared_ptr<request_record> rec)
      : inner_(std::move(inner)), rec_(std::move(rec)) {}

  // Dropped unanswered: the server's responder answers 500, so that is what is recorded.
  ~observed_responder() override { rec_->on_answer(500); }

  void respond(response r) override {
    r.headers.emplace_back("x-request-id", rec_->id());
    rec_->on_answer(r.status);
    inner_->respond(std::move(r));
  }
  std::shared_ptr<sse_stream> start_sse(int status, header_list headers) override {
    headers.emplace_back("x-request-id", rec_->id());
    rec_->on_answer(status);
    return inner_->start_sse(status, std::move(headers));
  }
  void respond_stream(response head, std::optional<std::uint64_t> content_length, body_source source) override {
    head.headers.emplace_back("x-request-id", rec_->id());
    rec_->on_answer(head.status);
    inner_->respond_stream(std::move(head), content_length, std::move(source));
  }
  void on_disconnect(std::function<void()> f) override { inner_->on_disconnect(std::move(f)); }

 private:
  std::shared_ptr<responder> inner_;
  std::shared_ptr<request_record> rec_;
};

}  // namespace

request_record::request_record(std::string id, std::string method, std::string remote)
    : id_(std::move(id)), method_(std::move(method)), remote_(std::move(remote)) {}

void request_record::set_route(std::string route) {
  std::lock_guard<std::mutex> lock(m_);
  route_ = std::move(route);
}

void request_record::set_key_id(std::string key_id) {
  std::lock_guard<std::mutex> lock(m_);
  key_id_ = std::move(key_id);
}

void request_record::on_answer(int status) {
  std::string route, key_id;
  {
    std::lock_guard<std::mutex> lock(m_);
    if (answered_) return;  // (only the first answer counts; the server ignores the others too)
    answered_ = true;
    route = route_;
    key_id = key_id_;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  auto& m = metrics::m();
  const std::string code = std::to_string(status);
  m.http_requests.with({method_, route, code}).inc();
  m.http_duration.with({method_, route}).observe(secs);
  if (status >= 400) m.errors.with({error_code_of(status)}).inc();
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.1f", secs * 1000);
  log::line(status >= 500 ? "error" : "info", "http", method_ + " " + route + " " + code,
            {{"request_id", id_}, {"method", method_}, {"route", route}, {"status", code}, {"duration_ms", ms},
             {"key_id", key_id}, {"remote", remote_}});
}

std::string request_id_of(const request& req) {
  if (const std::string* given = req.header("x-request-id"); given && !given->empty() && given->size() <= 64) {
    bool sane = true;
    for (char c : *given)
      sane = sane && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-');
    if (sane) return *given;
  }
  return new_id("r_");
}

std::shared_ptr<responder> observe(std::shared_ptr<responder> inner, std::shared_ptr<request_record> rec) {
  return std::make_shared<observed_responder>(std::move(inner), std::move(rec));
}

}  // namespace mpakt::http
