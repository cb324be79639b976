#include "runtime/tensor_builder.hpp"

#include <algorithm>
#include <cstring>

#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/quantize.hpp"
#include "runtime/interrupt.hpp"

namespace mpakt {

bool tensor_builder::keeps_as_published(const std::string& file_dtype, dtype resident) {
  // (a published dtype held as f32 is kept only when it is F32: F64, I64, BOOL are widened)
  const auto held = resident_dtype(file_dtype);
  return held && *held == resident && (*held != dtype::f32 || file_dtype == "F32");
}

tensor_builder::tensor_builder(std::string file_dtype, shape_t shape, dtype resident, std::string name,
                               const std::string& group, bool lanes)
    : file_dtype_(std::move(file_dtype)), shape_(std::move(shape)), resident_(resident), name_(std::move(name)) {
  in_size_ = std::size_t(std::max(0, published_dtype_size(file_dtype_)));
  const auto held = resident_dtype(file_dtype_);
  const std::int64_t n = shape_numel(shape_);
  if (in_size_ == 0 || !held) {
    error_ = invalid(what() + ": published dtype " + published_dtype_name(file_dtype_) + " cannot be held");
    return;
  }
  if (n < 0) {
    error_ = invalid(what() + ": shape " + shape_str(shape_) + " is not a valid size");
    return;
  }
  const bool is_float = file_dtype_ == "F32" || file_dtype_ == "BF16" || file_dtype_ == "F16" || file_dtype_ == "F64";
  if (keeps_as_published(file_dtype_, resident_)) {
    path_ = path::copy;  // f32, bf16, f16 kept as published
  } else if (resident_ == dtype::f32) {
    path_ = path::widen;  // F64/I64/BOOL → f32, or BF16/F16 → f32 on a worker that widens
  } else if (is_quantized(resident_) && is_float) {
    path_ = path::quantize;
  } else {
    error_ = invalid(what() + ": cannot convert published " + published_dtype_name(file_dtype_) + " to " +
                     std::string(dtype_name(resident_)));
    return;
  }
  cols_ = shape_.empty() ? 1 : shape_.back();
  total_in_ = std::uint64_t(n) * in_size_;
  unit_bytes_ = path_ == path::copy ? 1 : path_ == path::widen ? in_size_ : std::size_t(cols_) * in_size_;
  auto t = tensor::make_weight(resident_, shape_, group);  // (finish() needs every byte to have arrived)
  if (!t) {
    error_ = make_error(t.err().code, what() + ": " + t.err().message);
    return;
  }
  out_ = std::move(*t);
  if (path_ == path::quantize) {
    conv_.out_ = out_;
    conv_.file_dtype_ = file_dtype_;
    if (file_dtype_ == "F32") conv_.from_ = dtype::f32;
    else if (file_dtype_ == "BF16") conv_.from_ = dtype::bf16;
    else if (file_dtype_ == "F16") conv_.from_ = dtype::f16;
    conv_.to_ = resident_;
    conv_.cols_ = cols_;
    conv_.row_in_ = unit_bytes_;
    conv_.lanes_ = lanes && lanes_fit(resident_, shape_);
  }
}

std::string tensor_builder::what() const { return name_.empty() ? "tensor" : "tensor " + name_; }

error tensor_builder::fail(error e) {
  error_ = e;
  return e;
}

namespace {

/// `n` published elements of `file_dtype` → f32.
void widen_published(const std::string& file_dtype, const char* src, std::size_t n, float* dst) {
  if (file_dtype == "F32") {
    std::memcpy(dst, src, n * 4);
  } else if (file_dtype == "BF16" || file_dtype == "F16") {
    dequantize_row(file_dtype == "BF16" ? dtype::bf16 : dtype::f16, src, dst, std::int64_t(n));  // (pieces carry no alignment)
  } else {
    convert_piece(file_dtype, reinterpret_cast<const std::byte*>(src), n, reinterpret_cast<std::byte*>(dst));
  }
}

}  // namespace

void tensor_builder::widen(const char* src, std::size_t n, float* dst) const { widen_published(file_dtype_, src, n, dst); }

void row_converter::quantize_one(const char* src, void* dst, float* scratch) const {
  if (from_) {
    cpu_fast::quantize_row_from(*from_, to_, src, dst, cols_, scratch);
  } else {
    // f64: widened first; the row is aligned, so the quantizer reads it in place and never
    // needs the scratch it shares.
    widen_published(file_dtype_, src, std::size_t(cols_), scratch);
    cpu_fast::quantize_row_from(dtype::f32, to_, scratch, dst, cols_, scratch);
  }
}

void row_converter::convert(std::uint64_t first, const char* src, std::uint64_t n) const {
  // (each thread's own: a row of floats, and 16 quantized rows for the lanes)
  thread_local std::vector<float> scratch;
  thread_local std::vector<std::byte> rows;
  if (scratch.size() < std::size_t(cols_)) scratch.resize(std::size_t(cols_));
  if (!lanes_) {
    for (std::uint64_t r = 0; r < n; ++r) quantize_one(src + r * row_in_, out_.row(std::int64_t(first + r)), scratch.data());
    return;
  }
  const std::size_t row_out = out_.row_bytes(), group_bytes = std::size_t(lane_rows) * row_out;
  if (rows.size() < group_bytes) rows.resize(group_bytes);
  std::byte* const base = out_.data();
  for (std::uint64_t r = 0; r < n;) {
    const std::uint64_t at = first + r, g = at / lane_rows;
    if (at % lane_rows == 0 && n - r >= std::uint64_t(lane_rows)) {
      // (in one pass where a kernel takes the group, bf16 → q8 or q4 from AVX2 up: else each row's
      // blocks, then the reorder)
      const char* group_src = src + r * row_in_;
      std::byte* group = base + g * group_bytes;
      if (!from_ || !cpu_fast::quantize_group_to_lanes(*from_, to_, group_src, std::int64_t(row_in_), group, cols_)) {
        for (std::int64_t l = 0; l < lane_rows; ++l)
          quantize_one(group_src + std::size_t(l) * row_in_, rows.data() + std::size_t(l) * row_out, scratch.data());
        cpu_fast::group_to_lanes(to_, rows.data(), group, cols_);
      }
      r += lane_rows;
    } else {
      quantize_one(src + r * row_in_, rows.data(), scratch.data());
      row_to_lanes(to_, rows.data(), base + g * group_bytes, cols_, std::int64_t(at % lane_rows));
      ++r;
    }
  }
}

void tensor_builder::emit(const char* src, std::uint64_t n) {
  if (path_ == path::widen) {
    widen(src, std::size_t(n), out_.f32() + units_done_);
  } else if (const int parts = quantize_parts(n); parts > 1) {
    // Rows are independent (each row's bytes depend on that row alone), so a piece of many
    // rows is quantized by the kernel threads together: one thread converted ~1 GB/s of a
    // q8 load, below what the network delivers. (Parts of whole groups where rows allow:
    // a group cut between two parts is written a row at a time.)
    const std::uint64_t per = (n / std::uint64_t(parts) + lane_rows - 1) / lane_rows * lane_rows;
    const interrupt_scope whole{interrupt{}};  // (no run's stop may leave rows unconverted)
    cpu_fast::parallel_for(parts, [&](int p) {
      const std::uint64_t from = std::min(n, std::uint64_t(p) * per), to = p == parts - 1 ? n : std::min(n, from + per);
      if (from < to) conv_.convert(units_done_ + from, src + from * unit_bytes_, to - from);
    });
  } else {
    conv_.convert(units_done_, src, n);
  }
  units_done_ += n;
}

int tensor_builder::quantize_parts(std::uint64_t rows) const {
  // (a part of at least 256 KiB of published bytes: the pass of the threads costs a few
  // microseconds, a part some tens)
  constexpr std::uint64_t part_bytes = 256 << 10;
  const int threads = cpu_fast::kernel_threads();
  if (threads <= 1) return 1;
  const std::uint64_t by_size = rows * unit_bytes_ / part_bytes;
  return int(std::clamp<std::uint64_t>(by_size, 1, std::uint64_t(threads) * 4));
}

status tensor_builder::admit(std::uint64_t offset, std::uint64_t n) {
  if (error_) return *error_;
  if (finished_) return fail(invalid(what() + ": a piece arrived after the tensor was finished"));
  if (offset != received_)
    return fail(invalid(what() + ": a piece at byte " + std::to_string(offset) + " arrived, but byte " +
                        std::to_string(received_) + " was next (pieces must arrive in order)"));
  if (n > total_in_ - received_)
    return fail(invalid(what() + ": a piece of " + std::to_string(n) + " bytes at byte " + std::to_string(offset) +
                        " runs past the tensor's " + std::to_string(total_in_) + " bytes"));
  return ok_status();
}

status tensor_builder::wrote(std::uint64_t offset, std::uint64_t n) {
  MPAKT_TRY(admit(offset, n));
  if (path_ != path::copy) return fail(invalid(what() + ": its bytes are converted, so they cannot be written in place"));
  received_ += n;
  return ok_status();
}

status tensor_builder::converted(std::uint64_t offset, std::uint64_t n) {
  MPAKT_TRY(admit(offset, n));
  if (path_ != path::quantize) return fail(invalid(what() + ": its bytes are not quantized, so no rows were converted elsewhere"));
  if (!partial_.empty() || n % unit_bytes_ != 0)
    return fail(invalid(what() + ": rows converted elsewhere must be whole rows from a row's start (bytes " +
                        std::to_string(offset) + "+" + std::to_string(n) + ")"));
  received_ += n;
  units_done_ += n / unit_bytes_;
  return ok_status();
}

status tensor_builder::add(std::uint64_t offset, std::string_view bytes) {
  MPAKT_TRY(admit(offset, bytes.size()));
  if (bytes.empty()) return ok_status();
  received_ += bytes.size();
  if (path_ == path::copy) {
    if (!bytes.empty()) std::memcpy(out_.data() + offset, bytes.data(), bytes.size());
    return ok_status();
  }
  // Complete the unit left over from the previous piece.
  if (!partial_.empty()) {
    const std::size_t take = std::min(unit_bytes_ - partial_.size(), bytes.size());
    partial_.append(bytes.substr(0, take));
    bytes.remove_prefix(take);
    if (partial_.size() < unit_bytes_) return ok_status();
    emit(partial_.data(), 1);
    partial_.clear();
  }
  // Whole units straight from the piece; keep the tail for the next one.
  const std::uint64_t whole = bytes.size() / unit_bytes_;
  if (whole) emit(bytes.data(), whole);
  partial_.assign(bytes.substr(std::size_t(whole * unit_bytes_)));
  return ok_status();
}

result<tensor> tensor_builder::finish() {
  if (error_) return *error_;
  if (finished_) return fail(invalid(what() + ": finished twice"));
  if (received_ != total_in_)
    return fail(invalid(what() + ": only " + std::to_string(received_) + " of its " + std::to_string(total_in_) +
                        " bytes arrived"));
  finished_ = true;
  out_.lanes16_ = conv_.lanes_;
  conv_ = row_converter();
  return std::move(out_);
}

}  // namespace mpakt
