#pragma once
/// Load and inspect jobs: the blocking work of reading a model host, run on their own
/// thread (a detached actor per job), so neither the coordinator nor CAF's scheduler
/// threads ever wait on the network.
///
/// Lifecycle: the coordinator spawns a job per request, asks it once, and the job quits
/// after replying. A load fetches the tensors from the host with a few range requests in
/// flight (actors/loader/fetch.hpp) and streams each tensor to its worker in pieces of at
/// most 16 MB, several pieces on their way at once; the coordinator never holds more than
/// `pieces_held` pieces of weights — fetched, or sent and not yet acknowledged.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/protocol.hpp"

namespace mpakt {

struct load_job_config {
  /// The operator's model host: hf: sources resolve there, and it is trusted (it may be on a
  /// private address; its being down is the server's 503, not the caller's 400).
  std::string hf_endpoint = "https://huggingface.co";
  /// The grid's Hugging Face token (`mpakt serve --hf-token-file`, or HF_TOKEN), sent to
  /// hf_endpoint only, for gated and private repositories; a request's own token wins.
  std::string hf_token;
  /// Folders local sources may name (`--allow-local`); empty: local paths are refused.
  std::vector<std::string> local_dirs;
  /// Whether URL sources and redirects may lead to loopback, link-local or private
  /// addresses (`--allow-private-sources`); by default a user cannot make the coordinator
  /// fetch from inside its own network.
  bool allow_private_sources = false;
  std::string default_quantize = "none";
  /// KV caches of the sessions the server opens on a model loaded without kvDtype
  /// (`serve --kv-dtype`): f32, bf16 or f16.
  std::string default_kv_dtype = "f32";
  bool verify_tls = true;
  std::chrono::milliseconds worker_timeout{60 * 1000};
  /// Range requests a load keeps in flight to its model host (one connection each).
  int fetch_connections = 4;
  /// Pieces of weights (16 MB each) the coordinator may hold at once for one load: fetched
  /// ahead, or on their way to a worker and not yet acknowledged (a volunteer's own ranges
  /// in flight count the same).
  int pieces_held = 4;
  /// Whether workers may read their own weights from the model host (`serve --worker-fetch
  /// off` turns it off): asked per worker and file — embedded workers and volunteers alike —
  /// never for a spot-checked volunteer or a load that sends a hub token
  /// (actors/loader/host_fetch.hpp).
  bool worker_fetch = true;
};

/// What a load job does: the load as asked for (source, selection, quantize, the caller's own
/// hub token — empty: the grid's; held in memory only, never logged or written anywhere),
/// for a model id.
struct load_job_request : load_call {
  std::string model_id;
  /// Whether the selection may be spread over several workers when no one can hold it
  /// (false when fetching one lost worker's share again: it goes to one worker).
  bool allow_spread = true;
};

/// What a finished load tells the coordinator.
struct load_outcome {
  load_model_reply reply;                                  ///< the answer to the client
  std::vector<std::pair<std::string, std::string>> tensor_ids;  ///< tensorId -> name
  std::string source;
  std::string quantize;
  /// The commit the hub resolved the source's revision to (empty when it did not say): a
  /// lost worker's share is fetched again from exactly this commit.
  std::string commit;
  std::uint64_t published_bytes = 0;
  std::uint64_t resident_bytes = 0;
  worker_actor worker;
  std::string worker_id;  ///< the worker's name, for the placement shown to clients
  /// Spread over several workers: each part's worker, name, weight names and resident
  /// bytes (empty when one worker holds it all).
  std::vector<worker_actor> part_workers;
  std::vector<std::string> part_ids;
  std::vector<std::vector<std::string>> part_tensors;
  std::vector<std::uint64_t> part_bytes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, load_job_request& x) {
  return f(caf::meta::type_name("load_job_request"), x.model_id, x.source, x.include, x.exclude, x.names, x.quantize,
           x.allow_spread, x.token);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, load_outcome& x) {
  return f(caf::meta::type_name("load_outcome"), x.reply, x.tensor_ids, x.source, x.quantize, x.published_bytes,
           x.resident_bytes, x.worker, x.worker_id, x.part_workers, x.part_ids, x.part_tensors, x.part_bytes, x.commit);
}

using load_job_actor = caf::typed_actor<caf::replies_to<load_atom, load_job_request>::with<load_outcome>,
                                        caf::replies_to<inspect_atom, std::string, std::string>::with<inspect_model_reply>,
                                        /// source (and token) -> config.json, tokenizer.json, tokenizer_config.json,
                                        /// chat_template.jinja
                                        caf::replies_to<files_atom, std::string, std::string>::with<std::string, std::string, std::string, std::string>>;

/// How far a load is: written by its job's thread as the load goes, read by the coordinator
/// for the console (the job blocks on its model host while it loads and answers no message
/// until it is done). In-process only: a job runs in the coordinator's process.
struct load_progress {
  std::atomic<int> phase{0};  ///< 0: reading the source and placing; 1: transferring; 2: done or failed
  std::atomic<std::uint32_t> tensors_total{0}, tensors_done{0};
  std::atomic<std::uint64_t> published_total{0};  ///< bytes to transfer (published)
  std::atomic<std::uint64_t> transferred{0};      ///< published bytes the workers acknowledged
  std::atomic<std::uint64_t> resident{0};         ///< resident bytes of the tensors finished
  std::atomic<std::uint32_t> workers{0};          ///< workers it is placed on
};

/// A job on its own thread; it quits after answering one request. A load reports its
/// progress to `progress`, if given.
load_job_actor spawn_load_job(caf::actor_system& sys, load_job_config cfg, pool_actor pool,
                              std::shared_ptr<load_progress> progress = nullptr);

/// Announces the job's payload types.
void add_load_job_types(caf::actor_system_config& cfg);

}  // namespace mpakt
