#pragma once
/// Tensors a worker holds: model weights, v2 tensors and session namespaces.
///
/// The worker actor owns one store; the `mpakt run` tool and the tests use
/// one directly. Not thread-safe: its owner serialises access.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/executor.hpp"
#include "runtime/tensor.hpp"

namespace mpakt {

class tensor_store {
 public:
  using tensor_map = std::map<std::string, tensor, std::less<>>;

  /// Adds a model's weights under `model_id` (replacing any earlier model of that id).
  void put_model(std::string model_id, tensor_map weights);
  bool drop_model(std::string_view model_id);
  /// Adds one weight to a model (created if absent), as a load delivers them.
  void put_weight(const std::string& model_id, std::string name, tensor t);
  /// Resident bytes held: weights, v2 tensors and session tensors.
  std::uint64_t bytes_held() const;
  static std::uint64_t bytes_of(const tensor_map& m);
  const tensor_map* model(std::string_view model_id) const;

  void put_tensor(std::string id, tensor t);
  bool drop_tensor(std::string_view id);

  /// Creates the session namespace if absent.
  tensor_map& session(const std::string& id);
  const tensor_map* find_session(std::string_view id) const;
  bool drop_session(std::string_view id);

  /// A tensor_source for a graph run with a primary session and a multi-session list:
  /// an input without `of` reads the primary, `of` = k reads list[k]. A list without a
  /// primary makes list[0] the primary; neither means no session.
  class source final : public tensor_source {
   public:
    source(tensor_store& store, std::vector<std::string> sessions) : source(store, "", std::move(sessions)) {}
    source(tensor_store& store, std::string primary, std::vector<std::string> list)
        : store_(store), primary_(std::move(primary)), sessions_(std::move(list)) {
      if (primary_.empty() && !sessions_.empty()) primary_ = sessions_.front();
      if (sessions_.empty() && !primary_.empty()) sessions_.push_back(primary_);
    }
    result<tensor> weight(std::string_view model, std::string_view name) override;
    result<tensor> by_id(std::string_view id) override;
    result<tensor> session_tensor(int of, std::string_view name) override;
    int session_count() const override { return int(sessions_.size()); }

   private:
    tensor_store& store_;
    std::string primary_;
    std::vector<std::string> sessions_;
  };

  /// After a run: keeps each retained value in the primary session under its name. A
  /// value that already is that session tensor (an in-place cache_write, or the input
  /// itself) is left alone.
  status apply_retain(executable_graph& g, const std::string& session_id,
                      const std::vector<std::pair<std::string, std::string>>& retain);

 private:
  std::map<std::string, tensor_map, std::less<>> models_;
  tensor_map tensors_;
  std::map<std::string, tensor_map, std::less<>> sessions_;
};

}  // namespace mpakt
