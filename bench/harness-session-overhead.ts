// What the harness host adds to a session: median wall time of one
// oz0-fake-harness session (one scripted model turn) run through
// @oz0/harness/host (process group, framing, validation, outcome) against the
// same command spawned directly with a pipe, writing the same request line and
// waiting for exit, in the same run, alternating. Goal: < 30 ms added.
//   node --import tsx bench/harness-session-overhead.ts [--sessions 20]
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { create, toJsonString } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { startHostSession } from "@oz0/harness/host";
import { startScriptedModel } from "@oz0/harness/testing";
import { benchOptions } from "./bench-options.js";

const SESSIONS = benchOptions({ sessions: { type: "number", default: 20 } }).sessions;

const fakeHarness = path.join(import.meta.dirname, "..", "sdk", "harness-ts", "bin", "oz0-fake-harness.js");
const command = [process.execPath, fakeHarness];
const model = await startScriptedModel({ turns: () => ({ text: "Done." }) });
const workDir = mkdtempSync(path.join(tmpdir(), "oz0-bench-session-"));
const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: workDir };
const request = create(SessionRequestSchema, {
  protocolVersion: 1,
  jobId: "job-bench",
  agent: { name: "bench", version: 1 },
  model: { primary: "anthropic/scripted" },
  input: "Say done.",
  workingDir: workDir,
  llm: { anthropicBaseUrl: model.url, token: "oz0st_bench", headers: { "Oz0-Job": "job-bench", "Oz0-Agent": "bench@1" } },
});
const requestLine = toJsonString(SessionRequestSchema, request) + "\n";

async function throughHost(): Promise<number> {
  const started = performance.now();
  const session = startHostSession({ command, cwd: workDir, env, request });
  const outcome = await session.outcome;
  if (outcome.status !== "completed") throw new Error(`host session ${outcome.status}: ${outcome.error?.message ?? ""}`);
  return performance.now() - started;
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

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;
try {
  await directPipe();
  await throughHost();
  const host: number[] = [];
  const direct: number[] = [];
  const directSetsid: number[] = [];
  for (let i = 0; i < SESSIONS; i++) {
    direct.push(await directPipe());
    host.push(await throughHost());
    directSetsid.push(await directPipe(true));
  }
  console.log(`${SESSIONS} sessions of oz0-fake-harness, one scripted model turn each`);
  console.log(`direct spawn + pipe:  median ${median(direct).toFixed(1)} ms`);
  // setsid puts the child in its own session, which Linux's scheduler autogroups treat as a separate
  // group: on a busy machine that alone moves timings, so it is shown apart from the host's own work.
  console.log(`direct, own session:  median ${median(directSetsid).toFixed(1)} ms (detached: true, as the host spawns)`);
  console.log(`through the host:     median ${median(host).toFixed(1)} ms`);
  // Paired differences (each host run against the direct run just before it) are steadier on a busy machine.
  const paired = host.map((h, i) => h - (direct[i] ?? NaN));
  console.log(`added by the host: ${(median(host) - median(direct)).toFixed(1)} ms between medians, ${median(paired).toFixed(1)} ms median of paired differences (goal < 30 ms)`);
  console.log(`host against direct in its own session: ${(median(host) - median(directSetsid)).toFixed(1)} ms between medians`);
} finally {
  await model.close();
  rmSync(workDir, { recursive: true, force: true });
}
