#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <unistd.h>

#include "actors/loader/reader.hpp"
#include "actors/loader/source.hpp"

namespace mpakt::loader {

namespace {

struct file_closer {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

class local_reader final : public byte_reader {
 public:
  explicit local_reader(std::vector<std::string> allowed_dirs) : allowed_dirs_(std::move(allowed_dirs)) {}

  result<range_read> read_range(const std::string& location, std::uint64_t first, std::uint64_t length) override {
    auto f = open(location);
    if (!f) return std::move(f).err();
    auto size = file_size(f->get(), location);
    if (!size) return std::move(size).err();
    range_read out;
    out.file_size = *size;
    if (first >= *size || length == 0) return out;
    const std::uint64_t n = std::min(length, *size - first);
    if (fseeko(f->get(), off_t(first), SEEK_SET) != 0)
      return make_error(errc::internal, "cannot seek in " + location + ": " + std::strerror(errno));
    out.bytes.resize(std::size_t(n));
    if (std::fread(out.bytes.data(), 1, out.bytes.size(), f->get()) != out.bytes.size())
      return make_error(errc::internal, "cannot read " + location + ": " + std::strerror(errno));
    return out;
  }

  result<std::uint64_t> read_range_into(const std::string& location, std::uint64_t first,
                                        std::span<const std::span<char>> parts, const part_filled& filled) override {
    auto f = open(location);
    if (!f) return std::move(f).err();
    auto size = file_size(f->get(), location);
    if (!size) return std::move(size).err();
    const int fd = fileno(f->get());
    std::uint64_t pos = first, read = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const auto& part = parts[i];
      std::size_t at = 0;
      for (; at < part.size() && pos < *size;) {
        const std::size_t want = std::size_t(std::min<std::uint64_t>(part.size() - at, *size - pos));
        const ssize_t n = ::pread(fd, part.data() + at, want, off_t(pos));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return make_error(errc::internal, "cannot read " + location + ": " + std::strerror(errno));
        if (n == 0) return make_error(errc::internal, location + " shrank while it was being read");
        at += std::size_t(n);
        pos += std::uint64_t(n);
        read += std::uint64_t(n);
      }
      if (at < part.size()) break;  // (the file ended)
      if (filled) filled(i);
    }
    return read;
  }

  result<std::string> read_all(const std::string& location, std::size_t max_bytes) override {
    auto f = open(location);
    if (!f) return std::move(f).err();
    auto size = file_size(f->get(), location);
    if (!size) return std::move(size).err();
    if (*size > max_bytes)
      return make_error(errc::too_large, location + " holds " + std::to_string(*size) + " bytes, more than the " +
                                             std::to_string(max_bytes) + " accepted");
    std::string out(std::size_t(*size), '\0');
    if (std::fread(out.data(), 1, out.size(), f->get()) != out.size())
      return make_error(errc::internal, "cannot read " + location + ": " + std::strerror(errno));
    return out;
  }

  std::uint64_t requests() const override { return requests_; }

 private:
  result<file_ptr> open(const std::string& location) {
    ++requests_;
    // A shard an index names, or a link inside an allowed folder, may still lead outside it.
    if (!allowed_dirs_.empty() && !inside_dirs(location, allowed_dirs_))
      return invalid(location + " is outside the folders this server reads models from (mpakt serve --allow-local)");
    file_ptr f(std::fopen(location.c_str(), "rb"));
    if (!f) {
      if (errno == ENOENT || errno == ENOTDIR) return make_error(errc::not_found, location + " does not exist");
      return invalid("cannot open " + location + ": " + std::strerror(errno));
    }
    return f;
  }

  static result<std::uint64_t> file_size(std::FILE* f, const std::string& location) {
    if (fseeko(f, 0, SEEK_END) != 0) return invalid("cannot seek in " + location + " (is it a regular file?)");
    const off_t end = ftello(f);
    if (end < 0 || fseeko(f, 0, SEEK_SET) != 0) return invalid("cannot size " + location);
    return std::uint64_t(end);
  }

  std::vector<std::string> allowed_dirs_;
  std::uint64_t requests_ = 0;
};

}  // namespace

std::unique_ptr<byte_reader> make_local_reader(std::vector<std::string> allowed_dirs) {
  return std::make_unique<local_reader>(std::move(allowed_dirs));
}

}  // namespace mpakt::loader
