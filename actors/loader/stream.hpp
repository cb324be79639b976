#pragma once
/// Streaming one tensor's published bytes from the model host in pieces (LOAD-16, LOAD-19/20,
/// LOAD-22, DUR re-fetch).
///
/// A tensor of any size is read as consecutive range requests of at most `piece_bytes`
/// (16 MB, MB = 10^6: decisions.md "Units", Z-15), each handed to the caller's sink before the
/// next is read, so the loader holds one piece at a time whatever the tensor's size. Each piece
/// is checked (206 with a matching Content-Range, by the HTTP reader) before the sink sees it.
/// The bytes are the published ones: conversion happens on the worker (runtime/tensor_builder).
/// This is the sequential form, one request at a time; a load fetches with fetch.hpp (several
/// requests in flight, small neighbouring tensors in one), which shares the piece size, the
/// retry rule and tensor_location defined here.
///
/// Thread-safety: blocking; run on the loader's own thread with a reader it owns.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "actors/loader/inspect.hpp"
#include "actors/loader/reader.hpp"

namespace mpakt::loader {

inline constexpr std::uint64_t piece_bytes = 16'000'000;
/// A piece whose read fails for a transient reason (errc::unavailable or timeout: a dropped
/// connection, a CDN hiccup) is asked for again up to this many times; the sink has not seen
/// it, so a retry is invisible downstream. Other errors (404, Range not honoured) are final.
inline constexpr int piece_retries = 2;
/// Whether a failed read may succeed when asked again (errc::unavailable or timeout).
bool transient(const error& e);
/// `reader.read_range_into`, asked again up to piece_retries times after a transient failure;
/// `each_request`, when given, is called before every request (counting them); `filled` hears
/// of each part filled, in every attempt (a retry fills and announces the parts again).
result<std::uint64_t> read_range_into_retrying(byte_reader& reader, const std::string& location, std::uint64_t first,
                                               std::span<const std::span<char>> parts,
                                               const std::function<void()>& each_request = {},
                                               const part_filled& filled = {});

/// Where a tensor's published bytes are: everything needed to fetch it again later (a lost
/// worker's tensors are re-fetched from the same URL and byte range — DUR-02).
struct tensor_location {
  std::string name;
  std::string location;     ///< URL or absolute path of its file
  std::uint64_t first = 0;  ///< absolute offset of its first byte in the file
  std::uint64_t length = 0; ///< published bytes
  std::string file_dtype;   ///< as published ("BF16", …)
  shape_t shape;
};

tensor_location locate(const model_index& index, const tensor_info& t);

/// Receives piece after piece in order: its offset within the tensor and its bytes. Returning
/// an error stops the stream, and stream_tensor returns that error.
using piece_sink = std::function<status(std::uint64_t offset_in_tensor, std::string_view bytes)>;

struct stream_stats {
  std::uint64_t bytes = 0;          ///< delivered to the sink
  std::uint64_t pieces = 0;
  std::uint64_t peak_buffered = 0;  ///< the largest piece held at once (<= piece size)
};

/// Streams `t` to `sink` in pieces of at most `piece` bytes (piece_bytes unless a test wants
/// smaller). Errors name the tensor and the file's location.
result<stream_stats> stream_tensor(byte_reader& reader, const tensor_location& t, const piece_sink& sink,
                                   std::uint64_t piece = piece_bytes);

}  // namespace mpakt::loader
