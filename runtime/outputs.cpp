#include "runtime/outputs.hpp"

#include <charconv>
#include <cmath>

namespace mpakt {

void write_outputs(rapidjson::Writer<rapidjson::StringBuffer>& w, const executable_graph& g,
                   const std::vector<std::string>& names, bool base64) {
  w.StartObject();
  for (const auto& name : names) {
    const tensor* t = g.value(name);
    if (!t) continue;
    auto wide = to_f32(*t);
    if (!wide) continue;
    w.Key(name.c_str(), rapidjson::SizeType(name.size()));
    w.StartObject();
    w.Key("shape");
    w.StartArray();
    for (auto d : t->shape()) w.Int64(d);
    w.EndArray();
    if (base64) {
      const std::string b = encode_f32_base64(wide->f32_span());
      w.Key("dataB64");
      w.String(b.c_str(), rapidjson::SizeType(b.size()));
    } else {
      w.Key("data");
      w.StartArray();
      for (float v : wide->f32_span()) {
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
  w.EndObject();
}

}  // namespace mpakt
