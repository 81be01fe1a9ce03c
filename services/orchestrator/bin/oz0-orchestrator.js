#!/usr/bin/env node
// oz0-orchestrator: runs the compiled service (npm run build first).
import "../dist/main.js";
