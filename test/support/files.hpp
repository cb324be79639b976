#pragma once
/// Small file helpers for tests: a temporary folder, read text, read .npy (float64/float32, C
/// order).

#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace mpakt::test {

/// A fresh folder under /tmp (`prefix` + random letters), removed with everything in it when
/// the object goes.
struct temp_dir {
  std::string path;
  explicit temp_dir(const std::string& prefix = "mpakt-test-") {
    std::string t = "/tmp/" + prefix + "XXXXXX";
    path = mkdtemp(t.data());
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct npy_array {
  std::vector<std::int64_t> shape;
  std::vector<double> data;
};

/// Reads a version-1/2 .npy holding little-endian f8 or f4 in C order; empty on failure.
inline npy_array read_npy(const std::string& path) {
  npy_array out;
  const std::string s = read_file(path);
  if (s.size() < 10 || s.compare(0, 6, "\x93NUMPY") != 0) return out;
  const int major = static_cast<unsigned char>(s[6]);
  std::size_t hlen, off;
  if (major == 1) {
    hlen = static_cast<unsigned char>(s[8]) | (static_cast<unsigned char>(s[9]) << 8);
    off = 10;
  } else {
    hlen = 0;
    for (int i = 3; i >= 0; --i) hlen = (hlen << 8) | static_cast<unsigned char>(s[8 + std::size_t(i)]);
    off = 12;
  }
  const std::string header = s.substr(off, hlen);
  const bool f8 = header.find("'<f8'") != std::string::npos;
  const bool f4 = header.find("'<f4'") != std::string::npos;
  if ((!f8 && !f4) || header.find("'fortran_order': False") == std::string::npos) return out;
  const auto lp = header.find('(', header.find("'shape'")), rp = header.find(')', lp);
  std::stringstream dims(header.substr(lp + 1, rp - lp - 1));
  std::string tok;
  std::int64_t n = 1;
  while (std::getline(dims, tok, ','))
    if (tok.find_first_of("0123456789") != std::string::npos) {
      out.shape.push_back(std::stoll(tok));
      n *= out.shape.back();
    }
  const char* p = s.data() + off + hlen;
  out.data.resize(std::size_t(n));
  for (std::int64_t i = 0; i < n; ++i) {
    if (f8) {
      double v;
      std::memcpy(&v, p + i * 8, 8);
      out.data[std::size_t(i)] = v;
    } else {
      float v;
      std::memcpy(&v, p + i * 4, 4);
      out.data[std::size_t(i)] = v;
    }
  }
  return out;
}

}  // namespace mpakt::test
