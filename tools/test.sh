#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test:
#   main  build/       the unit tests (a CTest entry each) and the end-to-end modules (e2e.<module>)
#   asan  build-asan/  the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer
#   fuzz  build-fuzz/  each libFuzzer target: its regression inputs and seeds, then a bounded run
# MPAKT_TEST_SUITES picks some ("main asan fuzz" by default). Every suite runs even when an
# earlier one failed; the command fails if any did.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash tools/install.sh
suites="${MPAKT_TEST_SUITES:-main asan fuzz}"
for s in $suites; do bash tools/build.sh "$s"; done
# ctest runs two tests at once: keep any OpenMP runtime a test's Python side loads (numpy,
# tokenizers) to one thread, so they do not oversubscribe the cores.
export OMP_NUM_THREADS=1
failed=() failed_dirs=()
for s in $suites; do
  case "$s" in main) dir=build ;; *) dir="build-$s" ;; esac
  echo "== ctest: $s ($dir)"
  ctest --test-dir "$dir" --output-on-failure -j "${MPAKT_TEST_JOBS:-2}" --timeout 900 || { failed+=("$s"); failed_dirs+=("$dir"); }
done
if ((${#failed[@]})); then
  # last, so that the end of the output says what failed and why (tools/failure_digest.sh)
  for dir in "${failed_dirs[@]}"; do bash tools/failure_digest.sh "$dir" >&2; done
  echo "FAILED suites: ${failed[*]}" >&2
  exit 1
fi
