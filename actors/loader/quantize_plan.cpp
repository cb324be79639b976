#include "actors/loader/quantize_plan.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace mpakt::loader {

namespace {

/// Lower-case, dot-separated components of a tensor name.
std::vector<std::string> components(std::string_view name) {
  std::vector<std::string> out(1);
  for (char c : name) {
    if (c == '.') out.emplace_back();
    else out.back() += char(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

template <std::size_t N>
bool one_of(std::string_view s, const std::array<std::string_view, N>& set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

bool is_norm_component(std::string_view c) {
  if (c.find("norm") != std::string_view::npos) return true;
  if (c == "ln" || starts_with(c, "ln_") || ends_with(c, "_ln")) return true;
  if (starts_with(c, "ln") && c.size() > 2)
    return std::all_of(c.begin() + 2, c.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  return false;
}

bool is_sensitive(const std::vector<std::string>& comps) {
  static constexpr std::array<std::string_view, 4> embed_exact{"wte", "wpe", "shared", "emb"};
  static constexpr std::array<std::string_view, 3> head{"lm_head", "embed_out", "output_layer"};
  static constexpr std::array<std::string_view, 13> value{"v_proj", "value", "v",    "wv",   "to_v", "v_lin", "qkv_proj",
                                                          "query_key_value", "c_attn", "wqkv", "qkv", "w_pack", "kv_b_proj"};
  static constexpr std::array<std::string_view, 6> down{"down_proj", "fc2", "dense_4h_to_h", "w2", "ffn_down", "linear_fc2"};
  if (comps.size() == 2 && comps[0] == "output") return true;  // Llama/Mistral originals: output.weight
  for (std::size_t i = 0; i < comps.size(); ++i) {
    const std::string& c = comps[i];
    const std::string_view prev = i ? std::string_view(comps[i - 1]) : std::string_view();
    if (c.find("embed") != std::string::npos || one_of(c, embed_exact) || one_of(c, head) || one_of(c, value) ||
        one_of(c, down))
      return true;
    if ((c == "c_proj" || c == "fc_out") && prev == "mlp") return true;  // GPT-2, GPT-J feed-forward out
    if (c == "wo" && prev == "densereludense") return true;              // T5 feed-forward out
  }
  return false;
}

bool is_float_published(std::string_view d) { return d == "F32" || d == "BF16" || d == "F16"; }

std::uint64_t bytes_of(dtype t, std::int64_t n) { return storage_bytes(t, n).value_or(0); }

}  // namespace

std::string_view quantize_mode_name(quantize_mode m) {
  switch (m) {
    case quantize_mode::none: return "none";
    case quantize_mode::q8: return "q8";
    case quantize_mode::q4: return "q4";
    case quantize_mode::automatic: return "auto";
  }
  return "none";
}

std::optional<quantize_mode> quantize_mode_from_name(std::string_view name) {
  for (auto m : {quantize_mode::none, quantize_mode::q8, quantize_mode::q4, quantize_mode::automatic})
    if (quantize_mode_name(m) == name) return m;
  return std::nullopt;
}

weight_kind classify_weight(const st_entry& e) {
  if (!is_float_published(e.file_dtype)) return weight_kind::buffer;
  const std::int64_t n = shape_numel(e.shape);
  if (e.shape.size() < 2 || n < small_tensor_elements || e.shape.back() % quant_block != 0) return weight_kind::kept;
  const auto comps = components(e.name);
  if (comps.back() == "bias") return weight_kind::kept;
  for (std::size_t i = 0; i + 1 < comps.size(); ++i)
    if (is_norm_component(comps[i])) return weight_kind::kept;
  if (comps.size() == 1 && is_norm_component(comps[0])) return weight_kind::kept;
  return is_sensitive(comps) ? weight_kind::sensitive : weight_kind::matrix;
}

std::optional<dtype> planned_dtype(const st_entry& e, quantize_mode mode) {
  auto published = resident_dtype(e.file_dtype);
  if (!published) return std::nullopt;
  switch (classify_weight(e)) {
    case weight_kind::buffer:
    case weight_kind::kept: return published;
    case weight_kind::matrix:
      if (mode == quantize_mode::q8) return dtype::q8;
      if (mode == quantize_mode::q4) return dtype::q4;
      return published;
    case weight_kind::sensitive:
      if (mode == quantize_mode::q8 || mode == quantize_mode::q4) return dtype::q8;
      return published;
  }
  return published;
}

load_plan plan_mode(const model_index& index, const std::vector<std::size_t>& selected, quantize_mode mode,
                    const pool_capacity& pool) {
  load_plan plan;
  plan.mode = mode;
  plan.tensors.reserve(selected.size());
  for (std::size_t i : selected) {
    const st_entry& e = index.tensors[i].entry;
    const std::int64_t n = shape_numel(e.shape);
    tensor_plan t;
    t.tensor = i;
    t.published_bytes = index.tensors[i].bytes();
    // Unholdable dtypes are refused earlier (check_not_quantised); plan them as published.
    const dtype published = resident_dtype(e.file_dtype).value_or(dtype::f32);
    t.resident = planned_dtype(e, mode).value_or(published);
    t.resident_bytes = resident_dtype(e.file_dtype) ? bytes_of(t.resident, n) : t.published_bytes;
    // The worst case over the pool: a worker that cannot quantize holds the published dtype;
    // one that predates packed weights widens bf16/f16 to f32.
    const dtype worst = pool.can_quantize ? t.resident : published;
    t.planned_bytes = resident_dtype(e.file_dtype) ? bytes_of(worst, n) : t.published_bytes;
    if ((worst == dtype::bf16 || worst == dtype::f16) && pool.widen_factor > 1)
      t.planned_bytes *= std::uint64_t(pool.widen_factor);
    plan.published_bytes += t.published_bytes;
    plan.resident_bytes += t.resident_bytes;
    plan.planned_bytes += t.planned_bytes;
    plan.tensors.push_back(t);
  }
  return plan;
}

status check_capacity(const model_index& index, const load_plan& plan, const pool_capacity& pool) {
  if (plan.planned_bytes > pool.free_bytes)
    return make_error(errc::unavailable, capacity_message(plan.planned_bytes, pool.free_bytes, pool.workers));
  const tensor_plan* worst = nullptr;
  for (const auto& t : plan.tensors)
    if (t.planned_bytes > pool.largest_free_bytes && (!worst || t.planned_bytes > worst->planned_bytes)) worst = &t;
  if (worst)
    return make_error(errc::unavailable, tensor_capacity_message(index.tensors[worst->tensor].name(),
                                                                 worst->planned_bytes, pool.largest_free_bytes));
  return ok_status();
}

result<load_plan> plan_load(const model_index& index, const std::vector<std::size_t>& selected, quantize_mode mode,
                            const pool_capacity& pool) {
  if (mode != quantize_mode::automatic) {
    load_plan plan = plan_mode(index, selected, mode, pool);
    MPAKT_TRY(check_capacity(index, plan, pool));
    return plan;
  }
  status last;
  for (auto m : {quantize_mode::none, quantize_mode::q8, quantize_mode::q4}) {
    load_plan plan = plan_mode(index, selected, m, pool);
    last = check_capacity(index, plan, pool);
    if (last.ok()) return plan;
  }
  return std::move(last).err();
}

std::uint64_t mb_up(std::uint64_t bytes) { return bytes / 1'000'000 + (bytes % 1'000'000 != 0); }
std::uint64_t mb_down(std::uint64_t bytes) { return bytes / 1'000'000; }

std::string capacity_message(std::uint64_t need_bytes, std::uint64_t free_bytes, int workers) {
  return "model needs " + std::to_string(mb_up(need_bytes)) + " MB but only " + std::to_string(mb_down(free_bytes)) +
         " MB is free across " + std::to_string(workers) +
         " worker(s) \u2014 load fewer layers or wait for more volunteers";
}

std::string tensor_capacity_message(std::string_view name, std::uint64_t need_bytes, std::uint64_t largest_free_bytes) {
  return "tensor " + std::string(name) + " needs " + std::to_string(mb_up(need_bytes)) +
         " MB but the largest worker has " + std::to_string(mb_down(largest_free_bytes)) + " MB free";
}

}  // namespace mpakt::loader
