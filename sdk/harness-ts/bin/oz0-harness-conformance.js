#!/usr/bin/env node
// Runs the compiled conformance kit (npm run build first).
import "../dist/testing/conformance/conformance-cli.js";
