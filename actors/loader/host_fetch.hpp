#pragma once
/// A volunteer fetching its own weights from the model host (LOAD-22: "weights stream from the
/// model host straight to the volunteers"; docs/protocol.md, "Volunteers fetching from the
/// model host").
///
/// Why: relayed through the coordinator, every byte of a volunteer's load is received and
/// sent again by the coordinator and crosses a TLS connection (encrypted there, decrypted
/// here); read from the host, it is received once. The coordinator still plans the load —
/// which tensors, which ranges, in which order — and decides, per volunteer and file, whether
/// the volunteer reads them itself: only where the volunteer proved it reads the same file at
/// that address (`probe`), where no hub token is involved, and never for a spot-checked
/// volunteer (whose weights the coordinator hashes as they pass).
///
/// The volunteer's own rules: it reads only http(s) URLs, only public addresses unless its
/// operator allows private ones (`mpakt worker --host-fetch any`: a coordinator must not make
/// it read its own network), only files it has probed, and it holds a bounded number of
/// ranges at once (errc::limit past that: the coordinator's window is smaller).
///
/// How a range travels: the coordinator sends `tfetch` in the place of the pieces; the worker's
/// front calls `start` (never blocks: the range goes to a fetch thread at once, so several
/// are read while the receiver works on earlier ones) and hands the receiver the range's
/// number, in order with the other load messages (the range's own message begins the tensors
/// starting in it and ends those ending with it). Beginning a tensor, the receiver says where its bytes go
/// (`destine`: the tensor itself when they are kept as published, its row converter when
/// they are quantized, else nothing); a fetch thread waits for that and reads those parts
/// straight into the tensor — the bytes land once, in their final place —, converts the
/// whole rows of quantized ones as they arrive, and reads the others into buffers. The receiver asks to hear when the
/// range is over (`when_done`; it never blocks on one, so the tensors of the ranges behind it
/// are begun, and those ranges read, meanwhile), then `take`s it, records the parts written
/// in place, converts the others into their tensors and gives the buffers back (`recycle`),
/// so steady loading allocates nothing.
/// A destination is a tensor handle, so its storage outlives any write in flight.
///
/// Thread-safety: every member may be called from any thread. Lifecycle: owned by the
/// volunteer's worker config; the destructor stops the threads after the reads in flight end
/// (their timeouts bound that).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "actors/loader/fetch.hpp"
#include "actors/loader/reader.hpp"
#include "actors/protocol.hpp"
#include "actors/spare_strings.hpp"
#include "runtime/tensor.hpp"
#include "runtime/tensor_builder.hpp"

namespace mpakt::loader {

class host_fetcher {
 public:
  struct options {
    /// May URLs (and redirects) lead to loopback, link-local or private addresses?
    bool allow_private = false;
    /// A host exempt from `allow_private` (an embedded worker: the coordinator's --hf-endpoint).
    std::string trusted_endpoint;
    bool verify_tls = true;
    int connections = 4;   ///< fetch threads, each with its own connection
    int max_ranges = worker_ranges;  ///< ranges started and not yet taken, at most (fetch.hpp)
    int timeout_ms = 30000;
    /// How long a part waits for its tensor's destination (its begin comes first, so only a
    /// coordinator that skipped it makes a part wait this long).
    int destine_patience_ms = 30000;
  };
  explicit host_fetcher(options opts);
  ~host_fetcher();
  host_fetcher(const host_fetcher&) = delete;
  host_fetcher& operator=(const host_fetcher&) = delete;

  /// Reads bytes [0, header_bytes) of `location` and compares their SHA-256 with `sha256_hex`
  /// (the coordinator's digest of the file's safetensors header): ok means later ranges of
  /// that file may be fetched here. Blocks. Errors say why not (errc::invalid: not allowed
  /// here; errc::conflict: other bytes at that address; the reader's errors otherwise).
  status probe(const std::string& location, std::uint64_t header_bytes, const std::string& sha256_hex);
  /// Starts reading `f` and returns its number for `take`; never blocks. errc::invalid for a
  /// file not probed or a range whose parts do not add up, errc::limit with too many waiting.
  result<std::uint64_t> start(const tensor_fetch& f);
  /// Where tensor `name` of `model` is built: `storage` when its published bytes are its bytes
  /// (a part of it is then read straight into place); else, for a tensor quantized on load,
  /// `rows` converts the whole rows of a part on the fetch thread as they arrive (read a few
  /// MB at a time into the thread's own window, so they are quantized while in cache and no
  /// buffer of the part's size is filled); else neither (read into a buffer). A range's part
  /// waits for this (at most `destine_patience`; then it takes a buffer).
  void destine(const std::string& model, const std::string& name, tensor storage, row_converter rows = {});
  /// The tensor is finished or dropped: later ranges do not write into it.
  void forget(const std::string& model, const std::string& name);
  void forget_model(const std::string& model);
  /// A range's parts, in order: each either written into its tensor's storage (`in_place`),
  /// or converted on the fetch thread (`converted` > 0: `bytes` holds the part's first bytes,
  /// which end a row begun before it — maybe none —, then `converted` bytes of whole rows were
  /// converted into the tensor, and `tails` holds the rest, a row the next range ends), or
  /// held in the first `length` bytes of `bytes` (a buffer may be longer; empty for those
  /// written in place).
  struct range {
    std::vector<std::string> bytes;
    std::vector<bool> in_place;
    std::vector<std::uint64_t> converted;
    std::vector<std::string> tails;
  };
  /// Range `number`, waiting for it.
  result<range> take(std::uint64_t number);
  /// Calls `done` once range `number` is over (read or failed; `take` then returns at once):
  /// on the fetch thread that ends it, or here when it is over already. Not called for a
  /// range that never ends because the fetcher stops.
  void when_done(std::uint64_t number, std::function<void()> done);
  /// Buffers of parts that were used, kept for later ranges (a few at most).
  void recycle(std::vector<std::string> parts);
  /// Frees the buffers kept (a load ended: they would otherwise stay until the next).
  void drop_spares();
  /// Bytes of the buffers kept for later ranges.
  std::uint64_t spare_bytes() const;

  std::uint64_t bytes_fetched() const;
  std::uint64_t requests() const;
  /// Fetch threads running: none until the first range is started.
  int threads() const;

 private:
  void run_thread();
  /// Reads range `f`; `window` is the calling thread's buffer for rows converted as they come.
  result<range> fetch(byte_reader& reader, const tensor_fetch& f, std::string& window);
  std::string buffer(std::uint64_t n);
  struct destination {
    tensor storage;
    row_converter rows;
  };
  /// The destination of a part (waiting for it), or an empty one.
  destination destination_of(const std::string& model, const std::string& name);

  const options opts_;
  mutable std::mutex m_;
  /// Fetch threads wait on work_cv_ for a range to read; everyone else (a destination, a
  /// range's end) on cv_ — so a tensor's begin does not wake every idle fetch thread.
  std::condition_variable work_cv_;
  std::condition_variable cv_;
  std::set<std::string> probed_;
  std::deque<std::pair<std::uint64_t, tensor_fetch>> queue_;
  std::map<std::uint64_t, result<range>> done_;
  std::map<std::uint64_t, std::function<void()>> on_done_;
  std::map<std::pair<std::string, std::string>, destination> destinations_;  ///< (model, name) -> where
  std::size_t waiting_ = 0;  ///< started and not yet taken
  std::uint64_t next_ = 1;
  spare_strings spares_;
  std::uint64_t bytes_ = 0, requests_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace mpakt::loader
