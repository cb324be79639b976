#pragma once
/// Whether the products a graph runs must give each row the bits it gets alone.
///
/// Batching conversations into one pass, listing several sessions in one graph (SES-20) and
/// speculative verify passes (SPC-08, GEN-19) promise every conversation exactly the tokens it
/// would have had alone, so by default a product of up to 32 rows computes each row as a
/// one-row product does (the decode kernels; docs/decisions.md, "A row is the same bits
/// alone, batched or verified"). A graph call that makes no such promise — a plain call
/// listing at most one session, such as a prompt's prefill (run_request::free_rows) — runs in a
/// free_rows_scope: products of 16 to 32 rows may then take the many-row kernels (AMX tiles,
/// VNNI or AVX2 lanes), whose rows get the bits products of more than 32 rows always get.
///
/// Like the interrupt (runtime/interrupt.hpp), the setting belongs to the thread running the
/// graph; kernels read it on that thread, before they split their work.

namespace mpakt {

namespace detail {
inline thread_local bool free_rows = false;
}

/// Whether the graph running on this thread lets a product's rows take the many-row kernels'
/// bits (false: each row gets its bits alone).
inline bool rows_free() { return detail::free_rows; }

/// Sets rows_free() for the calling thread for its lifetime.
class free_rows_scope {
 public:
  explicit free_rows_scope(bool free) : saved_(detail::free_rows) { detail::free_rows = free; }
  ~free_rows_scope() { detail::free_rows = saved_; }
  free_rows_scope(const free_rows_scope&) = delete;
  free_rows_scope& operator=(const free_rows_scope&) = delete;

 private:
  bool saved_;
};

}  // namespace mpakt
