#!/usr/bin/env bash
# Runs the pinned Temporal server (1.29.1) on PostgreSQL with llmgw's search attributes:
# builds the server and SQL tool with Go the first time, uses LLMGW_POSTGRES_URL or starts
# a private PostgreSQL under .llmgw/postgres, applies the schema, and returns control only
# when the server accepts workflows. Ctrl-C stops it; --detach leaves it running.
set -euo pipefail
cd "$(dirname "$0")/.."
exec node bin/llmgw.js temporal start-postgres "$@"
