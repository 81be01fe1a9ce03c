#!/usr/bin/env node
// oz0 / orchestrator-zero: runs the compiled CLI (npm run build first).
import "../dist/cli/main.js";
