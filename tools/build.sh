#!/usr/bin/env bash
# Configures and builds one of mpakt's build folders (Ninja, ccache):
#   tools/build.sh        build/       RelWithDebInfo, everything (the binary, tests, benchmarks)
#   tools/build.sh asan   build-asan/  the unit tests under AddressSanitizer + UndefinedBehaviorSanitizer
#                                      (g++, -O1, no CUDA; only mpakt_tests and what it needs)
#   tools/build.sh fuzz   build-fuzz/  the libFuzzer targets of test/fuzz (clang, ASan + UBSan)
#   tools/build.sh tsan   build-tsan/  the mpakt binary under ThreadSanitizer (by hand, not CI)
# Jobs default to the core count; oneDNN/OpenMP threads are not used by the build.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
jobs="${MPAKT_JOBS:-$(nproc)}"
flavour="${1:-main}"
case "$flavour" in
  main)
    dir=build targets=()
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan)
    dir=build-asan targets=(--target mpakt_tests)
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
          -DMPAKT_SANITIZE=address,undefined -DMPAKT_CUDA=OFF) ;;
  tsan)
    # not a CI suite: the ThreadSanitizer build of the binary, run by hand when changing actors
    # (docs/building.md, "ThreadSanitizer")
    dir=build-tsan targets=(--target mpakt)
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
          -DMPAKT_SANITIZE=thread -DMPAKT_CUDA=OFF) ;;
  fuzz)
    dir=build-fuzz targets=()
    args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
          -DCMAKE_CXX_COMPILER="$(command -v clang++-14 || command -v clang++)" -DMPAKT_FUZZ=ON) ;;
  *) echo "usage: tools/build.sh [main|asan|fuzz|tsan]" >&2; exit 2 ;;
esac
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja "${args[@]}" ${MPAKT_CMAKE_ARGS:-}
fi
cmake --build "$dir" -j "$jobs" ${targets[@]+"${targets[@]}"}
