#!/usr/bin/env bash
# The README's serve command: installs what is missing, builds, and starts `mpakt serve`
# (dev mode: sign-ups approved at once) with the demo model, stories260K, ready to load
# through a local model host — the same path a real hub load takes.
#
#   MPAKT_PORT (default 8080), MPAKT_HOST_PORT (8081), MPAKT_DATA (.mpakt-data)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash tools/install.sh
bash tools/build.sh

port="${MPAKT_PORT:-8080}"
host_port="${MPAKT_HOST_PORT:-8081}"
data="${MPAKT_DATA:-$here/.mpakt-data}"
model="$here/../shared/models/stories260K"

# The model host serves DIR/{org}/{model}/{file} as the hub does: put stories260K there.
mkdir -p "$data/hub/local/stories260K"
cp "$model"/config.json "$model"/model.safetensors "$model"/tokenizer.json "$model"/tokenizer_config.json \
   "$data/hub/local/stories260K/"

build/mpakt host "$data/hub" --port "$host_port" > "$data/host.log" 2>&1 &
host_pid=$!
trap 'kill $host_pid 2>/dev/null || true' EXIT

base="http://127.0.0.1:$port"
cat <<EOT

  Open $base/ in a browser for the chat page: sign up (approved at once on this demo
  server), keep the model hf:local/stories260K, and type the start of a story.

  Or from the command line — the demo model is ready to load as hf:local/stories260K:

    curl -X POST $base/api/accounts -d '{"username":"alice","password":"a long password"}'
    TOKEN=\$(curl -s -X POST $base/api/accounts/login -d '{"username":"alice","password":"a long password"}' | sed 's/.*"token":"\([^"]*\)".*/\1/')
    KEY=\$(curl -s -X POST $base/api/keys -H "Authorization: Bearer \$TOKEN" -d '{"label":"first"}' | sed 's/.*"key":"\([^"]*\)".*/\1/')
    curl -s "$base/api/v3/models/inspect?source=hf:local/stories260K" -H "x-api-key: \$KEY"
    curl -s -X POST $base/api/v3/models -H "x-api-key: \$KEY" -d '{"source":"hf:local/stories260K"}'
    curl -N -X POST $base/api/v3/chat -H "x-api-key: \$KEY" -d '{"model":"hf:local/stories260K","messages":[{"role":"user","content":"Once upon a time"}]}'

  Then build/mpakt graph ../shared/models/stories260K/config.json --help shows how to make
  the graphs to run; the Python client is clients/mpakt_grid.py; the reference is at $base/llms.txt.

EOT
build/mpakt serve --port "$port" --data-dir "$data" --dev --hf-endpoint "http://127.0.0.1:$host_port"
