#include "runtime/tensor.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <string>

namespace mpakt {

std::string shape_str(const shape_t& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::int64_t shape_numel(const shape_t& s) {
  std::int64_t n = 1;
  for (auto d : s) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

namespace {
struct aligned_free {
  void operator()(std::byte* p) const { std::free(p); }
};

/// Storage of this size or more is mapped from the kernel directly: its pages arrive zeroed,
/// so a weight written once as it loads is not cleared first (and a page never touched costs
/// nothing). Its whole 2 MB pages are asked to be huge pages (MADV_HUGEPAGE; where the kernel
/// has none to give it uses small ones): a decode step streams every weight, and with 4 KB
/// pages the 1.2 GB of a Qwen3-0.6B bf16 model took 300,000 TLB entries a token — huge pages
/// gave its two-thread decode 8–18 % (17.1 → 20.2 and 16.8 → 18.1 tok/s, alternated on a
/// Xeon), while loads measured the same within noise (each fault then clears 2 MB at once).
constexpr std::size_t mapped_storage_bytes = std::size_t(4) << 20;
constexpr std::size_t huge_page_bytes = std::size_t(2) << 20;

struct unmap {
  std::size_t bytes = 0;
  void operator()(std::byte* p) const { ::munmap(p, bytes); }
};

/// Maps `bytes` starting on a huge page's boundary and asks for huge pages on its whole ones
/// (a tail shorter than a huge page stays in small pages: it would take 2 MB for a few bytes);
/// the mapping's owner is the returned pointer (null on failure).
std::shared_ptr<std::byte[]> map_huge(std::size_t bytes) {
  // (mapped one huge page larger, so the storage can start on a huge page's boundary; the
  // bytes before it are never touched, so they take no memory)
  const std::size_t mapped = bytes + huge_page_bytes;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* base = static_cast<std::byte*>(p);
  const auto first = (reinterpret_cast<std::uintptr_t>(base) + huge_page_bytes - 1) & ~(huge_page_bytes - 1);
  auto* start = reinterpret_cast<std::byte*>(first);
  (void)::madvise(start, bytes / huge_page_bytes * huge_page_bytes, MADV_HUGEPAGE);
  const std::shared_ptr<std::byte[]> mapping(base, unmap{mapped});
  return std::shared_ptr<std::byte[]>(mapping, start);  // (owns the whole mapping)
}

/// Weights smaller than mapped_storage_bytes (most of a small model's: SmolLM2-135M's largest
/// matrix is 1.8 MB) are carved one after another from 32 MB slabs on huge pages, so they too
/// stream through few TLB entries: a 1.8 MB bf16 product read 22 GB/s from 4 KB pages where
/// one of 6 MB on huge pages read 28 (two threads, the same Xeon run). Each group (a model:
/// the loader passes its id) has slabs of its own, so a model's weights go with it: a slab is
/// unmapped whole when its last weight is freed — never given back a weight at a time, which
/// splits the huge pages a weight shares with its neighbours (~100 per SmolLM2-sized model
/// deleted, when slabs were shared) — and models loaded side by side never hold each other's
/// slabs. What a group's last slab leaves untouched costs nothing.
class weight_slabs {
 public:
  static weight_slabs& get() {
    static weight_slabs* w = new weight_slabs();  // (leaked: weights may outlive static destruction)
    return *w;
  }

  /// `bytes` (a multiple of 64, under slab_bytes) of zeroed storage in `group`'s slabs; null
  /// when mapping fails.
  std::shared_ptr<std::byte[]> carve(const std::string& group, std::size_t bytes) {
    std::shared_ptr<std::byte[]> slab;
    std::size_t at = 0;
    {
      std::lock_guard lock(mutex_);
      auto& g = groups_[group];
      slab = g.slab.lock();
      if (!slab || g.used + bytes > slab_bytes) {
        slab = map_huge(slab_bytes);
        if (!slab) return nullptr;
        g.slab = slab;
        g.used = 0;
        forget_gone_groups();
      }
      at = g.used;
      g.used += bytes;
    }
    // (a control block of its own, so the weight's storage_watch expires with the weight)
    return std::shared_ptr<std::byte[]>(slab.get() + at, [slab](std::byte*) mutable { slab.reset(); });
  }

  static constexpr std::size_t slab_bytes = std::size_t(32) << 20;

 private:
  struct group_slab {
    std::weak_ptr<std::byte[]> slab;  ///< the one being carved (unmapped with its last weight)
    std::size_t used = 0;
  };

  /// Drops the entries of groups whose slabs are all gone (a model unloaded).
  void forget_gone_groups() {
    for (auto it = groups_.begin(); it != groups_.end();) it = it->second.slab.expired() ? groups_.erase(it) : std::next(it);
  }

  std::mutex mutex_;
  std::map<std::string, group_slab> groups_;
};
}  // namespace

result<tensor> tensor::make(dtype t, shape_t shape) { return allocate(t, std::move(shape), false, {}); }

result<tensor> tensor::make_weight(dtype t, shape_t shape, const std::string& group) {
  return allocate(t, std::move(shape), true, group);
}

result<tensor> tensor::allocate(dtype t, shape_t shape, bool weight, const std::string& group) {
  const std::int64_t n = shape_numel(shape);
  if (n < 0) return make_error(errc::too_large, "shape " + shape_str(shape) + " is not a valid size");
  if (is_quantized(t) && (shape.empty() || shape.back() % quant_block != 0))
    return invalid(std::string(dtype_name(t)) + " needs a last dimension that is a multiple of 32, not " + shape_str(shape));
  auto bytes = storage_bytes(t, n);
  if (!bytes) return make_error(errc::too_large, "shape " + shape_str(shape) + " is too large");
  const std::size_t alloc = (*bytes + 63) / 64 * 64 + 64;
  std::shared_ptr<std::byte[]> storage;
  if (alloc >= mapped_storage_bytes) {
    storage = map_huge(alloc);
  } else if (weight) {
    storage = weight_slabs::get().carve(group, alloc);
  } else if (void* p = std::aligned_alloc(64, alloc)) {
    std::memset(p, 0, alloc);
    storage = std::shared_ptr<std::byte[]>(static_cast<std::byte*>(p), aligned_free{});
  }
  if (!storage) return make_error(errc::too_large, "cannot allocate " + std::to_string(*bytes) + " bytes for " + shape_str(shape));
  tensor out;
  out.type_ = t;
  out.shape_ = std::move(shape);
  out.numel_ = n;
  out.storage_ = std::move(storage);
  out.nbytes_ = *bytes;
  return out;
}

tensor tensor::view(const tensor& base, dtype t, shape_t shape, std::size_t byte_offset) {
  tensor out;
  out.type_ = t;
  out.numel_ = shape_numel(shape);
  out.shape_ = std::move(shape);
  out.storage_ = base.storage_;
  out.offset_ = base.offset_ + byte_offset;
  out.nbytes_ = storage_bytes(t, out.numel_).value_or(0);
  return out;
}

std::size_t tensor::row_bytes() const { return storage_bytes(type_, cols()).value_or(0); }

tensor tensor::reshaped(shape_t shape) const {
  tensor out = view(*this, type_, std::move(shape), 0);
  out.lanes16_ = lanes16_ && out.cols() == cols() && lanes_fit(type_, out.shape_);
  return out;
}

const std::byte* tensor::packed_row(std::int64_t r, std::byte* scratch) const {
  if (!lanes16_) return row(r);
  lanes_row(type_, data(), cols(), r, scratch);
  return scratch;
}

status tensor::to_lanes16() {
  if (lanes16_) return ok_status();
  if (!lanes_fit(type_, shape_))
    return invalid("a " + std::string(dtype_name(type_)) + " tensor of shape " + shape_str(shape_) + " cannot be held in lanes");
  rows_to_lanes(type_, data(), rows(), cols());
  lanes16_ = true;
  return ok_status();
}

result<tensor> make_f32(shape_t shape, std::span<const float> values) {
  auto t = tensor::make(dtype::f32, std::move(shape));
  if (!t) return t;
  if (std::size_t(t->numel()) != values.size())
    return invalid("shape " + shape_str(t->shape()) + " holds " + std::to_string(t->numel()) +
                   " values but " + std::to_string(values.size()) + " were given");
  // An empty span may hold no pointer at all, and memcpy from null is undefined even for 0 bytes.
  if (!values.empty()) std::memcpy(t->data(), values.data(), values.size() * 4);
  return t;
}

result<tensor> convert_tensor(const tensor& src, dtype t) {
  auto wide = to_f32(src);
  if (!wide) return wide;
  auto out = tensor::make(t, src.shape());
  if (!out) return out;
  const std::int64_t rows = wide->rows(), cols = wide->cols();
  for (std::int64_t r = 0; r < rows; ++r) quantize_row(t, wide->f32() + r * cols, out->row(r), cols);
  return out;
}

result<tensor> to_f32(const tensor& src) {
  if (src.type() == dtype::f32) {
    auto out = tensor::make(dtype::f32, src.shape());
    if (out && src.nbytes() > 0) std::memcpy(out->data(), src.data(), src.nbytes());
    return out;
  }
  auto out = tensor::make(dtype::f32, src.shape());
  if (!out) return out;
  widen_rows(src, out->f32());
  return out;
}

void widen_rows(const tensor& src, float* dst) {
  const std::int64_t rows = src.rows(), cols = src.cols();
  std::vector<std::byte> scratch(src.lanes16() ? src.row_bytes() : 0);
  for (std::int64_t r = 0; r < rows; ++r) dequantize_row(src.type(), src.packed_row(r, scratch.data()), dst + r * cols, cols);
}

}  // namespace mpakt
