#include "runtime/models/tokenizer.hpp"

#include "runtime/models/tokenizer_pipeline.hpp"
#include "runtime/models/tokenizer_unicode.hpp"

namespace mpakt::models {

namespace {

/// The text cut at added tokens: first those matched on the raw text, then, inside each piece
/// once normalized, those matched on normalized text (the library's extract_and_normalize).
std::vector<detail::piece> split_added_tokens(const detail::tokenizer_data& d, const std::string& text) {
  std::vector<detail::piece> out;
  for (const auto& m : d.added.split(text, false)) {
    if (m.end <= m.begin) continue;
    if (m.id >= 0) {
      out.push_back({{}, m.id, m.begin == 0});
      continue;
    }
    const std::string normalized = detail::normalize(d.normalizers, text.substr(m.begin, m.end - m.begin));
    for (const auto& n : d.added.split(normalized, true))
      if (n.end > n.begin)
        out.push_back({n.id >= 0 ? std::string() : normalized.substr(n.begin, n.end - n.begin), n.id, m.begin == 0 && n.begin == 0});
  }
  return out;
}

/// TemplateProcessing: each template wraps the ids so far with its special ids.
std::vector<std::int32_t> apply_templates(const std::vector<std::vector<detail::template_item>>& templates,
                                          std::vector<std::int32_t> ids) {
  for (const auto& items : templates) {
    std::vector<std::int32_t> wrapped;
    for (const auto& item : items) {
      const auto& part = item.sequence ? ids : item.ids;
      wrapped.insert(wrapped.end(), part.begin(), part.end());
    }
    ids = std::move(wrapped);
  }
  return ids;
}

bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

result<tokenizer> tokenizer::from_json(std::string_view tokenizer_json) {
  auto data = detail::parse_tokenizer_json(tokenizer_json);
  if (!data) return std::move(data).err();
  return tokenizer(std::move(*data));
}

std::vector<std::int32_t> tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const detail::tokenizer_data& d = *data_;
  const std::string valid = unicode::is_valid_utf8(text) ? std::string(text) : unicode::to_valid_utf8(text);
  std::vector<detail::piece> pieces = split_added_tokens(d, valid);
  detail::pre_tokenize(d.pre_tokenizers, pieces);
  std::vector<std::int32_t> ids;
  for (const auto& p : pieces) {
    if (p.id >= 0)
      ids.push_back(p.id);
    else
      d.model.tokenize(p.text, ids);
  }
  return add_special_tokens ? apply_templates(d.templates, std::move(ids)) : ids;
}

std::string tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  return decode_impl(ids, skip_special_tokens, false, nullptr);
}

std::string tokenizer::decode_impl(std::span<const std::int32_t> ids, bool skip_special_tokens, bool hold_incomplete,
                                   bool* held) const {
  const detail::tokenizer_data& d = *data_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const auto id : ids) {
    const std::string* token = d.added.token_of(id);
    if (!token) token = d.model.id_to_token(id);
    if (!token || (skip_special_tokens && d.added.is_special(*token))) continue;
    tokens.push_back(*token);
  }
  return detail::run_decoders(d.decoders, std::move(tokens), hold_incomplete, held);
}

std::optional<std::int32_t> tokenizer::token_to_id(std::string_view token) const {
  if (const auto id = data_->added.id_of(token)) return id;
  return data_->model.token_to_id(token);
}

std::optional<std::string> tokenizer::id_to_token(std::int32_t id) const {
  const std::string* token = data_->added.token_of(id);
  if (!token) token = data_->model.id_to_token(id);
  if (!token) return std::nullopt;
  return *token;
}

std::int32_t tokenizer::vocab_size() const { return data_->vocab_size; }

bool tokenizer::is_special(std::int32_t id) const {
  const auto token = id_to_token(id);
  return token && data_->added.is_special(*token);
}

// ---- stream_decoder ----

stream_decoder::stream_decoder(const tokenizer& t, bool skip_special_tokens)
    : tokenizer_(t), skip_special_(skip_special_tokens) {}

std::string stream_decoder::push(std::int32_t id) {
  window_.push_back(id);
  bool held = false;
  const std::string text = tokenizer_.decode_impl(window_, skip_special_, true, &held);
  std::string fresh = take_new_text(text);
  if (fresh.empty()) return fresh;  // nothing completed yet: keep the whole window as context
  if (held) {
    emitted_ = text;  // part of a character is still missing; it needs this window's bytes
    return fresh;
  }
  // Everything decoded is out: the ids since the old context become the new context.
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(context_));
  context_ = window_.size();
  emitted_ = tokenizer_.decode_impl(window_, skip_special_, true, nullptr);
  return fresh;
}

std::string stream_decoder::finish() {
  const std::string text = tokenizer_.decode_impl(window_, skip_special_, false, nullptr);
  std::string fresh = take_new_text(text);
  window_.clear();
  context_ = 0;
  emitted_.clear();
  return fresh;
}

std::string stream_decoder::take_new_text(const std::string& text) const {
  if (text.compare(0, emitted_.size(), emitted_) == 0) return text.size() > emitted_.size() ? text.substr(emitted_.size()) : "";
  // The window's text was rewritten (a byte run turned invalid): emit what lies beyond the
  // length already emitted, from a character boundary, so nothing is repeated or split.
  std::size_t cut = std::min(emitted_.size(), text.size());
  while (cut < text.size() && is_continuation_byte(text[cut])) ++cut;
  return text.substr(cut);
}

}  // namespace mpakt::models
