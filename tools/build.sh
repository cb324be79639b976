#!/usr/bin/env bash
# Configures and builds mpakt in build/ (Release with debug info, Ninja, ccache).
# Jobs default to the core count; oneDNN/OpenMP threads are not used by the build.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
jobs="${MPAKT_JOBS:-$(nproc)}"
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${MPAKT_CMAKE_ARGS:-}
fi
cmake --build build -j "$jobs"
