#pragma once
/// Inspect: a checkpoint's tensor index, read from headers only (INS-01..11, LOAD-13..18).
///
/// For one file this is one range request: the first 256 KiB are asked for speculatively,
/// and only a header longer than that costs a second request for the rest. A sharded
/// checkpoint costs the index JSON plus one header read per shard (Z-03). No weight byte is
/// read. The result, `model_index`, is what selection, quantize planning and streaming work
/// from; `inspect_reply_of` is the API's inspect answer (written as JSON at the HTTP edge).
///
/// Figures are published (stored) bytes: inspect reads only headers, and what a tensor will
/// occupy on a worker depends on the load's quantize mode and the pool (see quantize_plan.hpp;
/// Z-16). Shapes are as stored ([out, in]; decisions.md "Graph wire details").

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/loader/reader.hpp"
#include "actors/loader/source.hpp"
#include "actors/replies.hpp"
#include "runtime/safetensors.hpp"

namespace mpakt::loader {

/// First request of a header read: enough for the headers of all but the largest checkpoints.
inline constexpr std::uint64_t header_probe_bytes = 256 * 1024;
/// Largest index JSON accepted (a 90,000-tensor index is about 9 MB).
inline constexpr std::size_t max_index_bytes = std::size_t(64) << 20;

/// One file of a checkpoint (the single file, or one shard).
struct model_file {
  std::string name;                   ///< file name as published ("model.safetensors", a weight_map value)
  std::string location;               ///< URL or absolute path
  std::uint64_t data_start = 0;       ///< 8 + header length: where tensor offsets start
  std::optional<std::uint64_t> size;  ///< whole file size, when the host said
  /// SHA-256 (hex) of bytes [0, data_start): what a volunteer that fetches its own weights
  /// compares with what it reads there, so that it reads this very file (docs/protocol.md).
  std::string header_sha256;
};

/// One tensor and where its published bytes are.
struct tensor_info {
  st_entry entry;                 ///< name, published dtype, shape, offsets within the data section
  std::size_t file = 0;           ///< index into model_index::files
  std::uint64_t file_offset = 0;  ///< absolute offset of its first byte in its file

  const std::string& name() const { return entry.name; }
  /// Published bytes.
  std::uint64_t bytes() const { return entry.end - entry.begin; }
};

/// A checkpoint's tensor index. Plain data: copied freely, safe to read from any thread.
struct model_index {
  std::string source;  ///< the source text, for messages
  bool remote = false;
  bool sharded = false;
  std::string index_location;            ///< the index's URL or path (sharded only)
  std::vector<model_file> files;         ///< the single file, or the shards in name order
  std::vector<std::string> shards;       ///< shard file names (empty when not sharded)
  std::vector<tensor_info> tensors;      ///< by file, then by offset (the order to stream in)
  std::uint64_t total_bytes = 0;         ///< sum of published bytes
  std::map<std::string, std::uint64_t> dtypes;  ///< published dtype name ("bf16", "int64", …) → count
  std::vector<std::pair<std::string, std::string>> metadata;  ///< __metadata__ of the first file
  std::unordered_map<std::string, std::size_t> by_name;      ///< tensor name → index in `tensors`

  std::size_t count() const { return tensors.size(); }
  /// The tensor with that name, or nullptr.
  const tensor_info* find(std::string_view name) const;
};

/// Reads and checks one safetensors header at `location` (one request, two when the header is
/// longer than header_probe_bytes). errc::not_found passes through when the file is absent.
/// With `digest`, SHA-256 (hex) of the header's bytes (the length prefix included) goes there.
result<std::pair<st_header, std::optional<std::uint64_t>>> read_header(byte_reader& reader, const std::string& location,
                                                                       std::string* digest = nullptr);

/// Builds the index of `src`, trying its candidates in order (LOAD-13). `reader` must suit the
/// source (an HTTP reader for remote sources, a local one otherwise).
result<model_index> inspect_source(const model_source& src, byte_reader& reader);

/// The inspect answer: total bytes, a count per dtype, every tensor's name, shape, dtype and
/// bytes, and the shards' file names (INS-04..06).
inspect_model_reply inspect_reply_of(const model_index& index);

}  // namespace mpakt::loader
