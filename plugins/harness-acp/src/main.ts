#!/usr/bin/env node
// oz0-harness-acp [--agent PRESET | --agent-command PROGRAM [ARGS...]]: one
// harness session per process, run by an ACP agent. The flags name the agent
// when the request's harness options do not (the conformance kit sends none;
// a plugin can also pin one agent in its manifest's command this way).
import { readFileSync } from "node:fs";
import { runHarness } from "@oz0/harness";
import { AcpSessionRun } from "./acp-session.js";
import { AGENT_PRESET_NAMES, isAgentPresetName } from "./agent-presets.js";
import type { AgentPresetName } from "./agent-presets.js";
import type { AgentSpec } from "./harness-options.js";

const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
  version: string;
};
const USAGE = "usage: oz0-harness-acp [--agent PRESET | --agent-command PROGRAM [ARGS...]]";

function defaultAgent(argv: string[]): AgentSpec | undefined {
  const [flag, ...rest] = argv;
  if (flag === undefined) return undefined;
  if (flag === "--agent" && rest.length === 1 && isAgentPresetName(rest[0] ?? ""))
    return { kind: "preset", preset: rest[0] as AgentPresetName };
  if (flag === "--agent-command" && rest.length > 0)
    return { kind: "command", command: rest, env: {}, modelEnv: "anthropic" };
  process.stderr.write(
    `oz0-harness-acp: ${argv.join(" ")}: not understood (presets: ${AGENT_PRESET_NAMES.join(", ")})\n${USAGE}\n`,
  );
  process.exit(2);
}

const agent = defaultAgent(process.argv.slice(2));
let run: AcpSessionRun | undefined;
let cancelledEarly = false;
// This harness handles SIGTERM itself: the result waits for the agent's own
// `cancelled` stop (within the grace), so there is exactly one result.
process.on("SIGTERM", () => {
  if (run === undefined) cancelledEarly = true;
  else run.cancel();
});

await runHarness(
  {
    name: "acp",
    version,
    capabilities: { permissions: true, streamingText: true },
    handleSigterm: false,
  },
  async (session) => {
    run = new AcpSessionRun({
      session,
      version,
      inheritedEnv: process.env,
      ...(agent !== undefined ? { defaultAgent: agent } : {}),
    });
    if (cancelledEarly) run.cancel();
    return run.run();
  },
);
// Nothing should be left, but a stuck handle must not keep a finished session alive.
setTimeout(() => process.exit(), 1_000).unref();
