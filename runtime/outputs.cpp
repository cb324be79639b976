#include "runtime/outputs.hpp"

#include <charconv>
#include <cmath>

namespace mpakt {

void write_output(rapidjson::Writer<rapidjson::StringBuffer>& w, const std::string& name, const shape_t& shape,
                  std::span<const float> values, bool base64) {
  w.Key(name.c_str(), rapidjson::SizeType(name.size()));
  w.StartObject();
  w.Key("shape");
  w.StartArray();
  for (auto d : shape) w.Int64(d);
  w.EndArray();
  if (base64) {
    const std::string b = encode_f32_base64(values);
    w.Key("dataB64");
    w.String(b.c_str(), rapidjson::SizeType(b.size()));
  } else {
    w.Key("data");
    w.StartArray();
    for (float v : values) {
      // JSON has no inf/nan: -inf (a causal mask) and friends are written as null.
      if (std::isfinite(v)) {
        char buf[32];
        auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
        w.RawValue(buf, std::size_t(r.ptr - buf), rapidjson::kNumberType);
      } else {
        w.Null();
      }
    }
    w.EndArray();
  }
  w.EndObject();
}

void write_outputs(rapidjson::Writer<rapidjson::StringBuffer>& w, const executable_graph& g,
                   const std::vector<std::string>& names, bool base64) {
  w.StartObject();
  for (const auto& name : names) {
    const tensor* t = g.value(name);
    if (!t) continue;
    auto wide = to_f32(*t);
    if (!wide) continue;
    write_output(w, name, t->shape(), wide->f32_span(), base64);
  }
  w.EndObject();
}

std::size_t output_values::bytes() const {
  std::size_t n = 0;
  for (const auto& [_, t] : values) n += t.nbytes();
  return n;
}

output_values take_outputs(const executable_graph& g, const std::vector<std::string>& names) {
  output_values out;
  for (const auto& name : names) {
    const tensor* t = g.value(name);
    if (!t) continue;
    auto wide = to_f32(*t);
    if (!wide) continue;
    out.values.emplace_back(name, std::move(*wide));
  }
  return out;
}

std::string outputs_json(const output_values& v, bool base64) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  for (const auto& [name, t] : v.values) write_output(w, name, t.shape(), t.f32_span(), base64);
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace mpakt
