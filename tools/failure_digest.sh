#!/usr/bin/env bash
# Prints, in a few lines, why the tests of one build folder failed: for each test in its last
# ctest run's failed list, the last lines of its output that name a cause (a sanitizer's or
# libFuzzer's ERROR/SUMMARY, a timeout, a gtest or pytest failure), and for a fuzz build each
# input libFuzzer kept as a crasher (its name, size, and base64 when small enough to replay).
# tools/test.sh calls it last, so that the end of a failed run's output says what failed and why
# even when only that end is kept.
#   tools/failure_digest.sh BUILD_DIR
set -uo pipefail
dir="$1"
tmp="$dir/Testing/Temporary"
failed="$tmp/LastTestsFailed.log"
log="$tmp/LastTest.log"
[[ -f "$failed" && -f "$log" ]] || exit 0
pattern='ERROR:|SUMMARY:|runtime error|ALARM|timeout|out-of-memory|Failure$|FAILED |Expected|Which is|Error:|Assertion|Traceback|what\(\)'
while IFS=: read -r _ name; do
  [[ -n "$name" ]] || continue
  # that test's block in LastTest.log: its output between "Output:" and "<end of output>",
  # then its "Test time" line
  block=$(awk -v t="$name" '
    /^[0-9]+\/[0-9]+ Test: / { h = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", h); mine = (h == t); state = 0; next }
    !mine { next }
    state == 0 && $0 == "Output:" { state = 1; next }
    state == 1 { state = 2; next }  # the dashes under "Output:"
    state == 2 && $0 == "<end of output>" { state = 3; next }
    state == 2 { print "out " $0; next }
    state == 3 && /^Test time/ { print "time " $0; mine = 0 }' "$log")
  causes=$(grep '^out ' <<<"$block" | cut -c5- | grep -E "$pattern" | tail -n 3)
  frame=$(grep '^out ' <<<"$block" | cut -c5- | grep -m1 -E '^ *#[0-9]+ .* in mpakt::')
  if [[ -z "$causes" ]]; then
    causes="no cause named in its output; $(grep '^time ' <<<"$block" | cut -c6-); last line: $(grep '^out ' <<<"$block" | tail -n 1 | cut -c5-)"
  fi
  printf '%s\n' "$causes" ${frame:+"$frame"} | cut -c1-300 | sed "s|^|$name: |"
done < "$failed"
shopt -s nullglob
for f in "$dir"/crashes/*; do
  size=$(stat -c %s "$f")
  if ((size <= 384)); then
    echo "kept input $(basename "$f") ($size bytes), base64: $(base64 -w0 "$f")"
  else
    echo "kept input $(basename "$f") ($size bytes; too long to print)"
  fi
done
