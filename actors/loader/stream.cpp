#include "actors/loader/stream.hpp"

#include <algorithm>

namespace mpakt::loader {

tensor_location locate(const model_index& index, const tensor_info& t) {
  tensor_location l;
  l.name = t.name();
  l.location = index.files[t.file].location;
  l.first = t.file_offset;
  l.length = t.bytes();
  l.file_dtype = t.entry.file_dtype;
  l.shape = t.entry.shape;
  return l;
}

bool transient(const error& e) { return e.code == errc::unavailable || e.code == errc::timeout; }

result<std::uint64_t> read_range_into_retrying(byte_reader& reader, const std::string& location, std::uint64_t first,
                                               std::span<const std::span<char>> parts,
                                               const std::function<void()>& each_request, const part_filled& filled) {
  for (int attempt = 0;; ++attempt) {
    if (each_request) each_request();
    auto got = reader.read_range_into(location, first, parts, filled);
    if (got || attempt >= piece_retries || !transient(got.err())) return got;
  }
}

result<stream_stats> stream_tensor(byte_reader& reader, const tensor_location& t, const piece_sink& sink,
                                   std::uint64_t piece) {
  stream_stats stats;
  if (piece == 0) return invalid("stream_tensor: the piece size must be positive");
  for (std::uint64_t off = 0; off < t.length;) {
    const std::uint64_t n = std::min(piece, t.length - off);
    auto r = reader.read_range(t.location, t.first + off, n);
    for (int retry = 0; retry < piece_retries && !r && transient(r.err()); ++retry)
      r = reader.read_range(t.location, t.first + off, n);
    if (!r) {
      error e = std::move(r).err();
      e.message = "tensor " + t.name + ": " + e.message;
      return e;
    }
    if (r->bytes.size() != n)
      return invalid("tensor " + t.name + ": " + t.location + " ends at byte " + std::to_string(t.first + off + r->bytes.size()) +
                     ", before the tensor's last byte " + std::to_string(t.first + t.length - 1));
    stats.peak_buffered = std::max<std::uint64_t>(stats.peak_buffered, r->bytes.size());
    MPAKT_TRY(sink(off, r->bytes));
    off += n;
    stats.bytes += n;
    ++stats.pieces;
  }
  return stats;
}

}  // namespace mpakt::loader
