#pragma once
/// Tensors: a dtype, a shape and shared, 64-byte aligned storage.
///
/// A tensor is a cheap handle (a shared_ptr to its buffer plus shape); copying it aliases
/// the same bytes. Row-major. Activations are f32; weights may be packed (dtype.hpp).
/// Thread-safety: a tensor's bytes are written only by the one worker that owns it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/dtype.hpp"
#include "runtime/status.hpp"

namespace mpakt {

using shape_t = std::vector<std::int64_t>;

/// The most dimensions any shape may have: graph inputs, and the shapes zeros and reshape
/// are given (decisions.md, "Graph limits").
constexpr std::size_t max_rank = 8;

/// Weights' storage given back (a model deleted) is kept for the next weights a while, its
/// pages the kernel's to take back meanwhile (tensor.cpp): the bytes kept now, and how long a
/// mapping is kept (10 s; tests shorten it).
std::size_t kept_weight_bytes();
void keep_freed_weights_for(std::chrono::milliseconds t);

/// "[2, 3, 4]" for messages.
std::string shape_str(const shape_t& s);

/// Element count, or -1 when a dimension is negative or the product overflows int64.
std::int64_t shape_numel(const shape_t& s);

/// What validation knows of a tensor before it exists.
struct tensor_desc {
  dtype type = dtype::f32;
  shape_t shape;
};

class tensor {
 public:
  tensor() = default;

  /// Allocates zeroed storage. Fails (errc::too_large) when the size overflows or the
  /// allocation fails, so a hostile shape never aborts the process.
  static result<tensor> make(dtype t, shape_t shape);
  /// As make, for a model's weight (built once from its published bytes, then streamed by
  /// every decode step): its storage lies on huge pages, in a mapping of its own from 4 MB,
  /// below that carved from slabs that only weights of the same `group` (a model) share
  /// (see tensor.cpp). Its bytes are NOT zeroed — they may be a deleted weight's (kept
  /// storage: kept_weight_bytes) — and the caller writes every one of them; the bytes of its
  /// storage past them read as zeros.
  static result<tensor> make_weight(dtype t, shape_t shape, const std::string& group = {});
  /// Wraps existing storage (e.g. a slice or reshape view); offset in bytes.
  static tensor view(const tensor& base, dtype t, shape_t shape, std::size_t byte_offset);

  bool empty() const { return !storage_; }
  dtype type() const { return type_; }
  const shape_t& shape() const { return shape_; }
  tensor_desc desc() const { return {type_, shape_}; }
  std::int64_t numel() const { return numel_; }
  /// Last dimension (1 for a 0-d tensor).
  std::int64_t cols() const { return shape_.empty() ? 1 : shape_.back(); }
  /// Every leading dimension folded (numel / cols).
  std::int64_t rows() const { return cols() == 0 ? 0 : numel_ / cols(); }
  std::size_t nbytes() const { return nbytes_; }
  /// Bytes of one row (last dimension) in this tensor's dtype.
  std::size_t row_bytes() const;

  std::byte* data() { return storage_.get() + offset_; }
  const std::byte* data() const { return storage_.get() + offset_; }
  float* f32() { return reinterpret_cast<float*>(data()); }
  const float* f32() const { return reinterpret_cast<const float*>(data()); }
  std::span<float> f32_span() { return {f32(), std::size_t(numel_)}; }
  std::span<const float> f32_span() const { return {f32(), std::size_t(numel_)}; }
  /// Start of row r (r counts rows of the last dimension). Not for a tensor in lanes
  /// (lanes16), whose rows are not laid out one after another: read those with packed_row.
  const std::byte* row(std::int64_t r) const { return data() + std::size_t(r) * row_bytes(); }
  std::byte* row(std::int64_t r) { return data() + std::size_t(r) * row_bytes(); }
  /// Row r's bytes in row-major form: the row itself, or for a tensor in lanes its bytes
  /// gathered into `scratch` (row_bytes() of them).
  const std::byte* packed_row(std::int64_t r, std::byte* scratch) const;

  /// Whether this q8/q4 matrix is held in lanes (dtype.hpp, "q8/q4 in lanes"): a CPU worker's
  /// resident form of its quantized weights, read in place by the CPU's matmul kernels and
  /// through packed_row by everything else.
  bool lanes16() const { return lanes16_; }
  /// Reorders this q8/q4 matrix's bytes into lanes, in place (lanes_fit must hold).
  status to_lanes16();

  /// Same storage, new shape (same dtype, same element count, caller checked).
  tensor reshaped(shape_t shape) const;
  /// Points this handle at `from`'s bytes, keeping this handle's dtype and shape (views
  /// whose base changes per call). No allocation.
  void alias_storage(const tensor& from) {
    storage_ = from.storage_;
    offset_ = from.offset_;
  }
  /// True when both handles alias the same bytes.
  bool same_storage(const tensor& o) const { return storage_ == o.storage_ && offset_ == o.offset_; }
  /// Watches the storage without keeping it: expired once every handle to it is gone (a copy
  /// of the bytes elsewhere — a device's — knows then that its original is no more).
  std::weak_ptr<const std::byte[]> storage_watch() const { return storage_; }

 private:
  friend class tensor_builder;  // (builds a matrix in lanes group by group, then marks it)
  static result<tensor> allocate(dtype t, shape_t shape, bool weight, const std::string& group);
  dtype type_ = dtype::f32;
  shape_t shape_;
  std::int64_t numel_ = 0;
  std::shared_ptr<std::byte[]> storage_;
  std::size_t offset_ = 0;
  std::size_t nbytes_ = 0;
  bool lanes16_ = false;
};

/// An f32 tensor with the given shape and values (sizes must agree).
result<tensor> make_f32(shape_t shape, std::span<const float> values);

/// Converts an f32 tensor into `t` (a packed weight), as a worker does on load.
/// q8/q4 need a last dimension that is a multiple of 32.
result<tensor> convert_tensor(const tensor& src, dtype t);

/// Widens any tensor to f32 (tests, debugging, small slices).
result<tensor> to_f32(const tensor& src);
/// Widens every row of `src` into `dst` (src.numel() floats), whatever form src is held in.
void widen_rows(const tensor& src, float* dst);

}  // namespace mpakt
