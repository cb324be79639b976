// libFuzzer target: a safetensors file's start, as a model host serves it — the 8-byte header
// length, the JSON header (runtime/safetensors.cpp: dtypes, shapes, offsets against the data
// that follows) — then every tensor the header accepts converted from its published bytes to
// what a worker holds (convert_piece), reading only bytes that exist. Anything may be refused;
// nothing may crash or read past the input.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/safetensors.hpp"

using namespace mpakt;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  if (file.size() < 8) return 0;
  auto n = safetensors_header_length(file.substr(0, 8));
  if (!n || *n > file.size() - 8) return 0;
  const std::uint64_t data_bytes = file.size() - 8 - *n;
  auto h = parse_safetensors_header(file.substr(8, *n), *n, data_bytes);
  if (!h) return 0;
  std::vector<std::byte> out;
  for (const auto& t : h->tensors) {
    (void)published_dtype_name(t.file_dtype);
    (void)looks_quantised(t);
    const int in_size = published_dtype_size(t.file_dtype);
    const auto resident = resident_dtype(t.file_dtype);
    if (in_size <= 0 || !resident) continue;
    const std::uint64_t bytes = t.end - t.begin;
    const std::size_t count = bytes / std::uint64_t(in_size);
    // The header said the tensor lies within the data: read it from there, as a load does.
    const auto* src = reinterpret_cast<const std::byte*>(data + h->data_start + t.begin);
    out.assign(count * 4 + 4, std::byte{0});
    convert_piece(t.file_dtype, src, count, out.data());
  }
  return 0;
}
