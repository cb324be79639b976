// Fetch planning and the fetch pool (actors/loader/fetch.hpp) against readers of in-memory
// files: units cover every tensor once, in order, never past a piece; several requests run
// at once yet units are handed over in order with the bytes of the file; the pool never
// holds more than its bound; transient failures are retried and a final one stops it.

#include "actors/loader/fetch.hpp"
#include "actors/loader/host_fetch.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

namespace mpakt::loader {
namespace {

using namespace std::chrono_literals;

tensor_location at(std::string name, std::string file, std::uint64_t first, std::uint64_t length) {
  tensor_location t;
  t.name = std::move(name);
  t.location = std::move(file);
  t.first = first;
  t.length = length;
  t.file_dtype = "BF16";
  return t;
}

TEST(PlanFetches, SmallNeighboursShareAUnitAndBigTensorsArePieces) {
  const std::uint64_t piece = 1000;
  std::vector<tensor_location> ts = {
      at("a", "f1", 100, 300), at("b", "f1", 400, 300), at("c", "f1", 700, 300),  // 900 back to back
      at("d", "f1", 1000, 200),                                                    // would make 1100: new unit
      at("e", "f1", 1300, 100),                                                    // a gap: new unit
      at("big", "f1", 1400, 2500),                                                 // three pieces of its own
      at("f", "f1", 3900, 10),                                                     // not joined to a piece
      at("g", "f2", 3910, 10),                                                     // another file
      at("empty", "f2", 3920, 0),                                                  // a segment of 0 bytes
  };
  auto units = plan_fetches(ts, piece);
  ASSERT_EQ(units.size(), 8u);
  EXPECT_EQ(units[0].first, 100u);
  EXPECT_EQ(units[0].length, 900u);
  ASSERT_EQ(units[0].segments.size(), 3u);
  EXPECT_EQ(units[0].segments[2].tensor, 2u);
  EXPECT_EQ(units[1].first, 1000u);
  EXPECT_EQ(units[2].first, 1300u);
  for (int p = 0; p < 3; ++p) {
    const auto& u = units[std::size_t(3 + p)];
    ASSERT_EQ(u.segments.size(), 1u);
    EXPECT_EQ(u.segments[0].tensor, 5u);
    EXPECT_EQ(u.segments[0].offset, std::uint64_t(p) * piece);
    EXPECT_EQ(u.length, p < 2 ? piece : 500u);  // exactly a piece, the last shorter
    EXPECT_EQ(u.first, 1400u + std::uint64_t(p) * piece);
  }
  EXPECT_EQ(units[6].location, "f1");
  EXPECT_EQ(units[7].location, "f2");
  ASSERT_EQ(units[7].segments.size(), 2u);
  EXPECT_EQ(units[7].segments[1].tensor, 8u);
  EXPECT_EQ(units[7].segments[1].length, 0u);

  // Every tensor's bytes exactly once, in order.
  std::size_t next = 0;
  std::map<std::size_t, std::uint64_t> covered;
  for (const auto& u : units) {
    EXPECT_LE(u.length, piece);
    std::uint64_t sum = 0;
    for (const auto& s : u.segments) {
      EXPECT_GE(s.tensor + 1, next);
      next = s.tensor + 1;
      EXPECT_EQ(s.offset, covered[s.tensor]);
      covered[s.tensor] += s.length;
      sum += s.length;
    }
    EXPECT_EQ(sum, u.length);
  }
  for (std::size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(covered[i], ts[i].length) << ts[i].name;
}

/// In-memory files shared by every reader a factory makes; counts requests, tracks how many
/// run at once, and can delay or fail them.
struct fake_host {
  std::map<std::string, std::string> files;
  std::chrono::milliseconds delay{0};
  std::mutex m;
  int running = 0, most_running = 0, calls = 0;
  std::map<std::uint64_t, int> fail_at;  ///< first byte → failures left
  errc fail_with = errc::unavailable;

  std::unique_ptr<byte_reader> reader();
};

class fake_reader final : public byte_reader {
 public:
  explicit fake_reader(fake_host& h) : h_(h) {}
  result<range_read> read_range(const std::string& location, std::uint64_t first, std::uint64_t length) override {
    {
      std::lock_guard<std::mutex> lock(h_.m);
      ++h_.calls;
      h_.most_running = std::max(h_.most_running, ++h_.running);
      if (auto it = h_.fail_at.find(first); it != h_.fail_at.end() && it->second > 0) {
        --it->second;
        --h_.running;
        return make_error(h_.fail_with, "simulated failure at byte " + std::to_string(first));
      }
    }
    std::this_thread::sleep_for(h_.delay);
    range_read r;
    const std::string& f = h_.files.at(location);
    if (first < f.size()) r.bytes = f.substr(std::size_t(first), std::size_t(length));
    r.file_size = f.size();
    std::lock_guard<std::mutex> lock(h_.m);
    --h_.running;
    return r;
  }
  result<std::string> read_all(const std::string& location, std::size_t) override { return h_.files.at(location); }
  std::uint64_t requests() const override { return 0; }

 private:
  fake_host& h_;
};

std::unique_ptr<byte_reader> fake_host::reader() { return std::make_unique<fake_reader>(*this); }

/// A file of `n` patterned bytes cut into tensors of the given sizes, back to back.
std::vector<tensor_location> tensors_in(fake_host& h, const std::string& name, const std::vector<std::uint64_t>& sizes) {
  std::string bytes;
  std::vector<tensor_location> ts;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    ts.push_back(at("t" + std::to_string(i), name, bytes.size(), sizes[i]));
    for (std::uint64_t k = 0; k < sizes[i]; ++k) bytes.push_back(char((bytes.size() * 7 + i) & 0xff));
  }
  h.files[name] = bytes;
  return ts;
}

TEST(FetchPool, ParallelRequestsHandOverTheFilesBytesInOrder) {
  fake_host h;
  h.delay = 5ms;
  auto ts = tensors_in(h, "f", {700, 300, 2500, 100, 0, 900, 1200, 50});
  auto units = plan_fetches(ts, 1000);
  const std::size_t n = units.size();
  fetch_pool pool(ts, units, [&] { return h.reader(); }, {4, 4000});
  std::map<std::size_t, std::string> got;  // tensor -> bytes
  for (std::size_t u = 0; u < n; ++u) {
    auto f = pool.next();
    ASSERT_TRUE(f.ok()) << f.err().message;
    EXPECT_EQ(f->index, u);
    ASSERT_EQ(f->parts.size(), units[u].segments.size());
    for (std::size_t s = 0; s < f->parts.size(); ++s) {
      const auto& seg = units[u].segments[s];
      EXPECT_EQ(got[seg.tensor].size(), seg.offset);
      got[seg.tensor] += f->parts[s];
    }
    pool.release(units[u].length);
  }
  for (std::size_t i = 0; i < ts.size(); ++i)
    EXPECT_EQ(got[i], h.files["f"].substr(std::size_t(ts[i].first), std::size_t(ts[i].length))) << ts[i].name;
  EXPECT_GT(h.most_running, 1);  // requests overlapped
  EXPECT_LE(pool.peak_bytes(), 4000u);
  EXPECT_EQ(pool.requests(), n);
}

TEST(FetchPool, PartsTakeTheStorageOfPiecesGivenBackWhileAPoolIsAlive) {
  // A relayed load's pieces are given back where their bytes were sent on (the data
  // connection's writer, a receiver in this process) and read into again: no fresh buffer,
  // faulted in and cleared, a piece. Kept only while a fetch pool lives, and only pieces of
  // 64 KiB and more.
  const auto zeros = [](const std::string& s) { return s.find_first_not_of('\0') == std::string::npos; };
  give_back_piece(std::string(std::size_t(1) << 20, 'a'));
  EXPECT_TRUE(zeros(piece_buffer(1000))) << "no pool alive: nothing kept";
  fake_host h;
  auto ts = tensors_in(h, "f", {200'000, 150'000});
  auto units = plan_fetches(ts, 1'000'000);
  {
    fetch_pool pool(ts, units, [&] { return h.reader(); }, {1, 1'000'000});
    auto f = pool.next();
    ASSERT_TRUE(f.ok()) << f.err().message;
    ASSERT_EQ(f->parts.size(), 2u);
    EXPECT_EQ(f->parts[0], h.files["f"].substr(std::size_t(ts[0].first), 200'000));
    const char* first = f->parts[0].data();
    const char* second = f->parts[1].data();
    give_back_piece(std::move(f->parts[0]));
    give_back_piece(std::move(f->parts[1]));
    give_back_piece(std::string(1000, 'b'));  // (too small to keep)
    // the smallest kept piece that holds the next: 150,000 bytes for 120,000, then the other
    std::string a = piece_buffer(120'000);
    EXPECT_EQ(a.size(), 120'000u);
    EXPECT_EQ(a.data(), second);
    std::string b = piece_buffer(120'000);
    EXPECT_EQ(b.data(), first);
    EXPECT_TRUE(zeros(piece_buffer(5000))) << "none left";
    give_back_piece(std::move(a));
  }
  EXPECT_TRUE(zeros(piece_buffer(100'000))) << "the last pool ended: what was kept is freed";
}

// A load has its bound's worth of pieces on their way (sixty-odd tensors of a small model's
// layers in 64 MB): every piece given back is kept for the next of its size, not four of them
// (which read three quarters of a relayed load into fresh, cleared storage).
TEST(FetchPool, AsManyPiecesAsALoadHasOnItsWayAreKept) {
  fake_host h;
  std::vector<std::uint64_t> sizes;
  for (int i = 0; i < 60; ++i) sizes.push_back(i % 2 ? 100'000 : 70'000);
  auto ts = tensors_in(h, "f", sizes);
  auto units = plan_fetches(ts, 200'000);
  fetch_pool pool(ts, units, [&] { return h.reader(); }, {1, 100'000'000});
  std::vector<std::string> parts;
  for (std::size_t u = 0; u < pool.size(); ++u) {
    auto f = pool.next();
    ASSERT_TRUE(f.ok()) << f.err().message;
    for (auto& p : f->parts) parts.push_back(std::move(p));
  }
  ASSERT_EQ(parts.size(), 60u);
  std::map<const char*, std::size_t> given;
  for (auto& p : parts) {
    given[p.data()] = p.size();
    give_back_piece(std::move(p));
  }
  for (int i = 0; i < 60; ++i) {
    const std::size_t n = i % 2 ? 70'000 : 100'000;
    std::string b = piece_buffer(n);
    ASSERT_EQ(given.count(b.data()), 1u) << "piece " << i << " in fresh storage";
    EXPECT_EQ(given[b.data()], n) << "piece " << i << ": another size's storage, grown or cut";
    given.erase(b.data());
  }
}

TEST(FetchPool, UnitsItsWorkerReadsItselfAreNotReadButCountAgainstTheBound) {
  fake_host h;
  auto ts = tensors_in(h, "f", {1000, 1000, 1000, 1000});
  auto units = plan_fetches(ts, 1000);
  ASSERT_EQ(units.size(), 4u);
  units[1].remote = units[2].remote = true;
  fetch_pool pool(ts, units, [&] { return h.reader(); }, {4, 2000});
  auto a = pool.next();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->parts.size(), 1u);
  auto b = pool.next();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->index, 1u);
  EXPECT_TRUE(b->parts.empty());  // read by its worker: no bytes here
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(pool.try_next().has_value());  // yet it holds its place: the third waits for room
  pool.release(1000);
  auto c = pool.try_next();  // (a remote unit that fits is handed over by the release itself)
  ASSERT_TRUE(c.has_value());
  ASSERT_TRUE(c->ok());
  EXPECT_TRUE((*c)->parts.empty());
  pool.release(1000, true);
  pool.release(1000, true);
  auto d = pool.next();
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->parts[0], h.files["f"].substr(3000, 1000));
  EXPECT_EQ(pool.requests(), 2u);  // units 0 and 3 only
  EXPECT_EQ(pool.peak_bytes(), 1000u);  // (bytes of remote units are never held here)
}

// A volunteer holds at most worker_ranges ranges at once and refuses one more (the load then
// starts again relayed): ranges far smaller than a piece — a tiny tensor before a big one —
// must not put more of them in flight than that, however far under the byte bound they are.
TEST(FetchPool, UnitsItsWorkerReadsItselfAreBoundedInNumberToo) {
  fake_host h;
  auto ts = tensors_in(h, "f", {10, 10, 10, 10, 1000});
  auto units = plan_fetches(ts, 10);
  ASSERT_EQ(units.size(), 4u + 100u);  // (the 1000-byte tensor in pieces of 10)
  for (auto& u : units) u.remote = true;
  fetch_pool pool(ts, units, [&] { return h.reader(); }, {4, 1'000'000, 3});
  for (std::size_t i = 0; i < 3; ++i) {
    auto u = pool.next();
    ASSERT_TRUE(u.ok());
    EXPECT_EQ(u->index, i);
  }
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(pool.try_next().has_value()) << "a fourth range while three are out";
  pool.release(10, true);
  auto d = pool.try_next();  // (handed over by the release itself)
  ASSERT_TRUE(d.has_value());
  ASSERT_TRUE(d->ok());
  EXPECT_EQ((*d)->index, 3u);
  EXPECT_FALSE(pool.try_next().has_value());
  // relayed units are not counted: past three remote ones, a relayed one still starts
  auto mixed = plan_fetches(ts, 10);
  for (std::size_t i = 0; i < 3; ++i) mixed[i].remote = true;
  fetch_pool pool2(ts, mixed, [&] { return h.reader(); }, {4, 1'000'000, 3});
  for (std::size_t i = 0; i < 5; ++i) {
    auto u = pool2.next();
    ASSERT_TRUE(u.ok());
    EXPECT_EQ(u->index, i);
  }
  EXPECT_EQ(worker_ranges, host_fetcher::options{}.max_ranges) << "the pool's bound is the volunteer's";
}

TEST(FetchPool, HoldsNoMoreThanItsBoundUntilBytesAreReleased) {
  fake_host h;
  auto ts = tensors_in(h, "f", {1000, 1000, 1000, 1000});
  fetch_pool pool(ts, plan_fetches(ts, 1000), [&] { return h.reader(); }, {4, 2000});
  auto a = pool.next();
  auto b = pool.next();
  ASSERT_TRUE(a.ok() && b.ok());
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(pool.try_next().has_value());  // the third waits for room
  {
    std::lock_guard<std::mutex> lock(h.m);
    EXPECT_EQ(h.calls, 2);
  }
  pool.release(1000);
  auto c = pool.next();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->index, 2u);
  pool.release(2000);
  ASSERT_TRUE(pool.next().ok());
  EXPECT_EQ(pool.peak_bytes(), 2000u);
}

TEST(FetchPool, TransientFailuresAreRetriedAndAFinalOneStopsTheFetch) {
  fake_host h;
  auto ts = tensors_in(h, "f", {1000, 1000, 1000, 1000});
  h.fail_at[1000] = piece_retries;  // fails twice, then answers
  {
    fetch_pool pool(ts, plan_fetches(ts, 1000), [&] { return h.reader(); }, {2, 4000});
    for (int u = 0; u < 4; ++u) {
      auto f = pool.next();
      ASSERT_TRUE(f.ok()) << f.err().message;
      pool.release(1000);
    }
    EXPECT_EQ(pool.requests(), 4u + piece_retries);
  }
  fake_host g;
  ts = tensors_in(g, "f", {1000, 1000, 1000, 1000, 1000, 1000});
  g.fail_at[1000] = 1;
  g.fail_with = errc::invalid;  // not transient: final at once
  fetch_pool pool(ts, plan_fetches(ts, 1000), [&] { return g.reader(); }, {1, 1000});
  ASSERT_TRUE(pool.next().ok());
  pool.release(1000);
  auto bad = pool.next();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().code, errc::invalid);
  EXPECT_EQ(bad.err().message, "tensor t1: simulated failure at byte 1000");
  std::this_thread::sleep_for(30ms);
  std::lock_guard<std::mutex> lock(g.m);
  EXPECT_EQ(g.calls, 2);  // nothing started after the failure
}

TEST(FetchPool, AFileEndingEarlyNamesTheTensorItEndsIn) {
  fake_host h;
  auto ts = tensors_in(h, "f", {400, 400});
  h.files["f"].resize(600);
  fetch_pool pool(ts, plan_fetches(ts, 1000), [&] { return h.reader(); }, {});
  auto r = pool.next();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().message, "tensor t1: f ends at byte 600, before the tensor's last byte 799");
}

}  // namespace
}  // namespace mpakt::loader
