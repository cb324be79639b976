#include "actors/loader/source.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

#include "http/url.hpp"

namespace mpakt::loader {

namespace {

constexpr std::string_view index_suffix = ".safetensors.index.json";
constexpr std::string_view file_suffix = ".safetensors";
constexpr std::string_view default_file = "model.safetensors";
constexpr std::string_view default_index = "model.safetensors.index.json";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

error bad_source(std::string_view text, std::string_view why) {
  return invalid("source \"" + std::string(text) + "\" " + std::string(why) + "; accepted forms: " +
                 std::string(accepted_source_forms));
}

/// Characters of hub organisation, model and revision names.
bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.';
}

bool valid_name(std::string_view s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (char c : s)
    if (!is_name_char(c)) return false;
  return true;
}

/// A relative path of plain segments: no empty, "." or ".." segment, no scheme or query.
bool valid_relative_path(std::string_view p) {
  if (p.empty() || p.front() == '/' || p.back() == '/') return false;
  if (p.find("://") != std::string_view::npos || p.find_first_of("?#\\") != std::string_view::npos) return false;
  std::size_t start = 0;
  while (start <= p.size()) {
    const std::size_t end = std::min(p.find('/', start), p.size());
    const std::string_view seg = p.substr(start, end - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    for (char c : seg)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
    start = end + 1;
  }
  return true;
}

/// Percent-encodes a relative path for a URL, keeping '/' and RFC 3986 unreserved characters.
std::string encode_path(std::string_view p) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (char ch : p) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += ch;
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string last_segment(std::string_view p) {
  const auto slash = p.rfind('/');
  return std::string(slash == std::string_view::npos ? p : p.substr(slash + 1));
}

/// Candidates for a path inside a remote base ("…/resolve/rev/" or a folder URL).
result<std::vector<source_candidate>> remote_candidates(std::string_view text, const std::string& base,
                                                        std::string_view path) {
  std::vector<source_candidate> out;
  if (ends_with(path, index_suffix)) {
    out.push_back({base + encode_path(path), true});
  } else if (ends_with(path, file_suffix)) {
    out.push_back({base + encode_path(path), false});
  } else if (path.empty() || last_segment(path).find('.') == std::string::npos) {
    // A folder: the single file first, the index only if the file is absent.
    const std::string dir = path.empty() ? base : base + encode_path(path) + "/";
    out.push_back({dir + std::string(default_file), false});
    out.push_back({dir + std::string(default_index), true});
  } else {
    return bad_source(text, "names " + last_segment(path) + ", which is neither a .safetensors file nor an index");
  }
  return out;
}

result<model_source> parse_hub(std::string_view text, const source_options& opts) {
  model_source s;
  s.text = std::string(text);
  s.kind = source_kind::hub;
  std::string_view rest = text.substr(3);
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos) return bad_source(text, "has no model name after the organisation");
  s.org = std::string(rest.substr(0, slash));
  rest.remove_prefix(slash + 1);
  const auto model_end = std::min(rest.find_first_of("@/"), rest.size());
  s.model = std::string(rest.substr(0, model_end));
  rest.remove_prefix(model_end);
  s.revision = "main";
  if (!rest.empty() && rest.front() == '@') {
    rest.remove_prefix(1);
    const auto rev_end = std::min(rest.find('/'), rest.size());
    s.revision = std::string(rest.substr(0, rev_end));
    rest.remove_prefix(rev_end);
    if (!valid_name(s.revision)) return bad_source(text, "has an invalid revision \"" + s.revision + "\"");
  }
  if (!valid_name(s.org)) return bad_source(text, "has an invalid organisation \"" + s.org + "\"");
  if (!valid_name(s.model)) return bad_source(text, "has an invalid model name \"" + s.model + "\"");
  if (!rest.empty()) {
    rest.remove_prefix(1);  // the '/'
    if (!valid_relative_path(rest)) return bad_source(text, "has an invalid file path \"" + std::string(rest) + "\"");
    s.path = std::string(rest);
  }
  std::string endpoint = opts.hf_endpoint;
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  const std::string base = endpoint + "/" + s.org + "/" + s.model + "/resolve/" + s.revision + "/";
  auto c = remote_candidates(text, base, s.path);
  if (!c) return std::move(c).err();
  s.candidates = std::move(*c);
  return s;
}

result<model_source> parse_http(std::string_view text) {
  auto u = http::parse_url(text);
  if (!u) return bad_source(text, "is not a valid http:// or https:// URL");
  model_source s;
  s.text = std::string(text);
  s.kind = source_kind::url;
  const std::string& target = u->target;
  const auto q = target.find('?');
  const std::string path = target.substr(0, q);
  const std::string origin = u->scheme + "://" + u->host_header();
  if (ends_with(path, index_suffix)) {
    s.candidates.push_back({std::string(text), true});
  } else if (!path.empty() && path.back() == '/') {
    // Resolved as a relative reference would be (RFC 3986): the folder's query is dropped.
    s.candidates.push_back({origin + path + std::string(default_file), false});
    s.candidates.push_back({origin + path + std::string(default_index), true});
  } else {
    s.candidates.push_back({std::string(text), false});
  }
  return s;
}

result<model_source> parse_local(std::string_view text) {
  namespace fs = std::filesystem;
  model_source s;
  s.text = std::string(text);
  s.kind = source_kind::local;
  std::error_code ec;
  const fs::path p = fs::absolute(fs::path(std::string(text)), ec);
  if (ec) return bad_source(text, "is not a usable path");
  const auto st = fs::status(p, ec);
  if (ec || !fs::exists(st)) return bad_source(text, "is no file or folder on the server");
  if (fs::is_regular_file(st)) {
    s.candidates.push_back({p.string(), is_index_name(p.string())});
    return s;
  }
  if (!fs::is_directory(st)) return bad_source(text, "is neither a file nor a folder");
  // A folder: model.safetensors, else model.safetensors.index.json, else the one index or
  // the one safetensors file it holds.
  if (fs::is_regular_file(p / default_file, ec)) {
    s.candidates.push_back({(p / default_file).string(), false});
    return s;
  }
  if (fs::is_regular_file(p / default_index, ec)) {
    s.candidates.push_back({(p / default_index).string(), true});
    return s;
  }
  std::vector<fs::path> indexes, files;
  for (const auto& e : fs::directory_iterator(p, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const std::string name = e.path().filename().string();
    if (ends_with(name, index_suffix)) indexes.push_back(e.path());
    else if (ends_with(name, file_suffix)) files.push_back(e.path());
  }
  if (indexes.size() == 1) {
    s.candidates.push_back({indexes[0].string(), true});
  } else if (indexes.empty() && files.size() == 1) {
    s.candidates.push_back({files[0].string(), false});
  } else if (indexes.empty() && files.empty()) {
    return bad_source(text, "is a folder holding no .safetensors file or index");
  } else {
    return bad_source(text, "is a folder holding several safetensors files or indexes and no model.safetensors or "
                            "model.safetensors.index.json; name one of them");
  }
  return s;
}

}  // namespace

bool is_index_name(std::string_view p) { return ends_with(p, index_suffix); }

bool inside_dirs(const std::string& path, const std::vector<std::string>& dirs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path real = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return false;
  for (const auto& d : dirs) {
    fs::path dir = fs::weakly_canonical(fs::absolute(d, ec), ec);
    if (ec) continue;
    if (dir.filename().empty()) dir = dir.parent_path();  // a trailing '/'
    auto it = real.begin();
    bool inside = true;
    for (const auto& part : dir) {
      if (it == real.end() || *it != part) {
        inside = false;
        break;
      }
      ++it;
    }
    if (inside) return true;
  }
  return false;
}

std::string pinned_source(const std::string& text, const std::string& commit) {
  if (commit.empty() || text.rfind("hf:", 0) != 0 || !valid_name(commit)) return text;
  auto s = parse_hub(text, source_options{});
  if (!s) return text;
  return "hf:" + s->org + "/" + s->model + "@" + commit + (s->path.empty() ? "" : "/" + s->path);
}

result<model_source> parse_source(std::string_view text, const source_options& opts) {
  if (text.empty()) return bad_source(text, "is empty");
  if (text.rfind("hf:", 0) == 0) return parse_hub(text, opts);
  if (text.rfind("http://", 0) == 0 || text.rfind("https://", 0) == 0) return parse_http(text);
  if (text.find("://") != std::string_view::npos || text.rfind("http:", 0) == 0 || text.rfind("https:", 0) == 0)
    return bad_source(text, "uses a scheme that is not supported");
  if (opts.local_dirs && opts.local_dirs->empty())
    return bad_source(text, "is a local path, and this server reads no local files (its operator may allow folders "
                            "with mpakt serve --allow-local DIR)");
  if (opts.local_dirs && !inside_dirs(std::string(text), *opts.local_dirs))
    return bad_source(text, "is a local path outside the folders this server reads models from (mpakt serve --allow-local)");
  return parse_local(text);
}

result<std::string> shard_location(const std::string& index_location, std::string_view shard_name, bool remote) {
  if (!valid_relative_path(shard_name))
    return invalid("index " + index_location + " names shard \"" + std::string(shard_name) +
                   "\", which is not a plain relative file name");
  if (remote) {
    // Resolved as a relative reference (RFC 3986): the index URL's query is not carried over.
    const std::string path = index_location.substr(0, index_location.find('?'));
    return path.substr(0, path.rfind('/') + 1) + encode_path(shard_name);
  }
  return (std::filesystem::path(index_location).parent_path() / std::string(shard_name)).string();
}

}  // namespace mpakt::loader
