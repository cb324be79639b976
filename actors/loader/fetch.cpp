#include "actors/loader/fetch.hpp"

#include <algorithm>
#include <atomic>
#include <span>

#include "actors/spare_strings.hpp"

namespace mpakt::loader {

namespace {

struct piece_store {
  spare_strings spares{256, 4 * piece_bytes, std::size_t(64) << 10};
  std::atomic<int> pools{0};  ///< fetch pools alive
};
piece_store& pieces() {
  static auto* s = new piece_store;  // (never destroyed: a writer thread may give back at exit)
  return *s;
}

}  // namespace

std::string piece_buffer(std::size_t n) {
  std::string b = pieces().spares.take(n);
  b.resize(n);  // (a kept string shorter than n is cleared only where it grows)
  return b;
}

void give_back_piece(std::string bytes) {
  if (pieces().pools.load() > 0) pieces().spares.give(std::move(bytes));
}

std::vector<fetch_unit> plan_fetches(const std::vector<tensor_location>& tensors, std::uint64_t piece) {
  std::vector<fetch_unit> units;
  if (piece == 0) piece = piece_bytes;
  // Whether tensor `t` can join the last unit: same file, starting where it ends, and room.
  auto joins = [&](const tensor_location& t) {
    if (units.empty()) return false;
    const auto& u = units.back();
    return u.location == t.location && u.first + u.length == t.first && u.length + t.length <= piece &&
           // a unit holding a big tensor's piece stays alone
           !(u.segments.size() == 1 && tensors[u.segments[0].tensor].length > piece);
  };
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (t.length > piece) {
      for (std::uint64_t off = 0; off < t.length; off += piece) {
        const std::uint64_t n = std::min(piece, t.length - off);
        units.push_back({t.location, t.first + off, n, {{i, off, n}}});
      }
      continue;
    }
    if (!joins(t)) units.push_back({t.location, t.first, 0, {}});
    units.back().segments.push_back({i, 0, t.length});
    units.back().length += t.length;
  }
  return units;
}

fetch_pool::fetch_pool(std::vector<tensor_location> tensors, std::vector<fetch_unit> units, reader_factory make_reader,
                       options opts)
    : tensors_(std::move(tensors)), units_(std::move(units)), opts_([&] {
        for (const auto& u : units_) opts.max_bytes = std::max(opts.max_bytes, u.length);
        opts.connections = std::max(1, opts.connections);
        opts.max_remote_units = std::max(1, opts.max_remote_units);
        return opts;
      }()) {
  ++pieces().pools;
  const int n = int(std::min<std::size_t>(std::size_t(opts_.connections), std::max<std::size_t>(1, units_.size())));
  for (int i = 0; i < n; ++i)
    threads_.emplace_back([this, reader = std::shared_ptr<byte_reader>(make_reader())] { run_thread(*reader); });
}

fetch_pool::~fetch_pool() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  if (--pieces().pools == 0) pieces().spares.clear();
}

void fetch_pool::run_thread(byte_reader& reader) {
  for (;;) {
    std::size_t i = 0;
    {
      std::unique_lock<std::mutex> lock(m_);
      // Units start in order, each once the bytes it needs fit under the bound.
      cv_.wait(lock, [&] { return stop_ || next_start_ >= units_.size() || next_fits(); });
      if (stop_ || next_start_ >= units_.size()) return;
      i = next_start_++;
      held_ += units_[i].length;
      if (units_[i].remote) {
        remote_held_ += units_[i].length;
        ++remote_units_;
      }
      peak_ = std::max(peak_, held_ - remote_held_);
    }
    auto r = fetch(reader, i);
    {
      std::lock_guard<std::mutex> lock(m_);
      if (!r) stop_ = true;
      done_.emplace(i, std::move(r));
    }
    cv_.notify_all();
  }
}

result<fetched_unit> fetch_pool::fetch(byte_reader& reader, std::size_t index) {
  const fetch_unit& u = units_[index];
  fetched_unit out;
  out.index = index;
  if (u.remote) return out;
  out.parts.reserve(u.segments.size());
  std::vector<std::span<char>> spans;
  for (const auto& s : u.segments) {
    out.parts.push_back(piece_buffer(std::size_t(s.length)));
    spans.emplace_back(out.parts.back().data(), out.parts.back().size());
  }
  const tensor_location& lead = tensors_[u.segments.front().tensor];
  if (u.length == 0) return out;
  auto got = read_range_into_retrying(reader, u.location, u.first, spans, [&] {
    std::lock_guard<std::mutex> lock(m_);
    ++requests_;
  });
  if (!got) {
    error e = std::move(got).err();
    e.message = "tensor " + lead.name + ": " + e.message;
    return e;
  }
  if (*got != u.length) {
    // Name the tensor the file ended in.
    std::uint64_t at = 0;
    const fetch_segment* short_one = &u.segments.front();
    for (const auto& s : u.segments) {
      short_one = &s;
      if (at + s.length > *got) break;
      at += s.length;
    }
    const tensor_location& t = tensors_[short_one->tensor];
    return invalid("tensor " + t.name + ": " + u.location + " ends at byte " + std::to_string(u.first + *got) +
                   ", before the tensor's last byte " + std::to_string(t.first + t.length - 1));
  }
  return out;
}

std::optional<result<fetched_unit>> fetch_pool::try_next() {
  std::lock_guard<std::mutex> lock(m_);
  auto it = done_.find(next_hand_);
  if (it == done_.end()) return std::nullopt;
  result<fetched_unit> r = std::move(it->second);
  done_.erase(it);
  ++next_hand_;
  return r;
}

result<fetched_unit> fetch_pool::next() {
  std::unique_lock<std::mutex> lock(m_);
  cv_.wait(lock, [&] { return done_.count(next_hand_) > 0; });
  auto it = done_.find(next_hand_);
  result<fetched_unit> r = std::move(it->second);
  done_.erase(it);
  ++next_hand_;
  return r;
}

void fetch_pool::release(std::uint64_t bytes, bool remote) {
  {
    std::lock_guard<std::mutex> lock(m_);
    held_ -= std::min(held_, bytes);
    if (remote) {
      remote_held_ -= std::min(remote_held_, bytes);
      remote_units_ -= std::min(remote_units_, 1);
    }
    // Remote units that now fit are handed over at once, not after a fetch thread wakes: the
    // caller's next try_next finds them, so a worker's next range goes out without delay.
    while (!stop_ && next_start_ < units_.size() && units_[next_start_].remote && next_fits()) {
      const std::size_t i = next_start_++;
      held_ += units_[i].length;
      remote_held_ += units_[i].length;
      ++remote_units_;
      fetched_unit out;
      out.index = i;
      done_.emplace(i, std::move(out));
    }
  }
  cv_.notify_all();
}

bool fetch_pool::next_fits() const {
  const fetch_unit& u = units_[next_start_];
  return held_ + u.length <= opts_.max_bytes && (!u.remote || remote_units_ < opts_.max_remote_units);
}

std::uint64_t fetch_pool::peak_bytes() const {
  std::lock_guard<std::mutex> lock(m_);
  return peak_;
}

std::uint64_t fetch_pool::requests() const {
  std::lock_guard<std::mutex> lock(m_);
  return requests_;
}

}  // namespace mpakt::loader
