#!/usr/bin/env bash
# Makes the pinned Temporal CLI available and prints its path (builds it with Go into
# ~/.cache/llmgw the first time). Needs `npm install` to have run (it builds dist/).
set -euo pipefail
cd "$(dirname "$0")/.."
exec node bin/llmgw.js temporal install
