#include "actors/loader/source.hpp"

#include "actors/loader/reader.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace mpakt::loader {
namespace {

namespace fs = std::filesystem;

source_options hub_at(std::string endpoint) {
  source_options o;
  o.hf_endpoint = std::move(endpoint);
  return o;
}

TEST(LoaderSource, HubModelTriesTheFileThenTheIndex) {
  auto s = parse_source("hf:Qwen/Qwen3-0.6B");
  ASSERT_TRUE(s.ok()) << s.err().message;
  EXPECT_EQ(s->kind, source_kind::hub);
  EXPECT_TRUE(s->remote());
  EXPECT_EQ(s->org, "Qwen");
  EXPECT_EQ(s->model, "Qwen3-0.6B");
  EXPECT_EQ(s->revision, "main");
  EXPECT_EQ(s->path, "");
  ASSERT_EQ(s->candidates.size(), 2u);
  EXPECT_EQ(s->candidates[0].location, "https://huggingface.co/Qwen/Qwen3-0.6B/resolve/main/model.safetensors");
  EXPECT_FALSE(s->candidates[0].is_index);
  EXPECT_EQ(s->candidates[1].location,
            "https://huggingface.co/Qwen/Qwen3-0.6B/resolve/main/model.safetensors.index.json");
  EXPECT_TRUE(s->candidates[1].is_index);
}

TEST(LoaderSource, PinningPutsTheCommitInPlaceOfTheRevision) {
  const std::string c = "0123456789abcdef0123456789abcdef01234567";
  EXPECT_EQ(pinned_source("hf:Org/M", c), "hf:Org/M@" + c);
  EXPECT_EQ(pinned_source("hf:Org/M@main", c), "hf:Org/M@" + c);
  EXPECT_EQ(pinned_source("hf:Org/M@v1/sub/model.safetensors", c), "hf:Org/M@" + c + "/sub/model.safetensors");
  EXPECT_EQ(pinned_source("hf:Org/M", ""), "hf:Org/M");
  EXPECT_EQ(pinned_source("https://host/m.safetensors", c), "https://host/m.safetensors");
  EXPECT_EQ(pinned_source("hf:Org/M", "not/a commit"), "hf:Org/M");
}

TEST(LoaderSource, HubRevisionAndFile) {
  auto s = parse_source("hf:HuggingFaceTB/SmolLM2-135M-Instruct@v1.0/model.safetensors", hub_at("http://127.0.0.1:9/"));
  ASSERT_TRUE(s.ok()) << s.err().message;
  EXPECT_EQ(s->revision, "v1.0");
  EXPECT_EQ(s->path, "model.safetensors");
  ASSERT_EQ(s->candidates.size(), 1u);
  EXPECT_EQ(s->candidates[0].location,
            "http://127.0.0.1:9/HuggingFaceTB/SmolLM2-135M-Instruct/resolve/v1.0/model.safetensors");
  EXPECT_FALSE(s->candidates[0].is_index);
}

TEST(LoaderSource, HubRevisionWithoutFileAndFileWithoutRevision) {
  auto a = parse_source("hf:Org/Model@abc123", hub_at("http://h"));
  ASSERT_TRUE(a.ok()) << a.err().message;
  EXPECT_EQ(a->revision, "abc123");
  ASSERT_EQ(a->candidates.size(), 2u);
  EXPECT_EQ(a->candidates[0].location, "http://h/Org/Model/resolve/abc123/model.safetensors");

  auto b = parse_source("hf:Org/Model/sub/weights.safetensors", hub_at("http://h"));
  ASSERT_TRUE(b.ok()) << b.err().message;
  EXPECT_EQ(b->revision, "main");
  ASSERT_EQ(b->candidates.size(), 1u);
  EXPECT_EQ(b->candidates[0].location, "http://h/Org/Model/resolve/main/sub/weights.safetensors");
}

TEST(LoaderSource, HubIndexNamedOutright) {
  auto s = parse_source("hf:Org/Big/model.safetensors.index.json", hub_at("http://h"));
  ASSERT_TRUE(s.ok()) << s.err().message;
  ASSERT_EQ(s->candidates.size(), 1u);
  EXPECT_TRUE(s->candidates[0].is_index);
  EXPECT_EQ(s->candidates[0].location, "http://h/Org/Big/resolve/main/model.safetensors.index.json");
}

TEST(LoaderSource, HubSubfolderTriesFileThenIndexInside) {
  auto s = parse_source("hf:Org/Model/text_encoder", hub_at("http://h"));
  ASSERT_TRUE(s.ok()) << s.err().message;
  ASSERT_EQ(s->candidates.size(), 2u);
  EXPECT_EQ(s->candidates[0].location, "http://h/Org/Model/resolve/main/text_encoder/model.safetensors");
  EXPECT_EQ(s->candidates[1].location, "http://h/Org/Model/resolve/main/text_encoder/model.safetensors.index.json");
}

TEST(LoaderSource, Urls) {
  auto f = parse_source("https://example.com/a/b/model.safetensors");
  ASSERT_TRUE(f.ok()) << f.err().message;
  EXPECT_EQ(f->kind, source_kind::url);
  ASSERT_EQ(f->candidates.size(), 1u);
  EXPECT_FALSE(f->candidates[0].is_index);
  EXPECT_EQ(f->candidates[0].location, "https://example.com/a/b/model.safetensors");

  auto i = parse_source("http://127.0.0.1:8080/x/model.safetensors.index.json");
  ASSERT_TRUE(i.ok()) << i.err().message;
  ASSERT_EQ(i->candidates.size(), 1u);
  EXPECT_TRUE(i->candidates[0].is_index);

  auto d = parse_source("http://127.0.0.1:8080/x/?sig=1");
  ASSERT_TRUE(d.ok()) << d.err().message;
  ASSERT_EQ(d->candidates.size(), 2u);
  EXPECT_EQ(d->candidates[0].location, "http://127.0.0.1:8080/x/model.safetensors");
  EXPECT_EQ(d->candidates[1].location, "http://127.0.0.1:8080/x/model.safetensors.index.json");

  auto q = parse_source("https://cdn.example.com/download?id=7");  // any URL to a safetensors file
  ASSERT_TRUE(q.ok()) << q.err().message;
  ASSERT_EQ(q->candidates.size(), 1u);
  EXPECT_FALSE(q->candidates[0].is_index);
}

TEST(LoaderSource, MalformedSourcesListTheAcceptedForms) {
  for (const char* bad : {"", "hf:", "hf:Org", "hf:Org/", "hf:/Model", "hf:Org/Mo del", "hf:Org/Model@",
                          "hf:Org/Model@rev/", "hf:Org/Model/../x.safetensors", "hf:Org/Model//x.safetensors",
                          "hf:Org/Model/config.json", "ftp://host/x.safetensors", "s3://bucket/x", "http://",
                          "https:/missing-slash/x.safetensors"}) {
    auto s = parse_source(bad);
    ASSERT_FALSE(s.ok()) << "accepted \"" << bad << "\"";
    EXPECT_EQ(s.err().code, errc::invalid) << bad;
    EXPECT_NE(s.err().message.find("\"" + std::string(bad) + "\""), std::string::npos) << s.err().message;
    EXPECT_NE(s.err().message.find("accepted forms: hf:Org/Model[@revision]"), std::string::npos) << s.err().message;
  }
}

class LoaderSourceLocal : public testing::Test {
 protected:
  fs::path dir = fs::path(testing::TempDir()) / ("mpakt_source_" + std::to_string(::getpid()));
  void SetUp() override {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  void touch(const fs::path& p) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "x";
  }
};

TEST_F(LoaderSourceLocal, FileIndexAndFolders) {
  touch(dir / "single/model.safetensors");
  touch(dir / "single/model.safetensors.index.json");  // the single file wins
  touch(dir / "sharded/model.safetensors.index.json");
  touch(dir / "sharded/model-00000-of-00002.safetensors");
  touch(dir / "odd/weights.safetensors");
  touch(dir / "two/a.safetensors");
  touch(dir / "two/b.safetensors");
  fs::create_directories(dir / "empty");

  auto f = parse_source((dir / "odd/weights.safetensors").string());
  ASSERT_TRUE(f.ok()) << f.err().message;
  EXPECT_EQ(f->kind, source_kind::local);
  EXPECT_FALSE(f->remote());
  EXPECT_FALSE(f->candidates.at(0).is_index);

  auto single = parse_source((dir / "single").string());
  ASSERT_TRUE(single.ok()) << single.err().message;
  ASSERT_EQ(single->candidates.size(), 1u);
  EXPECT_EQ(single->candidates[0].location, (dir / "single/model.safetensors").string());

  auto sharded = parse_source((dir / "sharded").string());
  ASSERT_TRUE(sharded.ok()) << sharded.err().message;
  EXPECT_TRUE(sharded->candidates.at(0).is_index);

  auto odd = parse_source((dir / "odd").string());
  ASSERT_TRUE(odd.ok()) << odd.err().message;
  EXPECT_EQ(odd->candidates.at(0).location, (dir / "odd/weights.safetensors").string());

  auto idx = parse_source((dir / "sharded/model.safetensors.index.json").string());
  ASSERT_TRUE(idx.ok()) << idx.err().message;
  EXPECT_TRUE(idx->candidates.at(0).is_index);

  for (const char* bad : {"two", "empty", "missing"}) {
    auto s = parse_source((dir / bad).string());
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.err().code, errc::invalid);
    EXPECT_NE(s.err().message.find((dir / bad).string()), std::string::npos) << s.err().message;
  }
}

TEST_F(LoaderSourceLocal, RelativePathsResolveAgainstTheWorkingDirectory) {
  touch(dir / "rel/model.safetensors");
  const auto old = fs::current_path();
  fs::current_path(dir);
  auto s = parse_source("rel");
  fs::current_path(old);
  ASSERT_TRUE(s.ok()) << s.err().message;
  EXPECT_EQ(s->candidates.at(0).location, (dir / "rel/model.safetensors").string());
}

TEST_F(LoaderSourceLocal, LocalPathsAreRefusedWhenNoFolderIsAllowed) {
  touch(dir / "model.safetensors");
  source_options o;
  o.local_dirs.emplace();
  auto s = parse_source(dir.string(), o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.err().message.find("reads no local files"), std::string::npos) << s.err().message;
  EXPECT_NE(s.err().message.find("--allow-local"), std::string::npos) << s.err().message;
}

// The refusal is the same whether the path exists or not: a user cannot probe the server's
// filesystem through inspect.
TEST_F(LoaderSourceLocal, OnlyPathsInsideAllowedFoldersAreRead) {
  touch(dir / "allowed/m/model.safetensors");
  touch(dir / "allowed2/model.safetensors");
  touch(dir / "secret/model.safetensors");
  fs::create_directory_symlink(dir / "secret", dir / "allowed/link");
  source_options o;
  o.local_dirs = std::vector<std::string>{(dir / "allowed").string() + "/"};
  auto ok = parse_source((dir / "allowed/m").string(), o);
  ASSERT_TRUE(ok.ok()) << ok.err().message;
  EXPECT_EQ(ok->candidates.at(0).location, (dir / "allowed/m/model.safetensors").string());
  std::set<std::string> messages;
  for (const fs::path& p : {dir / "secret", dir / "secret/nothing", dir / "allowed2", dir / "allowed/link",
                            dir / "allowed/../secret", fs::path("/etc/passwd"), fs::path("/no/such/thing")}) {
    auto s = parse_source(p.string(), o);
    ASSERT_FALSE(s.ok()) << p;
    EXPECT_EQ(s.err().code, errc::invalid);
    const std::string m = s.err().message;
    messages.insert(m.substr(m.find("\" ") + 2));  // all but the path itself
  }
  EXPECT_EQ(messages.size(), 1u);
  EXPECT_NE(messages.begin()->find("outside the folders this server reads models from"), std::string::npos);
}

// A shard an index names may be a link leading out of the allowed folder: the reader checks
// every file's real path before opening it.
TEST_F(LoaderSourceLocal, TheLocalReaderOpensNothingOutsideItsFolders) {
  touch(dir / "allowed/model.safetensors");
  touch(dir / "secret/shard.safetensors");
  fs::create_symlink(dir / "secret/shard.safetensors", dir / "allowed/shard.safetensors");
  auto r = make_local_reader({(dir / "allowed").string()});
  EXPECT_TRUE(r->read_all((dir / "allowed/model.safetensors").string(), 10).ok());
  auto out = r->read_all((dir / "allowed/shard.safetensors").string(), 10);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.err().message.find("outside the folders"), std::string::npos) << out.err().message;
  EXPECT_TRUE(make_local_reader()->read_all((dir / "allowed/shard.safetensors").string(), 10).ok());
}

TEST_F(LoaderSourceLocal, InsideDirsComparesWholeComponents) {
  fs::create_directories(dir / "data/m");
  fs::create_directories(dir / "data/m2");
  const std::vector<std::string> dirs{(dir / "data/m").string()};
  EXPECT_TRUE(inside_dirs((dir / "data/m").string(), dirs));
  EXPECT_TRUE(inside_dirs((dir / "data/m/x/y.safetensors").string(), dirs));
  EXPECT_FALSE(inside_dirs((dir / "data/m2/y.safetensors").string(), dirs));
  EXPECT_FALSE(inside_dirs((dir / "data").string(), dirs));
}

TEST(LoaderSource, ShardLocationsAreRelativeToTheIndex) {
  auto r = shard_location("http://h/Org/M/resolve/main/model.safetensors.index.json?x=1", "model-00000-of-00002.safetensors", true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "http://h/Org/M/resolve/main/model-00000-of-00002.safetensors");
  auto sub = shard_location("http://h/a/idx.safetensors.index.json", "sub/part 1.safetensors", true);
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(*sub, "http://h/a/sub/part%201.safetensors");
  auto local = shard_location("/data/m/model.safetensors.index.json", "s0.safetensors", false);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(*local, "/data/m/s0.safetensors");
  for (const char* bad : {"../x.safetensors", "/etc/passwd", "http://evil/x.safetensors", "a/../../b", ""}) {
    auto s = shard_location("/data/m/model.safetensors.index.json", bad, false);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.err().message.find("model.safetensors.index.json"), std::string::npos) << s.err().message;
  }
}

}  // namespace
}  // namespace mpakt::loader
