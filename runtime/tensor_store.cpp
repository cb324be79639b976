#include "runtime/tensor_store.hpp"

namespace mpakt {

void tensor_store::put_model(std::string model_id, tensor_map weights) { models_[std::move(model_id)] = std::move(weights); }

bool tensor_store::drop_model(std::string_view model_id) {
  auto it = models_.find(model_id);
  if (it == models_.end()) return false;
  models_.erase(it);
  return true;
}

void tensor_store::put_weight(const std::string& model_id, std::string name, tensor t) {
  models_[model_id][std::move(name)] = std::move(t);
}

std::uint64_t tensor_store::bytes_of(const tensor_map& m) {
  std::uint64_t n = 0;
  for (const auto& [_, t] : m) n += t.nbytes();
  return n;
}

std::uint64_t tensor_store::bytes_held() const {
  std::uint64_t n = bytes_of(tensors_);
  for (const auto& [_, m] : models_) n += bytes_of(m);
  for (const auto& [_, m] : sessions_) n += bytes_of(m);
  return n;
}

const tensor_store::tensor_map* tensor_store::model(std::string_view model_id) const {
  auto it = models_.find(model_id);
  return it == models_.end() ? nullptr : &it->second;
}

void tensor_store::put_tensor(std::string id, tensor t) { tensors_[std::move(id)] = std::move(t); }

bool tensor_store::drop_tensor(std::string_view id) {
  auto it = tensors_.find(id);
  if (it == tensors_.end()) return false;
  tensors_.erase(it);
  return true;
}

tensor_store::tensor_map& tensor_store::session(const std::string& id) { return sessions_[id]; }

const tensor_store::tensor_map* tensor_store::find_session(std::string_view id) const {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : &it->second;
}

bool tensor_store::drop_session(std::string_view id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return false;
  sessions_.erase(it);
  return true;
}

result<tensor> tensor_store::source::weight(std::string_view model, std::string_view name) {
  const tensor_map* m = store_.model(model);
  if (!m) return make_error(errc::not_found, "model " + std::string(model) + " is not loaded");
  auto it = m->find(name);
  if (it == m->end()) return make_error(errc::not_found, "model " + std::string(model) + " has no weight " + std::string(name));
  return it->second;
}

result<tensor> tensor_store::source::by_id(std::string_view id) {
  auto it = store_.tensors_.find(id);
  if (it == store_.tensors_.end()) return make_error(errc::not_found, "tensor " + std::string(id) + " does not exist");
  return it->second;
}

result<tensor> tensor_store::source::session_tensor(int of, std::string_view name) {
  if (of >= 0 && std::size_t(of) >= sessions_.size()) return invalid("no session at index " + std::to_string(of));
  const std::string& id = of < 0 ? primary_ : sessions_[std::size_t(of)];
  const tensor_map* s = store_.find_session(id);
  if (!s) return make_error(errc::not_found, "session " + id + " does not exist");
  auto it = s->find(name);
  if (it == s->end()) return make_error(errc::not_found, "session " + id + " holds no tensor named " + std::string(name));
  return it->second;
}

status tensor_store::apply_retain(executable_graph& g, const std::string& session_id,
                                  const std::vector<std::pair<std::string, std::string>>& retain) {
  if (retain.empty()) return {};
  tensor_map& sess = session(session_id);
  for (const auto& [name, value] : retain) {
    // Retaining a session tensor (or an in-place write into it) under its own name is a no-op.
    const tensor* v = g.value(value);
    auto held = sess.find(name);
    if (v && held != sess.end() && held->second.same_storage(*v) && held->second.shape() == v->shape()) continue;
    auto t = g.take(value);
    if (!t) return std::move(t).err();
    sess[name] = std::move(*t);
  }
  return {};
}

}  // namespace mpakt
