#pragma once
/// Fetching a load's tensors from the model host: several range requests in flight, the
/// bytes handed over in order (LOAD-16, LOAD-19, LOAD-22).
///
/// `plan_fetches` cuts the tensors of a load, in the order they go to workers, into fetch
/// units — one range request each, never more than a piece (16 MB). A tensor larger than a
/// piece is fetched in pieces of exactly `piece` bytes (the last shorter), each its own
/// unit; smaller tensors lying back to back in one file share a unit up to a piece, so a
/// layer's dozen small tensors cost one request, not a dozen round trips to the host.
///
/// `fetch_pool` runs the units on a few threads, each with its own reader (an HTTP reader
/// keeps its own connection), reading every unit straight into one buffer per tensor
/// segment — the very buffers that then travel to the worker as pieces — and hands the
/// units over strictly in order. It holds at most `max_bytes` of weights: a unit counts from
/// when its request starts until the caller releases its bytes (when the worker has
/// acknowledged them), so fetching ahead and pieces in flight to workers share one bound,
/// a few pieces whatever the model's size.
///
/// Units a worker reads itself (`remote`) are also bounded in number, `max_remote_units` at a
/// time: a volunteer refuses a range past its own bound (host_fetch.hpp, worker_ranges) and
/// the load then starts again relayed, and units far smaller than a piece — a tiny tensor
/// before a big one, a big tensor's last few bytes — would otherwise put many more than a
/// few pieces' worth of ranges in flight within the byte bound.
///
/// A unit whose read fails for a transient reason (a dropped connection, a timeout) is
/// asked for again up to `piece_retries` times before the caller sees anything; other
/// errors are final. After an error no further unit is started.
///
/// Thread-safety: a pool is driven by one thread (the load job's); its fetch threads touch
/// only their reader, their unit's buffers and the pool's queue (under its mutex).
/// Lifecycle: the threads start in the constructor and are stopped and joined by the
/// destructor, which waits for requests in flight to end (their timeouts bound that).

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/loader/reader.hpp"
#include "actors/loader/stream.hpp"

namespace mpakt::loader {

/// Ranges a worker that reads its own weights holds at once, at most (started and not yet
/// taken; host_fetcher refuses more): the load's fetch pool hands it no more than that.
inline constexpr int worker_ranges = 8;

/// A tensor's bytes within a fetch unit.
struct fetch_segment {
  std::size_t tensor = 0;   ///< index into the tensors given to plan_fetches
  std::uint64_t offset = 0; ///< of its first byte within the tensor
  std::uint64_t length = 0;
};

/// One range request: consecutive bytes of one file, the segments back to back.
struct fetch_unit {
  std::string location;
  std::uint64_t first = 0;   ///< absolute offset in the file
  std::uint64_t length = 0;  ///< the segments' lengths added up
  std::vector<fetch_segment> segments;
  /// Read by its worker itself from the model host (a volunteer that fetches its own weights,
  /// host_fetch.hpp): the pool reads nothing for it, but counts its bytes as held from its
  /// turn until they are released, so the worker's ranges in flight share the pool's bound.
  bool remote = false;
};

/// Cuts `tensors` (in order) into fetch units of at most `piece` bytes. Every tensor appears,
/// in order: an empty one as a segment of length 0.
std::vector<fetch_unit> plan_fetches(const std::vector<tensor_location>& tensors, std::uint64_t piece = piece_bytes);

/// A unit's bytes: one buffer per segment (none for a remote unit).
struct fetched_unit {
  std::size_t index = 0;
  std::vector<std::string> parts;
};

/// Storage for the parts fetch pools read (a piece of weights each, up to 16 MB), kept while
/// any fetch pool of this process is alive: as many strings as a load has pieces on their way
/// (up to 256, 64 MB in all) are kept for the next parts, given
/// back where a piece's bytes are done with (the data connection's writer, a receiver in this
/// process), so that a load the coordinator relays does not make, fault in and clear a fresh
/// buffer a piece (measured: the clearing alone 9 % of a relaying coordinator's samples).
/// Freed when the last fetch pool ends. Thread-safe.
std::string piece_buffer(std::size_t n);  ///< n bytes (a kept string's old bytes in them)
void give_back_piece(std::string bytes);

class fetch_pool {
 public:
  using reader_factory = std::function<std::unique_ptr<byte_reader>()>;
  struct options {
    int connections = 4;                        ///< fetch threads, each with its own reader
    std::uint64_t max_bytes = 4 * piece_bytes;  ///< weights held at once (raised to the largest unit)
    int max_remote_units = worker_ranges;       ///< units read by their worker, at once
  };

  /// Starts fetching `units` of `tensors` (for messages: a failure names its tensor).
  fetch_pool(std::vector<tensor_location> tensors, std::vector<fetch_unit> units, reader_factory make_reader,
             options opts);
  ~fetch_pool();
  fetch_pool(const fetch_pool&) = delete;
  fetch_pool& operator=(const fetch_pool&) = delete;

  std::size_t size() const { return units_.size(); }
  const fetch_unit& unit(std::size_t i) const { return units_[i]; }

  /// The next unit in order once it has arrived, without waiting (nullopt: not yet). Call
  /// only while units remain.
  std::optional<result<fetched_unit>> try_next();
  /// The next unit in order, waiting for it.
  result<fetched_unit> next();
  /// Gives back `bytes` of a handed-over unit (its piece reached the worker; `remote`: a unit
  /// its worker read itself, released once, whole), so later units can start.
  void release(std::uint64_t bytes, bool remote = false);

  /// The most weight bytes held at once so far (fetching, waiting or not yet released; remote
  /// units, whose bytes are never here, do not count).
  std::uint64_t peak_bytes() const;
  /// Range requests made (retries included).
  std::uint64_t requests() const;

 private:
  void run_thread(byte_reader& reader);
  result<fetched_unit> fetch(byte_reader& reader, std::size_t index);
  /// Whether the next unit to start fits under the bounds now (under the mutex).
  bool next_fits() const;

  const std::vector<tensor_location> tensors_;
  const std::vector<fetch_unit> units_;
  const options opts_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::size_t next_start_ = 0;   ///< the next unit a thread takes
  std::size_t next_hand_ = 0;    ///< the next unit handed to the caller
  std::uint64_t held_ = 0;       ///< bytes of units started and not released
  std::uint64_t remote_held_ = 0;  ///< of which remote units
  int remote_units_ = 0;           ///< remote units started and not released
  std::uint64_t peak_ = 0;
  std::uint64_t requests_ = 0;
  bool stop_ = false;            ///< the destructor, or a unit failed: start nothing more
  std::map<std::size_t, result<fetched_unit>> done_;  ///< arrived, not yet handed over
  std::vector<std::thread> threads_;
};

}  // namespace mpakt::loader
