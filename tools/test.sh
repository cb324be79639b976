#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash tools/install.sh
bash tools/build.sh
# Tests compute on one thread each; keep OpenMP (oneDNN) from oversubscribing 2 cores.
export OMP_NUM_THREADS=1
ctest --test-dir build --output-on-failure -j "${MPAKT_TEST_JOBS:-2}" --timeout 900
