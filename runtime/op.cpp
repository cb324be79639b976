#include "runtime/op.hpp"

namespace mpakt {

result<std::unique_ptr<op_params>> parse_no_params(const param_map&) {
  return std::unique_ptr<op_params>(std::make_unique<no_params>());
}

void no_features(const param_map&, std::size_t, std::vector<std::string>&) {}

float* workspace::floats(std::size_t n, int slot) {
  if (f_.size() <= std::size_t(slot)) f_.resize(std::size_t(slot) + 1);
  auto& v = f_[std::size_t(slot)];
  if (v.size() < n) v.resize(n);
  return v.data();
}

std::int32_t* workspace::ints(std::size_t n, int slot) {
  if (i_.size() <= std::size_t(slot)) i_.resize(std::size_t(slot) + 1);
  auto& v = i_[std::size_t(slot)];
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace mpakt
