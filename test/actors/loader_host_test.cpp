// The loader against the real `mpakt host` binary over real sockets: hf: sources resolved
// against the host, one request per single-file inspect, sharded checkpoints through their
// index, a host that ignores Range refused by URL, and a tensor larger than a piece streamed
// whole in 16 MB pieces; fetch units over several connections at once (fetch.hpp) giving the
// file's bytes, read straight into their buffers.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "test/support/actors.hpp"
#include "test/support/host_process.hpp"
#include "actors/digest.hpp"
#include "actors/errors.hpp"
#include "actors/loader/fetch.hpp"
#include "actors/loader/host_fetch.hpp"
#include "actors/loader/inspect.hpp"
#include "actors/loader/selection.hpp"
#include "actors/loader/stream.hpp"
#include "actors/protocol.hpp"
#include "actors/worker/worker_actor.hpp"
#include "runtime/tensor_builder.hpp"


namespace mpakt::loader {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using test::host_process;

/// A TCP relay in front of the host that records every request head the client sends, so
/// request counts are checked on the wire rather than through the reader's own counter.
class counting_proxy {
 public:
  explicit counting_proxy(std::uint16_t target) : target_(target) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 16) != 0) return;
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~counting_proxy() {
    stop_ = true;
    if (acceptor_.joinable()) acceptor_.join();
    for (auto& t : relays_) t.join();
    ::close(listen_fd_);
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  /// Request heads seen so far ("GET /path HTTP/1.1\r\nhost: …").
  std::vector<std::string> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return heads_;
  }
  /// Answers to requests whose head contains `text` (lower case) are held back, not one byte
  /// passed on, until release().
  void hold_answers_to(std::string text) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = std::move(text);
  }
  void release() { released_ = true; }
  /// The next answer the host sends is cut after `bytes` bytes (head included): the proxy
  /// passes that many on and closes both connections, as a host that drops mid-body.
  void cut_next_answer_after(std::size_t bytes) { cut_after_ = std::int64_t(bytes); }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept(listen_fd_, nullptr, nullptr);
      if (c >= 0) relays_.emplace_back([this, c] { relay(c); });
    }
  }
  static bool write_all(int fd, const char* p, std::size_t n) {
    while (n > 0) {
      const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= std::size_t(w);
    }
    return true;
  }
  void relay(int client) {
    const int up = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(target_);
    std::string pending;  // client bytes not yet split into request heads (GET/HEAD have no body)
    bool held = false;
    if (::connect(up, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      std::vector<char> buf(1 << 16);
      while (!stop_) {
        pollfd p[2] = {{client, POLLIN, 0}, {up, short(held && !released_ ? 0 : POLLIN), 0}};
        if (::poll(p, 2, 50) <= 0) continue;
        if (p[0].revents) {
          const ssize_t n = ::recv(client, buf.data(), buf.size(), 0);
          if (n <= 0 || !write_all(up, buf.data(), std::size_t(n))) break;
          pending.append(buf.data(), std::size_t(n));
          for (std::size_t end; (end = pending.find("\r\n\r\n")) != std::string::npos;) {
            std::lock_guard<std::mutex> lock(mu_);
            std::string head = pending.substr(0, end);
            for (auto& ch : head) ch = char(std::tolower(static_cast<unsigned char>(ch)));
            held = held || (!hold_.empty() && head.find(hold_) != std::string::npos);
            heads_.push_back(pending.substr(0, end));
            pending.erase(0, end + 4);
          }
        }
        if (p[1].revents) {
          const ssize_t n = ::recv(up, buf.data(), buf.size(), 0);
          if (n <= 0) break;
          if (const std::int64_t cut = cut_after_.load(); cut >= 0) {
            const std::size_t pass = std::size_t(std::min<std::int64_t>(cut, n));
            cut_after_ = cut - std::int64_t(pass);
            if (pass < std::size_t(n)) {
              cut_after_ = -1;
              write_all(client, buf.data(), pass);
              break;
            }
          }
          if (!write_all(client, buf.data(), std::size_t(n))) break;
        }
      }
    }
    ::close(up);
    ::close(client);
  }

  std::uint16_t target_;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> relays_;  // touched only by the acceptor thread until joined
  mutable std::mutex mu_;
  std::vector<std::string> heads_;
  std::string hold_;
  std::atomic<bool> released_{false};
  std::atomic<std::int64_t> cut_after_{-1};
};

struct st_tensor {
  std::string name;
  std::string dtype;
  shape_t shape;
};

/// A safetensors file whose tensor bytes follow a pattern (finite values for float dtypes).
std::string safetensors_bytes(const std::vector<st_tensor>& ts) {
  std::string json = "{\"__metadata__\":{\"format\":\"pt\"}";
  std::string data;
  for (const auto& t : ts) {
    const std::size_t n = std::size_t(shape_numel(t.shape)) * std::size_t(published_dtype_size(t.dtype));
    std::string shape;
    for (std::size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
    json += ",\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
            std::to_string(data.size()) + "," + std::to_string(data.size() + n) + "]}";
    const std::size_t start = data.size();
    data.resize(start + n);
    for (std::size_t i = 0; i < n; ++i) data[start + i] = char((i * 131 + i / 509) & 0x3f);
  }
  json += "}";
  while (json.size() % 8) json += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[std::size_t(i)] = char((json.size() >> (8 * i)) & 0xff);
  return out + json + data;
}

void write_file(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

/// A hub-layout folder: org/small (one file, a revision), org/sharded (index + zero-indexed
/// shards), org/big (a 20 MB tensor).
struct hub_folder {
  fs::path root = fs::path(testing::TempDir()) / ("mpakt_loader_host_" + std::to_string(::getpid()));
  hub_folder() {
    fs::remove_all(root);
    write_file(root / "org/small/model.safetensors",
               safetensors_bytes({{"model.embed_tokens.weight", "BF16", {64, 64}},
                                  {"model.layers.0.self_attn.q_proj.weight", "BF16", {64, 64}},
                                  {"model.layers.0.input_layernorm.weight", "F32", {64}},
                                  {"model.position_ids", "I64", {1, 64}}}));
    write_file(root / "org/small/revisions/v1/model.safetensors", safetensors_bytes({{"only.weight", "F16", {8, 8}}}));
    write_file(root / "org/sharded/model-00000-of-00002.safetensors",
               safetensors_bytes({{"a.weight", "BF16", {32, 64}}, {"b.weight", "BF16", {32, 64}}}));
    write_file(root / "org/sharded/model-00001-of-00002.safetensors", safetensors_bytes({{"c.weight", "F32", {16, 32}}}));
    write_file(root / "org/sharded/model.safetensors.index.json",
               R"({"metadata":{"total_size":10240},"weight_map":{"a.weight":"model-00000-of-00002.safetensors",)"
               R"("b.weight":"model-00000-of-00002.safetensors","c.weight":"model-00001-of-00002.safetensors"}})");
    write_file(root / "org/wide/model.safetensors",
               safetensors_bytes({{"norm.weight", "BF16", {1024}}, {"w.weight", "BF16", {2048, 1024}},
                                  {"v.weight", "F32", {48, 96}}, {"u.weight", "BF16", {40, 64}},
                                  // (rows of 32 KB: one group of 16 is wider than a fetch's window;
                                  // rows of 272 KB: one group is wider than any window taken)
                                  {"x.weight", "BF16", {88, 16384}}, {"y.weight", "BF16", {16, 139264}}}));
    write_file(root / "org/tiny/model.safetensors",
               safetensors_bytes({{"a", "F32", {2}}, {"b", "F32", {3}}, {"c", "BF16", {5}}, {"d", "F32", {1}},
                                  {"e", "F16", {4}}, {"f", "F32", {2}}, {"g", "BF16", {3}}, {"h", "F32", {2}},
                                  {"i", "F32", {3}}}));
    write_file(root / "org/big/model.safetensors",
               safetensors_bytes({{"model.norm.weight", "BF16", {64}}, {"model.embed_tokens.weight", "BF16", {5000, 2048}}}));
  }
  ~hub_folder() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

class LoaderHost : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    folder_ = new hub_folder;
    host_ = new host_process({folder_->root.string(), "--port", "0"});
    no_range_ = new host_process({folder_->root.string(), "--port", "0", "--no-range"});
  }
  static void TearDownTestSuite() {
    delete host_;
    delete no_range_;
    delete folder_;
  }
  void SetUp() override {
    ASSERT_NE(host_->port(), 0) << "mpakt host did not start";
    ASSERT_NE(no_range_->port(), 0) << "mpakt host --no-range did not start";
  }

  static result<model_index> inspect(const std::string& text, const host_process& h, byte_reader& r) {
    source_options o;
    o.hf_endpoint = h.endpoint();
    auto src = parse_source(text, o);
    if (!src) return std::move(src).err();
    return inspect_source(*src, r);
  }

  /// A single-file model of the folder as a fetcher sees it: its tensors, the file's bytes,
  /// and the file probed by `fetcher`.
  struct probed_model {
    std::vector<tensor_location> tensors;
    std::string bytes;
  };
  static probed_model probe_model(const std::string& model, host_fetcher& fetcher) {
    probed_model out;
    auto r = make_http_reader();
    auto idx = inspect("hf:org/" + model, *host_, *r);
    EXPECT_TRUE(idx.ok()) << idx.err().message;
    if (!idx) return out;
    const auto& file = idx->files[0];
    EXPECT_TRUE(fetcher.probe(file.location, file.data_start, file.header_sha256).ok());
    for (const auto& t : idx->tensors) out.tensors.push_back(locate(*idx, t));
    std::ifstream in(folder_->root / ("org/" + model + "/model.safetensors"), std::ios::binary);
    out.bytes.assign(std::istreambuf_iterator<char>(in), {});
    return out;
  }

  static inline hub_folder* folder_ = nullptr;
  static inline host_process* host_ = nullptr;
  static inline host_process* no_range_ = nullptr;
};

TEST_F(LoaderHost, SingleFileInspectIsOneRangeRequest) {
  auto r = make_http_reader();
  auto idx = inspect("hf:org/small", *host_, *r);
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  EXPECT_EQ(r->requests(), 1u);
  EXPECT_TRUE(idx->remote);
  EXPECT_EQ(idx->count(), 4u);
  EXPECT_FALSE(idx->sharded);
  EXPECT_EQ(idx->files[0].location, host_->endpoint() + "/org/small/resolve/main/model.safetensors");
  ASSERT_TRUE(idx->files[0].size.has_value());  // from Content-Range
  EXPECT_EQ(*idx->files[0].size, fs::file_size(folder_->root / "org/small/model.safetensors"));
  EXPECT_EQ(idx->dtypes.at("bf16"), 2u);
  EXPECT_EQ(idx->dtypes.at("int64"), 1u);
}

TEST_F(LoaderHost, InspectSendsOneRequestOnTheWire) {
  counting_proxy proxy(host_->port());
  source_options o;
  o.hf_endpoint = proxy.endpoint();
  auto src = parse_source("hf:org/small", o);
  ASSERT_TRUE(src.ok());
  {
    auto r = make_http_reader();
    auto idx = inspect_source(*src, *r);
    ASSERT_TRUE(idx.ok()) << idx.err().message;
    EXPECT_EQ(idx->count(), 4u);
  }
  const auto heads = proxy.requests();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_EQ(heads[0].rfind("GET /org/small/resolve/main/model.safetensors HTTP/1.1\r\n", 0), 0u) << heads[0];
  std::string lower = heads[0];
  for (auto& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  EXPECT_NE(lower.find("\r\nrange: bytes=0-262143"), std::string::npos) << heads[0];
}

TEST_F(LoaderHost, RevisionsAndUrls) {
  auto r = make_http_reader();
  auto rev = inspect("hf:org/small@v1", *host_, *r);
  ASSERT_TRUE(rev.ok()) << rev.err().message;
  ASSERT_EQ(rev->count(), 1u);
  EXPECT_EQ(rev->tensors[0].name(), "only.weight");
  auto url = inspect(host_->endpoint() + "/org/small/resolve/main/model.safetensors", *host_, *r);
  ASSERT_TRUE(url.ok()) << url.err().message;
  EXPECT_EQ(url->count(), 4u);
}

TEST_F(LoaderHost, ShardedModelThroughItsIndex) {
  auto r = make_http_reader();
  auto idx = inspect("hf:org/sharded", *host_, *r);
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  // model.safetensors (404), the index, one header per shard.
  EXPECT_EQ(r->requests(), 4u);
  EXPECT_TRUE(idx->sharded);
  EXPECT_EQ(idx->shards,
            (std::vector<std::string>{"model-00000-of-00002.safetensors", "model-00001-of-00002.safetensors"}));
  ASSERT_EQ(idx->count(), 3u);
  EXPECT_EQ(idx->files[1].location, host_->endpoint() + "/org/sharded/resolve/main/model-00001-of-00002.safetensors");
  EXPECT_TRUE(inspect_reply_of(*idx).sharded);

  // Named outright, the index costs one request fewer.
  auto r2 = make_http_reader();
  auto named = inspect("hf:org/sharded/model.safetensors.index.json", *host_, *r2);
  ASSERT_TRUE(named.ok()) << named.err().message;
  EXPECT_EQ(r2->requests(), 3u);
  EXPECT_EQ(named->count(), 3u);

  // Shards stream from their own files.
  const tensor_info* c = idx->find("c.weight");
  ASSERT_NE(c, nullptr);
  std::string got;
  auto st = stream_tensor(*r, locate(*idx, *c), [&](std::uint64_t, std::string_view b) {
    got.append(b);
    return ok_status();
  });
  ASSERT_TRUE(st.ok()) << st.err().message;
  const std::string file = [&] {
    std::ifstream f(folder_->root / "org/sharded/model-00001-of-00002.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  EXPECT_EQ(got, file.substr(std::size_t(c->file_offset), std::size_t(c->bytes())));
}

TEST_F(LoaderHost, MissingModelNamesBothCandidates) {
  auto r = make_http_reader();
  auto idx = inspect("hf:org/absent", *host_, *r);
  ASSERT_FALSE(idx.ok());
  EXPECT_EQ(idx.err().code, errc::invalid);
  EXPECT_EQ(idx.err().message, "source hf:org/absent: neither " + host_->endpoint() +
                                   "/org/absent/resolve/main/model.safetensors nor " + host_->endpoint() +
                                   "/org/absent/resolve/main/model.safetensors.index.json exists");
}

TEST_F(LoaderHost, HostIgnoringRangeIsRefusedNamingTheUrl) {
  auto r = make_http_reader();
  const auto t0 = std::chrono::steady_clock::now();
  auto idx = inspect("hf:org/big", *no_range_, *r);
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(idx.ok());
  EXPECT_EQ(idx.err().code, errc::invalid);
  const std::string url = no_range_->endpoint() + "/org/big/resolve/main/model.safetensors";
  EXPECT_NE(idx.err().message.find("host " + url + " does not honour Range requests"), std::string::npos)
      << idx.err().message;
  EXPECT_EQ(r->requests(), 1u);
  EXPECT_LT(elapsed, 10s);  // the 20 MB body is not read

  // Streaming from it is refused too, before the sink sees a byte.
  auto good = make_http_reader();
  auto index = inspect("hf:org/small", *host_, *good);
  ASSERT_TRUE(index.ok());
  tensor_location loc = locate(*index, index->tensors[1]);
  loc.location = no_range_->endpoint() + "/org/small/resolve/main/model.safetensors";
  int pieces = 0;
  auto st = stream_tensor(*r, loc, [&](std::uint64_t, std::string_view) {
    ++pieces;
    return ok_status();
  });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(pieces, 0);
  EXPECT_NE(st.err().message.find("tensor " + loc.name + ": host " + loc.location + " does not honour Range requests"),
            std::string::npos)
      << st.err().message;
}

TEST_F(LoaderHost, TensorLargerThanAPieceArrivesWhole) {
  auto r = make_http_reader();
  auto idx = inspect("hf:org/big", *host_, *r);
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  const tensor_info* emb = idx->find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  ASSERT_EQ(emb->bytes(), 20'480'000u);
  const std::string file = [&] {
    std::ifstream f(folder_->root / "org/big/model.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  const std::string_view want = std::string_view(file).substr(std::size_t(emb->file_offset), std::size_t(emb->bytes()));

  const loader::tensor_location loc = locate(*idx, *emb);
  tensor_builder builder(loc.file_dtype, loc.shape, dtype::q8, loc.name);
  std::vector<std::size_t> sizes;
  std::uint64_t mismatched = 0;
  const auto before = r->requests();
  auto st = stream_tensor(*r, loc, [&](std::uint64_t off, std::string_view bytes) -> status {
    sizes.push_back(bytes.size());
    if (want.substr(std::size_t(off), bytes.size()) != bytes) ++mismatched;
    return builder.add(off, bytes);
  });
  ASSERT_TRUE(st.ok()) << st.err().message;
  EXPECT_EQ(sizes, (std::vector<std::size_t>{16'000'000, 4'480'000}));
  EXPECT_EQ(mismatched, 0u);
  EXPECT_EQ(st->bytes, emb->bytes());
  EXPECT_LE(st->peak_buffered, piece_bytes);
  EXPECT_EQ(r->requests() - before, 2u);  // one range request per piece

  auto t = builder.finish();
  ASSERT_TRUE(t.ok()) << t.err().message;
  auto whole = tensor::make(dtype::bf16, loc.shape);
  ASSERT_TRUE(whole.ok());
  std::memcpy(whole->data(), want.data(), want.size());
  auto q = convert_tensor(*whole, dtype::q8);
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(t->nbytes(), q->nbytes());
  EXPECT_EQ(std::memcmp(t->data(), q->data(), q->nbytes()), 0);
}

TEST_F(LoaderHost, WholeModelStreamedIntoBuildersMatchesTheLocalLoader) {
  auto r = make_http_reader();
  auto idx = inspect("hf:org/small", *host_, *r);
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  auto sel = select_tensors(*idx, {});
  ASSERT_TRUE(sel.ok());
  ASSERT_TRUE(check_not_quantised(*idx, *sel).ok());
  auto local = load_safetensors_file((folder_->root / "org/small/model.safetensors").string());
  ASSERT_TRUE(local.ok()) << local.err().message;
  for (std::size_t i : *sel) {
    const auto loc = locate(*idx, idx->tensors[i]);
    tensor_builder b(loc.file_dtype, loc.shape, *resident_dtype(loc.file_dtype), loc.name);
    auto st = stream_tensor(*r, loc, [&](std::uint64_t off, std::string_view bytes) { return b.add(off, bytes); }, 1000);
    ASSERT_TRUE(st.ok()) << st.err().message;
    auto t = b.finish();
    ASSERT_TRUE(t.ok()) << t.err().message;
    const tensor* want = nullptr;
    for (const auto& [name, lt] : *local)
      if (name == loc.name) want = &lt;
    ASSERT_NE(want, nullptr) << loc.name;
    ASSERT_EQ(t->type(), want->type()) << loc.name;
    ASSERT_EQ(t->nbytes(), want->nbytes()) << loc.name;
    EXPECT_EQ(std::memcmp(t->data(), want->data(), t->nbytes()), 0) << loc.name;
  }
}

TEST_F(LoaderHost, ParallelRangeRequestsGiveTheFilesBytes) {
  for (const std::string model : {"big", "small", "sharded"}) {
    auto r = make_http_reader();
    auto idx = inspect("hf:org/" + model, *host_, *r);
    ASSERT_TRUE(idx.ok()) << idx.err().message;
    std::vector<tensor_location> ts;
    for (const auto& t : idx->tensors) ts.push_back(locate(*idx, t));
    // Small pieces: many units, several tensors sharing some, big tensors cut.
    for (std::uint64_t piece : {std::uint64_t(3000), std::uint64_t(5'000'000), piece_bytes}) {
      auto units = plan_fetches(ts, piece);
      fetch_pool pool(ts, units, [] { return make_http_reader(); }, {4, 4 * piece});
      std::map<std::size_t, std::string> got;
      for (std::size_t u = 0; u < units.size(); ++u) {
        auto f = pool.next();
        ASSERT_TRUE(f.ok()) << f.err().message;
        for (std::size_t s = 0; s < f->parts.size(); ++s) got[units[u].segments[s].tensor] += f->parts[s];
        pool.release(units[u].length);
      }
      EXPECT_EQ(pool.requests(), units.size());
      EXPECT_LE(pool.peak_bytes(), 4 * piece);
      for (std::size_t i = 0; i < ts.size(); ++i) {
        const fs::path file = folder_->root / ("org/" + model) / ts[i].location.substr(ts[i].location.rfind('/') + 1);
        std::ifstream in(file, std::ios::binary);
        std::string want(std::size_t(ts[i].length), '\0');
        in.seekg(std::streamoff(ts[i].first));
        in.read(want.data(), std::streamsize(want.size()));
        EXPECT_TRUE(got[i] == want) << model << " " << ts[i].name << " with pieces of " << piece;
      }
    }
  }
}

TEST_F(LoaderHost, FetchFromAHostIgnoringRangeFailsNamingTheTensor) {
  auto good = make_http_reader();
  auto index = inspect("hf:org/small", *host_, *good);
  ASSERT_TRUE(index.ok());
  std::vector<tensor_location> ts;
  for (const auto& t : index->tensors) {
    ts.push_back(locate(*index, t));
    ts.back().location = no_range_->endpoint() + "/org/small/resolve/main/model.safetensors";
  }
  fetch_pool pool(ts, plan_fetches(ts), [] { return make_http_reader(); }, {});
  auto f = pool.next();
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.err().code, errc::invalid);
  EXPECT_NE(f.err().message.find("tensor " + ts[0].name + ": host " + ts[0].location + " does not honour Range requests"),
            std::string::npos)
      << f.err().message;
}

/// A volunteer's own fetching (host_fetch.hpp): it reads a file's ranges only after proving,
/// by the header's digest, that the address gives it the coordinator's file; it reads public
/// addresses only unless allowed more; ranges come back whole and in their parts.
TEST_F(LoaderHost, HostFetcherReadsOnlyFilesItProvedTheSame) {
  auto r = make_http_reader();
  auto idx = inspect("hf:org/sharded", *host_, *r);
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  ASSERT_EQ(idx->files.size(), 2u);
  for (const auto& f : idx->files) ASSERT_EQ(f.header_sha256.size(), 64u) << f.location;
  const auto& file = idx->files[0];

  host_fetcher::options o;
  o.allow_private = true;
  o.max_ranges = 2;
  host_fetcher fetcher(o);
  std::vector<tensor_location> ts;
  for (const auto& t : idx->tensors)
    if (t.file == 0) ts.push_back(locate(*idx, t));
  auto units = plan_fetches(ts, piece_bytes);
  ASSERT_EQ(units.size(), 1u);  // (both tensors of the first shard in one range)
  tensor_fetch f{"m", units[0].location, units[0].first, units[0].length, {}, {}, {}};
  for (const auto& seg : units[0].segments) f.parts.push_back({ts[seg.tensor].name, seg.offset, seg.length});

  // not probed yet: refused, nothing read (and no fetch thread started for it)
  auto early = fetcher.start(f);
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.err().code, errc::invalid);
  EXPECT_EQ(fetcher.threads(), 0);
  // other bytes than the coordinator's: refused
  auto other = fetcher.probe(file.location, file.data_start, std::string(64, '0'));
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.err().code, errc::conflict) << other.err().message;
  EXPECT_FALSE(fetcher.start(f).ok());
  auto shorter = fetcher.probe(file.location, file.data_start - 1, file.header_sha256);
  EXPECT_FALSE(shorter.ok());

  ASSERT_TRUE(fetcher.probe(file.location, file.data_start, file.header_sha256).ok());
  // the first tensor is kept as published: its part is read straight into it; the second is
  // converted (to f32), so its part comes in a buffer
  tensor_builder kept(ts[0].file_dtype, ts[0].shape, dtype::bf16, ts[0].name);
  ASSERT_FALSE(kept.destination().empty());
  ASSERT_TRUE(tensor_builder(ts[1].file_dtype, ts[1].shape, dtype::f32).destination().empty());
  EXPECT_EQ(fetcher.threads(), 0);  // (probed, but no range yet: a fetcher that never reads costs no thread)
  auto n = fetcher.start(f);
  ASSERT_TRUE(n.ok()) << n.err().message;
  EXPECT_EQ(fetcher.threads(), o.connections);  // (its threads start with its first range)
  fetcher.destine("m", ts[0].name, kept.destination());  // (the fetch waits for these)
  fetcher.destine("m", ts[1].name, tensor());
  auto got = fetcher.take(*n);
  ASSERT_TRUE(got.ok()) << got.err().message;
  ASSERT_EQ(got->in_place, (std::vector<bool>{true, false}));
  std::ifstream in(folder_->root / "org/sharded/model-00000-of-00002.safetensors", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(kept.wrote(0, ts[0].length).ok());
  auto t0 = kept.finish();
  ASSERT_TRUE(t0.ok());
  EXPECT_TRUE(std::string_view(reinterpret_cast<const char*>(t0->data()), t0->nbytes()) ==
              bytes.substr(std::size_t(ts[0].first), std::size_t(ts[0].length)));
  EXPECT_TRUE(std::string_view(got->bytes[1]).substr(0, std::size_t(ts[1].length)) ==
              bytes.substr(std::size_t(ts[1].first), std::size_t(ts[1].length)));
  fetcher.recycle(std::move(got->bytes));
  EXPECT_EQ(fetcher.bytes_fetched(), units[0].length);
  // Buffers of 64 KiB and more are kept for later ranges, up to a bound, until a load's end
  // drops them (the receiver's `reserve 0`).
  fetcher.drop_spares();
  fetcher.recycle({std::string(std::size_t(1) << 20, 'x'), std::string(100, 'y')});
  EXPECT_EQ(fetcher.spare_bytes(), std::uint64_t(1) << 20) << "a small buffer is not kept";
  std::vector<std::string> many(64, std::string(std::size_t(8) << 20, 'z'));
  fetcher.recycle(std::move(many));
  EXPECT_LE(fetcher.spare_bytes(), std::uint64_t(o.max_ranges) * 2 * piece_bytes) << "kept buffers are bounded";
  fetcher.drop_spares();
  EXPECT_EQ(fetcher.spare_bytes(), 0u);
  fetcher.forget_model("m");  // (later ranges of these tensors would wait again, then take buffers)
  // the second shard was not probed: its ranges are not fetched
  tensor_fetch g = f;
  g.location = idx->files[1].location;
  EXPECT_FALSE(fetcher.start(g).ok());
  // parts that do not add up to the range, or a range larger than a piece: refused
  tensor_fetch bad = f;
  bad.parts.back().length += 1;
  EXPECT_FALSE(fetcher.start(bad).ok());
  bad = f;
  bad.length = 3 * piece_bytes;
  bad.parts = {{"x", 0, 3 * piece_bytes}};
  EXPECT_FALSE(fetcher.start(bad).ok());
  // at most max_ranges waiting to be taken
  fetcher.destine("m", ts[0].name, tensor());
  fetcher.destine("m", ts[1].name, tensor());
  auto a = fetcher.start(f), b = fetcher.start(f), c = fetcher.start(f);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.err().code, errc::limit);
  EXPECT_TRUE(fetcher.take(*b).ok());
  EXPECT_TRUE(fetcher.take(*a).ok());
  EXPECT_FALSE(fetcher.take(*b + 100).ok());  // never started

  // public addresses only (a volunteer's default): the loopback host is refused
  host_fetcher careful({});
  auto refused = careful.probe(file.location, file.data_start, file.header_sha256);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.err().code, errc::invalid) << refused.err().message;
}

/// Reads range `f` with `fetcher` and hands its parts to their builders as a worker's receiver
/// does (load_receiver.cpp): parts written in place, rows converted on the fetch thread with
/// the rows a range boundary cut added as bytes, the rest added; returns the bytes converted.
std::uint64_t fetch_into(host_fetcher& fetcher, const tensor_fetch& f, std::map<std::string, tensor_builder>& builders,
                         const std::string& what) {
  std::uint64_t converted = 0;
  auto n = fetcher.start(f);
  EXPECT_TRUE(n.ok()) << what << ": " << n.err().message;
  if (!n) return converted;
  auto got = fetcher.take(*n);
  EXPECT_TRUE(got.ok()) << what << ": " << got.err().message;
  if (!got) return converted;
  for (std::size_t i = 0; i < f.parts.size(); ++i) {
    const auto& p = f.parts[i];
    auto& b = builders.at(p.name);
    if (got->in_place[i]) {
      EXPECT_TRUE(b.wrote(p.offset, p.length).ok()) << what;
    } else if (got->converted[i] > 0) {
      const std::uint64_t head = got->bytes[i].size(), mid = got->converted[i];
      EXPECT_EQ(head + mid + got->tails[i].size(), p.length) << what;
      EXPECT_TRUE(b.add(p.offset, got->bytes[i]).ok()) << what;
      EXPECT_TRUE(b.converted(p.offset + head, mid).ok()) << what;
      EXPECT_TRUE(b.add(p.offset + head + mid, got->tails[i]).ok()) << what;
      converted += mid;
    } else {
      EXPECT_TRUE(b.add(p.offset, std::string_view(got->bytes[i]).substr(0, std::size_t(p.length))).ok()) << what;
    }
  }
  fetcher.recycle(std::move(got->bytes));
  return converted;
}

TEST_F(LoaderHost, HostFetcherConvertsTheWholeRowsOfQuantizedTensorsAsTheyArrive) {
  // Ranges cut the 4 MiB matrix and the two of wide rows (2.9 and 4.5 MB) mid-row (3 MB or 1 MB
  // pieces), the fetch reads their whole rows through its window (256 KiB, or one group of 16
  // rows where that is wider, or one row where a group would pass 4 MiB) and converts them on
  // its thread; the rows the ranges cut go
  // through the builder, as a worker's receiver does (load_receiver.cpp). The tensors must
  // be those of converting the file whole, in rows and in lanes; the norm is read in place.
  host_fetcher::options o;
  o.allow_private = true;
  host_fetcher fetcher(o);
  const auto [ts, bytes] = probe_model("wide", fetcher);
  ASSERT_EQ(ts.size(), 6u);
  int round = 0;
  for (std::uint64_t piece : {std::uint64_t(3'000'000), std::uint64_t(1'000'000), piece_bytes})
    for (dtype q : {dtype::q8, dtype::q4})
      for (bool lanes : {false, true}) {
        const std::string model = "m" + std::to_string(round++);
        const std::string what = std::string(dtype_name(q)) + (lanes ? " in lanes" : "") + ", pieces of " + std::to_string(piece);
        std::map<std::string, tensor_builder> builders;
        for (const auto& t : ts) {
          const dtype held = t.shape.size() == 1 ? dtype::bf16 : q;
          auto& b = builders.try_emplace(t.name, t.file_dtype, t.shape, held, t.name, model, lanes).first->second;
          fetcher.destine(model, t.name, b.destination(), b.conversion());
        }
        std::uint64_t converted = 0;
        const std::uint64_t requests_before = fetcher.requests();
        const auto units = plan_fetches(ts, piece);
        for (const auto& u : units) {
          tensor_fetch f{model, u.location, u.first, u.length, {}, {}, {}};
          for (const auto& seg : u.segments) f.parts.push_back({ts[seg.tensor].name, seg.offset, seg.length});
          converted += fetch_into(fetcher, f, builders, what);
        }
        // every matrix but the rows the ranges cut was converted on the fetch threads, each
        // range read with one request however many windows its rows took
        EXPECT_GT(converted, ts[1].length + ts[4].length + ts[5].length - 4 * 2048 - 4 * 32768 - 6 * 278528) << what;
        EXPECT_EQ(fetcher.requests() - requests_before, units.size()) << what;
        for (const auto& t : ts) {
          auto got = builders.at(t.name).finish();
          ASSERT_TRUE(got.ok()) << what << ": " << got.err().message;
          const std::string_view published = std::string_view(bytes).substr(std::size_t(t.first), std::size_t(t.length));
          if (t.shape.size() == 1) {
            EXPECT_TRUE(std::string_view(reinterpret_cast<const char*>(got->data()), got->nbytes()) == published) << t.name;
            continue;
          }
          auto whole = tensor::make(*resident_dtype(t.file_dtype), t.shape);
          ASSERT_TRUE(whole.ok());
          std::memcpy(whole->data(), published.data(), published.size());
          auto want = convert_tensor(*whole, q);
          ASSERT_TRUE(want.ok());
          const bool in_lanes = lanes && lanes_fit(q, t.shape);
          if (in_lanes) {
            ASSERT_TRUE(want->to_lanes16().ok());
          }
          EXPECT_EQ(got->lanes16(), in_lanes) << what << " " << t.name;
          ASSERT_EQ(got->nbytes(), want->nbytes());
          EXPECT_EQ(std::memcmp(got->data(), want->data(), want->nbytes()), 0) << what << " " << t.name;
        }
        fetcher.forget_model(model);
      }
}

TEST_F(LoaderHost, HostFetcherConvertsTheRowsAgainWhenARangeIsCutAndAskedForAgain) {
  // One range request carries a range's bytes through the window a part at a time, each
  // converted as it fills; a host that drops the answer after the first window leaves rows
  // converted and the rest unread: the range is asked for again — by a fetcher built as a
  // volunteer's is, for which the host is no trusted endpoint — every window converted again,
  // and the tensor is that of converting the file whole.
  counting_proxy proxy(host_->port());
  host_fetcher::options o;
  o.allow_private = true;  // (as a volunteer's `mpakt worker --host-fetch any`: no trusted endpoint)
  host_fetcher fetcher(o);
  auto r = make_http_reader();
  auto idx = inspect("hf:org/wide", *host_, *r);
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  const auto& file = idx->files[0];
  const std::string location = proxy.endpoint() + file.location.substr(host_->endpoint().size());
  ASSERT_TRUE(fetcher.probe(location, file.data_start, file.header_sha256).ok());
  std::vector<tensor_location> ts;
  for (const auto& t : idx->tensors) ts.push_back(locate(*idx, t));
  std::ifstream in(folder_->root / "org/wide/model.safetensors", std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  int round = 0;
  for (dtype q : {dtype::q8, dtype::q4}) {
    const std::string model = "cut" + std::to_string(round++);
    std::map<std::string, tensor_builder> builders;
    for (const auto& t : ts) {
      const dtype held = t.shape.size() == 1 ? dtype::bf16 : q;
      auto& b = builders.try_emplace(t.name, t.file_dtype, t.shape, held, t.name, model, true).first->second;
      fetcher.destine(model, t.name, b.destination(), b.conversion());
    }
    const auto units = plan_fetches(ts, 3'000'000);
    const auto requests_before = proxy.requests().size();
    bool cut = false;
    for (const auto& u : units) {
      tensor_fetch f{model, location, u.first, u.length, {}, {}, {}};
      for (const auto& seg : u.segments) f.parts.push_back({ts[seg.tensor].name, seg.offset, seg.length});
      if (!cut && u.length > (std::uint64_t(5) << 19)) {  // (a range of more than one window)
        proxy.cut_next_answer_after(std::size_t(5) << 19);
        cut = true;
      }
      fetch_into(fetcher, f, builders, std::string(dtype_name(q)));
    }
    ASSERT_TRUE(cut);
    EXPECT_EQ(proxy.requests().size() - requests_before, units.size() + 1) << "one range asked for twice";
    for (const auto& t : ts) {
      auto got = builders.at(t.name).finish();
      ASSERT_TRUE(got.ok()) << got.err().message;
      if (t.shape.size() == 1) continue;
      auto whole = tensor::make(*resident_dtype(t.file_dtype), t.shape);
      ASSERT_TRUE(whole.ok());
      std::memcpy(whole->data(), bytes.data() + t.first, std::size_t(t.length));
      auto want = convert_tensor(*whole, q);
      ASSERT_TRUE(want.ok());
      if (lanes_fit(q, t.shape)) {
        ASSERT_TRUE(want->to_lanes16().ok());
      }
      ASSERT_EQ(got->nbytes(), want->nbytes());
      EXPECT_EQ(std::memcmp(got->data(), want->data(), want->nbytes()), 0) << dtype_name(q) << " " << t.name;
    }
    fetcher.forget_model(model);
  }
}

TEST_F(LoaderHost, HostFetcherReadsRangesOfManyTinyTensorsIntoTheirBuffers) {
  // Nine tensors of a few bytes share one range, each read into its own buffer (nothing is
  // destined): a buffer that short keeps its bytes inside the string object, so the list of
  // buffers must not move while the read fills them.
  host_fetcher::options o;
  o.allow_private = true;
  host_fetcher fetcher(o);
  const auto [ts, bytes] = probe_model("tiny", fetcher);
  auto units = plan_fetches(ts, piece_bytes);
  ASSERT_EQ(units.size(), 1u);
  tensor_fetch f{"m", units[0].location, units[0].first, units[0].length, {}, {}, {}};
  for (const auto& seg : units[0].segments) {
    f.parts.push_back({ts[seg.tensor].name, seg.offset, seg.length});
    fetcher.destine("m", ts[seg.tensor].name, tensor());
  }
  ASSERT_EQ(f.parts.size(), 9u);
  auto n = fetcher.start(f);
  ASSERT_TRUE(n.ok()) << n.err().message;
  auto got = fetcher.take(*n);
  ASSERT_TRUE(got.ok()) << got.err().message;
  for (std::size_t i = 0; i < f.parts.size(); ++i) {
    const auto& t = ts[units[0].segments[i].tensor];
    EXPECT_FALSE(got->in_place[i]);
    EXPECT_TRUE(std::string_view(got->bytes[i]).substr(0, std::size_t(t.length)) ==
                std::string_view(bytes).substr(std::size_t(t.first), std::size_t(t.length)))
        << t.name;
  }
}

/// A volunteer's worker waits for a range it reads itself without holding up the tensors
/// begun after it: while the host holds back the answer to the first range, the second
/// range's tensor is begun and its range requested on another connection. Then both
/// tensors end with the file's bytes.
TEST_F(LoaderHost, AWorkerBeginsTheNextRangesTensorsWhileARangeIsStillArriving) {
  MPAKT_SKIP_ACTOR_TEST_UNDER_SANITIZERS();
  counting_proxy proxy(host_->port());
  auto r = make_http_reader();
  auto idx = inspect("hf:org/sharded", *host_, *r);
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  const auto& file = idx->files[0];
  const std::string location = proxy.endpoint() + file.location.substr(host_->endpoint().size());
  std::vector<tensor_location> ts;
  for (const auto& t : idx->tensors)
    if (t.file == 0) ts.push_back(locate(*idx, t));
  ASSERT_EQ(ts.size(), 2u);  // a.weight and b.weight, 4096 bytes each, one after the other
  proxy.hold_answers_to("range: bytes=" + std::to_string(ts[0].first) + "-");

  test::protocol_system actors;
  caf::actor_system& sys = actors.sys;
  worker_config wc;
  wc.worker_id = "w_fetch";
  wc.memory_bytes = 1 << 20;
  host_fetcher::options o;
  o.allow_private = true;
  wc.fetcher = std::make_shared<host_fetcher>(o);
  auto w = spawn_worker(sys, wc);
  caf::scoped_actor me{sys};
  auto fail = [](caf::error& e) { FAIL() << from_caf(e).message; };
  // (the probe's answer: whether it reads the tensors it converts too — every worker the
  // program starts does; one configured not to gets those relayed)
  me->request(w, 10s, tprobe_atom::value, location, file.data_start, file.header_sha256)
      .receive([](bool converted_too) { EXPECT_TRUE(converted_too); }, fail);
  {
    worker_config kept_only = wc;
    kept_only.worker_id = "w_kept_only";
    kept_only.fetch_converted = false;
    auto k = spawn_worker(sys, kept_only);
    me->request(k, 10s, tprobe_atom::value, location, file.data_start, file.header_sha256)
        .receive([](bool converted_too) { EXPECT_FALSE(converted_too); }, fail);
    anon_send_exit(k, caf::exit_reason::user_shutdown);
  }
  // each range begins its tensor, reads it and ends it (as the coordinator sends them)
  auto fetch = [&](const tensor_location& t) {
    tensor_fetch f{"m", location, t.first, t.length, {{t.name, 0, t.length}}, {}, {t.name}};
    f.begins.push_back(tensor_begin_request{"m", t.name, t.file_dtype, t.shape, "bf16", t.length});
    return me->request(w, 30s, tfetch_atom::value, std::move(f));
  };
  auto f0 = fetch(ts[0]);
  auto f1 = fetch(ts[1]);
  // the second range's tensor is begun, and its range asked for, while the first is held
  const std::string second = "range: bytes=" + std::to_string(ts[1].first) + "-";
  bool asked = false;
  for (int i = 0; i < 500 && !asked; ++i) {
    for (auto head : proxy.requests()) {
      for (auto& ch : head) ch = char(std::tolower(static_cast<unsigned char>(ch)));
      asked = asked || head.find(second) != std::string::npos;
    }
    if (!asked) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(asked) << "the second range was not requested while the first was held";
  proxy.release();
  for (auto [h, t] : {std::pair{&f0, &ts[0]}, std::pair{&f1, &ts[1]}})
    h->receive(
        [&](tensor_fetch_reply& r) {
          EXPECT_EQ(r.bytes, t->length);
          EXPECT_EQ(r.resident, std::vector<std::uint64_t>{t->length});  // (bf16 kept as published)
        },
        fail);
  // the bytes are the file's: each tensor's digest as the worker holds it, against the file's
  std::ifstream in(folder_->root / "org/sharded/model-00000-of-00002.safetensors", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& t : ts) {
    const std::string nonce = "n";
    me->request(w, 10s, tdigest_atom::value, std::string("m"), t.name, nonce)
        .receive(
            [&](const std::string& hex) {
              EXPECT_EQ(hex, weight_digest(nonce, std::string_view(bytes).substr(std::size_t(t.first), std::size_t(t.length))))
                  << t.name;
            },
            fail);
  }
  anon_send_exit(w, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace mpakt::loader
