// libFuzzer target: the tokenizer (runtime/models/tokenizer*.cpp) with the fixtures' kinds of
// tokenizer.json (BPE byte-level, Metaspace, SentencePiece-style, added tokens) and
// stories260K's. The first byte chooses the tokenizer and what to do with the rest:
//   0  encode it as text (with and without special tokens), then decode and stream-decode the ids
//   1  decode it as token ids (two bytes each, out-of-range ids included), whole and streamed
//   2  parse it as a tokenizer.json, and encode a short text with whatever parsed
// Anything may be refused; nothing may crash.

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/models/tokenizer.hpp"

using namespace mpakt;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::vector<models::tokenizer>& tokenizers() {
  static const std::vector<models::tokenizer> all = [] {
    std::vector<models::tokenizer> out;
    const std::string dir = MPAKT_FIXTURES_DIR "/tokenizers/";
    for (const char* name : {"gpt2", "llama2", "llama3", "mistral", "qwen2", "metaspace_split", "bytelevel_flags"})
      if (auto t = models::tokenizer::from_json(read_file(dir + name + ".tokenizer.json"))) out.push_back(std::move(*t));
    if (auto t = models::tokenizer::from_json(read_file(MPAKT_SHARED_DIR "/models/stories260K/tokenizer.json")))
      out.push_back(std::move(*t));
    if (out.size() != 8) __builtin_trap();  // a fixture no longer parses: fix the fixtures, not the fuzzer
    return out;
  }();
  return all;
}

void decode_all_ways(const models::tokenizer& t, std::span<const std::int32_t> ids) {
  (void)t.decode(ids, false);
  (void)t.decode(ids, true);
  models::stream_decoder stream(t, true);
  for (auto id : ids) (void)stream.push(id);
  (void)stream.finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const auto& all = tokenizers();
  const auto& t = all[(data[0] >> 2) % all.size()];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0:
    case 3: {
      auto ids = t.encode(rest, true);
      decode_all_ways(t, ids);
      (void)t.encode(rest, false);
      break;
    }
    case 1: {
      std::vector<std::int32_t> ids;
      for (std::size_t i = 0; i + 1 < rest.size(); i += 2) {
        const int raw = static_cast<std::uint8_t>(rest[i]) | (static_cast<std::uint8_t>(rest[i + 1]) << 8);
        ids.push_back(raw >= 0xff00 ? -(raw & 0xff) : raw % (t.vocab_size() + 16));  // a few ids past the end, a few negative
      }
      decode_all_ways(t, ids);
      for (auto id : ids) (void)t.id_to_token(id), (void)t.is_special(id);
      break;
    }
    case 2: {
      auto parsed = models::tokenizer::from_json(rest);
      if (parsed) decode_all_ways(*parsed, parsed->encode("Once upon a time, <s> caf\xc3\xa9 \xf0\x9f\x98\x80 1234", true));
      break;
    }
  }
  return 0;
}
