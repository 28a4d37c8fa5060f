#!/usr/bin/env bash
# Stops what start-postgres.sh left running (the server, and the private PostgreSQL);
# --purge also deletes its data.
set -euo pipefail
cd "$(dirname "$0")/.."
exec node bin/llmgw.js temporal stop-postgres "$@"
