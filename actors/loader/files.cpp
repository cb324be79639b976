#include "actors/loader/files.hpp"

namespace mpakt::loader {

namespace {
/// Largest side file read (tokenizer.json of a 150k-token vocabulary is about 10 MB).
constexpr std::size_t max_side_file = std::size_t(64) << 20;
}  // namespace

std::string sibling_location(const model_source& source, std::string_view file) {
  const std::string& first = source.candidates.front().location;
  const auto slash = first.find_last_of('/');
  return (slash == std::string::npos ? std::string() : first.substr(0, slash + 1)) + std::string(file);
}

result<model_files> read_model_files(const model_source& source, byte_reader& reader) {
  if (source.candidates.empty()) return invalid("source " + source.text + " names no checkpoint");
  model_files out;
  auto optional = [&](std::string_view name, std::string& into) -> status {
    auto r = reader.read_all(sibling_location(source, name), max_side_file);
    if (r) into = std::move(*r);
    else if (r.err().code != errc::not_found) return std::move(r).err();
    return {};
  };
  const std::string config_at = sibling_location(source, "config.json");
  auto config = reader.read_all(config_at, max_side_file);
  if (!config) {
    if (config.err().code == errc::not_found)
      return make_error(errc::invalid, "source " + source.text + " has no config.json (looked at " + config_at +
                                           "), so its architecture is unknown");
    return std::move(config).err();
  }
  out.config = std::move(*config);
  MPAKT_TRY(optional("tokenizer.json", out.tokenizer));
  MPAKT_TRY(optional("tokenizer_config.json", out.tokenizer_config));
  MPAKT_TRY(optional("chat_template.jinja", out.chat_template));
  return out;
}

}  // namespace mpakt::loader
