#include "runtime/tensor.hpp"

#include <sys/mman.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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

/// Storage of this size or more is mapped from the kernel directly (a weight's: or kept from a
/// weight gone, kept_mappings below): its pages arrive zeroed, so what is written once as it
/// loads is not cleared by the program first (and a page never touched costs nothing). Its whole 2 MB pages are asked to be huge pages (MADV_HUGEPAGE; where the kernel
/// has none to give it uses small ones): a decode step streams every weight, and with 4 KB
/// pages the 1.2 GB of a Qwen3-0.6B bf16 model took 300,000 TLB entries a token — huge pages
/// gave its two-thread decode 8–18 % (17.1 → 20.2 and 16.8 → 18.1 tok/s, alternated on a
/// Xeon), while loads measured the same within noise (each fault then clears 2 MB at once).
constexpr std::size_t mapped_storage_bytes = std::size_t(4) << 20;
constexpr std::size_t huge_page_bytes = std::size_t(2) << 20;

/// Weight mappings given back (a model deleted, a load abandoned) are kept a short while for
/// the next weights of about their size instead of being unmapped: fresh pages cost the kernel
/// a clearing pass before their first write, which took a volunteer reloading SmolLM2-135M
/// longer than the load's copy off the socket itself (clear_page 24 % of its samples, the
/// receive copy 13 %; a Xeon), while a kept page is written in place. Kept mappings are marked
/// MADV_FREE — the kernel takes their pages back whenever it needs the memory (such a page
/// comes back cleared) — and unmapped once kept longer than the keep time (10 s; a thread of
/// its own wakes for them); a weight mapped fresh unmaps as many kept bytes, oldest first, so
/// weights and kept pages together never hold more than the weights held before. Only weights
/// are given kept mappings: a weight's builder writes every byte before it is used
/// (tensor_builder::finish), so the old bytes are never read; anything else is mapped fresh.
class kept_mappings {
 public:
  static kept_mappings& get() {
    static kept_mappings* k = new kept_mappings();  // (leaked: weights may outlive static destruction)
    return *k;
  }

  struct mapping {
    std::byte* base = nullptr;
    std::size_t mapped = 0;
  };

  /// The smallest kept mapping of `mapped` bytes to an eighth more, taken; or none.
  mapping take(std::size_t mapped) {
    std::lock_guard lock(mutex_);
    auto it = kept_.lower_bound(mapped);
    if (it == kept_.end() || it->first > mapped + mapped / 8) return {};
    return drop(it);
  }

  /// Keeps a weight's mapping, its pages marked free; unmaps it where the kernel cannot mark
  /// them, or no reaper thread could be started (nothing is kept then). Never throws: it
  /// runs where a weight's last handle goes.
  void give(std::byte* base, std::size_t mapped) noexcept {
    if (::madvise(base, mapped, MADV_FREE) != 0) return void(::munmap(base, mapped));
    std::lock_guard lock(mutex_);
    if (!reaper_started_) {
      try {
        std::thread([this] { reap(); }).detach();
        reaper_started_ = true;
      } catch (...) {
        return void(::munmap(base, mapped));
      }
    }
    try {
      kept_.emplace(mapped, entry{base, clock::now()});
    } catch (...) {
      return void(::munmap(base, mapped));
    }
    held_ += mapped;
    wake_.notify_one();
  }

  /// A weight's mapping was made fresh: unmaps kept ones, the oldest first, until `mapped`
  /// bytes are gone.
  void make_room(std::size_t mapped) {
    std::vector<mapping> gone;
    {
      std::lock_guard lock(mutex_);
      for (std::size_t freed = 0; freed < mapped && !kept_.empty();) {
        auto oldest = kept_.begin();
        for (auto it = kept_.begin(); it != kept_.end(); ++it)
          if (it->second.since < oldest->second.since) oldest = it;
        freed += oldest->first;
        gone.push_back(drop(oldest));
      }
    }
    for (const auto& m : gone) ::munmap(m.base, m.mapped);
  }

  void keep_for(std::chrono::milliseconds t) {
    std::lock_guard lock(mutex_);
    keep_for_ = t;
    wake_.notify_one();
  }
  std::size_t held() {
    std::lock_guard lock(mutex_);
    return held_;
  }

 private:
  using clock = std::chrono::steady_clock;
  struct entry {
    std::byte* base;
    clock::time_point since;
  };

  /// Removes a kept mapping (under the lock), returning it for unmapping.
  mapping drop(std::multimap<std::size_t, entry>::iterator it) {
    const mapping m{it->second.base, it->first};
    held_ -= it->first;
    kept_.erase(it);
    return m;
  }

  /// The reaper thread: unmaps what was kept longer than the keep time.
  void reap() {
    std::unique_lock lock(mutex_);
    for (;;) {
      const auto now = clock::now();
      std::optional<clock::time_point> next;
      std::vector<mapping> gone;
      for (auto it = kept_.begin(); it != kept_.end();) {
        if (now - it->second.since >= keep_for_) {
          gone.push_back(drop(it++));
        } else {
          next = std::min(next.value_or(clock::time_point::max()), it->second.since + keep_for_);
          ++it;
        }
      }
      if (!gone.empty()) {
        lock.unlock();
        for (const auto& m : gone) ::munmap(m.base, m.mapped);
        lock.lock();
        continue;
      }
      if (next) wake_.wait_until(lock, *next);
      else wake_.wait(lock);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::multimap<std::size_t, entry> kept_;  ///< by mapped bytes
  std::size_t held_ = 0;
  std::chrono::milliseconds keep_for_{10000};
  bool reaper_started_ = false;
};

/// The owner of a mapping: unmaps it, or gives it back to kept_mappings (a weight's).
struct unmap {
  std::size_t bytes = 0;
  bool weight = false;
  void operator()(std::byte* p) const {
    if (weight) kept_mappings::get().give(p, bytes);
    else ::munmap(p, bytes);
  }
};

/// Maps `bytes` starting on a huge page's boundary and asks for huge pages on its whole ones
/// (a tail shorter than a huge page stays in small pages: it would take 2 MB for a few bytes);
/// the mapping's owner is the returned pointer (null on failure). A weight's may be a kept
/// mapping (kept_mappings: `*kept` says so), whose bytes are those of a weight gone; anything
/// else's is zeroed.
std::shared_ptr<std::byte[]> map_huge(std::size_t bytes, bool weight, bool* kept = nullptr) {
  // (mapped one huge page larger, so the storage can start on a huge page's boundary; the
  // bytes before it are never touched, so they take no memory)
  std::size_t mapped = bytes + huge_page_bytes;
  std::byte* base = nullptr;
  if (weight) {
    const auto m = kept_mappings::get().take(mapped);
    base = m.base;
    if (base) mapped = m.mapped;
  }
  if (kept) *kept = base != nullptr;
  if (!base) {
    void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    base = static_cast<std::byte*>(p);
    if (weight) kept_mappings::get().make_room(mapped);
  }
  const auto first = (reinterpret_cast<std::uintptr_t>(base) + huge_page_bytes - 1) & ~(huge_page_bytes - 1);
  auto* start = reinterpret_cast<std::byte*>(first);
  (void)::madvise(start, bytes / huge_page_bytes * huge_page_bytes, MADV_HUGEPAGE);
  const std::shared_ptr<std::byte[]> mapping(base, unmap{mapped, weight});
  return std::shared_ptr<std::byte[]>(mapping, start);  // (owns the whole mapping)
}

/// Weights smaller than mapped_storage_bytes (most of a small model's: SmolLM2-135M's largest
/// matrix is 1.8 MB) are carved one after another from 32 MB slabs on huge pages, so they too
/// stream through few TLB entries: a 1.8 MB bf16 product read 22 GB/s from 4 KB pages where
/// one of 6 MB on huge pages read 28 (two threads, the same Xeon run). Each group (a model:
/// the loader passes its id) has slabs of its own, so a model's weights go with it: a slab is
/// given back whole (kept_mappings) when its last weight is freed — never a weight at a time, which
/// splits the huge pages a weight shares with its neighbours (~100 per SmolLM2-sized model
/// deleted, when slabs were shared) — and models loaded side by side never hold each other's
/// slabs. What a group's last slab leaves untouched costs nothing.
class weight_slabs {
 public:
  static weight_slabs& get() {
    static weight_slabs* w = new weight_slabs();  // (leaked: weights may outlive static destruction)
    return *w;
  }

  /// `bytes` (a multiple of 64, under slab_bytes) of storage in `group`'s slabs; null when
  /// mapping fails. Zeroed unless `*kept` (the slab is a kept mapping).
  std::shared_ptr<std::byte[]> carve(const std::string& group, std::size_t bytes, bool& kept) {
    std::shared_ptr<std::byte[]> slab;
    std::size_t at = 0;
    {
      std::lock_guard lock(mutex_);
      auto& g = groups_[group];
      slab = g.slab.lock();
      if (!slab || g.used + bytes > slab_bytes) {
        slab = map_huge(slab_bytes, true, &g.kept);
        if (!slab) return nullptr;
        g.slab = slab;
        g.used = 0;
        forget_gone_groups();
      }
      at = g.used;
      g.used += bytes;
      kept = g.kept;
    }
    // (a control block of its own, so the weight's storage_watch expires with the weight)
    return std::shared_ptr<std::byte[]>(slab.get() + at, [slab](std::byte*) mutable { slab.reset(); });
  }

  static constexpr std::size_t slab_bytes = std::size_t(32) << 20;

 private:
  struct group_slab {
    std::weak_ptr<std::byte[]> slab;  ///< the one being carved (unmapped with its last weight)
    std::size_t used = 0;
    bool kept = false;  ///< whether the slab is a kept mapping
  };

  /// Drops the entries of groups whose slabs are all gone (a model unloaded).
  void forget_gone_groups() {
    for (auto it = groups_.begin(); it != groups_.end();) it = it->second.slab.expired() ? groups_.erase(it) : std::next(it);
  }

  std::mutex mutex_;
  std::map<std::string, group_slab> groups_;
};
}  // namespace

std::size_t kept_weight_bytes() { return kept_mappings::get().held(); }
void keep_freed_weights_for(std::chrono::milliseconds t) { kept_mappings::get().keep_for(t); }

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
  bool kept = false;
  if (alloc >= mapped_storage_bytes) {
    storage = map_huge(alloc, weight, &kept);
  } else if (weight) {
    storage = weight_slabs::get().carve(group, alloc, kept);
  } else if (void* p = std::aligned_alloc(64, alloc)) {
    std::memset(p, 0, alloc);
    storage = std::shared_ptr<std::byte[]>(static_cast<std::byte*>(p), aligned_free{});
  }
  if (!storage) return make_error(errc::too_large, "cannot allocate " + std::to_string(*bytes) + " bytes for " + shape_str(shape));
  // (a kept mapping's bytes are a weight's gone: the builder writes the weight's own, and the
  // bytes past them read as zeros, as ever — cleared here only where kept, since touching a
  // fresh page would make this thread clear it for the kernel)
  if (kept) std::memset(storage.get() + *bytes, 0, alloc - *bytes);
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
