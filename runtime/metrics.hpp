#pragma once
/// The process's metrics: counters, gauges and histograms with labels, rendered in the
/// Prometheus text exposition format (version 0.0.4) for GET /metrics.
///
/// Every metric the process exports is a member of `grid_metrics` below, declared in one place
/// with its help text, so the list reads here and in docs/operators.md ("Metrics and logs").
/// Code increments them where things happen; gauges that describe what the coordinator holds
/// are set when /metrics is scraped (http/api/metrics_route.cpp).
///
/// Thread-safety: every operation may be called from any thread. A family's children are
/// created once per label set (under the family's mutex) and never move, so a reference kept
/// from `with()` stays valid for the process's life (until `clear()`, which only gauge
/// families describing a snapshot use); increments are relaxed atomics.

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace mpakt::metrics {

/// A value that only goes up (a `_total`). Doubles, so seconds can be summed too.
class counter {
 public:
  void inc(double by = 1) { v_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

/// A value that goes up and down, or is set.
class gauge {
 public:
  void set(double v) { v_.store(v, std::memory_order_relaxed); }
  void add(double by) { v_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

/// Observations counted into fixed buckets (upper bounds, ascending; +Inf is implied).
class histogram {
 public:
  explicit histogram(const std::vector<double>& bounds);
  void observe(double v);
  /// Cumulative counts per bound (the last is +Inf), sum and count, as rendered.
  std::vector<std::uint64_t> cumulative() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;  ///< per bucket, not cumulative; +Inf last
  std::atomic<double> sum_{0};
};

enum class kind { counter, gauge, histogram };

/// What the registry renders: one family.
class family_base {
 public:
  family_base(std::string name, std::string help, kind k, std::vector<std::string> labels);
  virtual ~family_base() = default;
  const std::string& name() const { return name_; }
  /// Appends "# HELP", "# TYPE" and one sample line per child (per bucket for histograms).
  void render(std::string& out) const;

 protected:
  using key = std::vector<std::string>;
  virtual void render_children(std::string& out) const = 0;
  std::string name_, help_;
  kind kind_;
  std::vector<std::string> labels_;
  mutable std::mutex m_;
  friend class registry;
};

/// Children of one metric, one per label set. A family without labels has one child, `with()`.
template <class T>
class family final : public family_base {
 public:
  family(std::string name, std::string help, kind k, std::vector<std::string> labels, std::vector<double> bounds = {});
  /// The child for these label values (as many as the family has label names; missing ones
  /// are empty, extra ones ignored).
  T& with(std::initializer_list<std::string_view> values = {});
  /// Drops every child (a gauge family set afresh from a snapshot at each scrape).
  void clear();

 private:
  void render_children(std::string& out) const override;
  std::vector<double> bounds_;
  std::map<key, std::unique_ptr<T>> children_;
};

/// Every metric of the process, in the order /metrics lists them. Names follow Prometheus'
/// conventions: `mpakt_` prefix, base units in the name, `_total` for counters.
struct grid_metrics {
  // HTTP (http/api/routes.cpp: one observation per answered request)
  family<counter> http_requests{"mpakt_http_requests_total", "HTTP requests answered, by method, route template and status code",
                                kind::counter, {"method", "route", "code"}};
  family<histogram> http_duration{"mpakt_http_request_duration_seconds",
                                  "Time from a request's arrival to its answer (the header of a stream), by method and route template",
                                  kind::histogram, {"method", "route"},
                                  {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}};
  family<counter> errors{"mpakt_errors_total", "Error answers and generations ended by an error, by error code (invalid, not_found, ...)",
                         kind::counter, {"code"}};
  // Generation (http/api/generate.cpp, chat.cpp: what reached the client)
  family<counter> tokens_generated{"mpakt_tokens_generated_total",
                                   "Tokens generated, by path (worker_loop, per_call, chat)", kind::counter, {"path"}};
  family<counter> prompt_tokens{"mpakt_prompt_tokens_total",
                                "Prompt tokens processed by the server's own prefill, by path (chat)", kind::counter, {"path"}};
  family<counter> drafts_proposed{"mpakt_speculative_drafts_proposed_total", "Draft tokens proposed by speculative decoding",
                                  kind::counter, {}};
  family<counter> drafts_accepted{"mpakt_speculative_drafts_accepted_total", "Draft tokens accepted by verification",
                                  kind::counter, {}};
  family<histogram> batch_occupancy{"mpakt_batched_pass_sessions",
                                    "Sessions run together by one plain pass of a worker-side decode loop (1 = alone; this process's workers)",
                                    kind::histogram, {}, {1, 2, 4, 8, 16, 32, 64}};
  // Graphs (runtime/executor.cpp: every step run in this process, i.e. on embedded workers)
  family<counter> graph_steps{"mpakt_graph_steps_total", "Graph steps run by this process's workers, by op", kind::counter, {"op"}};
  family<counter> graph_step_seconds{"mpakt_graph_step_seconds_total", "Wall time spent in graph steps by this process's workers, by op",
                                     kind::counter, {"op"}};
  // Loads (actors/coordinator/load_job.cpp)
  family<counter> load_bytes{"mpakt_load_bytes_total", "Published bytes of weights read from model hosts by finished loads",
                             kind::counter, {}};
  family<histogram> load_duration{"mpakt_load_duration_seconds", "Time of a model load, from its request to the weights held, by outcome",
                                  kind::histogram, {"outcome"}, {0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}};
  // Recovery (actors/coordinator/recovery.cpp, actors/coordinator/gate_actor.cpp)
  family<counter> workers_lost{"mpakt_workers_lost_total", "Workers that left the grid while monitored", kind::counter, {}};
  family<counter> recoveries{"mpakt_recoveries_total", "Things put back after a lost worker, by kind (model, session) and outcome (ok, at_checkpoint, failed)",
                             kind::counter, {"kind", "outcome"}};
  family<counter> calls_replayed{"mpakt_calls_replayed_total",
                                 "Graph calls sent again after their worker was lost, by source (in_flight: calls it had not answered; journal: a restored session's calls since its checkpoint)",
                                 kind::counter, {"source"}};
  family<counter> joins_refused{"mpakt_volunteer_joins_refused_total", "Volunteer joins refused at the gate, by reason",
                                kind::counter, {"reason"}};
  family<counter> joins{"mpakt_volunteer_joins_total", "Volunteers admitted at the gate", kind::counter, {}};
  family<counter> links_closed{"mpakt_cluster_connections_closed_total",
                               "Connections to the cluster port closed by its front before or instead of a join, by reason (tls, frame, busy, slow)",
                               kind::counter, {"reason"}};
  family<counter> frames_left_out{"mpakt_cluster_frames_left_out_total",
                                  "Frames from admitted or joining volunteers that the cluster port's front did not pass on, by kind (reply: a reply nobody awaited; monitor: a monitor of an actor not the volunteer's)",
                                  kind::counter, {"reason"}};
  // What the grid holds (set at each scrape from the coordinator and the pool)
  family<gauge> sessions{"mpakt_sessions", "Sessions open", kind::gauge, {}};
  family<gauge> graphs{"mpakt_compiled_graphs", "Compiled graphs held", kind::gauge, {}};
  family<gauge> models{"mpakt_models", "Models loaded", kind::gauge, {}};
  family<gauge> workers{"mpakt_workers", "Workers in the pool, by backend and state (idle, busy)", kind::gauge, {"backend", "state"}};
  family<gauge> worker_offered{"mpakt_worker_offered_bytes", "Memory a worker offers the grid", kind::gauge, {"worker", "backend"}};
  family<gauge> worker_resident{"mpakt_worker_resident_bytes", "Memory a worker holds (weights, sessions, reservations)",
                                kind::gauge, {"worker", "backend"}};
  family<gauge> worker_generations{"mpakt_worker_generations", "Worker-side decode loops running on a worker", kind::gauge,
                                   {"worker", "backend"}};

  /// Every family, in rendering order.
  std::vector<const family_base*> all() const;
};

/// The process's metrics (created on first use, never destroyed).
grid_metrics& m();

/// The whole exposition: every family of m(), text format 0.0.4.
std::string render();

/// The content type of render()'s text.
inline constexpr const char* content_type = "text/plain; version=0.0.4; charset=utf-8";

/// `v` as a label value in the exposition: backslash, double quote and newline escaped.
std::string escape_label(std::string_view v);

}  // namespace mpakt::metrics
