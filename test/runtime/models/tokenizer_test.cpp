// The tokenizer against the Hugging Face `tokenizers` library: for every tokenizer kind in
// test/fixtures/tokenizers (made by tools/goldens/gen_tokenizers.py) and the real stories260K
// tokenizer, every corpus string must encode to the library's ids and decode to its text, and
// the stream decoder must emit decode()'s text in valid UTF-8 pieces. Then refusals, streaming
// edge cases and long inputs.

#include "runtime/models/tokenizer.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <map>
#include <sstream>

#include "test/support/files.hpp"

namespace mpakt::models {
namespace {

const std::string fixtures_dir = std::string(MPAKT_FIXTURES_DIR) + "/tokenizers/";

std::vector<std::int32_t> ids_of(const rapidjson::Value& v) {
  std::vector<std::int32_t> ids;
  for (const auto& x : v.GetArray()) ids.push_back(x.GetInt());
  return ids;
}

std::string string_of(const rapidjson::Value& v) { return std::string(v.GetString(), v.GetStringLength()); }

/// A strict UTF-8 check written apart from the tokenizer's own.
bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    std::uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (std::size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    const std::uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

std::string show(std::string_view s) {
  std::ostringstream out;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b == 0x7F || b == '"' || b == '\\')
      out << "\\x" << std::hex << int(b) << std::dec;
    else
      out << c;
  }
  return '"' + out.str() + '"';
}

std::string show(const std::vector<std::int32_t>& ids) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < ids.size(); ++i) out << (i ? "," : "") << ids[i];
  return out.str() + ']';
}

/// One kind's fixture: its tokenizer, the corpus and the library's answers.
struct kind_fixture {
  struct sample {
    std::string text;
    std::vector<std::int32_t> ids, ids_special;
    std::string decode, decode_skip;  ///< decode(ids), decode(ids_special, skip specials)
  };
  struct random_decode {
    std::vector<std::int32_t> ids;
    std::string decode, decode_skip;
  };
  struct added {
    std::int32_t id;
    std::string content, token;  ///< what token_to_id takes, what id_to_token gives
    bool skipped;                ///< decode(skip_special_tokens=true) drops it
  };
  std::optional<tokenizer> tok;
  std::string load_error;
  std::int32_t vocab_size = 0;
  std::vector<sample> samples;
  std::vector<random_decode> randoms;
  std::vector<added> added_tokens;
};

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> strings = [] {
    rapidjson::Document d;
    d.Parse(test::read_file(fixtures_dir + "corpus.json").c_str());
    std::vector<std::string> out;
    for (const auto& s : d["strings"].GetArray()) out.push_back(string_of(s));
    return out;
  }();
  return strings;
}

kind_fixture load_kind(const std::string& kind) {
  kind_fixture f;
  rapidjson::Document d;
  d.Parse(test::read_file(fixtures_dir + kind + ".json").c_str());
  if (d.HasParseError()) {
    f.load_error = "cannot read the fixture of " + kind;
    return f;
  }
  const std::string file = d["tokenizer"].GetString();
  const std::string path = file.rfind("shared:", 0) == 0 ? std::string(MPAKT_SHARED_DIR) + "/" + file.substr(7) : fixtures_dir + file;
  auto tok = tokenizer::from_json(test::read_file(path));
  if (!tok) {
    f.load_error = tok.err().message;
    return f;
  }
  f.tok = *tok;
  f.vocab_size = d["vocab_size"].GetInt();
  const auto prefix = ids_of(d["special_prefix"]), suffix = ids_of(d["special_suffix"]);
  const auto& strings = corpus();
  const auto& cases = d["cases"];
  for (rapidjson::SizeType i = 0; i < cases.Size() && i < strings.size(); ++i) {
    const auto& c = cases[i];
    kind_fixture::sample s;
    s.text = strings[i];
    s.ids = ids_of(c["ids"]);
    if (c.HasMember("ids_special")) {
      s.ids_special = ids_of(c["ids_special"]);
    } else {
      s.ids_special = prefix;
      s.ids_special.insert(s.ids_special.end(), s.ids.begin(), s.ids.end());
      s.ids_special.insert(s.ids_special.end(), suffix.begin(), suffix.end());
    }
    s.decode = c.HasMember("decode") ? string_of(c["decode"]) : s.text;
    s.decode_skip = c.HasMember("decode_skip") ? string_of(c["decode_skip"]) : s.decode;
    f.samples.push_back(std::move(s));
  }
  for (const auto& r : d["random_decodes"].GetArray())
    f.randoms.push_back({ids_of(r["ids"]), string_of(r["decode"]), string_of(r["decode_skip"])});
  for (const auto& a : d["added_tokens"].GetArray())
    f.added_tokens.push_back({a["id"].GetInt(), string_of(a["content"]), string_of(a["token"]), a["skipped"].GetBool()});
  return f;
}

const kind_fixture& fixture(const std::string& kind) {
  static std::map<std::string, kind_fixture> loaded;
  auto it = loaded.find(kind);
  if (it == loaded.end()) it = loaded.emplace(kind, load_kind(kind)).first;
  return it->second;
}

/// Pushes ids through a stream decoder; fails on any piece that is not valid UTF-8.
std::string stream(const tokenizer& tok, const std::vector<std::int32_t>& ids, bool skip_special) {
  stream_decoder s(tok, skip_special);
  std::string out;
  for (const auto id : ids) {
    const std::string piece = s.push(id);
    EXPECT_TRUE(valid_utf8(piece)) << "push(" << id << ") gave " << show(piece) << " in " << show(ids);
    out += piece;
  }
  const std::string last = s.finish();
  EXPECT_TRUE(valid_utf8(last)) << "finish gave " << show(last);
  return out + last;
}

constexpr int max_reports = 5;

struct TokenizerCorpus : ::testing::TestWithParam<std::string> {
  void SetUp() override {
    const auto& f = fixture(GetParam());
    ASSERT_TRUE(f.tok.has_value()) << f.load_error;
    ASSERT_GE(f.samples.size(), 2000u) << "the fixture should cover the whole corpus";
  }
  const kind_fixture& f() const { return fixture(GetParam()); }
};

TEST_P(TokenizerCorpus, EncodeMatchesLibrary) {
  int wrong = 0;
  for (std::size_t i = 0; i < f().samples.size(); ++i) {
    const auto& s = f().samples[i];
    const auto plain = f().tok->encode(s.text, false);
    const auto special = f().tok->encode(s.text, true);
    if (plain == s.ids && special == s.ids_special) continue;
    if (++wrong <= max_reports)
      ADD_FAILURE() << "corpus[" << i << "] " << show(s.text) << "\n  library " << show(s.ids) << " / " << show(s.ids_special)
                    << "\n  mpakt   " << show(plain) << " / " << show(special);
  }
  EXPECT_EQ(wrong, 0) << "of " << f().samples.size() << " strings";
}

TEST_P(TokenizerCorpus, DecodeMatchesLibrary) {
  int wrong = 0;
  for (std::size_t i = 0; i < f().samples.size(); ++i) {
    const auto& s = f().samples[i];
    const auto plain = f().tok->decode(s.ids, false);
    const auto skipped = f().tok->decode(s.ids_special, true);
    if (plain == s.decode && skipped == s.decode_skip) continue;
    if (++wrong <= max_reports)
      ADD_FAILURE() << "corpus[" << i << "] " << show(s.ids) << "\n  library " << show(s.decode) << " / " << show(s.decode_skip)
                    << "\n  mpakt   " << show(plain) << " / " << show(skipped);
  }
  for (const auto& r : f().randoms) {
    const auto plain = f().tok->decode(r.ids, false);
    const auto skipped = f().tok->decode(r.ids, true);
    if (plain == r.decode && skipped == r.decode_skip) continue;
    if (++wrong <= max_reports)
      ADD_FAILURE() << "random ids " << show(r.ids) << "\n  library " << show(r.decode) << " / " << show(r.decode_skip)
                    << "\n  mpakt   " << show(plain) << " / " << show(skipped);
  }
  EXPECT_EQ(wrong, 0);
}

TEST_P(TokenizerCorpus, StreamEqualsDecode) {
  int wrong = 0;
  for (std::size_t i = 0; i < f().samples.size(); ++i) {
    const auto& s = f().samples[i];
    const auto plain = stream(*f().tok, s.ids, false);
    const auto skipped = stream(*f().tok, s.ids_special, true);
    if (plain == s.decode && skipped == s.decode_skip) continue;
    if (++wrong <= max_reports)
      ADD_FAILURE() << "corpus[" << i << "] " << show(s.ids) << "\n  decode " << show(s.decode) << " / " << show(s.decode_skip)
                    << "\n  stream " << show(plain) << " / " << show(skipped);
  }
  // Random ids may hold invalid byte runs, where a stream cannot take back what it emitted; it
  // must still give valid UTF-8, and exactly decode() whenever decode() has no U+FFFD.
  for (const auto& r : f().randoms) {
    const auto plain = stream(*f().tok, r.ids, false);
    if (r.decode.find("\xEF\xBF\xBD") == std::string::npos && plain != r.decode && ++wrong <= max_reports)
      ADD_FAILURE() << "random ids " << show(r.ids) << "\n  decode " << show(r.decode) << "\n  stream " << show(plain);
  }
  EXPECT_EQ(wrong, 0);
}

TEST_P(TokenizerCorpus, VocabularyMatchesLibrary) {
  const auto& tok = *f().tok;
  EXPECT_EQ(tok.vocab_size(), f().vocab_size);
  for (const auto& a : f().added_tokens) {
    EXPECT_EQ(tok.token_to_id(a.content), a.id) << a.content;
    EXPECT_EQ(tok.id_to_token(a.id), a.token) << a.id;
    EXPECT_EQ(tok.is_special(a.id), a.skipped) << a.content;
  }
  EXPECT_FALSE(tok.id_to_token(-1).has_value());
  EXPECT_FALSE(tok.id_to_token(f().vocab_size + 1000).has_value());
  EXPECT_FALSE(tok.token_to_id("no such token \x01").has_value());
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, TokenizerCorpus,
                         ::testing::Values("gpt2", "bytelevel_flags", "llama3", "qwen2", "llama2", "mistral",
                                           "metaspace_split", "stories260K"),
                         [](const auto& info) { return info.param; });

// ---- refusals ----

std::string minimal_bpe(const std::string& extra) {
  return R"({"version":"1.0","added_tokens":[],"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]})" +
         extra + "}";
}

std::string refusal(const std::string& json) {
  auto tok = tokenizer::from_json(json);
  EXPECT_FALSE(tok.ok());
  return tok.ok() ? "" : tok.err().message;
}

TEST(TokenizerJson, AcceptsMinimalBpe) {
  auto tok = tokenizer::from_json(minimal_bpe(""));
  ASSERT_TRUE(tok.ok()) << tok.err().message;
  EXPECT_EQ(tok->encode("ab"), (std::vector<std::int32_t>{2}));
  EXPECT_EQ(tok->decode(std::vector<std::int32_t>{0, 1, 2}), "a b ab");  // no decoder: joined with spaces
}

TEST(TokenizerJson, RefusesWordPieceModelNamingTheField) {
  const auto message = refusal(R"({"model":{"type":"WordPiece","unk_token":"[UNK]","vocab":{"[UNK]":0}}})");
  EXPECT_NE(message.find("tokenizer.json: model type 'WordPiece' is not supported"), std::string::npos) << message;
}

TEST(TokenizerJson, RefusesMalformedJson) {
  EXPECT_NE(refusal(R"({"model": {"type": "BPE", )").find("not valid JSON"), std::string::npos);
  EXPECT_NE(refusal("[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(refusal("").find("not valid JSON"), std::string::npos);
}

TEST(TokenizerJson, RefusesWhatItCannotReproduce) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"(,"pre_tokenizer":{"type":"Whitespace"})", "pre_tokenizer type 'Whitespace' is not supported"},
      {R"(,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},{"type":"Digits","individual_digits":true}]})",
       "pre_tokenizer.pretokenizers[1] type 'Digits' is not supported"},
      {R"(,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"\\d+"},"behavior":"Isolated","invert":false})",
       "pre_tokenizer.pattern regex '\\d+' is not one this runtime reproduces"},
      {R"(,"pre_tokenizer":{"type":"Split","pattern":{"String":" "},"behavior":"Isolated","invert":false})",
       "pre_tokenizer.pattern must be a Regex"},
      {R"(,"normalizer":{"type":"Lowercase"})", "normalizer type 'Lowercase' is not supported"},
      {R"(,"normalizer":{"type":"Replace","pattern":{"Regex":" +"},"content":" "})", "normalizer.pattern Regex is not supported"},
      {R"(,"decoder":{"type":"WordPiece","prefix":"##"})", "decoder type 'WordPiece' is not supported"},
      {R"(,"post_processor":{"type":"RobertaProcessing"})", "post_processor type 'RobertaProcessing' is not supported"},
      {R"(,"truncation":{"max_length":512})", "truncation is not supported"},
      {R"(,"padding":{"strategy":{"Fixed":8}})", "padding is not supported"},
  };
  for (const auto& [extra, expected] : cases) {
    const auto message = refusal(minimal_bpe(extra));
    EXPECT_NE(message.find("tokenizer.json: " + expected), std::string::npos) << extra << "\n  said: " << message;
  }
  const auto dropout = refusal(R"({"model":{"type":"BPE","dropout":0.1,"vocab":{},"merges":[]}})");
  EXPECT_NE(dropout.find("model.dropout"), std::string::npos) << dropout;
  const auto merge = refusal(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":["a c"]}})");
  EXPECT_NE(merge.find("model.merges[0] uses 'c'"), std::string::npos) << merge;
  const auto unk = refusal(R"({"model":{"type":"BPE","unk_token":"<unk>","vocab":{"a":0},"merges":[]}})");
  EXPECT_NE(unk.find("model.unk_token '<unk>' is not in the vocab"), std::string::npos) << unk;
}

// ---- streaming and input edge cases ----

tokenizer load(const std::string& kind) {
  auto tok = tokenizer::from_json(test::read_file(fixtures_dir + kind + ".tokenizer.json"));
  EXPECT_TRUE(tok.ok()) << tok.err().message;
  return *tok;
}

TEST(TokenizerStream, HoldsByteFallbackUntilTheCharacterIsComplete) {
  const auto tok = load("llama2");
  stream_decoder s(tok);
  EXPECT_EQ(s.push(*tok.token_to_id("▁the")), "the");  // the leading space is stripped at the start only
  EXPECT_EQ(s.push(*tok.token_to_id("<0xE2>")), "");
  EXPECT_EQ(s.push(*tok.token_to_id("<0x82>")), "");
  EXPECT_EQ(s.push(*tok.token_to_id("<0xAC>")), "\xE2\x82\xAC");
  EXPECT_EQ(s.push(*tok.token_to_id("▁the")), " the");
  EXPECT_EQ(s.push(*tok.token_to_id("<0xE2>")), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");  // an incomplete character ends as U+FFFD, as decode() renders it
}

TEST(TokenizerStream, HoldsByteLevelPiecesUntilTheCharacterIsComplete) {
  const auto tok = load("gpt2");
  const auto ids = tok.encode("€ and 👍🏽 then 你好", false);
  stream_decoder s(tok);
  std::string out;
  for (const auto id : ids) {
    const auto piece = s.push(id);
    EXPECT_TRUE(valid_utf8(piece)) << show(piece);
    out += piece;
  }
  out += s.finish();
  EXPECT_EQ(out, "€ and 👍🏽 then 你好");
}

TEST(TokenizerStream, SkipsSpecialTokensAndKeepsSpacesAfterThem) {
  const auto tok = load("llama2");
  const auto ids = tok.encode("Hello <s> world", true);
  EXPECT_EQ(stream(tok, ids, true), tok.decode(ids, true));
  EXPECT_EQ(stream(tok, ids, false), tok.decode(ids, false));
}

TEST(TokenizerStream, InvalidByteRunsStayValidUtf8) {
  const auto tok = load("llama2");
  const std::vector<std::int32_t> ids = {*tok.token_to_id("<0x41>"), *tok.token_to_id("<0xFF>"),
                                         *tok.token_to_id("<0xE2>"), *tok.token_to_id("▁a")};
  EXPECT_EQ(tok.decode(ids), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD a");  // the library: one U+FFFD per byte of the run
  const auto streamed = stream(tok, ids, true);
  EXPECT_TRUE(valid_utf8(streamed));
  EXPECT_NE(streamed.find(" a"), std::string::npos) << show(streamed);
}

TEST(TokenizerEncode, InvalidUtf8IsReplacedFirst) {
  const auto tok = load("gpt2");
  EXPECT_EQ(tok.encode("a\xFF" "b\xE2\x82", false), tok.encode("a\xEF\xBF\xBD" "b\xEF\xBF\xBD", false));
}

TEST(TokenizerEncode, LongInputsRoundTripInReasonableTime) {
  const auto qwen = load("qwen2");
  const auto llama2 = load("llama2");
  std::string marks = "a";
  for (int i = 0; i < 20000; ++i) marks += "\xCC\x81";  // U+0301 after one base
  const std::vector<std::pair<const tokenizer*, std::string>> inputs = {
      {&qwen, std::string(200000, ' ')}, {&qwen, std::string(200000, '7')}, {&qwen, std::string(100000, 'a')},
      {&qwen, marks}, {&llama2, std::string(100000, 'a')}, {&llama2, std::string(50000, ' ')},
  };
  for (const auto& [tok, text] : inputs) {
    const auto start = std::chrono::steady_clock::now();
    const auto ids = tok->encode(text, false);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 20.0) << "encoding " << text.size() << " bytes took " << seconds << " s";
    if (tok == &qwen && text != marks) {
      EXPECT_EQ(tok->decode(ids), text);
    }
  }
}

}  // namespace
}  // namespace mpakt::models
