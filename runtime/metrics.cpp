#include "runtime/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>

namespace mpakt::metrics {

namespace {

/// A sample value as Prometheus reads it: integers without a fraction, +Inf/-Inf/NaN spelled out.
std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// `{a="x",b="y"}` for these names and values, with `extra` (a histogram's le) last; empty
/// when there are none.
std::string label_text(const std::vector<std::string>& names, const std::vector<std::string>& values,
                       const std::string& extra = {}) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += names[i] + "=\"" + escape_label(i < values.size() ? values[i] : std::string()) + "\"";
  }
  if (!extra.empty()) out += (out.empty() ? "{" : ",") + extra;
  if (!out.empty()) out += "}";
  return out;
}

std::string escape_help(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

std::string escape_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// ---- histogram ----

histogram::histogram(const std::vector<double>& bounds)
    : bounds_(bounds), counts_(new std::atomic<std::uint64_t>[bounds.size() + 1]) {
  for (std::size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void histogram::observe(double v) {
  const auto i = std::size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());  // first bound >= v
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<std::uint64_t> histogram::cumulative() const {
  std::vector<std::uint64_t> out(bounds_.size() + 1);
  std::uint64_t running = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) out[i] = running += counts_[i].load(std::memory_order_relaxed);
  return out;
}

// ---- families ----

family_base::family_base(std::string name, std::string help, kind k, std::vector<std::string> labels)
    : name_(std::move(name)), help_(std::move(help)), kind_(k), labels_(std::move(labels)) {}

void family_base::render(std::string& out) const {
  static const char* const type_names[] = {"counter", "gauge", "histogram"};
  out += "# HELP " + name_ + " " + escape_help(help_) + "\n";
  out += "# TYPE " + name_ + " " + type_names[int(kind_)] + "\n";
  render_children(out);
}

template <class T>
family<T>::family(std::string name, std::string help, kind k, std::vector<std::string> labels, std::vector<double> bounds)
    : family_base(std::move(name), std::move(help), k, std::move(labels)), bounds_(std::move(bounds)) {}

template <class T>
T& family<T>::with(std::initializer_list<std::string_view> values) {
  key k(labels_.size());
  std::size_t i = 0;
  for (auto v : values) {
    if (i == k.size()) break;
    k[i++] = std::string(v);
  }
  std::lock_guard<std::mutex> lock(m_);
  auto it = children_.find(k);
  if (it != children_.end()) return *it->second;
  std::unique_ptr<T> made;
  if constexpr (std::is_same_v<T, histogram>)
    made = std::make_unique<histogram>(bounds_);
  else
    made = std::make_unique<T>();
  return *children_.emplace(std::move(k), std::move(made)).first->second;
}

template <class T>
void family<T>::clear() {
  std::lock_guard<std::mutex> lock(m_);
  children_.clear();
}

template <class T>
void family<T>::render_children(std::string& out) const {
  std::lock_guard<std::mutex> lock(m_);
  // A family without labels shows 0 before its first increment: a query finds it at once.
  if (children_.empty() && labels_.empty() && kind_ != kind::histogram) out += name_ + " 0\n";
  for (const auto& [values, child] : children_) {
    if constexpr (std::is_same_v<T, histogram>) {
      const auto counts = child->cumulative();
      for (std::size_t i = 0; i < counts.size(); ++i) {
        const std::string le = i < bounds_.size() ? format_value(bounds_[i]) : "+Inf";
        out += name_ + "_bucket" + label_text(labels_, values, "le=\"" + le + "\"") + " " + format_value(double(counts[i])) + "\n";
      }
      out += name_ + "_sum" + label_text(labels_, values) + " " + format_value(child->sum()) + "\n";
      out += name_ + "_count" + label_text(labels_, values) + " " + format_value(double(counts.back())) + "\n";
    } else {
      out += name_ + label_text(labels_, values) + " " + format_value(child->value()) + "\n";
    }
  }
}

template class family<counter>;
template class family<gauge>;
template class family<histogram>;

// ---- the process's metrics ----

std::vector<const family_base*> grid_metrics::all() const {
  return {&http_requests, &http_duration,   &errors,          &tokens_generated, &prompt_tokens,     &drafts_proposed,
          &drafts_accepted, &batch_occupancy, &graph_steps,   &graph_step_seconds, &load_bytes,      &load_duration,
          &workers_lost,  &recoveries,      &calls_replayed,  &joins_refused,    &joins,             &links_closed,
          &frames_left_out, &sessions,
          &graphs,        &models,          &workers,         &worker_offered,   &worker_resident,   &worker_generations};
}

grid_metrics& m() {
  static auto* g = new grid_metrics();  // never destroyed: threads may count during exit
  return *g;
}

std::string render() {
  std::string out;
  out.reserve(16 * 1024);
  for (const auto* f : m().all()) f->render(out);
  return out;
}

}  // namespace mpakt::metrics
