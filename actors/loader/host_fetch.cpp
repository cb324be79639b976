#include "actors/loader/host_fetch.hpp"

#include <algorithm>
#include <chrono>
#include <span>

#include "actors/digest.hpp"
#include "actors/loader/stream.hpp"

namespace mpakt::loader {

namespace {

http_reader_options reader_options(const host_fetcher::options& o) {
  http_reader_options ho;
  ho.timeout_ms = o.timeout_ms;
  ho.verify_tls = o.verify_tls;
  ho.allow_private = o.allow_private;
  ho.trusted_endpoint = o.trusted_endpoint;
  ho.every_host_transient = true;  // (every host here is one the coordinator sent us to)
  return ho;  // (no token: never handed on)
}

bool is_url(const std::string& s) { return s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0; }

}  // namespace

host_fetcher::host_fetcher(options opts)
    : opts_([&] {
        opts.connections = std::max(1, opts.connections);
        opts.max_ranges = std::max(1, opts.max_ranges);
        return opts;
      }()),
      // (buffers of 64 KiB and more, what a few ranges in flight need; the rest is freed)
      spares_(64, std::uint64_t(opts_.max_ranges) * 2 * piece_bytes, std::size_t(64) << 10) {}

host_fetcher::~host_fetcher() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
    threads.swap(threads_);
  }
  work_cv_.notify_all();
  cv_.notify_all();
  for (auto& t : threads) t.join();
}

status host_fetcher::probe(const std::string& location, std::uint64_t header_bytes, const std::string& sha256_hex) {
  if (!is_url(location)) return make_error(errc::invalid, "fetches only http(s) URLs, not " + location);
  if (header_bytes < 8 || header_bytes > (std::uint64_t(100) << 20))
    return make_error(errc::invalid, "a safetensors header of " + std::to_string(header_bytes) + " bytes is not one to probe");
  // (a host that cannot be reached from here should cost the load little before it relays)
  auto ro = reader_options(opts_);
  ro.timeout_ms = std::min(ro.timeout_ms, 10000);
  auto reader = make_http_reader(ro);
  auto got = reader->read_range(location, 0, header_bytes);
  {
    std::lock_guard<std::mutex> lock(m_);
    requests_ += reader->requests();
  }
  if (!got) return std::move(got).err();
  sha256_stream sha;
  sha.add(got->bytes);
  if (got->bytes.size() != header_bytes || sha.hex() != sha256_hex)
    return make_error(errc::conflict, location + " answers here with other bytes than the coordinator read there");
  std::lock_guard<std::mutex> lock(m_);
  probed_.insert(location);
  return ok_status();
}

result<std::uint64_t> host_fetcher::start(const tensor_fetch& f) {
  // (a range is at most a piece: plan_fetches never makes a larger one)
  if (f.length > 2 * piece_bytes)
    return invalid("a range of " + std::to_string(f.length) + " bytes is larger than " + std::to_string(2 * piece_bytes));
  std::uint64_t sum = 0;
  for (const auto& p : f.parts) sum += std::min(p.length, 2 * piece_bytes + 1);
  if (sum != f.length || f.parts.empty())
    return invalid("the range of " + std::to_string(f.length) + " bytes at " + f.location + " does not match its parts");
  std::lock_guard<std::mutex> lock(m_);
  if (!probed_.count(f.location)) return invalid(f.location + " was not probed here; its ranges are not fetched");
  if (waiting_ >= std::size_t(opts_.max_ranges))
    return make_error(errc::limit, std::to_string(waiting_) + " ranges are already being fetched");
  // (the threads start with the first range: a fetcher that never reads — a volunteer's
  // verifier on a grid whose models come through the coordinator — costs none)
  if (threads_.empty())
    for (int i = 0; i < opts_.connections; ++i) threads_.emplace_back([this] { run_thread(); });
  const std::uint64_t n = next_++;
  queue_.emplace_back(n, f);
  ++waiting_;
  work_cv_.notify_one();
  return n;
}

void host_fetcher::destine(const std::string& model, const std::string& name, tensor storage, row_converter rows) {
  {
    std::lock_guard<std::mutex> lock(m_);
    destinations_[{model, name}] = destination{std::move(storage), std::move(rows)};
  }
  cv_.notify_all();
}

void host_fetcher::forget(const std::string& model, const std::string& name) {
  std::lock_guard<std::mutex> lock(m_);
  destinations_.erase({model, name});
}

void host_fetcher::forget_model(const std::string& model) {
  std::lock_guard<std::mutex> lock(m_);
  for (auto it = destinations_.lower_bound({model, std::string()}); it != destinations_.end() && it->first.first == model;)
    it = destinations_.erase(it);
}

host_fetcher::destination host_fetcher::destination_of(const std::string& model, const std::string& name) {
  std::unique_lock<std::mutex> lock(m_);
  const std::pair<std::string, std::string> key{model, name};
  cv_.wait_for(lock, std::chrono::milliseconds(opts_.destine_patience_ms),
               [&] { return stop_ || destinations_.count(key) > 0; });
  auto it = destinations_.find(key);
  return it == destinations_.end() ? destination() : it->second;
}

result<host_fetcher::range> host_fetcher::take(std::uint64_t number) {
  std::unique_lock<std::mutex> lock(m_);
  if (number == 0 || number >= next_) return invalid("no range numbered " + std::to_string(number) + " was started");
  cv_.wait(lock, [&] { return done_.count(number) > 0 || stop_; });
  auto it = done_.find(number);
  if (it == done_.end()) return make_error(errc::unavailable, "the worker is shutting down");
  auto r = std::move(it->second);
  done_.erase(it);
  --waiting_;
  return r;
}

void host_fetcher::when_done(std::uint64_t number, std::function<void()> done) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (!done_.count(number)) {
      on_done_[number] = std::move(done);
      return;
    }
  }
  done();
}

void host_fetcher::recycle(std::vector<std::string> parts) {
  for (auto& p : parts) spares_.give(std::move(p));
}

void host_fetcher::drop_spares() { spares_.clear(); }

std::uint64_t host_fetcher::spare_bytes() const { return spares_.bytes(); }

std::string host_fetcher::buffer(std::uint64_t n) {
  std::string b = spares_.take(std::size_t(n));
  // A buffer may be longer than its part (only its first n bytes are read into and used): a
  // spare is never shrunk, so it is never filled again when it serves a larger part later.
  if (b.size() < n) b.resize(std::size_t(n));
  return b;
}

void host_fetcher::run_thread() {
  auto reader = make_http_reader(reader_options(opts_));
  std::string window;  // (rows converted as they come: this thread's, kept while it lives)
  std::uint64_t counted = 0;
  for (;;) {
    std::pair<std::uint64_t, tensor_fetch> job;
    {
      std::unique_lock<std::mutex> lock(m_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    auto r = fetch(*reader, job.second, window);
    std::function<void()> done;
    {
      std::lock_guard<std::mutex> lock(m_);
      requests_ += reader->requests() - counted;
      counted = reader->requests();
      if (r) bytes_ += job.second.length;
      done_.emplace(job.first, std::move(r));
      if (auto it = on_done_.find(job.first); it != on_done_.end()) {
        done = std::move(it->second);
        on_done_.erase(it);
      }
    }
    cv_.notify_all();
    if (done) done();
  }
}

result<host_fetcher::range> host_fetcher::fetch(byte_reader& reader, const tensor_fetch& f, std::string& window) {
  // Rows converted as they come pass through this many bytes of the thread's window at a
  // time — whole groups of 16 rows, at least one where a group fits in group_bytes —, so
  // that they are still in the core's L2 when quantized and the socket's copy writes into
  // lines the last conversion just read (2 MiB windows, half of them past L2 on a core of
  // 2 MiB, converted a q8 load 8 % slower).
  // The whole range is one request; the window is named as one part after another, each
  // converted as soon as it is full (part_filled), before the next fills it.
  constexpr std::uint64_t window_bytes = 256 << 10;
  constexpr std::uint64_t group_bytes = 4 << 20;  ///< the widest window taken for one group of rows
  range out;
  const std::size_t n = f.parts.size();
  // (reserved: spans point into these strings, which must not move — a short one keeps its
  // bytes inside the string object)
  out.bytes.reserve(n);
  out.tails.reserve(n);
  out.in_place.reserve(n);
  out.converted.reserve(n);
  std::vector<tensor> held;  // the destinations written into: alive until the read is over
  std::vector<std::span<char>> spans;  // read by one request
  /// The rows a window part holds, converted when it is full.
  struct rows_in_window {
    std::size_t span;
    row_converter rows;
    std::uint64_t first_row, count;
  };
  std::vector<rows_in_window> windows;
  std::uint64_t pending = 0;
  const std::string which = "tensor " + f.parts.front().name + " (bytes " + std::to_string(f.first) + "+" +
                            std::to_string(f.length) + " of " + f.location + ")";
  const auto add_span = [&](char* p, std::uint64_t len) {
    if (len == 0) return;
    spans.emplace_back(p, std::size_t(len));
    pending += len;
  };
  status ok = ok_status();
  for (std::size_t i = 0; i < n; ++i) {
    const auto& p = f.parts[i];
    destination d = destination_of(f.model_id, p.name);
    out.tails.emplace_back();
    out.converted.push_back(0);
    tensor t = std::move(d.storage);
    if (!t.empty() && p.offset <= t.nbytes() && p.length <= t.nbytes() - p.offset) {
      out.bytes.emplace_back();
      out.in_place.push_back(true);
      add_span(reinterpret_cast<char*>(t.data()) + p.offset, p.length);
      held.push_back(std::move(t));
      continue;
    }
    out.in_place.push_back(false);
    const row_converter& rows = d.rows;
    const std::uint64_t rb = rows ? rows.row_bytes() : 0;
    const std::uint64_t head = rb ? std::min(p.length, (rb - p.offset % rb) % rb) : 0;
    const std::uint64_t whole = rb ? (p.length - head) / rb : 0;
    // (a part past the tensor's bytes is the receiver's to refuse: it gets them in a buffer)
    const std::uint64_t tensor_bytes = rows ? rows.rows() * rb : 0;
    if (whole == 0 || p.offset > tensor_bytes || p.length > tensor_bytes - p.offset) {
      out.bytes.push_back(buffer(p.length));
      add_span(out.bytes.back().data(), p.length);
      continue;
    }
    out.bytes.emplace_back(std::size_t(head), '\0');
    add_span(out.bytes.back().data(), head);
    const std::uint64_t first_row = (p.offset + head) / rb;
    // (rows so wide that 16 pass group_bytes go through a row or a few at a time: a window is
    // never a tensor's size)
    const std::uint64_t per = lane_rows * rb <= group_bytes
                                  ? std::max<std::uint64_t>(lane_rows, window_bytes / rb / lane_rows * lane_rows)
                                  : std::max<std::uint64_t>(1, window_bytes / rb);
    for (std::uint64_t k = 0, m; k < whole; k += m) {
      m = std::min(per, whole - k);
      // (a window ends where a group of 16 rows does when it can: in lanes a whole group is
      // written at once, a cut one a row at a time)
      if (m < whole - k && m >= std::uint64_t(lane_rows)) m -= (first_row + k + m) % lane_rows;
      if (window.size() < m * rb) window.resize(std::size_t(m * rb));
      windows.push_back({spans.size(), rows, first_row + k, m});
      add_span(window.data(), m * rb);
    }
    out.converted.back() = whole * rb;
    out.tails.back().resize(std::size_t(p.length - head - whole * rb));
    add_span(out.tails.back().data(), out.tails.back().size());
  }
  if (pending > 0) {
    // (a window part is named after window's last resize: every span into it is valid)
    for (const auto& w : windows) spans[w.span] = std::span<char>(window.data(), spans[w.span].size());
    std::size_t next = 0;  // the first window part not yet converted in this attempt
    const part_filled convert = [&](std::size_t part) {
      if (next < windows.size() && windows[next].span == part) {
        const auto& w = windows[next++];
        w.rows.convert(w.first_row, window.data(), w.count);
      }
    };
    // (a retry fills every part again, from the first)
    auto got = read_range_into_retrying(reader, f.location, f.first, spans, [&] { next = 0; },
                                        windows.empty() ? part_filled{} : convert);
    if (!got) {
      error e = std::move(got).err();
      e.message = which + ": " + e.message;
      ok = e;
    } else if (*got != pending) {
      ok = invalid(which + ": the file ends after " + std::to_string(*got) + " of them");
    }
  }
  // (a window grown past one group of the widest rows, for a row wider than the window, is
  // not kept for the thread's life; one of wide rows below that is, not to be made again for
  // every range)
  if (window.size() > group_bytes) std::string().swap(window);
  if (!ok) {
    recycle(std::move(out.bytes));
    return ok.err();
  }
  return out;
}

std::uint64_t host_fetcher::bytes_fetched() const {
  std::lock_guard<std::mutex> lock(m_);
  return bytes_;
}

std::uint64_t host_fetcher::requests() const {
  std::lock_guard<std::mutex> lock(m_);
  return requests_;
}

int host_fetcher::threads() const {
  std::lock_guard<std::mutex> lock(m_);
  return int(threads_.size());
}

}  // namespace mpakt::loader
