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
///    with AVX-512 where the CPU has it) — or, for a tensor built in lanes, group by group.
/// Only one partial element or row (in lanes: one partial group of rows) is ever buffered
/// besides the tensor itself. The result is
/// bit-identical to converting the whole tensor at once (convert_piece then convert_tensor),
/// whatever the piece boundaries — quantization is deterministic (QNT-09).
///
/// Lifecycle: constructed when a tensor's first piece is due, fed with add() in order, then
/// finish() hands over the tensor once. Any error is sticky: later calls return it again.
/// Thread-safety: none; one builder belongs to the one worker thread filling it (which lends
/// a piece of many rows to the kernel threads while it quantizes, and waits for them).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/safetensors.hpp"
#include "runtime/status.hpp"
#include "runtime/tensor.hpp"

namespace mpakt {

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
  /// Quantizes rows [from, to) of the `n` at `src` into rows units_done_ + from … of the tensor;
  /// `scratch` holds cols_ floats and belongs to the caller.
  void quantize_rows(const char* src, std::uint64_t from, std::uint64_t to, float* scratch);
  /// Quantizes one row of published bytes at `src` into `dst` (row-major).
  void quantize_row(const char* src, void* dst, float* scratch);
  /// emit() for a tensor built in lanes: rows of a group begun or left unfinished by a piece go
  /// through group_; whole groups are quantized into a buffer of each thread and reordered
  /// into place.
  void emit_lanes(const char* src, std::uint64_t n);
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
  std::vector<float> row_f32_;  ///< one row widened before quantizing (or the fallback's scratch)
  /// Quantizing: the published dtype when the quantizer reads it directly (f32, bf16, f16);
  /// empty (f64) when rows are widened to f32 first.
  std::optional<dtype> quant_from_;
  tensor out_;
  bool lanes_ = false;             ///< built in lanes (emit_lanes)
  std::vector<std::byte> group_;   ///< in lanes: the rows of the group not complete yet
  std::optional<error> error_;
  bool finished_ = false;
};

}  // namespace mpakt
