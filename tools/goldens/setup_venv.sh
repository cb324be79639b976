#!/usr/bin/env bash
# Create (or bring up to date) the virtualenv the golden generator runs in: <repo>/.venv-goldens.
# Idempotent: an existing venv whose packages already match requirements.txt is left alone.
# Usage: tools/goldens/setup_venv.sh      (then: .venv-goldens/bin/python tools/goldens/gen_ops.py)
# Env:   PYTHON (interpreter used to create the venv, default python3), GOLDENS_VENV (venv path).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${GOLDENS_VENV:-$root/.venv-goldens}"
req="$here/requirements.txt"

if [ ! -x "$venv/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$venv"
fi

if "$venv/bin/python" - "$req" <<'PY'
import sys
import importlib.metadata as md
ok = True
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, _, want = line.partition("==")
    try:
        have = md.version(name.strip())
    except md.PackageNotFoundError:
        ok = False
        continue
    if want and have.split("+")[0] != want.strip():
        ok = False
sys.exit(0 if ok else 1)
PY
then
  echo "goldens venv up to date: $venv"
else
  "$venv/bin/python" -m pip install --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install -r "$req"
fi
