// mpakt_quantize_bench: quantize on load alone — bf16 rows to q8 and q4 in lanes, as a worker
// converts a window of arriving rows — at every kernel level this CPU has: the one pass
// (cpu_fast::quantize_group_to_lanes) against the two steps it replaced (each row quantized to
// row-major blocks, then the sixteen rows reordered into lanes), beside a plain copy of the same
// published bytes, on one thread. Both ways must give the same bytes (checked each run); a level
// where the one pass declines the dtype shows the two steps alone.
//
//   mpakt_quantize_bench [--cols C] [--rows R] [--repeats N]
//
// Defaults: rows of 576 (the SmolLM2-135M width); 64 rows (in the caches) and 1,536 rows
// (1.7 MB of bf16, about a fetch thread's 2 MB conversion window). Reports the best of N runs:
// ns per 32-value block, GB/s of bf16 read, and the one pass's speed over the two steps'.
// q4's random rows are kept off zero (a block whose extreme is zero takes the two steps).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/isa.hpp"
#include "backends/cpu/quantize.hpp"
#include "bench/timing.hpp"
#include "runtime/dtype.hpp"

using namespace mpakt;
using namespace mpakt::bench;

int main(int argc, char** argv) {
  std::int64_t cols = 576;
  int repeats = 15;
  std::vector<std::int64_t> row_counts{64, 1536};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--cols") cols = std::atol(argv[i + 1]);
    else if (a == "--rows") row_counts = {std::atol(argv[i + 1])};
    else if (a == "--repeats") repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (cols <= 0 || cols % quant_block != 0 || repeats < 1) {
    std::fprintf(stderr, "--cols must be a positive multiple of 32, --repeats at least 1\n");
    return 2;
  }
  for (auto& r : row_counts) r = std::max<std::int64_t>(16, r / 16 * 16);
  std::printf("bf16 rows of %ld values to q8 and q4 in lanes, one thread, best of %d\n", long(cols), repeats);
  std::printf("%-5s %-12s %6s %10s  %18s  %18s  %18s  %8s\n", "dtype", "level", "rows", "MB bf16", "two steps ns/blk",
              "one pass ns/blk", "copy ns/blk", "speedup");
  for (const dtype to : {dtype::q8, dtype::q4}) {
    const std::string dt(dtype_name(to));
    const std::size_t row_q = *storage_bytes(to, cols);
    for (const std::int64_t rows : row_counts) {
      std::vector<std::uint16_t> src(std::size_t(rows * cols));
      std::mt19937 g(1);
      std::normal_distribution<float> normal(0, 0.02f);
      for (auto& w : src) {
        float f = normal(g);
        if (f == 0) f = 0.01f;
        std::uint32_t u;
        std::memcpy(&u, &f, 4);
        w = std::uint16_t(u >> 16);
        if ((w & 0x7fff) == 0) w |= 1;  // (no zero after truncation either)
      }
      std::vector<std::byte> two(row_q * std::size_t(rows)), one(two.size()), group(row_q * 16);
      std::vector<std::uint16_t> copied(src.size());
      std::vector<float> scratch(static_cast<std::size_t>(cols));
      const double blocks = double(rows) * double(cols) / quant_block, mb = double(src.size()) * 2 / 1e6;
      // (a copy is the same at every level: taken once)
      const double copy = best_of(repeats, [&] { std::memcpy(copied.data(), src.data(), src.size() * 2); });
      for (const auto level : cpu_isa::supported_levels()) {
        if (level < cpu_isa::level::avx2 || !cpu_isa::set_level(level)) continue;
        const std::string name(cpu_isa::level_name(level));
        const double t_two = best_of(repeats, [&] {
          for (std::int64_t gr = 0; gr < rows / 16; ++gr) {
            for (int l = 0; l < 16; ++l)
              cpu_fast::quantize_row_from(dtype::bf16, to, src.data() + (gr * 16 + l) * cols, group.data() + l * row_q, cols,
                                          scratch.data());
            cpu_fast::group_to_lanes(to, group.data(), two.data() + gr * 16 * row_q, cols);
          }
        });
        bool taken = true;
        const auto one_pass = [&] {
          for (std::int64_t gr = 0; gr < rows / 16; ++gr)
            taken = cpu_fast::quantize_group_to_lanes(dtype::bf16, to, src.data() + gr * 16 * cols, cols * 2,
                                                      one.data() + gr * 16 * row_q, cols) &&
                    taken;
        };
        one_pass();
        if (!taken) {
          std::printf("%-5s %-12s %6ld %10.2f  %7.2f (%5.1f GB/s)  %18s  %7.2f (%5.1f GB/s)\n", dt.c_str(),
                      name.c_str(), long(rows), mb, t_two / blocks * 1e9, mb / 1e3 / t_two, "(none here)",
                      copy / blocks * 1e9, mb / 1e3 / copy);
          continue;
        }
        const double t_one = best_of(repeats, one_pass);
        if (!taken || one != two) {
          std::fprintf(stderr, "%s at %s: the one pass %s\n", dt.c_str(), name.c_str(),
                       taken ? "wrote other bytes than the two steps" : "declined a group it took before");
          return 1;
        }
        std::printf("%-5s %-12s %6ld %10.2f  %7.2f (%5.1f GB/s)  %7.2f (%5.1f GB/s)  %7.2f (%5.1f GB/s)  %7.2fx\n",
                    dt.c_str(), name.c_str(), long(rows), mb, t_two / blocks * 1e9, mb / 1e3 / t_two,
                    t_one / blocks * 1e9, mb / 1e3 / t_one, copy / blocks * 1e9, mb / 1e3 / copy, t_two / t_one);
      }
    }
  }
  return 0;
}
