// End to end: the real `mpakt host` binary as a child process, driven over real sockets.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test/support/host_process.hpp"
#include "http/client.hpp"
#include "test/http/raw_connection.hpp"


namespace mpakt::http {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;

using test::host_process;

void write_file(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << content;
}

/// A checkpoint folder in the hub's layout, with traps.
struct host_folder {
  static inline int count = 0;
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(count++);
  fs::path root = fs::path(testing::TempDir()) / ("mpakt_host_" + tag);
  fs::path outside = fs::path(testing::TempDir()) / ("mpakt_host_secret_" + tag + ".txt");
  std::string weights;

  host_folder() {
    fs::remove_all(root);
    weights.resize((std::size_t(3) << 20) + 123);  // more than one 1 MiB streaming chunk
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = char((i * 31 + i / 7) % 256);
    write_file(root / "org/model/model.safetensors", weights);
    write_file(root / "org/model/sub/dir/file.txt", "nested");
    write_file(root / "org/model/revisions/v1/model.safetensors", "revision one");
    write_file(root / "other/thing/x.bin", "x");
    // a gated repository with two revisions, as the hub names them
    write_file(root / "gated/m/model.safetensors", "main weights");
    write_file(root / "gated/m/.gated", "hf_first\nhf_second\n");
    write_file(root / "gated/m/.commit", "1111111111111111111111111111111111111111\n");
    write_file(root / "gated/m/revisions/2222222222222222222222222222222222222222/model.safetensors", "older weights");
    write_file(root / "gated/m/revisions/v1/model.safetensors", "tagged weights");
    write_file(root / "gated/m/revisions/v1/.commit", "3333333333333333333333333333333333333333");
    write_file(outside, "the-outside-content");
    fs::create_symlink(outside, root / "org/model/link.txt");                        // points out of DIR
    fs::create_symlink(root / "org/model/sub/dir/file.txt", root / "org/model/in.txt");  // stays inside
  }
  ~host_folder() {
    std::error_code ec;
    fs::remove_all(root, ec);
    fs::remove(outside, ec);
  }
};

class host_test : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    folder_ = new host_folder;
    proc_ = new host_process({folder_->root.string(), "--port", "0"});
  }
  static void TearDownTestSuite() {
    delete proc_;
    delete folder_;
  }
  void SetUp() override {
    ASSERT_NE(proc_->port(), 0) << "mpakt host did not start; its first line: \"" << proc_->first_line()
                                << "\" (a failing registry check in main() stops every subcommand)";
  }

  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(proc_->port()) + path; }
  const std::string& weights() const { return folder_->weights; }

  /// The raw answer to GET/HEAD `target` with optional extra header lines.
  bhttp::response<bhttp::string_body> raw(const std::string& method, const std::string& target,
                                          const std::string& extra = "") {
    test::raw_connection c(proc_->port());
    EXPECT_TRUE(c.connected());
    EXPECT_FALSE(c.send(method + " " + target + " HTTP/1.1\r\nHost: t\r\n" + extra + "\r\n"));
    bhttp::response<bhttp::string_body> r;
    EXPECT_FALSE(c.read_response(r, method == "HEAD"));
    return r;
  }

  static host_folder* folder_;
  static host_process* proc_;
};

host_folder* host_test::folder_ = nullptr;
host_process* host_test::proc_ = nullptr;

const std::string model = "/org/model/resolve/main/model.safetensors";

TEST_F(host_test, prints_where_it_serves) {
  EXPECT_EQ(proc_->first_line().rfind("mpakt host: serving " + folder_->root.string() + " at http://127.0.0.1:", 0), 0u)
      << proc_->first_line();
}

TEST_F(host_test, whole_file_is_200_with_length_and_accept_ranges) {
  client c;
  auto r = c.get(url(model));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.size(), weights().size());
  EXPECT_TRUE(r->body == weights());
  EXPECT_EQ(*r->header("content-length"), std::to_string(weights().size()));
  EXPECT_EQ(*r->header("accept-ranges"), "bytes");
}

TEST_F(host_test, streamed_download_matches) {
  client c;
  std::string got;
  auto r = c.get_stream(url(model), std::nullopt, std::size_t(1) << 20, [&](std::string_view chunk) {
    got.append(chunk);
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_TRUE(got == weights());
}

TEST_F(host_test, ranges_are_206_with_the_exact_bytes) {
  client c;
  // Across the boundary of the host's 1 MiB streaming chunks.
  auto r = c.get(url(model), byte_range{1'048'000, 1'049'999});
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->status, 206);
  EXPECT_EQ(*r->header("content-range"), "bytes 1048000-1049999/" + std::to_string(weights().size()));
  EXPECT_TRUE(r->body == weights().substr(1'048'000, 2000));

  const std::string size = std::to_string(weights().size());
  auto tail = raw("GET", model, "Range: bytes=3145728-\r\n");
  EXPECT_EQ(tail.result_int(), 206u);
  EXPECT_EQ(tail[bhttp::field::content_range], "bytes 3145728-" + std::to_string(weights().size() - 1) + "/" + size);
  EXPECT_TRUE(tail.body() == weights().substr(3145728));

  auto suffix = raw("GET", model, "Range: bytes=-100\r\n");
  EXPECT_EQ(suffix.result_int(), 206u);
  EXPECT_TRUE(suffix.body() == weights().substr(weights().size() - 100));
}

TEST_F(host_test, unsatisfiable_range_is_416) {
  auto r = raw("GET", model, "Range: bytes=" + std::to_string(weights().size()) + "-\r\n");
  EXPECT_EQ(r.result_int(), 416u);
  EXPECT_EQ(r[bhttp::field::content_range], "bytes */" + std::to_string(weights().size()));
}

TEST_F(host_test, head_gives_headers_only) {
  client c;
  auto h = c.head(url(model));
  ASSERT_TRUE(h.ok()) << h.err().message;
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(*h->header("content-length"), std::to_string(weights().size()));
  EXPECT_EQ(*h->header("accept-ranges"), "bytes");
  EXPECT_NE(h->header("etag"), nullptr);
  EXPECT_TRUE(h->body.empty());
}

TEST_F(host_test, revisions_nested_paths_and_listing) {
  client c;
  auto rev = c.get(url("/org/model/resolve/v1/model.safetensors"));
  ASSERT_TRUE(rev.ok());
  EXPECT_EQ(rev->status, 200);
  EXPECT_EQ(rev->body, "revision one");
  auto nested = c.get(url("/org/model/resolve/main/sub/dir/file.txt"));
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(nested->body, "nested");
  auto inside_link = c.get(url("/org/model/resolve/main/in.txt"));
  ASSERT_TRUE(inside_link.ok());
  EXPECT_EQ(inside_link->body, "nested");
  auto list = c.get(url("/"));
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->body, "gated/m\norg/model\nother/thing\n");
}

TEST_F(host_test, gated_folders_need_a_token_and_revisions_name_their_commit) {
  client anonymous;
  auto refused = anonymous.get(url("/gated/m/resolve/main/model.safetensors"));
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->status, 401);
  client_options wrong_o;
  wrong_o.bearer_token = "hf_wrong";
  wrong_o.bearer_origin = url("");
  client wrong(wrong_o);
  EXPECT_EQ(wrong.get(url("/gated/m/resolve/main/model.safetensors"))->status, 401);
  for (const char* token : {"hf_first", "hf_second"}) {
    client_options o;
    o.bearer_token = token;
    o.bearer_origin = url("");
    client c(o);
    auto main = c.get(url("/gated/m/resolve/main/model.safetensors"));
    ASSERT_TRUE(main.ok());
    EXPECT_EQ(main->status, 200) << token;
    EXPECT_EQ(main->body, "main weights");
    EXPECT_EQ(main->repo_commit, "1111111111111111111111111111111111111111");
    auto old = c.get(url("/gated/m/resolve/2222222222222222222222222222222222222222/model.safetensors"));
    EXPECT_EQ(old->body, "older weights");
    EXPECT_EQ(old->repo_commit, "2222222222222222222222222222222222222222");  // a commit id names itself
    auto by_commit = c.get(url("/gated/m/resolve/3333333333333333333333333333333333333333/model.safetensors"));
    EXPECT_EQ(by_commit->body, "tagged weights");  // a commit id finds the folder naming it
    EXPECT_EQ(c.get(url("/gated/m/resolve/1111111111111111111111111111111111111111/model.safetensors"))->body,
              "main weights");
    EXPECT_EQ(c.get(url("/gated/m/resolve/4444444444444444444444444444444444444444/model.safetensors"))->status, 404);
    auto tag = c.get(url("/gated/m/resolve/v1/model.safetensors"));
    EXPECT_EQ(tag->body, "tagged weights");
    EXPECT_EQ(tag->repo_commit, "3333333333333333333333333333333333333333");
    EXPECT_EQ(c.get(url("/gated/m/resolve/main/.gated"))->status, 404);  // the tokens are never served
    EXPECT_EQ(c.get(url("/gated/m/resolve/v1/.commit"))->status, 404);
  }
  EXPECT_EQ(anonymous.get(url("/org/model/resolve/main/model.safetensors"))->repo_commit, "");  // says nothing
}

TEST_F(host_test, missing_things_are_404) {
  client c;
  for (const char* p : {"/org/model/resolve/main/nope.bin", "/org/model/resolve/v2/model.safetensors",
                        "/nobody/model/resolve/main/model.safetensors", "/org/model/blob/main/model.safetensors",
                        "/org/model/resolve/main/sub"}) {
    auto r = c.get(url(p));
    ASSERT_TRUE(r.ok()) << p;
    EXPECT_EQ(r->status, 404) << p;
  }
  auto post = raw("POST", model, "Content-Length: 0\r\n");
  EXPECT_EQ(post.result_int(), 405u);
}

TEST_F(host_test, nothing_outside_the_folder_is_served) {
  const std::string name = folder_->outside.filename().string();
  const std::vector<std::string> attempts = {
      "/org/model/resolve/main/../../../" + name,
      "/org/model/resolve/main/%2e%2e/%2e%2e/%2e%2e/" + name,
      "/org/model/resolve/main/..%2f..%2f..%2f" + name,
      "/org/model/resolve/main//etc/passwd",
      "/org/model/resolve/main/link.txt",
      "/../../" + name,
      "/org/model/resolve/%2e%2e/model.safetensors",
  };
  for (const auto& target : attempts) {
    auto r = raw("GET", target);
    EXPECT_TRUE(r.result_int() == 400u || r.result_int() == 404u) << target << " -> " << r.result_int();
    EXPECT_EQ(r.body().find("the-outside-content"), std::string::npos) << target;
  }
}

TEST(host_no_range, ignores_range_and_exits_cleanly_on_sigint) {
  host_folder folder;
  host_process proc({folder.root.string(), "--port", "0", "--no-range"});
  ASSERT_NE(proc.port(), 0) << proc.first_line();
  const std::string u = "http://127.0.0.1:" + std::to_string(proc.port()) + model;
  client c;
  auto r = c.get(u, byte_range{0, 99});
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.size(), folder.weights.size());
  EXPECT_EQ(r->header("accept-ranges"), nullptr);
  // The loader's path: a streamed range request to such a host hands nothing to the sink.
  int calls = 0;
  auto s = c.get_stream(u, byte_range{0, 99}, 4096, [&](std::string_view) { return ++calls, true; });
  ASSERT_TRUE(s.ok()) << s.err().message;
  EXPECT_EQ(s->status, 200);
  EXPECT_EQ(calls, 0);
  const int status = proc.stop(SIGINT);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(host_cli, exits_cleanly_on_sigterm_and_refuses_bad_arguments) {
  host_folder folder;
  host_process proc({folder.root.string(), "--port", "0"});
  ASSERT_NE(proc.port(), 0) << proc.first_line();
  const int status = proc.stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  host_process missing({(folder.root / "nope").string(), "--port", "0"});
  EXPECT_EQ(missing.port(), 0);
  const int st = missing.stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << st;
}

}  // namespace
}  // namespace mpakt::http
