#include "runtime/safetensors.hpp"

#include <rapidjson/document.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>

#include "runtime/json.hpp"

namespace mpakt {

result<std::uint64_t> safetensors_header_length(std::string_view first8) {
  if (first8.size() < 8) return invalid("file is shorter than the 8-byte safetensors header length");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(first8[std::size_t(i)]);
  if (n < 2 || n > max_safetensors_header)
    return invalid("safetensors header length " + std::to_string(n) + " is outside 2 .. " + std::to_string(max_safetensors_header));
  return n;
}

int published_dtype_size(std::string_view d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2" || d == "F8_E8M0") return 1;
  return 0;
}

std::string published_dtype_name(std::string_view d) {
  if (d == "F32") return "f32";
  if (d == "BF16") return "bf16";
  if (d == "F16") return "f16";
  if (d == "F64") return "f64";
  if (d == "I64") return "int64";
  if (d == "BOOL") return "bool";
  std::string s(d);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

std::optional<dtype> resident_dtype(std::string_view d) {
  if (d == "F32" || d == "F64" || d == "I64" || d == "BOOL") return dtype::f32;
  if (d == "BF16") return dtype::bf16;
  if (d == "F16") return dtype::f16;
  return std::nullopt;
}

bool looks_quantised(const st_entry& e) {
  if (!resident_dtype(e.file_dtype)) return true;
  static const char* markers[] = {".qweight", ".qzeros", ".scales", ".g_idx", ".weight_scale", ".input_scale",
                                  ".SCB", ".weight_format", ".absmax", ".quant_map", ".quant_state", ".nested_absmax"};
  for (const char* m : markers) {
    const std::string_view mv(m);
    if (e.name.size() >= mv.size() && e.name.compare(e.name.size() - mv.size(), mv.size(), mv) == 0) return true;
    if (e.name.find(std::string(mv) + ".") != std::string::npos) return true;
  }
  return false;
}

result<st_header> parse_safetensors_header(std::string_view json, std::uint64_t header_bytes,
                                           std::optional<std::uint64_t> data_bytes) {
  // Depth, syntax, and names that are not UTF-8 are refused here with their byte offset in
  // the header (tensor names reach JSON responses and messages).
  auto parsed = parse_json(json, "safetensors header");
  if (!parsed) return std::move(parsed).err();
  rapidjson::Document& d = *parsed;
  if (!d.IsObject()) return invalid("safetensors header is not a JSON object");
  st_header h;
  h.header_bytes = header_bytes;
  h.data_start = 8 + header_bytes;
  for (auto it = d.MemberBegin(); it != d.MemberEnd(); ++it) {
    std::string name(it->name.GetString(), it->name.GetStringLength());
    const auto& v = it->value;
    if (name == "__metadata__") {
      if (v.IsObject())
        for (auto m = v.MemberBegin(); m != v.MemberEnd(); ++m)
          if (m->value.IsString()) h.metadata.emplace_back(m->name.GetString(), m->value.GetString());
      continue;
    }
    const std::string at = "safetensors tensor " + name;
    if (!v.IsObject()) return invalid(at + " is not an object");
    auto dt = v.FindMember("dtype");
    auto sh = v.FindMember("shape");
    auto off = v.FindMember("data_offsets");
    if (dt == v.MemberEnd() || !dt->value.IsString()) return invalid(at + " has no dtype");
    if (sh == v.MemberEnd() || !sh->value.IsArray()) return invalid(at + " has no shape");
    if (off == v.MemberEnd() || !off->value.IsArray() || off->value.Size() != 2 || !off->value[0].IsUint64() ||
        !off->value[1].IsUint64())
      return invalid(at + " has no valid data_offsets");
    st_entry e;
    e.name = name;
    e.file_dtype = dt->value.GetString();
    for (const auto& s : sh->value.GetArray()) {
      if (!s.IsUint64() || s.GetUint64() > (1ull << 40)) return invalid(at + " has an invalid shape");
      e.shape.push_back(std::int64_t(s.GetUint64()));
    }
    e.begin = off->value[0].GetUint64();
    e.end = off->value[1].GetUint64();
    if (e.end < e.begin) return invalid(at + " has data_offsets that run backwards");
    const int esize = published_dtype_size(e.file_dtype);
    const std::int64_t n = shape_numel(e.shape);
    if (n < 0) return invalid(at + " has a shape whose size overflows");
    if (esize > 0 && std::uint64_t(n) * std::uint64_t(esize) != e.end - e.begin)
      return invalid(at + " holds " + std::to_string(e.end - e.begin) + " bytes but " + std::string(e.file_dtype) + " " +
                     shape_str(e.shape) + " needs " + std::to_string(std::uint64_t(n) * std::uint64_t(esize)));
    if (data_bytes && e.end > *data_bytes) return invalid(at + " runs past the end of the file");
    h.tensors.push_back(std::move(e));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const st_entry& a, const st_entry& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < h.tensors.size(); ++i)
    if (h.tensors[i].begin < h.tensors[i - 1].end)
      return invalid("safetensors tensors " + h.tensors[i - 1].name + " and " + h.tensors[i].name + " overlap");
  return h;
}

void convert_piece(std::string_view d, const std::byte* src, std::size_t count, std::byte* dst) {
  if (d == "F32" || d == "BF16" || d == "F16") {
    std::memcpy(dst, src, count * std::size_t(published_dtype_size(d)));
    return;
  }
  auto* out = reinterpret_cast<float*>(dst);
  if (d == "F64") {
    for (std::size_t i = 0; i < count; ++i) {
      double v;
      std::memcpy(&v, src + i * 8, 8);
      out[i] = static_cast<float>(v);
    }
  } else if (d == "I64") {
    for (std::size_t i = 0; i < count; ++i) {
      std::int64_t v;
      std::memcpy(&v, src + i * 8, 8);
      out[i] = static_cast<float>(v);
    }
  } else if (d == "BOOL") {
    for (std::size_t i = 0; i < count; ++i) out[i] = src[i] != std::byte{0} ? 1.0f : 0.0f;
  }
}

result<std::vector<std::pair<std::string, tensor>>> load_safetensors_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(errc::not_found, "cannot open " + path);
  f.seekg(0, std::ios::end);
  const std::uint64_t size = std::uint64_t(f.tellg());
  f.seekg(0);
  std::string first8(8, '\0');
  f.read(first8.data(), 8);
  if (!f) return invalid(path + " is not a safetensors file (shorter than 8 bytes)");
  auto hl = safetensors_header_length(first8);
  if (!hl) return invalid(path + ": " + hl.err().message);
  if (8 + *hl > size) return invalid(path + ": header runs past the end of the file");
  std::string json(std::size_t(*hl), '\0');
  f.read(json.data(), std::streamsize(*hl));
  auto h = parse_safetensors_header(json, *hl, size - 8 - *hl);
  if (!h) return invalid(path + ": " + h.err().message);
  std::vector<std::string> quantised;
  for (const auto& e : h->tensors)
    if (looks_quantised(e)) quantised.push_back(e.name + " (" + published_dtype_name(e.file_dtype) + ")");
  if (!quantised.empty()) {
    std::string names;
    for (std::size_t i = 0; i < quantised.size() && i < 10; ++i) names += (i ? ", " : "") + quantised[i];
    return invalid(path + " is a quantised checkpoint, which cannot be loaded without a dequantisation path: " + names);
  }
  std::vector<std::pair<std::string, tensor>> out;
  std::vector<std::byte> buf;
  for (const auto& e : h->tensors) {
    const dtype rt = *resident_dtype(e.file_dtype);
    auto t = tensor::make(rt, e.shape);
    if (!t) return make_error(t.err().code, path + ": " + e.name + ": " + t.err().message);
    buf.resize(e.end - e.begin);
    f.seekg(std::streamoff(h->data_start + e.begin));
    f.read(reinterpret_cast<char*>(buf.data()), std::streamsize(buf.size()));
    if (!f) return invalid(path + ": cannot read the bytes of " + e.name);
    convert_piece(e.file_dtype, buf.data(), std::size_t(t->numel()), t->data());
    out.emplace_back(e.name, std::move(*t));
  }
  return out;
}

}  // namespace mpakt
