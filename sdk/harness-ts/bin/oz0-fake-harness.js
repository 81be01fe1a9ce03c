#!/usr/bin/env node
// Runs the compiled fake harness (npm run build first).
import "../dist/fake-harness/fake-harness.js";
