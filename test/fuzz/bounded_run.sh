#!/usr/bin/env bash
# fuzz.<target>.run (CMakeLists.txt here): runs one libFuzzer target with the given arguments
# and passes its verdict through, with one exception, checked rather than assumed. libFuzzer
# reads a unit's running time off the wall clock, so a virtual machine paused for longer than
# -timeout (or a clock step) mid-unit reads as a slow input. When libFuzzer reports a timeout,
# the input it wrote is replayed alone under the same -timeout, three times: an input slow
# enough to time out again fails the test as before; one that runs in time on every replay is
# reported (with its file) as a stall of the machine, not of the target, and the run passes.
# Crashes, leaks and memory limits are never replayed: they fail as libFuzzer says.
#   bounded_run.sh TARGET_BINARY LIBFUZZER_ARGS...
set -uo pipefail
bin="$1"
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bin" "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
((rc == 0)) && exit 0
grep -q 'ERROR: libFuzzer: timeout after' "$out" || exit "$rc"
unit=$(grep -o 'Test unit written to .*' "$out" | tail -n 1 | cut -d' ' -f5-)
[[ -n "$unit" && -f "$unit" ]] || exit "$rc"
timeout_flag=$(printf '%s\n' "$@" | grep -m1 '^-timeout=' || echo '-timeout=10')
for i in 1 2 3; do
  start=$(date +%s%N)
  if ! "$bin" "$timeout_flag" -rss_limit_mb=2048 "$unit" >/dev/null 2>&1; then
    echo "bounded_run: the timed-out input $unit times out again when replayed alone ($timeout_flag): a slow input"
    exit "$rc"
  fi
  echo "bounded_run: replay $i of $unit alone: passed in $((($(date +%s%N) - start) / 1000000)) ms"
done
echo "bounded_run: the timed-out input runs in time alone (three replays under $timeout_flag): the machine stalled" \
  "mid-unit, not the target; the run passes (the input stays in $unit)"
exit 0
