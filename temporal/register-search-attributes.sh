#!/usr/bin/env bash
# Registers llmgw's six search attributes on an existing Temporal cluster.
# Connection settings are the Temporal CLI's own (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
# TLS, API key, or flags passed through: --address host:7233 --namespace ns).
set -euo pipefail
cd "$(dirname "$0")/.."
exec node bin/llmgw.js temporal register-search-attributes -- "$@"
