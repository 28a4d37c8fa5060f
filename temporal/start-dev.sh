#!/usr/bin/env bash
# Starts `temporal server start-dev` with llmgw's search attributes, data in
# .llmgw/temporal/dev.db (pass --in-memory for none), Web UI on 8233.
# Returns control only when the frontend answers; Ctrl-C stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
exec node bin/llmgw.js temporal start-dev "$@"
