#!/usr/bin/env node
// The `llmgw` command: a thin launcher for the compiled CLI (npm run build writes dist/).
require('../dist/cli/main.js');
