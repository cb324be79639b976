/// Layout ops: reshape, transpose, slice, concat, zeros and cache_write. They move values
/// without arithmetic. slice may take a packed weight (a row range along axis 0 keeps its
/// dtype); cache_write writes its cache in place. Kernels: backends/cpu/ref/layout.cpp.

#include "runtime/ops/layout_params.hpp"

#include <cmath>

#include "runtime/ops/families.hpp"

namespace mpakt::ops {

namespace {

constexpr std::int64_t max_dim = std::int64_t(1) << 53;  // doubles hold integers exactly up to here

/// A shape parameter: whole numbers >= 0, or -1 where `allow_infer` (at most one).
result<shape_t> parse_shape(const param_map& pm, bool allow_infer) {
  auto nums = pm.numbers("shape");
  if (!nums) return std::move(nums).err();
  if (nums->size() > max_rank)
    return invalid("parameter shape has " + std::to_string(nums->size()) + " dimensions; at most " + std::to_string(max_rank) +
                   " are supported");
  shape_t shape;
  bool inferred = false;
  for (std::size_t i = 0; i < nums->size(); ++i) {
    const double v = (*nums)[i];
    const std::string at = "parameter shape[" + std::to_string(i) + "]";
    if (v != std::floor(v)) return invalid(at + " must be a whole number, not " + num_str(v));
    if (v == -1 && allow_infer) {
      if (inferred) return invalid("parameter shape may contain -1 only once");
      inferred = true;
    } else if (v < 0 || v > double(max_dim)) {
      return invalid(at + " is " + num_str(v) + (allow_infer ? " but must be >= 0 (or -1 for one inferred dimension)"
                                                            : " but must be >= 0"));
    }
    shape.push_back(std::int64_t(v));
  }
  return shape;
}

status check_whole(double v, std::string_view name) {
  if (!std::isfinite(v) || v != std::floor(v) || v < 0 || v > double(max_dim))
    return invalid("parameter " + std::string(name) + " must be a whole number >= 0, not " + num_str(v));
  return ok_status();
}

/// The resolved axis, or an error naming the axis parameter.
result<int> axis_of(std::int64_t axis, const shape_t& shape, std::string_view input) {
  if (shape.empty()) return invalid("input " + std::string(input) + " must have at least one dimension");
  const int ax = resolve_axis(axis, shape.size());
  if (ax < 0)
    return invalid("parameter axis is " + std::to_string(axis) + " but input " + std::string(input) + " has " +
                   std::to_string(shape.size()) + " dimensions; only axis 0 and the last axis (" +
                   std::to_string(shape.size() - 1) + " or -1) are supported");
  return ax;
}

// ---- reshape ----

result<std::unique_ptr<op_params>> parse_reshape(const param_map& pm) {
  auto p = std::make_unique<reshape_params>();
  auto s = parse_shape(pm, true);
  if (!s) return std::move(s).err();
  p->shape = std::move(*s);
  return std::unique_ptr<op_params>(std::move(p));
}

result<tensor_desc> infer_reshape(const shape_query& q) {
  shape_t shape = static_cast<const reshape_params&>(q.params).shape;
  const shape_t& a = q.inputs[0].shape;
  const std::int64_t n = shape_numel(a);
  std::int64_t known = 1;
  int infer_at = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) { infer_at = int(i); continue; }
    if (shape[i] != 0 && known > max_dim / shape[i]) return invalid("parameter shape " + shape_str(shape) + " is too large");
    known *= shape[i];
  }
  if (infer_at >= 0) {
    if (known == 0 || n % known != 0)
      return invalid("parameter shape " + shape_str(shape) + " cannot hold the " + std::to_string(n) +
                     " values of input a " + shape_str(a) + " for any value of -1");
    shape[std::size_t(infer_at)] = n / known;
  } else if (known != n) {
    return invalid("parameter shape " + shape_str(shape) + " holds " + std::to_string(known) + " values but input a " +
                   shape_str(a) + " has " + std::to_string(n));
  }
  return tensor_desc{dtype::f32, shape};
}

// ---- transpose ----

result<tensor_desc> infer_transpose(const shape_query& q) {
  const shape_t& a = q.inputs[0].shape;
  if (a.size() != 2) return invalid("input a has shape " + shape_str(a) + " but transpose needs a two-dimensional [R, C] tensor");
  return tensor_desc{dtype::f32, {a[1], a[0]}};
}

// ---- slice ----

result<std::unique_ptr<op_params>> parse_slice(const param_map& pm) {
  auto p = std::make_unique<slice_params>();
  auto start = pm.required_number("start");  // bindable: ranges are checked by check_slice
  if (!start) return std::move(start).err();
  auto length = pm.required_integer("length", 0, max_dim);
  if (!length) return std::move(length).err();
  auto axis = pm.integer("axis", 0, -1, max_dim);
  if (!axis) return std::move(axis).err();
  p->start = *start;
  p->length = *length;
  p->axis = *axis;
  return std::unique_ptr<op_params>(std::move(p));
}

double* bind_slice(op_params& p, std::string_view name) {
  return name == "start" ? &static_cast<slice_params&>(p).start : nullptr;
}

status check_slice(const op_params& p) { return check_whole(static_cast<const slice_params&>(p).start, "start"); }

result<tensor_desc> infer_slice(const shape_query& q) {
  const auto& p = static_cast<const slice_params&>(q.params);
  const tensor_desc& a = q.inputs[0];
  auto ax = axis_of(p.axis, a.shape, "a");
  if (!ax) return std::move(ax).err();
  const std::int64_t dim = a.shape[std::size_t(*ax)];
  // A bound start is 0 here; the kernel checks the bound value again.
  if (p.start + double(p.length) > double(dim))
    return invalid("parameter start is " + num_str(p.start) + " and length " + std::to_string(p.length) +
                   ", which run past the end of axis " + std::to_string(*ax) + " of input a " + shape_str(a.shape));
  shape_t out = a.shape;
  out[std::size_t(*ax)] = p.length;
  // A row range of a packed weight stays packed; anything else is widened to f32.
  const bool keep = *ax == 0 && a.shape.size() >= 2;
  return tensor_desc{keep ? a.type : dtype::f32, out};
}

// ---- concat ----

result<std::unique_ptr<op_params>> parse_concat(const param_map& pm) {
  auto p = std::make_unique<concat_params>();
  auto axis = pm.integer("axis", 0, -1, max_dim);
  if (!axis) return std::move(axis).err();
  p->axis = *axis;
  return std::unique_ptr<op_params>(std::move(p));
}

result<tensor_desc> infer_concat(const shape_query& q) {
  const auto& p = static_cast<const concat_params&>(q.params);
  const shape_t& a = q.inputs[0].shape;
  const shape_t& b = q.inputs[1].shape;
  auto ax = axis_of(p.axis, a, "a");
  if (!ax) return std::move(ax).err();
  bool match = a.size() == b.size();
  for (std::size_t i = 0; match && i < a.size(); ++i) match = int(i) == *ax || a[i] == b[i];
  if (!match)
    return invalid("input b has shape " + shape_str(b) + " but a has shape " + shape_str(a) +
                   "; they must have the same rank and agree on every dimension except axis " + std::to_string(*ax));
  shape_t out = a;
  out[std::size_t(*ax)] += b[std::size_t(*ax)];
  return tensor_desc{dtype::f32, out};
}

// ---- zeros ----

result<std::unique_ptr<op_params>> parse_zeros(const param_map& pm) {
  auto p = std::make_unique<zeros_params>();
  auto s = parse_shape(pm, false);
  if (!s) return std::move(s).err();
  p->shape = std::move(*s);
  if (pm.has("dtype")) {
    const std::string name = pm.string("dtype", "");
    const auto t = dtype_from_name(name);
    if (!t || !(*t == dtype::f32 || *t == dtype::bf16 || *t == dtype::f16))
      return invalid("parameter dtype must be f32, bf16 or f16, not \"" + name + "\"");
    p->type = *t;
  }
  return std::unique_ptr<op_params>(std::move(p));
}

result<tensor_desc> infer_zeros(const shape_query& q) {
  const auto& p = static_cast<const zeros_params&>(q.params);
  if (shape_numel(p.shape) < 0) return invalid("parameter shape " + shape_str(p.shape) + " is too large");
  return tensor_desc{p.type, p.shape};
}

constexpr std::string_view zeros_server_params[] = {"dtype"};

// ---- cache_write ----

result<std::unique_ptr<op_params>> parse_cache_write(const param_map& pm) {
  auto p = std::make_unique<cache_write_params>();
  auto off = pm.required_number("offset");  // bindable: ranges are checked by check_cache_write
  if (!off) return std::move(off).err();
  p->offset = *off;
  return std::unique_ptr<op_params>(std::move(p));
}

double* bind_cache_write(op_params& p, std::string_view name) {
  return name == "offset" ? &static_cast<cache_write_params&>(p).offset : nullptr;
}

status check_cache_write(const op_params& p) {
  return check_whole(static_cast<const cache_write_params&>(p).offset, "offset");
}

result<tensor_desc> infer_cache_write(const shape_query& q) {
  const auto& p = static_cast<const cache_write_params&>(q.params);
  const tensor_desc& cache = q.inputs[0];
  const shape_t& values = q.inputs[1].shape;
  if (cache.shape.size() != 2)
    return invalid("input cache has shape " + shape_str(cache.shape) + " but must be two-dimensional [maxRows, width]");
  if (values.empty() || values.back() != cache.shape[1])
    return invalid("input values has shape " + shape_str(values) + " but must be [rows, " +
                   std::to_string(cache.shape[1]) + "], as wide as the cache " + shape_str(cache.shape));
  const std::int64_t rows = shape_numel(shape_t(values.begin(), values.end() - 1));
  // A bound offset is 0 here; the kernel checks the bound value again.
  if (p.offset + double(rows) > double(cache.shape[0]))
    return invalid("parameter offset is " + num_str(p.offset) + " but " + std::to_string(rows) +
                   " rows written from there run past the cache's " + std::to_string(cache.shape[0]) + " rows");
  return tensor_desc{cache.type, cache.shape};
}

/// The rows a call overwrites: the values' rows from offset (a stopped run restores them).
std::pair<std::int64_t, std::int64_t> cache_write_rows(const op_params& p, std::span<tensor* const> inputs) {
  const auto& cw = static_cast<const cache_write_params&>(p);
  const tensor& values = *inputs[1];
  const std::int64_t width = values.cols();
  return {std::int64_t(cw.offset), width > 0 ? values.numel() / width : 0};
}

}  // namespace

void add_layout_ops(std::vector<op_def>& out) {
  op_def reshape;
  reshape.name = "reshape";
  reshape.parse = parse_reshape;
  reshape.infer = infer_reshape;
  reshape.features = no_features;
  reshape.view_of_input0 = true;
  out.push_back(reshape);

  op_def transpose;
  transpose.name = "transpose";
  transpose.parse = parse_no_params;
  transpose.infer = infer_transpose;
  transpose.features = no_features;
  out.push_back(transpose);

  op_def slice;
  slice.name = "slice";
  slice.parse = parse_slice;
  slice.infer = infer_slice;
  slice.bindable = bind_slice;
  slice.check = check_slice;
  slice.features = no_features;
  slice.packed_inputs = 1u << 0;
  out.push_back(slice);

  op_def concat;
  concat.name = "concat";
  concat.parse = parse_concat;
  concat.infer = infer_concat;
  concat.features = no_features;
  out.push_back(concat);

  op_def zeros;
  zeros.name = "zeros";
  zeros.parse = parse_zeros;
  zeros.infer = infer_zeros;
  zeros.features = no_features;
  zeros.server_params = zeros_server_params;
  out.push_back(zeros);

  op_def cw;
  cw.name = "cache_write";
  cw.parse = parse_cache_write;
  cw.infer = infer_cache_write;
  cw.bindable = bind_cache_write;
  cw.check = check_cache_write;
  cw.features = no_features;
  cw.aliases_input = 0;
  cw.written_rows = cache_write_rows;
  cw.half_inputs = 1u << 0;  // a bf16/f16 cache: the values are rounded into it
  out.push_back(cw);
}

}  // namespace mpakt::ops
