#pragma once
/// The per-token values of server-side decoding, shared by the worker-side loop and the
/// ordinary (one round trip per token) loop so both feed the graph exactly the same.

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "actors/protocol.hpp"

namespace mpakt {

struct gen_call {
  std::string bind_json;                                   ///< {"ids":[t],"pos":p,...}
  std::vector<std::pair<std::string, double>> overrides;   ///< sample-step parameters set directly
};

/// One decode call: `ids` = the tokens fed at pos, pos+1, … (one for a plain step, k+1 for
/// a verify pass); the sampler's counter `step` = pos
/// (decisions.md: the absolute position of the row decoded). Sampling parameters the
/// template binds are bound; the others (and step, when not bound) override the template's
/// sample step, so a request's settings win over what the template baked in.
gen_call make_gen_call(const std::vector<std::string>& bindings, const std::vector<std::int64_t>& tokens, std::int64_t pos,
                       const std::vector<std::pair<std::string, double>>& sampling);

/// The worker-side loop's start request for a plan: what generate and chat send with genstart.
gen_request start_request(const gen_plan& plan, std::string gen_id, gen_listener listener);

/// What a run of a generation fed its session, for a checkpointed session's journal: `first`
/// at `start_pos`, then every token the run produced but the last (not fed yet).
gen_journal fed_journal(const gen_plan& plan, std::int64_t first, std::int64_t start_pos,
                        std::span<const std::int64_t> produced);

class speculator;

/// Copies a speculator's counters into a generation's end record (nothing without one).
gen_done with_counters(gen_done d, const speculator* spec);

}  // namespace mpakt
