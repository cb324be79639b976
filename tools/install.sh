#!/usr/bin/env bash
# Installs everything mpakt needs to build and test, and nothing twice.
# Used by both README commands (serve and test). Safe to run repeatedly.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

debs=(
  build-essential cmake ninja-build ccache pkg-config lld
  libcaf-dev libboost1.81-dev rapidjson-dev
  libsqlite3-dev libssl-dev
  libgtest-dev libgmock-dev
  # the fuzz targets (tools/build.sh fuzz): clang with libFuzzer and the sanitizer runtimes
  clang-14 libclang-rt-14-dev
  python3 python3-venv python3-pip
  # the chat page's browser test: headless Chromium driven by Selenium, and fonts to lay out text
  chromium chromium-driver fonts-liberation
  # test/e2e/test_metrics.py: a real Prometheus server scrapes a running grid's /metrics
  prometheus
  # test/e2e/test_top.py: mpakt top is driven in a terminal multiplexer and read back
  tmux
)

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install: Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages for the test suite (no torch here: goldens are committed fixtures).
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
req="$here/tools/requirements-test.txt"
stamp="$venv/.req-stamp"
if [ ! -f "$stamp" ] || ! cmp -s "$req" "$stamp"; then
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  cp "$req" "$stamp"
fi
