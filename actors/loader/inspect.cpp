#include "actors/loader/inspect.hpp"

#include <rapidjson/document.h>

#include <algorithm>
#include <set>

#include "actors/digest.hpp"
#include "runtime/json.hpp"

namespace mpakt::loader {

namespace {

std::string file_name_of(const std::string& location) {
  const std::string path = location.substr(0, location.find('?'));
  return path.substr(path.rfind('/') + 1);
}

/// Adds a file's tensors (all of them, or those `keep` accepts) to `idx`.
template <class Keep>
status add_file(model_index& idx, model_file file, const st_header& h, Keep keep) {
  const std::size_t fi = idx.files.size();
  for (const auto& e : h.tensors) {
    if (!keep(e)) continue;
    if (auto dup = idx.by_name.find(e.name); dup != idx.by_name.end()) {
      const std::size_t other = idx.tensors[dup->second].file;
      return invalid(idx.source + " holds tensor " + e.name + " twice (in " + file.name + " and " +
                     (other == fi ? file.name : idx.files[other].name) + ")");
    }
    tensor_info t;
    t.entry = e;
    t.file = fi;
    t.file_offset = h.data_start + e.begin;
    idx.by_name.emplace(e.name, idx.tensors.size());
    idx.total_bytes += t.bytes();
    ++idx.dtypes[published_dtype_name(e.file_dtype)];
    idx.tensors.push_back(std::move(t));
  }
  if (idx.files.empty()) idx.metadata = h.metadata;
  idx.files.push_back(std::move(file));
  return ok_status();
}

result<model_index> index_single(const model_source& src, const std::string& location, st_header h,
                                 std::optional<std::uint64_t> size, std::string digest) {
  model_index idx;
  idx.source = src.text;
  idx.remote = src.remote();
  model_file f{file_name_of(location), location, h.data_start, size, std::move(digest)};
  MPAKT_TRY(add_file(idx, std::move(f), h, [](const st_entry&) { return true; }));
  return idx;
}

result<model_index> index_sharded(const model_source& src, const std::string& location, const std::string& json,
                                  byte_reader& reader) {
  auto parsed = parse_json(json, "index " + location);
  if (!parsed) return std::move(parsed).err();
  const rapidjson::Document& d = *parsed;
  if (!d.IsObject()) return invalid("index " + location + " is not a JSON object");
  auto wm = d.FindMember("weight_map");
  if (wm == d.MemberEnd() || !wm->value.IsObject()) return invalid("index " + location + " has no weight_map object");
  // weight_map is the only source of shard names (LOAD-14): never guessed from a pattern.
  std::unordered_map<std::string, std::string> tensor_shard;
  std::set<std::string> shard_names;
  for (auto it = wm->value.MemberBegin(); it != wm->value.MemberEnd(); ++it) {
    const std::string name(it->name.GetString(), it->name.GetStringLength());
    if (!it->value.IsString()) return invalid("index " + location + " maps tensor " + name + " to something not a file name");
    const std::string shard(it->value.GetString(), it->value.GetStringLength());
    if (!tensor_shard.emplace(name, shard).second) return invalid("index " + location + " lists tensor " + name + " twice");
    shard_names.insert(shard);
  }
  if (tensor_shard.empty()) return invalid("index " + location + " has an empty weight_map");

  model_index idx;
  idx.source = src.text;
  idx.remote = src.remote();
  idx.sharded = true;
  idx.index_location = location;
  for (const auto& shard : shard_names) {
    auto loc = shard_location(location, shard, src.remote());
    if (!loc) return std::move(loc).err();
    std::string digest;
    auto h = read_header(reader, *loc, &digest);
    if (!h) {
      if (h.err().code == errc::not_found)
        return invalid("index " + location + " names shard " + shard + ", but " + *loc + " does not exist");
      return std::move(h).err();
    }
    model_file f{shard, *loc, h->first.data_start, h->second, std::move(digest)};
    MPAKT_TRY(add_file(idx, std::move(f), h->first, [&](const st_entry& e) {
      auto it = tensor_shard.find(e.name);
      return it != tensor_shard.end() && it->second == shard;
    }));
    idx.shards.push_back(shard);
  }
  for (const auto& [name, shard] : tensor_shard)
    if (!idx.by_name.count(name))
      return invalid("index " + location + " maps tensor " + name + " to shard " + shard +
                     ", whose header does not hold it");
  return idx;
}

}  // namespace

const tensor_info* model_index::find(std::string_view name) const {
  auto it = by_name.find(std::string(name));
  return it == by_name.end() ? nullptr : &tensors[it->second];
}

result<std::pair<st_header, std::optional<std::uint64_t>>> read_header(byte_reader& reader, const std::string& location,
                                                                       std::string* digest) {
  auto first = reader.read_range(location, 0, header_probe_bytes);
  if (!first) return std::move(first).err();
  std::string& bytes = first->bytes;
  std::optional<std::uint64_t> size = first->file_size;
  if (bytes.size() < 8) return invalid(location + " is not a safetensors file (shorter than 8 bytes)");
  auto n = safetensors_header_length(std::string_view(bytes).substr(0, 8));
  if (!n) return invalid(location + ": " + n.err().message);
  const std::uint64_t need = 8 + *n;
  if ((size && need > *size) || (bytes.size() < need && bytes.size() < header_probe_bytes))
    return invalid(location + ": the safetensors header runs past the end of the file");
  if (bytes.size() < need) {
    // A header longer than the probe: one more request for the rest of it.
    auto more = reader.read_range(location, bytes.size(), need - bytes.size());
    if (!more) return std::move(more).err();
    if (more->bytes.size() != need - bytes.size())
      return invalid(location + ": the safetensors header runs past the end of the file");
    bytes += more->bytes;
    if (!size) size = more->file_size;
  }
  const std::string_view json = std::string_view(bytes).substr(8, std::size_t(*n));
  std::optional<std::uint64_t> data_bytes;
  if (size) data_bytes = *size - need;
  auto h = parse_safetensors_header(json, *n, data_bytes);
  if (!h) return invalid(location + ": " + h.err().message);
  if (digest) {
    sha256_stream sha;
    sha.add(std::string_view(bytes).substr(0, std::size_t(need)));
    *digest = sha.hex();
  }
  return std::make_pair(std::move(*h), size);
}

result<model_index> inspect_source(const model_source& src, byte_reader& reader) {
  std::vector<std::string> absent;
  for (const auto& c : src.candidates) {
    if (c.is_index) {
      auto json = reader.read_all(c.location, max_index_bytes);
      if (!json && json.err().code == errc::not_found) {
        absent.push_back(c.location);
        continue;
      }
      if (!json) return std::move(json).err();
      return index_sharded(src, c.location, *json, reader);
    }
    std::string digest;
    auto h = read_header(reader, c.location, &digest);
    if (!h && h.err().code == errc::not_found) {
      absent.push_back(c.location);
      continue;
    }
    if (!h) return std::move(h).err();
    return index_single(src, c.location, std::move(h->first), h->second, std::move(digest));
  }
  std::string list;
  for (std::size_t i = 0; i < absent.size(); ++i) list += (i ? (i + 1 == absent.size() ? " nor " : ", ") : "") + absent[i];
  return invalid("source " + src.text + ": " + (absent.size() > 1 ? "neither " : "") + list +
                 (absent.size() > 1 ? " exists" : " does not exist"));
}

inspect_model_reply inspect_reply_of(const model_index& idx) {
  inspect_model_reply r;
  r.total_bytes = idx.total_bytes;
  for (const auto& [name, n] : idx.dtypes) r.dtypes.push_back(dtype_count{name, n});
  r.tensors.reserve(idx.tensors.size());
  for (const auto& t : idx.tensors)
    r.tensors.push_back(inspect_tensor{t.name(), t.entry.shape, published_dtype_name(t.entry.file_dtype), t.bytes()});
  r.sharded = idx.sharded;
  r.shards = idx.shards;
  return r;
}

}  // namespace mpakt::loader
