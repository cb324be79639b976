#pragma once
/// POST /api/v3/chat: a conversation in, streamed text out (decisions.md, "Chat").
///
/// A chat actor per request does, as a client of the coordinator with the caller's key:
/// resolve the model (a modelId, or a source it loads or reuses, with quantize "auto" so q8 or
/// q4 is used only when the model does not otherwise fit); read the model's chat side once
/// (tokenizer, conversation format; cached per model); compile its decode and verify graphs
/// once per account, model and penalty (cached); render and tokenize the conversation; open a
/// session with KV caches and a token history; prefill; then run the worker-side decode loop
/// (speculative unless asked not to, repetition penalty 1.1 by default) and stream text
/// deltas, detokenized so no event ever holds half a character. The session is deleted when
/// the reply ends; a client that disconnects stops decoding at once.
///
/// Because every conversation on a model uses the same compiled decode graph, conversations
/// decoding at the same time share passes on the worker (runtime/batching.hpp).

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "actors/protocol.hpp"
#include "http/api/chat_model.hpp"
#include "http/server.hpp"

namespace mpakt::http {

/// Compiled graphs chat uses for one account, model and repetition penalty.
struct chat_graphs {
  std::string decode;               ///< one token per step
  std::vector<std::string> verify;  ///< verify passes over 5 and 3 positions
};

/// A conversation's session kept after its reply for the next turn (the prefix cache):
/// its KV caches and token history hold rows 0 … tokens.size() − 1, fed with `tokens`.
struct cached_conversation {
  std::string session_id;
  std::string account, key_id, model_id;
  std::vector<std::int32_t> tokens;
  std::uint64_t used = 0;  ///< when last put back (a counter: least recently used goes first)
};

/// Conversations each key keeps for its next turns, at most (decisions.md, "Prefix cache").
constexpr std::size_t chat_cached_per_key = 4;

/// What chat keeps between requests: each model's chat side, each account's graphs, and the
/// sessions of finished turns (the prefix cache). Thread-safe (chat actors run on any
/// scheduler thread).
class chat_registry {
 public:
  std::shared_ptr<const chat_model> model(const std::string& model_id) const;
  void put_model(const std::string& model_id, std::shared_ptr<const chat_model> m);
  std::optional<chat_graphs> graphs(const std::string& key) const;
  void put_graphs(const std::string& key, chat_graphs g);
  void drop_graphs(const std::string& key);

  /// Takes out the account's cached conversation on `model_id` that shares the longest prefix
  /// with `prompt` (at least one token; `*common` says how long), so no other request uses its
  /// session meanwhile. Nothing when none shares a token.
  std::optional<cached_conversation> take_prefix(const std::string& account, const std::string& model_id,
                                                 const std::vector<std::int32_t>& prompt, std::size_t* common);
  /// Keeps a conversation for later turns; returns those it evicted (beyond `per_key` for its
  /// key, least recently used first), whose sessions the caller deletes.
  std::vector<cached_conversation> put_conversation(cached_conversation c, std::size_t per_key = chat_cached_per_key);
  /// Takes out every conversation the key keeps (to free its sessions).
  std::vector<cached_conversation> drop_key(const std::string& key_id);

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const chat_model>> models_;
  std::map<std::string, chat_graphs> graphs_;
  std::vector<cached_conversation> conversations_;
  std::uint64_t clock_ = 0;
};

/// Runs one chat request (the body already passed parse_chat_request) for `who`; `slot` is
/// held until it ends (the key's count of generations running at once).
void start_chat(caf::actor_system& sys, coordinator_actor coordinator, std::shared_ptr<chat_registry> registry, caller who,
                chat_request req, std::shared_ptr<responder> res, std::shared_ptr<void> slot = nullptr);

}  // namespace mpakt::http
