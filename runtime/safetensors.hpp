#pragma once
/// The safetensors format: an 8-byte little-endian header length, a JSON header
/// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data.
///
/// Header parsing is separate from reading bytes, so the coordinator can read a header by
/// one range request and stream each tensor in pieces; `convert_piece` turns published
/// bytes into what a worker holds (bf16/f16/f32 kept, f64/int64/bool widened or narrowed
/// to f32) piece by piece.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.hpp"
#include "runtime/tensor.hpp"

namespace mpakt {

/// One tensor as the file describes it.
struct st_entry {
  std::string name;
  std::string file_dtype;  ///< as written: "F32", "BF16", "F16", "F64", "I64", "BOOL", "I8", "F8_E4M3", ...
  shape_t shape;
  std::uint64_t begin = 0;  ///< byte offsets relative to the data section
  std::uint64_t end = 0;
};

struct st_header {
  std::uint64_t header_bytes = 0;  ///< length of the JSON header
  std::uint64_t data_start = 0;    ///< 8 + header_bytes
  std::vector<st_entry> tensors;   ///< in file order
  std::vector<std::pair<std::string, std::string>> metadata;
};

/// Largest header we accept (the format's own limit is 100 MB).
inline constexpr std::uint64_t max_safetensors_header = 100'000'000;

/// Reads the header length from the first 8 bytes.
result<std::uint64_t> safetensors_header_length(std::string_view first8);
/// Parses the JSON header; checks offsets are in order, non-overlapping and consistent
/// with shape and dtype. `data_bytes` (if known) bounds the offsets.
result<st_header> parse_safetensors_header(std::string_view json, std::uint64_t header_bytes,
                                           std::optional<std::uint64_t> data_bytes = std::nullopt);

/// Lower-case name of the published dtype ("bf16", "f64", "i8", "f8_e4m3", ...).
std::string published_dtype_name(std::string_view file_dtype);
/// Bytes per element of a published dtype, or 0 when unknown.
int published_dtype_size(std::string_view file_dtype);
/// The dtype a worker holds for a published dtype (F32/F64/I64/BOOL → f32, BF16 → bf16,
/// F16 → f16), or nullopt for dtypes we refuse (quantised formats, int8, fp8, ...).
std::optional<dtype> resident_dtype(std::string_view file_dtype);
/// True when the tensor looks like part of a quantised checkpoint (GPTQ/AWQ/bitsandbytes
/// marker names, int8/uint8/int32-packed/fp8 dtypes).
bool looks_quantised(const st_entry& e);

/// Converts `count` published elements (bytes in `src`) into resident elements written at
/// `dst` (f32 for widened types, raw copy for f32/bf16/f16).
void convert_piece(std::string_view file_dtype, const std::byte* src, std::size_t count, std::byte* dst);

/// Reads a whole local safetensors file into tensors (the CLI and tests); refuses
/// quantised checkpoints naming the tensors.
result<std::vector<std::pair<std::string, tensor>>> load_safetensors_file(const std::string& path);

}  // namespace mpakt
