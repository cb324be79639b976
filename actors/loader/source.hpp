#pragma once
/// Model sources: what a load or inspect request names, turned into the files to read.
///
/// Accepted forms (docs: decisions.md "Loading details", checklist LOAD-09..17, Z-12):
///   hf:Org/Model[@rev][/path]   rev defaults to "main"; becomes
///                               {hf_endpoint}/{Org}/{Model}/resolve/{rev}/{path}
///   http://… or https://…       a .safetensors file, a .safetensors.index.json, or a folder
///                               URL ending in '/'
///   a local path                absolute or relative to the server's working directory: a
///                               .safetensors file, an index file, or a folder holding either
/// A path ending in ".safetensors.index.json" is read as an index. With no file named (hf
/// source without a path, a folder), the loader tries "model.safetensors" and, only if that is
/// absent, "model.safetensors.index.json" beside it; shard names are never guessed (LOAD-13/14).
/// A URL whose path ends in neither suffix nor '/' is read as a single safetensors file (the
/// spec's "any https:// URL to a safetensors file").
///
/// Parsing does no network I/O. A local source is looked at on disk (file or folder) so the
/// error for a missing path names it at once.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.hpp"

namespace mpakt::loader {

enum class source_kind { hub, url, local };

/// One file to try: where it is and whether it is an index or a safetensors file.
struct source_candidate {
  std::string location;  ///< URL (hub, url) or filesystem path (local)
  bool is_index = false;
};

/// A parsed source. `candidates` are tried in order; a candidate that does not exist
/// (404, no such file) moves on to the next one; the last one's absence is an error.
struct model_source {
  std::string text;  ///< as given, for messages
  source_kind kind = source_kind::hub;
  std::string org, model, revision, path;  ///< hub sources only (path may be empty)
  std::vector<source_candidate> candidates;

  /// True for hub and URL sources (read over HTTP), false for local files.
  bool remote() const { return kind != source_kind::local; }
};

struct source_options {
  /// Base of hf: sources. Tests and offline clusters point it at `mpakt host`.
  std::string hf_endpoint = "https://huggingface.co";
  /// The folders local paths may name (`mpakt serve --allow-local DIR`); a path outside all
  /// of them (symbolic links followed) is refused with the same message whether or not it
  /// exists, so the server's filesystem cannot be probed. Empty: no local path is accepted.
  /// nullopt: any (tools and tests that read their own files).
  std::optional<std::vector<std::string>> local_dirs;
};

/// Whether `path` (absolute, or relative to the working directory) lies in one of `dirs` or
/// is one of them, after following symbolic links; compared by path component, so /data/m2
/// is not inside /data/m.
bool inside_dirs(const std::string& path, const std::vector<std::string>& dirs);

/// The accepted forms, for error messages.
inline constexpr std::string_view accepted_source_forms =
    "hf:Org/Model[@revision][/file.safetensors], an http:// or https:// URL to a .safetensors "
    "or .safetensors.index.json file, or a local path to such a file or a folder holding one";

/// Parses `text`. Errors (errc::invalid) name the source and list the accepted forms.
result<model_source> parse_source(std::string_view text, const source_options& opts = {});

/// `text` with its hub revision replaced by `commit` ("hf:Org/Model@commit[/path]"), so that
/// reading it again reads the very files a load read; other sources, or an empty commit, are
/// returned as they are.
std::string pinned_source(const std::string& text, const std::string& commit);

/// True when `p` names an index ("….safetensors.index.json").
bool is_index_name(std::string_view p);

/// Where a shard named in an index's weight_map lives: resolved against the directory of
/// the index's own location (URL or path). Refuses names that are absolute, climb out of
/// that directory (".."), or carry a scheme or query, naming the shard.
result<std::string> shard_location(const std::string& index_location, std::string_view shard_name, bool remote);

}  // namespace mpakt::loader
