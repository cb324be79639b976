// The mpakt command-line tool as a user runs it: `mpakt ops`, `mpakt graph` then `mpakt run`
// against the stories260K folder, and a bad graph's error.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace {

struct run_result {
  int status = -1;
  std::string out;
};

run_result run(const std::string& args) {
  run_result r;
  const std::string cmd = std::string(MPAKT_BINARY) + " " + args + " 2>&1";
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
