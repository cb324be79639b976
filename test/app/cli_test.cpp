// The mpakt command-line tool as a user runs it: `mpakt ops`, `mpakt graph` then `mpakt run`
// against the stories260K folder, and a bad graph's error.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace {

struct run_result {
  int status = -1;
  std::string out;
};

/// Runs `mpakt ARGS`; with `timeout_s`, stopped after that many seconds (status 124).
run_result run(const std::string& args, int timeout_s = 0) {
  run_result r;
  const std::string cmd = (timeout_s > 0 ? "timeout " + std::to_string(timeout_s) + " " : std::string()) +
                          std::string(MPAKT_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  while (std::size_t n = fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

const std::string stories = std::string(MPAKT_SHARED_DIR) + "/models/stories260K";

TEST(Cli, OpsPrintsTheCatalogue) {
  auto r = run("ops");
  ASSERT_EQ(r.status, 0) << r.out;
  rapidjson::Document d;
  d.Parse(r.out.c_str());
  ASSERT_FALSE(d.HasParseError());
  EXPECT_EQ(d["protocolVersion"].GetInt(), 3);
  EXPECT_EQ(d["ops"].Size(), 37u);
}

TEST(Cli, GraphThenRunGivesTheGoldenNextToken) {
  const auto dir = std::filesystem::temp_directory_path() / ("mpakt_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string graph = (dir / "g.json").string();
  auto g = run("graph " + stories + "/config.json --ids 1,403,407,261,378 --argmax > " + graph);
  ASSERT_EQ(g.status, 0) << g.out;
  auto r = run("run " + graph + " --model " + stories);
  ASSERT_EQ(r.status, 0) << r.out;
  rapidjson::Document d;
  d.Parse(r.out.c_str());
  ASSERT_FALSE(d.HasParseError()) << r.out;
  const auto& tok = d["outputs"]["tok"]["data"];
  ASSERT_EQ(tok.Size(), 5u);
  EXPECT_EQ(tok[4].GetDouble(), 432.0);  // the golden greedy continuation of "<s>Once upon a time"
  std::filesystem::remove_all(dir);
}

TEST(Cli, RunNamesTheFaultOfABadGraph) {
  const auto path = std::filesystem::temp_directory_path() / ("mpakt_bad_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"inputs": [{"name": "x", "shape": [2], "data": [1, 2]}],
                             "steps": [{"op": "rope", "in": ["x"], "out": "y", "params": {"headDim": 3}}]})";
  auto r = run("run " + path.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("step 0 (rope)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("headDim"), std::string::npos) << r.out;
  std::filesystem::remove(path);
  EXPECT_EQ(run("frobnicate").status, 2);
}

}  // namespace

namespace {

// `--backend cuda` is the GPU or nothing (issue: CUDA workers): without a usable one — no GPU
// or driver (a build with CUDA), or a build without it (the sanitizer build) — serve and a
// volunteer exit with status 6, naming why, before listening or joining. Where a GPU is
// usable, serve starts and the timeout ends it: nothing to check here then.
TEST(Cli, AskedForCudaWithoutAUsableGpuServeAndWorkerSayWhyAndExit) {
  const auto dir = std::filesystem::temp_directory_path() / ("mpakt-cli-cuda-" + std::to_string(getpid()));
  auto served = run("serve --port 0 --data-dir " + dir.string() + " --backend cuda", 30);
  std::filesystem::remove_all(dir);
  if (served.status == 124) GTEST_SKIP() << "a usable GPU here: serve started";
  EXPECT_EQ(served.status, 6) << served.out;
  const bool why = served.out.find("--backend cuda: no usable CUDA device: ") != std::string::npos ||
                   served.out.find("--backend cuda: this build of mpakt has no CUDA backend") != std::string::npos;
  EXPECT_TRUE(why) << served.out;
  EXPECT_NE(served.out.find("not starting"), std::string::npos) << served.out;
  EXPECT_EQ(served.out.find("listening"), std::string::npos) << served.out;

  auto worker = run("worker --join 127.0.0.1:1 --token mpv_x --coordinator-fingerprint " + std::string(64, 'a') +
                    " --backend cuda --join-timeout-ms 1000",
                    30);
  EXPECT_EQ(worker.status, 6) << worker.out;
  EXPECT_NE(worker.out.find("--backend cuda: "), std::string::npos) << worker.out;
  EXPECT_EQ(worker.out.find("joined"), std::string::npos) << worker.out;

  auto bad = run("worker --join 127.0.0.1:1 --backend gpu");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("--backend takes cpu, cuda or auto"), std::string::npos) << bad.out;
}

// The spot-checks' queue per volunteer and for all of them (docs/operators.md, --verify-queue,
// --verify-queue-total): a size above zero; anything else is refused before the server starts.
TEST(Cli, ServeRefusesASpotCheckQueueThatIsNoSize) {
  const auto dir = std::filesystem::temp_directory_path() / ("mpakt-cli-queue-" + std::to_string(getpid()));
  for (const char* n : {"0", "abc", "-1M", ""}) {
    auto served = run("serve --port 0 --data-dir " + dir.string() + " --verify-queue " + std::string(n), 30);
    EXPECT_EQ(served.status, 2) << n << ": " << served.out;
    EXPECT_NE(served.out.find("--verify-queue takes a size such as 256M"), std::string::npos) << n << ": " << served.out;
    EXPECT_EQ(served.out.find("listening"), std::string::npos) << served.out;
    served = run("serve --port 0 --data-dir " + dir.string() + " --verify-queue-total " + std::string(n), 30);
    EXPECT_EQ(served.status, 2) << n << ": " << served.out;
    EXPECT_NE(served.out.find("--verify-queue-total takes a size such as 1G"), std::string::npos) << n << ": " << served.out;
    EXPECT_EQ(served.out.find("listening"), std::string::npos) << served.out;
  }
  std::filesystem::remove_all(dir);
}

// The spot-checks' window length (docs/operators.md): a number of passes from 1 to 1,000,000;
// anything else is refused before the server starts, and so is a worker fault it does not know.
TEST(Cli, ServeRefusesAWindowOfSpotChecksOutOfRangeAndWorkerAnUnknownFault) {
  const auto dir = std::filesystem::temp_directory_path() / ("mpakt-cli-window-" + std::to_string(getpid()));
  for (const char* n : {"0", "0.5", "-3", "abc", "2e6", ""}) {
    auto served = run("serve --port 0 --data-dir " + dir.string() + " --verify-window " + std::string(n), 30);
    EXPECT_EQ(served.status, 2) << n << ": " << served.out;
    EXPECT_NE(served.out.find("--verify-window takes a number of passes from 1 to 1000000"), std::string::npos)
        << n << ": " << served.out;
    EXPECT_EQ(served.out.find("listening"), std::string::npos) << served.out;
  }
  std::filesystem::remove_all(dir);
  auto worker = run("worker --join 127.0.0.1:1 --token mpv_x --fault cheat-sometimes", 30);
  EXPECT_EQ(worker.status, 2) << worker.out;
  EXPECT_NE(worker.out.find("cheat-unless-dumped, unanswered-dumps, refused-dumps, refused-dumps-after-generations"), std::string::npos)
      << worker.out;
}

}  // namespace
