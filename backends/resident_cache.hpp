#pragma once
/// Copies of immutable host tensors kept in a device's memory across kernel calls: a GPU
/// worker uploads each weight once, not at every call (kernel_call::immutable_inputs says which
/// inputs may be kept).
///
/// An entry is keyed by the host bytes it copies (address and length) and watches their
/// storage (tensor::storage_watch): once the host tensor is gone — its model deleted — the
/// entry is stale, and a later tensor at the same address gets a fresh copy, never the old
/// bytes. Stale entries are dropped whenever a copy is made, so a deleted model's device
/// memory is given back by the next upload; `clear()` drops everything (a device allocation
/// that failed tries again with the cache empty).
///
/// `Buffer` is the device's buffer type (move-only, freed when destroyed); `make(t)` returns
/// result<Buffer> holding t's bytes. Plain C++, so the policy is tested without a device
/// (test/backends/resident_cache_test.cpp). Thread-safety: none; the CUDA backend uses it under
/// its context's lock.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "runtime/status.hpp"
#include "runtime/tensor.hpp"

namespace mpakt {

template <class Buffer>
class resident_cache {
 public:
  /// The kept copy of `t`'s bytes, made with make(t) when there is none (or only a stale one).
  /// When making it fails, the cache is emptied and it is tried once more; a second failure
  /// is returned (the caller then copies per call, as without the cache).
  template <class Make>
  result<const Buffer*> get(const tensor& t, Make&& make) {
    const key k{t.data(), t.nbytes()};
    auto it = entries_.find(k);
    if (it != entries_.end()) {
      if (!it->second.watch.expired() && same_owner(it->second.watch, t)) {
        ++hits_;
        return &it->second.buffer;
      }
      bytes_ -= it->second.bytes;
      entries_.erase(it);
    }
    drop_stale();
    auto made = make(t);
    if (!made) {
      clear();
      made = make(t);
      if (!made) return std::move(made).err();
    }
    ++uploads_;
    bytes_ += t.nbytes();
    auto [pos, _] = entries_.emplace(k, entry{std::move(made).value(), t.storage_watch(), t.nbytes()});
    return &pos->second.buffer;
  }

  /// Drops every copy.
  void clear() {
    entries_.clear();
    bytes_ = 0;
  }

  std::size_t size() const { return entries_.size(); }
  /// Bytes held in copies.
  std::size_t bytes() const { return bytes_; }
  /// Copies made, and lookups served by an existing copy, since the cache was made.
  std::uint64_t uploads() const { return uploads_; }
  std::uint64_t hits() const { return hits_; }

 private:
  struct key {
    const std::byte* data;
    std::size_t bytes;
    bool operator<(const key& o) const { return data != o.data ? data < o.data : bytes < o.bytes; }
  };
  struct entry {
    Buffer buffer;
    std::weak_ptr<const std::byte[]> watch;
    std::size_t bytes = 0;
  };

  /// Whether `watch` watches t's storage (not another allocation that took its address).
  static bool same_owner(const std::weak_ptr<const std::byte[]>& watch, const tensor& t) {
    const auto mine = t.storage_watch();
    return !watch.owner_before(mine) && !mine.owner_before(watch);
  }

  void drop_stale() {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.watch.expired()) {
        bytes_ -= it->second.bytes;
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }

  std::map<key, entry> entries_;
  std::size_t bytes_ = 0;
  std::uint64_t uploads_ = 0, hits_ = 0;
};

}  // namespace mpakt
