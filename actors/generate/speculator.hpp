#pragma once
/// Speculative decoding by prompt lookup: the drafting, the choice of draft length and the
/// acceptance rule, shared by the worker-side loop and the ordinary loop.
///
/// Drafts are the continuation of the most recent earlier occurrence, in the context so
/// far, of its last 4, 3, 2 or 1 tokens (the longest that matches; among its occurrences
/// the most recent whose continuation fills the smallest verify pass). Every verify graph
/// is tried once before the estimates choose between them. A verify pass feeds the
/// current token and k drafts at positions pos..pos+k; row r's output is the model's token
/// after row r, sampled exactly as a one-token step at pos + r would be. The longest prefix
/// of drafts that agrees with the outputs is accepted, plus the first disagreeing row's
/// output, so greedy and seeded output equal plain decoding. Cache rows written for rejected
/// drafts lie beyond the next position and are overwritten before anything reads them.
///
/// Not thread-safe; one per generation.

#include <cstdint>
#include <vector>

namespace mpakt {

class speculator {
 public:
  /// `ks`: the draft length of each verify graph, in request order. `always`: draft on every
  /// pass a draft exists, instead of backing off when drafts do not pay.
  speculator(std::vector<std::int64_t> context, std::vector<int> ks, bool always);

  struct pass {
    int graph = -1;                     ///< index into ks; -1 = a plain one-token step
    std::vector<std::int64_t> drafts;   ///< exactly ks[graph] tokens
  };

  /// What to run next: `current` is the token about to be fed (already in the context).
  pass next() const;
  /// Records a verify pass: the outputs (k+1 ids) and its duration. Returns the produced
  /// tokens (accepted drafts' successors: between 1 and k+1 of them).
  std::vector<std::int64_t> verified(const pass& p, const std::vector<std::int64_t>& outputs, double ms);
  /// Records a plain step and its duration.
  void plain(double ms);
  /// Appends tokens to the context (what was produced).
  void extend(const std::vector<std::int64_t>& tokens);

  std::uint64_t verifies = 0, drafted = 0, accepted = 0, produced = 0, plains = 0;

 private:
  std::vector<std::int64_t> draft(std::size_t max_len, std::size_t min_len) const;
  std::vector<std::int64_t> context_;
  std::vector<int> ks_;
  bool always_;
  double accept_rate_ = 0.5;            ///< running estimate that one draft is right
  double plain_ms_ = 0;                 ///< running cost of a plain step
  std::vector<double> pass_ms_;         ///< running cost of each verify graph's pass
};

}  // namespace mpakt
