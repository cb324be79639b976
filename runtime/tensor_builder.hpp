#pragma once
/// Building a resident tensor on a worker from its published bytes as they arrive.
///
/// The loader streams a tensor's published bytes (safetensors, little-endian) in pieces whose
/// boundaries fall anywhere — mid-element, mid-row. The builder converts as they come:
///  - f32/bf16/f16 kept as published: copied straight into place;
///  - bf16/f16 widened to f32 (a worker that does not keep weights packed) and
///    f64/int64/bool narrowed or widened to f32: element by element (convert_piece);
///  - f32/bf16/f16/f64 quantized to q8/q4: row by row as each row completes, straight from
///    the piece's bytes into the tensor (backends/cpu/quantize.hpp: the reference's bytes,
///    with AVX-512 where the CPU has it) — in lanes, whole groups of 16 rows at once; or by a
///    reader on another thread, through conversion().
/// Only one partial element or row is ever buffered besides the tensor itself. The result is
/// bit-identical to converting the whole tensor at once (convert_piece then convert_tensor),
/// whatever the piece boundaries — quantization is deterministic (QNT-09).
///
/// Lifecycle: constructed when a tensor's first piece is due, fed with add() in order, then
/// finish() hands over the tensor once. Any error is sticky: later calls return it again.
/// Thread-safety: none; one builder belongs to the one worker thread filling it (which lends
/// a piece of many rows to the kernel threads while it quantizes, and waits for them). Its
/// row_converter may be used from any thread.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/safetensors.hpp"
#include "runtime/status.hpp"
#include "runtime/tensor.hpp"

namespace mpakt {

/// Converts whole published rows into the quantized tensor a builder builds, from any thread:
/// rows are independent, and in lanes a row writes only its own bytes of its group, so threads
/// converting different rows never write the same byte (a reader converts the rows of a range
/// as they arrive while the builder converts the rows that ranges cut: host_fetch.hpp). A copy
/// shares the tensor's storage, which so outlives a conversion in flight. Empty (false) where
/// the builder does not quantize.
class row_converter {
 public:
  row_converter() = default;
  explicit operator bool() const { return !out_.empty(); }
  /// Published bytes of one row.
  std::size_t row_bytes() const { return row_in_; }
  /// Rows of the tensor.
  std::uint64_t rows() const { return std::uint64_t(out_.rows()); }
  /// Converts the `n` whole published rows at `src` into rows first … first + n - 1 (the caller
  /// keeps them within rows()). Whole groups of 16 in lanes are quantized into a buffer and
  /// written into place at once; a group's other rows one at a time.
  void convert(std::uint64_t first, const char* src, std::uint64_t n) const;

 private:
  friend class tensor_builder;
  void quantize_one(const char* src, void* dst, float* scratch) const;
  mutable tensor out_;  ///< (only rows given to convert are written)
  std::string file_dtype_;
  std::optional<dtype> from_;  ///< what the quantizer reads directly (f32, bf16, f16); empty: f64, widened first
  dtype to_ = dtype::q8;
  std::int64_t cols_ = 0;
  std::size_t row_in_ = 0;
  bool lanes_ = false;
};

class tensor_builder {
 public:
  /// `file_dtype` as published ("BF16", "F64", …); `resident` what to hold. Accepted pairs:
  /// a published dtype with its resident_dtype; BF16/F16 with f32; F32/BF16/F16/F64 with q8 or
  /// q4 (last dimension a multiple of 32). Anything else fails on the first add()/finish().
  /// `name` is used in error messages only; `group` is the weight's storage group (its model:
  /// tensor::make_weight). `lanes`: a q8/q4 matrix that lanes_fit is built in lanes
  /// (tensor::lanes16, the CPU kernels' resident form): each group of 16 rows is reordered as it
  /// is quantized, while its bytes are in cache, instead of in a pass over the whole tensor.
  tensor_builder(std::string file_dtype, shape_t shape, dtype resident, std::string name = {},
                 const std::string& group = {}, bool lanes = false);

  /// Whether a tensor published as `file_dtype` and held as `resident` is kept as published
  /// (its bytes are its published bytes; destination() is then the tensor).
  static bool keeps_as_published(const std::string& file_dtype, dtype resident);
  /// Adds the published bytes [offset, offset + bytes.size()). Pieces must arrive in order
  /// (offset == received_bytes()) and not run past expected_bytes().
  status add(std::uint64_t offset, std::string_view bytes);
  /// The tensor being built, when its published bytes are its bytes (f32/bf16/f16 kept as
  /// published): a reader may write a piece straight into place (bytes [offset, offset + n)
  /// of its storage) and record it with wrote(), so the bytes land once. An empty tensor when
  /// the builder converts, or after an error.
  tensor destination() const { return path_ == path::copy && !error_ ? out_ : tensor(); }
  /// Records bytes [offset, offset + n) written into destination() — in order, as add().
  status wrote(std::uint64_t offset, std::uint64_t n);
  /// The converter of a builder that quantizes (empty otherwise, or after an error): a reader
  /// may convert whole rows with it and record them with converted().
  row_converter conversion() const { return path_ == path::quantize && !error_ ? conv_ : row_converter(); }
  /// Records bytes [offset, offset + n) converted with conversion() — in order, as add(), and
  /// whole rows: offset at a row's start (no partial row pending) and n whole rows.
  status converted(std::uint64_t offset, std::uint64_t n);

  /// The finished tensor; errors when bytes are missing (or an earlier add failed).
  result<tensor> finish();

  /// Published bytes the tensor needs, and bytes added so far.
  std::uint64_t expected_bytes() const { return total_in_; }
  std::uint64_t received_bytes() const { return received_; }
  /// Bytes buffered for an incomplete element or row (at most one of them).
  std::size_t pending_bytes() const { return partial_.size(); }

 private:
  enum class path { copy, widen, quantize };

  /// Whether bytes [offset, offset + n) may come next (in order, within the tensor).
  status admit(std::uint64_t offset, std::uint64_t n);
  /// Records a sticky error and returns it.
  error fail(error e);
  std::string what() const;
  /// Converts `n` complete units (elements or rows) starting at `src`.
  void emit(const char* src, std::uint64_t n);
  /// How many parts of the kernel threads (backends/cpu/fast/parallel.hpp) quantize `rows`
  /// complete rows (1: on this thread alone).
  int quantize_parts(std::uint64_t rows) const;
  /// Published elements → f32.
  void widen(const char* src, std::size_t n, float* dst) const;

  std::string file_dtype_;
  shape_t shape_;
  dtype resident_;
  std::string name_;
  path path_ = path::copy;
  std::size_t in_size_ = 0;     ///< published bytes per element
  std::size_t unit_bytes_ = 1;  ///< published bytes per conversion unit (byte, element or row)
  std::int64_t cols_ = 0;
  std::uint64_t total_in_ = 0;
  std::uint64_t received_ = 0;
  std::uint64_t units_done_ = 0;
  std::string partial_;         ///< an incomplete unit, carried to the next piece
  tensor out_;
  row_converter conv_;          ///< quantizing: how rows are converted (sharing out_'s storage)
  std::optional<error> error_;
  bool finished_ = false;
};

}  // namespace mpakt
