#!/usr/bin/env bash
# The README's serve command: installs what is missing, builds, and runs the demo model.
#
# Until the coordinator (`mpakt serve`) lands, this runs stories260K locally through the
# runtime: it builds the model's graphs from config.json and greedy-decodes a story.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash tools/install.sh
bash tools/build.sh
model="${MPAKT_DEMO_MODEL:-$here/../shared/models/stories260K}"
exec build/mpakt demo "$model"
