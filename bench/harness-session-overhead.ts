// What the harness host adds to a session: median wall time of one
// oz0-fake-harness session (one scripted model turn) run through
// @oz0/harness/host (process group, framing, validation, outcome) against the
// same command spawned directly with a pipe, writing the same request line and
// waiting for exit, in the same run, alternating. Goal: < 30 ms added.
//
// Then the same sessions under bubblewrap as the sandbox's bwrap mode runs
// them (issue 24): the sandbox's own launcher (every namespace, the mounts,
// --die-with-parent) with its LLM path, a Unix socket on the node piped to
// the model and, inside, the entry (the sandbox's Perl forwarder) that
// forwards 127.0.0.1 to that socket and then runs the harness. Against the
// host without isolation in the same run, paired; and, to say which part
// costs what, the entry script and its forwarding without bubblewrap.
// Goal: bubblewrap adds < 30 ms at the median.
//   node --import tsx bench/harness-session-overhead.ts [--sessions 20]
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { clone, create, toJsonString } from "@bufbuild/protobuf";
import { SessionRequestSchema, type SessionRequest } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { startHostSession, type HarnessLauncher } from "@oz0/harness/host";
import { startScriptedModel } from "@oz0/harness/testing";
import {
  bubblewrapLauncher,
  DEFAULT_READ_ONLY_PATHS,
  detectBubblewrap,
} from "../services/sandbox/src/bubblewrap-launcher.js";
import {
  DEFAULT_FORWARD_IDLE_TIMEOUT_MS,
  DEFAULT_FORWARDS_PER_SESSION,
  ForwardBudget,
  planLlmForwards,
  startLlmForwarding,
  type LlmForward,
} from "../services/sandbox/src/llm-forwarder.js";
import { sandboxEntryCommand } from "../services/sandbox/src/sandbox-entry.js";
import { benchOptions } from "./bench-options.js";
import { median, startReport } from "./bench-report.js";

const SESSIONS = benchOptions({ sessions: { type: "number", default: 20 } }).sessions;

const report = startReport("harness-session-overhead");

const repoRoot = path.join(import.meta.dirname, "..");
const fakeHarness = path.join(repoRoot, "sdk", "harness-ts", "bin", "oz0-fake-harness.js");
const entryCommand = sandboxEntryCommand();
const command = [process.execPath, fakeHarness];
const forwardBudget = new ForwardBudget({
  perSession: DEFAULT_FORWARDS_PER_SESSION,
  total: 1024,
  idleTimeoutMs: DEFAULT_FORWARD_IDLE_TIMEOUT_MS,
});
const model = await startScriptedModel({ turns: () => ({ text: "Done." }) });
// Laid out as the sandbox lays a session out: bubblewrap hides the root and its parent, and binds the session's own directories again.
const benchDir = mkdtempSync(path.join(tmpdir(), "oz0-bench-session-"));
const sandboxRoot = path.join(benchDir, "root");
const workDir = path.join(sandboxRoot, "s1", "work");
const stateDir = path.join(sandboxRoot, "s1", "state");
const socketDir = path.join(sandboxRoot, "internal", "s1", "run");
for (const dir of [workDir, stateDir]) mkdirSync(dir, { recursive: true });
mkdirSync(socketDir, { recursive: true, mode: 0o700 });
const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: workDir };
const request = create(SessionRequestSchema, {
  protocolVersion: 1,
  jobId: "job-bench",
  agent: { name: "bench", version: 1 },
  model: { primary: "anthropic/scripted" },
  input: "Say done.",
  workingDir: workDir,
  llm: {
    anthropicBaseUrl: model.url,
    token: "oz0st_bench",
    headers: { "Oz0-Job": "job-bench", "Oz0-Agent": "bench@1" },
  },
});
const requestLine = toJsonString(SessionRequestSchema, request) + "\n";

async function throughHost(
  options: { launcher?: HarnessLauncher; request?: SessionRequest; command?: string[] } = {},
): Promise<number> {
  const started = performance.now();
  const session = startHostSession({
    command: options.command ?? command,
    cwd: workDir,
    env,
    request: options.request ?? request,
    ...(options.launcher ? { launcher: options.launcher } : {}),
  });
  const outcome = await session.outcome;
  if (outcome.status !== "completed")
    throw new Error(`host session ${outcome.status}: ${outcome.error?.message ?? ""}`);
  return performance.now() - started;
}

const bubblewrap = await detectBubblewrap();
const [forward] = planLlmForwards({ socketDir, urls: [{ field: "llm.anthropic_base_url", url: model.url }] }) as [
  LlmForward,
];

/** A session as the sandbox's bwrap mode runs it: the socket forwarding started for it, bubblewrap, the entry script inside, the harness. */
async function underBubblewrap(): Promise<number> {
  const started = performance.now();
  const forwarding = await startLlmForwarding({ forwards: [forward], budget: forwardBudget, sessionId: "ses_bench" });
  try {
    const inner = clone(SessionRequestSchema, request);
    inner.llm!.anthropicBaseUrl = forwarding.innerUrl(model.url);
    const launcher = bubblewrapLauncher({
      bwrapPath: bubblewrap.path!,
      readOnlyPaths: [...DEFAULT_READ_ONLY_PATHS, repoRoot],
      pluginDir: "",
      writablePaths: [workDir, stateDir],
      hiddenPaths: [],
      sandboxRoot,
      entry: { command: entryCommand, forwards: [forward] },
    });
    await throughHost({ launcher, request: inner });
  } finally {
    await forwarding.close();
  }
  return performance.now() - started;
}

/** The same entry script and socket forwarding with no bubblewrap: the entry listens on a free port of the node's loopback. */
async function forwarderWithoutBubblewrap(): Promise<number> {
  const started = performance.now();
  const port = await freePort();
  const outside: LlmForward = { ...forward, innerSocketPath: forward.socketPath, innerPort: port };
  const forwarding = await startLlmForwarding({ forwards: [outside], budget: forwardBudget, sessionId: "ses_bench" });
  try {
    const direct = clone(SessionRequestSchema, request);
    direct.llm!.anthropicBaseUrl = `http://127.0.0.1:${port}`;
    await throughHost({
      request: direct,
      command: [...entryCommand, `${port}=${outside.socketPath}`, "--", ...command],
    });
  } finally {
    await forwarding.close();
  }
  return performance.now() - started;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function directPipe(detached = false): Promise<number> {
  const started = performance.now();
  const [file, ...rest] = command as [string, ...string[]];
  const child = spawn(file, rest, { cwd: workDir, env, stdio: ["pipe", "pipe", "ignore"], detached });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => {
    output += chunk.toString("utf8");
    // Like the host, close stdin once the result is out so the harness can exit.
    if (output.includes('"result"')) child.stdin.end();
  });
  child.stdin.write(requestLine);
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  if (code !== 0 || !output.includes("STOP_REASON_COMPLETED")) throw new Error(`direct run failed with ${code}`);
  return performance.now() - started;
}

/** The nearest-rank percentile: with 20 values, p95 is the 19th. */
const percentile = (values: number[], p: number): number =>
  [...values].sort((a, b) => a - b)[Math.max(0, Math.ceil(p * values.length) - 1)] ?? NaN;
const isolated = bubblewrap.available;
try {
  await directPipe();
  await throughHost();
  if (isolated) {
    await underBubblewrap();
    await forwarderWithoutBubblewrap();
  }
  const host: number[] = [];
  const direct: number[] = [];
  const directSetsid: number[] = [];
  const bwrap: number[] = [];
  const forwarder: number[] = [];
  for (let i = 0; i < SESSIONS; i++) {
    direct.push(await directPipe());
    host.push(await throughHost());
    if (isolated) {
      bwrap.push(await underBubblewrap());
      forwarder.push(await forwarderWithoutBubblewrap());
    }
    directSetsid.push(await directPipe(true));
  }
  console.log(`${SESSIONS} sessions of oz0-fake-harness, one scripted model turn each`);
  console.log(`direct spawn + pipe:  median ${median(direct).toFixed(1)} ms`);
  // setsid puts the child in its own session, which Linux's scheduler autogroups treat as a separate
  // group: on a busy machine that alone moves timings, so it is shown apart from the host's own work.
  console.log(
    `direct, own session:  median ${median(directSetsid).toFixed(1)} ms (detached: true, as the host spawns)`,
  );
  console.log(`through the host:     median ${median(host).toFixed(1)} ms`);
  // Paired differences (each host run against the direct run just before it) are steadier on a busy machine.
  const paired = host.map((h, i) => h - (direct[i] ?? NaN));
  console.log(
    `added by the host: ${(median(host) - median(direct)).toFixed(1)} ms between medians, ${median(paired).toFixed(1)} ms median of paired differences (goal < 30 ms)`,
  );
  console.log(
    `host against direct in its own session: ${(median(host) - median(directSetsid)).toFixed(1)} ms between medians`,
  );

  console.log("");
  if (!isolated) console.log(`bubblewrap: not measured, ${bubblewrap.reason ?? "unavailable"}`);
  else {
    const added = bwrap.map((b, i) => b - host[i]!);
    const forwarderAdded = forwarder.map((f, i) => f - host[i]!);
    console.log(
      `under bubblewrap as the sandbox runs it (${bubblewrap.version ?? bubblewrap.path}; the entry script forwarding to a Unix socket, then the harness):`,
    );
    console.log(
      `  through the host, no isolation: median ${median(host).toFixed(1)} ms, p95 ${percentile(host, 0.95).toFixed(1)} ms`,
    );
    console.log(
      `  under bubblewrap:               median ${median(bwrap).toFixed(1)} ms, p95 ${percentile(bwrap, 0.95).toFixed(1)} ms`,
    );
    console.log(
      `  entry script, no bubblewrap:    median ${median(forwarder).toFixed(1)} ms, p95 ${percentile(forwarder, 0.95).toFixed(1)} ms`,
    );
    console.log(
      `  added by bubblewrap: ${(median(bwrap) - median(host)).toFixed(1)} ms between medians, ${(percentile(bwrap, 0.95) - percentile(host, 0.95)).toFixed(1)} ms between p95s; ` +
        `paired: median ${median(added).toFixed(1)} ms, p95 ${percentile(added, 0.95).toFixed(1)} ms (goal < 30 ms at the median)`,
    );
    report.ratio(
      "  ratio bubblewrap / no isolation, each session against the one without isolation before it",
      bwrap.map((b, i) => b / host[i]!),
    );
    console.log(
      `  of which the entry (the Perl forwarder) and its forwarding: ${median(forwarderAdded).toFixed(1)} ms paired median; ` +
        `the namespaces and mounts, the rest: ${(median(added) - median(forwarderAdded)).toFixed(1)} ms`,
    );
  }
} finally {
  report.end();
  await model.close();
  rmSync(benchDir, { recursive: true, force: true });
}
