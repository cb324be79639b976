#include "runtime/models/tokenizer_bpe.hpp"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "runtime/models/tokenizer_unicode.hpp"

namespace mpakt::models {

namespace {

/// Vocabulary ids above this are refused: the id -> token table is a dense array.
constexpr std::int32_t max_vocab_id = 1 << 24;

std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return (std::uint64_t{static_cast<std::uint32_t>(left)} << 32) | static_cast<std::uint32_t>(right);
}

/// A merge waiting in the queue: lowest rank first, then leftmost.
struct candidate {
  std::uint32_t rank;
  std::int32_t pos;
  std::int32_t merged;
};
struct later_candidate {
  bool operator()(const candidate& a, const candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

result<bpe_model> bpe_model::build(bpe_config config) {
  bpe_model m;
  m.vocab_ = std::move(config.vocab);
  std::int32_t max_id = -1;
  for (const auto& [token, id] : m.vocab_) {
    if (id < 0 || id >= max_vocab_id) return invalid("tokenizer.json: model.vocab id " + std::to_string(id) + " of '" + token + "' is out of range");
    max_id = std::max(max_id, id);
  }
  m.by_id_.assign(static_cast<std::size_t>(max_id + 1), nullptr);
  for (const auto& [token, id] : m.vocab_)
    if (!m.by_id_[static_cast<std::size_t>(id)]) m.by_id_[static_cast<std::size_t>(id)] = &token;

  for (std::size_t rank = 0; rank < config.merges.size(); ++rank) {
    const auto& [a, b] = config.merges[rank];
    const auto a_id = m.token_to_id(a), b_id = m.token_to_id(b), merged = m.token_to_id(a + b);
    const std::string where = "tokenizer.json: model.merges[" + std::to_string(rank) + "] ";
    if (!a_id) return invalid(where + "uses '" + a + "', which is not in the vocab");
    if (!b_id) return invalid(where + "uses '" + b + "', which is not in the vocab");
    if (!merged) return invalid(where + "makes '" + a + b + "', which is not in the vocab");
    // A repeated pair keeps its last rank, as the library's map does.
    m.merges_.insert_or_assign(pair_key(*a_id, *b_id), merge_rule{static_cast<std::uint32_t>(rank), *merged});
  }

  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    m.byte_ids_[static_cast<std::size_t>(b)] = m.token_to_id(name).value_or(-1);
  }
  if (config.unk_token) {
    const auto unk = m.token_to_id(*config.unk_token);
    if (!unk) return invalid("tokenizer.json: model.unk_token '" + *config.unk_token + "' is not in the vocab");
    m.unk_id_ = *unk;
  }
  m.fuse_unk_ = config.fuse_unk;
  m.byte_fallback_ = config.byte_fallback;
  m.ignore_merges_ = config.ignore_merges;
  return m;
}

std::optional<std::int32_t> bpe_model::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* bpe_model::id_to_token(std::int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= by_id_.size()) return nullptr;
  return by_id_[static_cast<std::size_t>(id)];
}

const bpe_model::merge_rule* bpe_model::find_merge(std::int32_t left, std::int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void bpe_model::tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  // ignore_merges (Llama 3): a word that is itself a token is taken whole.
  if (ignore_merges_) {
    if (const auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  std::vector<symbol> symbols;
  initial_symbols(word, symbols);
  merge_all(symbols);
  for (const auto& s : symbols)
    if (!s.removed) out.push_back(s.id);
}

void bpe_model::initial_symbols(std::string_view word, std::vector<symbol>& symbols) const {
  const auto add = [&](std::int32_t id) { symbols.push_back({id, -1, -1, false}); };
  bool unk_pending = false;  // an unk waiting to be emitted (so that fuse_unk can extend it)
  for (std::size_t pos = 0; pos < word.size();) {
    const std::size_t start = pos;
    unicode::next_code_point(word, pos);
    const std::string_view ch = word.substr(start, pos - start);
    if (const auto id = token_to_id(ch)) {
      if (unk_pending) add(unk_id_);
      unk_pending = false;
      add(*id);
      continue;
    }
    if (byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; })) {
      // As in the library, byte tokens do not flush a pending unk: it follows them.
      for (const char c : ch) add(byte_ids_[static_cast<unsigned char>(c)]);
      continue;
    }
    if (unk_id_ < 0) continue;  // no unk token: the character is dropped
    if (unk_pending && !fuse_unk_) add(unk_id_);
    unk_pending = true;
  }
  if (unk_pending) add(unk_id_);
  const auto n = static_cast<std::int32_t>(symbols.size());
  for (std::int32_t i = 0; i < n; ++i) {
    symbols[static_cast<std::size_t>(i)].prev = i - 1;
    symbols[static_cast<std::size_t>(i)].next = i + 1 < n ? i + 1 : -1;
  }
}

void bpe_model::merge_all(std::vector<symbol>& symbols) const {
  std::priority_queue<candidate, std::vector<candidate>, later_candidate> queue;
  const auto consider = [&](std::int32_t pos) {
    const symbol& left = symbols[static_cast<std::size_t>(pos)];
    if (left.next < 0) return;
    if (const auto* rule = find_merge(left.id, symbols[static_cast<std::size_t>(left.next)].id))
      queue.push({rule->rank, pos, rule->merged});
  };
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) consider(static_cast<std::int32_t>(i));

  while (!queue.empty()) {
    const candidate top = queue.top();
    queue.pop();
    symbol& left = symbols[static_cast<std::size_t>(top.pos)];
    if (left.removed || left.next < 0) continue;
    symbol& right = symbols[static_cast<std::size_t>(left.next)];
    // Skip entries made stale by an earlier merge of either symbol.
    const auto* rule = find_merge(left.id, right.id);
    if (!rule || rule->merged != top.merged) continue;
    left.id = top.merged;
    right.removed = true;
    left.next = right.next;
    if (left.next >= 0) symbols[static_cast<std::size_t>(left.next)].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
}

}  // namespace mpakt::models
