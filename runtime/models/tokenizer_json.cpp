// tokenizer.json -> tokenizer_data. Every refusal names the JSON field it is about, so that a
// user can see which part of their tokenizer this runtime does not reproduce.

#include <rapidjson/document.h>

#include <tuple>
#include <utility>

#include "runtime/models/tokenizer_pipeline.hpp"
#include "runtime/models/tokenizer_unicode.hpp"
#include "runtime/json.hpp"

namespace mpakt::models::detail {

namespace {

using json = rapidjson::Value;

error refuse(const std::string& path, const std::string& what) { return invalid("tokenizer.json: " + path + " " + what); }

/// The member `key` of an object, or nullptr when it is absent or null.
const json* member(const json& object, const char* key) {
  if (!object.IsObject()) return nullptr;
  const auto it = object.FindMember(key);
  return it == object.MemberEnd() || it->value.IsNull() ? nullptr : &it->value;
}

std::string as_string(const json& v) { return std::string(v.GetString(), v.GetStringLength()); }

result<std::string> get_string(const json& object, const char* key, const std::string& path) {
  const json* v = member(object, key);
  if (!v || !v->IsString()) return refuse(path + "." + key, "must be a string");
  return as_string(*v);
}

result<bool> get_bool(const json& object, const char* key, const std::string& path, bool fallback) {
  const json* v = member(object, key);
  if (!v) return fallback;
  if (!v->IsBool()) return refuse(path + "." + key, "must be true or false");
  return v->GetBool();
}

/// A single character, as Metaspace's replacement and Strip's content are.
result<std::string> get_char(const json& object, const char* key, const std::string& path) {
  auto s = get_string(object, key, path);
  if (!s) return s;
  std::size_t pos = 0;
  if (s->empty() || (unicode::next_code_point(*s, pos), pos != s->size()))
    return refuse(path + "." + key, "must be a single character");
  return s;
}

result<std::string> get_type(const json& object, const std::string& path) {
  if (!object.IsObject()) return refuse(path, "must be an object");
  return get_string(object, "type", path);
}

error unsupported_type(const std::string& path, const std::string& type) {
  return refuse(path, "type '" + type + "' is not supported");
}

/// The string of a {"String": "..."} pattern; {"Regex": ...} patterns are refused.
result<std::string> string_pattern(const json& object, const std::string& path) {
  const json* p = member(object, "pattern");
  if (!p || !p->IsObject()) return refuse(path + ".pattern", "must be an object");
  if (const json* s = member(*p, "String"); s && s->IsString() && s->GetStringLength() > 0) return as_string(*s);
  if (member(*p, "Regex")) return refuse(path + ".pattern", "Regex is not supported here (only String)");
  return refuse(path + ".pattern", "must hold a non-empty String");
}

template <class Step, class Parse>
status parse_sequence(const json& object, const char* key, const std::string& path, std::vector<Step>& out,
                      Parse parse_one) {
  const json* items = member(object, key);
  if (!items || !items->IsArray()) return refuse(path + "." + key, "must be an array");
  for (rapidjson::SizeType i = 0; i < items->Size(); ++i)
    MPAKT_TRY(parse_one((*items)[i], path + "." + key + "[" + std::to_string(i) + "]", out));
  return {};
}

// ---- normalizer ----

status parse_normalizer(const json& v, const std::string& path, std::vector<normalizer_step>& out) {
  auto type = get_type(v, path);
  if (!type) return std::move(type).err();
  if (*type == "Sequence") return parse_sequence(v, "normalizers", path, out, parse_normalizer);
  if (*type == "NFC") {
    out.push_back({normalizer_step::kind::nfc, {}, {}});
  } else if (*type == "Prepend") {
    auto prefix = get_string(v, "prepend", path);
    if (!prefix) return std::move(prefix).err();
    out.push_back({normalizer_step::kind::prepend, *prefix, {}});
  } else if (*type == "Replace") {
    auto pattern = string_pattern(v, path);
    if (!pattern) return std::move(pattern).err();
    auto content = get_string(v, "content", path);
    if (!content) return std::move(content).err();
    out.push_back({normalizer_step::kind::replace, *pattern, *content});
  } else {
    return unsupported_type(path, *type);
  }
  return {};
}

// ---- pre-tokenizer ----

result<prepend_scheme> parse_prepend_scheme(const json& v, const std::string& path) {
  prepend_scheme scheme = prepend_scheme::always;
  if (const json* s = member(v, "prepend_scheme")) {
    const std::string name = s->IsString() ? as_string(*s) : "";
    if (name == "always") scheme = prepend_scheme::always;
    else if (name == "first") scheme = prepend_scheme::first;
    else if (name == "never") scheme = prepend_scheme::never;
    else return refuse(path + ".prepend_scheme", "must be \"always\", \"first\" or \"never\"");
  }
  // Older files say add_prefix_space instead; false means never (and contradicts anything else).
  if (const json* a = member(v, "add_prefix_space"); a && a->IsBool() && !a->GetBool()) {
    if (member(v, "prepend_scheme") && scheme != prepend_scheme::never)
      return refuse(path + ".add_prefix_space", "false contradicts prepend_scheme");
    scheme = prepend_scheme::never;
  }
  return scheme;
}

status parse_byte_level(const json& v, const std::string& path, pre_tokenizer_step& step) {
  step.what = pre_tokenizer_step::kind::byte_level;
  auto prefix = get_bool(v, "add_prefix_space", path, true);
  if (!prefix) return std::move(prefix).err();
  auto regex = get_bool(v, "use_regex", path, true);
  if (!regex) return std::move(regex).err();
  step.add_prefix_space = *prefix;
  step.use_regex = *regex;
  return {};
}

status parse_split(const json& v, const std::string& path, pre_tokenizer_step& step) {
  step.what = pre_tokenizer_step::kind::split;
  const json* pattern = member(v, "pattern");
  const json* regex = pattern ? member(*pattern, "Regex") : nullptr;
  if (!regex || !regex->IsString()) return refuse(path + ".pattern", "must be a Regex (String patterns are not supported)");
  const auto known = identify_split_pattern(as_string(*regex));
  if (!known) return refuse(path + ".pattern", "regex '" + as_string(*regex) + "' is not one this runtime reproduces");
  step.pattern = *known;
  auto behavior = get_string(v, "behavior", path);
  if (!behavior) return std::move(behavior).err();
  if (*behavior != "Isolated") return refuse(path + ".behavior", "'" + *behavior + "' is not supported (only Isolated)");
  auto inverted = get_bool(v, "invert", path, false);
  if (!inverted) return std::move(inverted).err();
  if (*inverted) return refuse(path + ".invert", "true is not supported");
  return {};
}

status parse_metaspace(const json& v, const std::string& path, pre_tokenizer_step& step) {
  step.what = pre_tokenizer_step::kind::metaspace;
  auto replacement = get_char(v, "replacement", path);
  if (!replacement) return std::move(replacement).err();
  step.replacement = *replacement;
  auto scheme = parse_prepend_scheme(v, path);
  if (!scheme) return std::move(scheme).err();
  step.scheme = *scheme;
  auto split = get_bool(v, "split", path, true);
  if (!split) return std::move(split).err();
  step.split = *split;
  return {};
}

status parse_pre_tokenizer(const json& v, const std::string& path, std::vector<pre_tokenizer_step>& out) {
  auto type = get_type(v, path);
  if (!type) return std::move(type).err();
  if (*type == "Sequence") return parse_sequence(v, "pretokenizers", path, out, parse_pre_tokenizer);
  pre_tokenizer_step step;
  if (*type == "ByteLevel")
    MPAKT_TRY(parse_byte_level(v, path, step));
  else if (*type == "Split")
    MPAKT_TRY(parse_split(v, path, step));
  else if (*type == "Metaspace")
    MPAKT_TRY(parse_metaspace(v, path, step));
  else
    return unsupported_type(path, *type);
  out.push_back(std::move(step));
  return {};
}

// ---- decoder ----

status parse_replace_decoder(const json& v, const std::string& path, decoder_step& step) {
  step.what = decoder_step::kind::replace;
  auto pattern = string_pattern(v, path);
  if (!pattern) return std::move(pattern).err();
  auto content = get_string(v, "content", path);
  if (!content) return std::move(content).err();
  step.pattern = *pattern;
  step.content = *content;
  return {};
}

status parse_strip_decoder(const json& v, const std::string& path, decoder_step& step) {
  step.what = decoder_step::kind::strip;
  auto content = get_char(v, "content", path);
  if (!content) return std::move(content).err();
  step.content = *content;
  for (const auto& [key, target] : {std::pair{"start", &step.start}, std::pair{"stop", &step.stop}}) {
    const json* n = member(v, key);
    if (!n || !n->IsUint()) return refuse(path + "." + key, "must be a non-negative integer");
    *target = n->GetUint();
  }
  return {};
}

status parse_metaspace_decoder(const json& v, const std::string& path, decoder_step& step) {
  step.what = decoder_step::kind::metaspace;
  auto replacement = get_char(v, "replacement", path);
  if (!replacement) return std::move(replacement).err();
  step.pattern = *replacement;
  auto scheme = parse_prepend_scheme(v, path);
  if (!scheme) return std::move(scheme).err();
  step.prepend = *scheme != prepend_scheme::never;
  return {};
}

status parse_decoder(const json& v, const std::string& path, std::vector<decoder_step>& out) {
  auto type = get_type(v, path);
  if (!type) return std::move(type).err();
  if (*type == "Sequence") return parse_sequence(v, "decoders", path, out, parse_decoder);
  decoder_step step;
  if (*type == "ByteLevel")
    step.what = decoder_step::kind::byte_level;
  else if (*type == "ByteFallback")
    step.what = decoder_step::kind::byte_fallback;
  else if (*type == "Fuse")
    step.what = decoder_step::kind::fuse;
  else if (*type == "Replace")
    MPAKT_TRY(parse_replace_decoder(v, path, step));
  else if (*type == "Strip")
    MPAKT_TRY(parse_strip_decoder(v, path, step));
  else if (*type == "Metaspace")
    MPAKT_TRY(parse_metaspace_decoder(v, path, step));
  else
    return unsupported_type(path, *type);
  out.push_back(std::move(step));
  return {};
}

// ---- post-processor ----

result<std::vector<template_item>> parse_template(const json& v, const std::string& path) {
  const json* single = member(v, "single");
  if (!single || !single->IsArray()) return refuse(path + ".single", "must be an array");
  const json* specials = member(v, "special_tokens");
  std::vector<template_item> items;
  for (rapidjson::SizeType i = 0; i < single->Size(); ++i) {
    const std::string at = path + ".single[" + std::to_string(i) + "]";
    const json& item = (*single)[i];
    if (const json* seq = member(item, "Sequence")) {
      auto id = get_string(*seq, "id", at + ".Sequence");
      if (!id) return std::move(id).err();
      if (*id != "A") return refuse(at + ".Sequence.id", "must be A in a single template");
      items.push_back({true, {}});
      continue;
    }
    const json* special = member(item, "SpecialToken");
    if (!special) return refuse(at, "must be a Sequence or a SpecialToken");
    auto name = get_string(*special, "id", at + ".SpecialToken");
    if (!name) return std::move(name).err();
    const json* entry = specials ? member(*specials, name->c_str()) : nullptr;
    const json* ids = entry ? member(*entry, "ids") : nullptr;
    if (!ids || !ids->IsArray()) return refuse(path + ".special_tokens", "lacks the ids of '" + *name + "'");
    template_item t;
    for (const auto& id : ids->GetArray()) {
      if (!id.IsInt()) return refuse(path + ".special_tokens." + *name + ".ids", "must hold integers");
      t.ids.push_back(id.GetInt());
    }
    items.push_back(std::move(t));
  }
  return items;
}

status parse_post_processor(const json& v, const std::string& path, std::vector<std::vector<template_item>>& out) {
  auto type = get_type(v, path);
  if (!type) return std::move(type).err();
  if (*type == "Sequence") return parse_sequence(v, "processors", path, out, parse_post_processor);
  if (*type == "ByteLevel") return {};  // only trims offsets; ids are unchanged
  if (*type != "TemplateProcessing") return unsupported_type(path, *type);
  auto items = parse_template(v, path);
  if (!items) return std::move(items).err();
  out.push_back(std::move(*items));
  return {};
}

// ---- model ----

status parse_merges(const json& merges, bpe_config& config) {
  for (rapidjson::SizeType i = 0; i < merges.Size(); ++i) {
    const json& m = merges[i];
    const std::string at = "model.merges[" + std::to_string(i) + "]";
    if (m.IsString()) {
      // The "a b" form: exactly one space, as the library requires.
      const std::string line = as_string(m);
      const auto space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        return refuse(at, "must be two tokens separated by one space");
      config.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
    } else if (m.IsArray() && m.Size() == 2 && m[0].IsString() && m[1].IsString()) {
      config.merges.emplace_back(as_string(m[0]), as_string(m[1]));
    } else {
      return refuse(at, "must be \"a b\" or [\"a\", \"b\"]");
    }
  }
  return {};
}

status check_empty_affix(const json& model, const char* key) {
  const json* v = member(model, key);
  if (v && !(v->IsString() && v->GetStringLength() == 0)) return refuse(std::string("model.") + key, "is not supported");
  return {};
}

result<bpe_config> parse_model(const json& root) {
  const json* model = member(root, "model");
  if (!model || !model->IsObject()) return refuse("model", "must be an object");
  const json* type = member(*model, "type");
  if (type && (!type->IsString() || as_string(*type) != "BPE"))
    return unsupported_type("model", type->IsString() ? as_string(*type) : "?");
  const json* vocab = member(*model, "vocab");
  const json* merges = member(*model, "merges");
  if (!vocab || !vocab->IsObject()) return refuse("model.vocab", "must be an object");
  if (!merges || !merges->IsArray()) return refuse("model.merges", "must be an array");
  if (const json* dropout = member(*model, "dropout"); dropout && !(dropout->IsNumber() && dropout->GetDouble() == 0))
    return refuse("model.dropout", "is not supported (it makes encoding random)");
  MPAKT_TRY(check_empty_affix(*model, "continuing_subword_prefix"));
  MPAKT_TRY(check_empty_affix(*model, "end_of_word_suffix"));

  bpe_config config;
  for (const auto& entry : vocab->GetObject()) {
    if (!entry.value.IsInt()) return refuse("model.vocab", "id of '" + as_string(entry.name) + "' must be an integer");
    config.vocab.emplace(as_string(entry.name), entry.value.GetInt());
  }
  MPAKT_TRY(parse_merges(*merges, config));
  if (const json* unk = member(*model, "unk_token")) {
    if (!unk->IsString()) return refuse("model.unk_token", "must be a string");
    config.unk_token = as_string(*unk);
  }
  for (const auto& [key, target] : {std::pair{"fuse_unk", &config.fuse_unk}, std::pair{"byte_fallback", &config.byte_fallback},
                                    std::pair{"ignore_merges", &config.ignore_merges}}) {
    auto flag = get_bool(*model, key, "model", false);
    if (!flag) return std::move(flag).err();
    *target = *flag;
  }
  return config;
}

// ---- the rest ----

status check_truncation_and_padding(const json& root) {
  if (member(root, "truncation")) return refuse("truncation", "is not supported (set it to null)");
  const json* padding = member(root, "padding");
  if (!padding) return {};
  // Padding to the longest of a batch leaves a single encoding as it is; anything else pads it.
  const json* strategy = member(*padding, "strategy");
  const bool batch_longest = strategy && strategy->IsString() && as_string(*strategy) == "BatchLongest";
  if (!batch_longest || member(*padding, "pad_to_multiple_of"))
    return refuse("padding", "is not supported except BatchLongest without pad_to_multiple_of");
  return {};
}

status parse_added_tokens(const json& root, tokenizer_data& data) {
  const json* tokens = member(root, "added_tokens");
  if (!tokens) return {};
  if (!tokens->IsArray()) return refuse("added_tokens", "must be an array");
  for (rapidjson::SizeType i = 0; i < tokens->Size(); ++i) {
    const json& t = (*tokens)[i];
    const std::string at = "added_tokens[" + std::to_string(i) + "]";
    auto content = get_string(t, "content", at);
    if (!content) return std::move(content).err();
    added_token token;
    token.content = *content;
    for (const auto& [key, target, fallback] :
         {std::tuple{"single_word", &token.single_word, false}, std::tuple{"lstrip", &token.lstrip, false},
          std::tuple{"rstrip", &token.rstrip, false}, std::tuple{"special", &token.special, false}}) {
      auto flag = get_bool(t, key, at, fallback);
      if (!flag) return std::move(flag).err();
      *target = *flag;
    }
    auto normalized = get_bool(t, "normalized", at, !token.special);
    if (!normalized) return std::move(normalized).err();
    token.normalized = *normalized;
    data.added.add(token, data.model);
  }
  return {};
}

template <class Step, class Parse>
status parse_optional(const json& root, const char* key, std::vector<Step>& out, Parse parse_one) {
  const json* v = member(root, key);
  return v ? parse_one(*v, key, out) : status{};
}

}  // namespace

result<std::shared_ptr<const tokenizer_data>> parse_tokenizer_json(std::string_view text) {
  auto parsed = parse_json(text, "tokenizer.json");
  if (!parsed) return std::move(parsed).err();
  const rapidjson::Document& doc = *parsed;
  if (!doc.IsObject()) return invalid("tokenizer.json is not a JSON object");

  MPAKT_TRY(check_truncation_and_padding(doc));
  auto config = parse_model(doc);
  if (!config) return std::move(config).err();
  auto model = bpe_model::build(std::move(*config));
  if (!model) return std::move(model).err();
  auto data = std::make_shared<tokenizer_data>(std::move(*model));

  MPAKT_TRY(parse_optional(doc, "normalizer", data->normalizers, parse_normalizer));
  MPAKT_TRY(parse_optional(doc, "pre_tokenizer", data->pre_tokenizers, parse_pre_tokenizer));
  MPAKT_TRY(parse_optional(doc, "decoder", data->decoders, parse_decoder));
  MPAKT_TRY(parse_optional(doc, "post_processor", data->templates, parse_post_processor));
  MPAKT_TRY(parse_added_tokens(doc, *data));
  data->added.finish([&](std::string_view content) { return normalize(data->normalizers, std::string(content)); });
  data->vocab_size = static_cast<std::int32_t>(data->model.size() + data->added.count_outside(data->model));
  return std::shared_ptr<const tokenizer_data>(std::move(data));
}

}  // namespace mpakt::models::detail
