#!/usr/bin/env node
// oz0-harness-claude: one harness session per process, as the runtime starts it
// (`node dist/main.js`, the session request on stdin).
import { readFileSync } from "node:fs";
import { runHarness } from "@oz0/harness";
import { runClaudeSession } from "./claude-session.js";

const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
  version: string;
};

/**
 * SIGTERM makes @oz0/harness write the one `cancelled` result at once and
 * abort the session's signal, which ends Claude Code. The process then waits
 * for Claude Code to be gone (so no process outlives the session) and exits;
 * this timer bounds that wait well inside the runtime's 10 s grace.
 */
const EXIT_AFTER_CANCEL_MS = 5_000;

await runHarness(
  {
    name: "claude-agent-sdk",
    version,
    capabilities: { permissions: true, runtimeTools: true, structuredOutput: true, streamingText: true },
    exitOnCancel: false,
  },
  async (session) => {
    session.onCancel(() => setTimeout(() => process.exit(0), EXIT_AFTER_CANCEL_MS).unref());
    return runClaudeSession({ session });
  },
);
