#include "runtime/param.hpp"

#include <cmath>
#include <cstdio>

namespace mpakt {

const param_value* param_value::field(std::string_view name) const {
  for (const auto& [k, v] : fields)
    if (k == name) return &v;
  return nullptr;
}

void param_map::set(std::string name, param_value v) {
  for (auto& [k, old] : items_)
    if (k == name) { old = std::move(v); return; }
  items_.emplace_back(std::move(name), std::move(v));
}

const param_value* param_map::find(std::string_view name) const {
  for (const auto& [k, v] : items_)
    if (k == name) return &v;
  return nullptr;
}

std::string num_str(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

result<double> param_map::number(std::string_view name, double fallback) const {
  const param_value* p = find(name);
  if (!p) return fallback;
  if (!p->is_number() || !std::isfinite(p->num)) return invalid("parameter " + std::string(name) + " must be a finite number");
  return p->num;
}

result<double> param_map::required_number(std::string_view name) const {
  if (!find(name)) return invalid("missing required parameter " + std::string(name));
  return number(name, 0);
}

result<std::int64_t> param_map::integer(std::string_view name, std::int64_t fallback, std::int64_t lo, std::int64_t hi) const {
  const param_value* p = find(name);
  if (!p) return fallback;
  auto v = number(name, 0);
  if (!v) return std::move(v).err();
  if (*v != std::floor(*v))
    return invalid("parameter " + std::string(name) + " must be an integer, not " + num_str(*v));
  if (*v < double(lo) || *v > double(hi))
    return invalid("parameter " + std::string(name) + " is " + num_str(*v) + ", outside [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<std::int64_t>(*v);
}

result<std::int64_t> param_map::required_integer(std::string_view name, std::int64_t lo, std::int64_t hi) const {
  if (!find(name)) return invalid("missing required parameter " + std::string(name));
  return integer(name, 0, lo, hi);
}

bool param_map::boolean(std::string_view name, bool fallback) const {
  const param_value* p = find(name);
  return p && p->k == param_value::kind::boolean ? p->flag : fallback;
}

std::string param_map::string(std::string_view name, std::string fallback) const {
  const param_value* p = find(name);
  return p && p->k == param_value::kind::string ? p->str : fallback;
}

result<std::vector<double>> param_map::numbers(std::string_view name) const {
  std::vector<double> out;
  const param_value* p = find(name);
  if (!p) return out;
  if (p->k != param_value::kind::array) return invalid("parameter " + std::string(name) + " must be an array of numbers");
  out.reserve(p->items.size());
  for (std::size_t i = 0; i < p->items.size(); ++i) {
    const auto& it = p->items[i];
    if (!it.is_number() || !std::isfinite(it.num))
      return invalid("parameter " + std::string(name) + "[" + std::to_string(i) + "] must be a finite number");
    out.push_back(it.num);
  }
  return out;
}

}  // namespace mpakt
