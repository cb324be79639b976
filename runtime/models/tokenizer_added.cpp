#include "runtime/models/tokenizer_added.hpp"

#include <algorithm>

#include "runtime/models/tokenizer_unicode.hpp"

namespace mpakt::models {

namespace {

/// The code point that ends text[0, pos), which must not be empty.
char32_t code_point_before(std::string_view text, std::size_t pos) {
  std::size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return unicode::next_code_point(text, start);
}

/// Start of the whitespace that ends text[0, pos).
std::size_t trailing_space_start(std::string_view text, std::size_t pos) {
  while (pos > 0) {
    std::size_t start = pos - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    std::size_t at = start;
    if (!unicode::is_strip_space(unicode::next_code_point(text, at))) break;
    pos = start;
  }
  return pos;
}

/// End of the whitespace that starts at pos.
std::size_t leading_space_end(std::string_view text, std::size_t pos) {
  while (pos < text.size()) {
    std::size_t next = pos;
    if (!unicode::is_strip_space(unicode::next_code_point(text, next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

void added_vocabulary::trie::insert(std::string_view content, std::int32_t id) {
  std::int32_t node = 0;
  for (const char ch : content) {
    const auto byte = static_cast<unsigned char>(ch);
    auto& next = nodes[static_cast<std::size_t>(node)].next;
    auto it = std::lower_bound(next.begin(), next.end(), byte, [](const auto& e, unsigned char b) { return e.first < b; });
    std::int32_t child;
    if (it != next.end() && it->first == byte) {
      child = it->second;
    } else {
      child = static_cast<std::int32_t>(nodes.size());
      next.insert(it, {byte, child});
      nodes.emplace_back();  // may reallocate `nodes`: `next` and `it` are dead from here
    }
    node = child;
  }
  auto& end = nodes[static_cast<std::size_t>(node)];
  if (end.id < 0) end.id = id;  // of two tokens with one content, the first added wins
  first_bytes.set(static_cast<unsigned char>(content.front()));
}

std::pair<std::size_t, std::int32_t> added_vocabulary::trie::longest_at(std::string_view text, std::size_t pos) const {
  std::pair<std::size_t, std::int32_t> best{pos, -1};
  std::int32_t node = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto& next = nodes[static_cast<std::size_t>(node)].next;
    const auto it = std::lower_bound(next.begin(), next.end(), byte, [](const auto& e, unsigned char b) { return e.first < b; });
    if (it == next.end() || it->first != byte) break;
    node = it->second;
    if (const auto id = nodes[static_cast<std::size_t>(node)].id; id >= 0) best = {i + 1, id};
  }
  return best;
}

std::int32_t added_vocabulary::add(const added_token& token, const bpe_model& model) {
  if (token.content.empty()) return -1;
  if (token.special && special_.insert(token.content).second) special_order_.push_back(token.content);
  const auto known = id_of(token.content);
  if (known && tokens_.at(*known) == token) return *known;  // the same token again
  const std::int32_t id = known ? *known : model.token_to_id(token.content).value_or(next_id(model));
  if (!known && !special_.count(token.content)) other_order_.push_back(token.content);
  ids_[token.content] = id;
  tokens_[id] = token;  // a token added again with other flags keeps its id and takes the new flags
  max_id_ = std::max(max_id_, id);
  return id;
}

std::int32_t added_vocabulary::next_id(const bpe_model& model) const {
  const auto vocab = static_cast<std::int32_t>(model.size());
  if (max_id_ < 0) return vocab;
  return max_id_ >= vocab || vocab == 0 ? max_id_ + 1 : vocab;
}

void added_vocabulary::finish(const std::function<std::string(std::string_view)>& normalize) {
  for (const auto* order : {&special_order_, &other_order_}) {
    for (const auto& content : *order) {
      const auto id = ids_.at(content);
      if (tokens_.at(id).normalized) {
        const std::string pattern = normalize(content);
        if (pattern != content) normalized_content_[id] = pattern;
        if (!pattern.empty()) normalized_.insert(pattern, id);
      } else {
        raw_.insert(content, id);
      }
    }
  }
}

std::vector<text_match> added_vocabulary::split(std::string_view text, bool normalized) const {
  const trie& t = normalized ? normalized_ : raw_;
  std::vector<text_match> found;
  for (std::size_t pos = 0; pos < text.size() && t.first_bytes.any();) {
    if (!t.first_bytes[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [end, id] = t.longest_at(text, pos);
    if (end == pos) {
      ++pos;
      continue;
    }
    found.push_back({pos, end, id});
    pos = end;
  }
  return apply_flags(text, found);
}

std::vector<text_match> added_vocabulary::apply_flags(std::string_view text, const std::vector<text_match>& found) const {
  std::vector<text_match> out;
  std::size_t done = 0;  // end of the last span emitted
  for (auto m : found) {
    const added_token& token = tokens_.at(m.id);
    if (token.single_word) {
      const bool word_before = m.begin > 0 && unicode::is_word_char(code_point_before(text, m.begin));
      std::size_t after = m.end;
      const bool word_after = m.end < text.size() && unicode::is_word_char(unicode::next_code_point(text, after));
      if (word_before || word_after) continue;
    }
    // The whitespace beside a token becomes part of it; never reach back over an earlier token.
    if (token.lstrip) m.begin = std::max(trailing_space_start(text, m.begin), done);
    if (token.rstrip) m.end = leading_space_end(text, m.end);
    if (done < m.begin) out.push_back({done, m.begin, -1});
    out.push_back(m);
    done = m.end;
  }
  if (done != text.size()) out.push_back({done, text.size(), -1});
  return out;
}

std::optional<std::int32_t> added_vocabulary::id_of(std::string_view content) const {
  const auto it = ids_.find(content);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* added_vocabulary::token_of(std::int32_t id) const {
  if (const auto n = normalized_content_.find(id); n != normalized_content_.end()) return &n->second;
  const auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : &it->second.content;
}

bool added_vocabulary::is_special(std::string_view content) const { return special_.find(content) != special_.end(); }

std::size_t added_vocabulary::count_outside(const bpe_model& model) const {
  return static_cast<std::size_t>(
      std::count_if(ids_.begin(), ids_.end(), [&](const auto& e) { return !model.token_to_id(e.first); }));
}

}  // namespace mpakt::models
