// Load benchmark of the sandbox service: N concurrent harness sessions on one
// node, over gRPC, against a baseline of the same sessions run straight
// through @oz0/harness/host in the same process (no RPC, no directories, no
// artifacts). Prints sessions/s, median and p99 session latency, peak memory
// per session, the ratios to the baseline, and fails if any session lost or
// repeated a message.
//
//   node --import tsx bench/sandbox-load.ts [--sessions 50] [--harness fake|chatty] [--events 100] [--isolation none|bwrap|auto]
//
// `fake` (default) is the SDK's oz0-fake-harness, a real agent loop, making
// one call to the scripted model per session; `chatty` is the sandbox tests'
// scenario harness writing --events text deltas (no model call), to load the
// event path.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { startHostSession } from "@oz0/harness/host";
import { startScriptedModel } from "@oz0/harness/testing";
import { ProtocolVersion, SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { SandboxService, SessionStatus, type RunSessionResponse } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { startSandbox, type IsolationSetting } from "@oz0/sandbox";
import { testCredentials } from "@oz0/serving/testing";
import { benchOptions } from "./bench-options.js";
import { percentile, startReport } from "./bench-report.js";

const {
  sessions: SESSIONS,
  events: EVENTS,
  isolation,
  harness,
  rounds: ROUNDS,
} = benchOptions({
  sessions: { type: "number", default: 50 },
  /** Rounds of baseline then sandbox; ratios are the median of the rounds'. */
  rounds: { type: "number", default: 3 },
  events: { type: "number", default: 100 },
  isolation: { type: "string", default: "none" },
  harness: { type: "string", default: "fake" },
});
const ISOLATION = isolation as IsolationSetting;
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const FAKE = harness !== "chatty";
const HARNESS = FAKE
  ? path.join(REPO, "sdk", "harness-ts", "bin", "oz0-fake-harness.js")
  : path.join(REPO, "services", "sandbox", "test", "fixtures", "scenario-harness.mjs");
const COMMAND = [process.execPath, HARNESS];
const INPUT = FAKE ? "say hello" : JSON.stringify({ mode: "chatty", events: EVENTS });
// Harness events per session: fake = started, text, usage, result; chatty = started, EVENTS texts, usage, result.
const EXPECTED_EVENTS = FAKE ? 4 : EVENTS + 3;
// Every model call gets the same one-turn answer, so sessions can run in any order.
const model = await startScriptedModel({
  turns: () => ({ text: "hello", usage: { input: 10, output: 2 } }),
  isSideCall: () => false,
});
const REQUEST = {
  protocolVersion: ProtocolVersion.PROTOCOL_VERSION_1,
  input: INPUT,
  model: { primary: "anthropic/scripted" },
  llm: { anthropicBaseUrl: model.url, token: "bench-token", headers: { "Oz0-Job": "bench", "Oz0-Agent": "bench" } },
};

function rssKiB(pid: number): number {
  try {
    const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return match?.[1] !== undefined ? Number(match[1]) : 0;
  } catch {
    return 0;
  }
}

/** Every descendant of this process (the harnesses, bwrap and what runs in it). */
function descendants(): number[] {
  const children = new Map<number, number[]>();
  const table = execFileSync("ps", ["-e", "-o", "pid=,ppid="], { encoding: "utf8" }).trim().split("\n");
  for (const line of table) {
    const [pid, ppid] = line.trim().split(/\s+/).map(Number);
    if (pid === undefined || ppid === undefined) continue;
    children.set(ppid, [...(children.get(ppid) ?? []), pid]);
  }
  const out: number[] = [];
  const walk = (pid: number): void => {
    for (const child of children.get(pid) ?? []) {
      out.push(child);
      walk(child);
    }
  };
  walk(process.pid);
  return out;
}

/** Samples this process's RSS and its children's total until stopped; returns the peaks in KiB. */
function sampleMemory(): { stop(): { selfPeak: number; childrenPeak: number } } {
  const base = process.memoryUsage().rss / 1024;
  let selfPeak = 0;
  let childrenPeak = 0;
  const timer = setInterval(() => {
    selfPeak = Math.max(selfPeak, process.memoryUsage().rss / 1024 - base);
    childrenPeak = Math.max(
      childrenPeak,
      descendants().reduce((sum, pid) => sum + rssKiB(pid), 0),
    );
  }, 100);
  return {
    stop() {
      clearInterval(timer);
      return { selfPeak, childrenPeak };
    },
  };
}

interface RunStats {
  wallMs: number;
  latencies: number[];
  selfPeakKiB: number;
  childrenPeakKiB: number;
}

async function baseline(): Promise<RunStats> {
  const memory = sampleMemory();
  const t0 = performance.now();
  const latencies = await Promise.all(
    Array.from({ length: SESSIONS }, async (_, i) => {
      const started = performance.now();
      const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-bench-baseline-"));
      let events = 0;
      const session = startHostSession({
        command: COMMAND,
        cwd: dir,
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
        request: create(SessionRequestSchema, {
          ...REQUEST,
          jobId: "bench",
          sessionId: `baseline-${i}`,
          workingDir: dir,
          stateDir: dir,
        }),
        onEvent: () => events++,
      });
      const outcome = await session.outcome.finally(() => rmSync(dir, { recursive: true, force: true }));
      if (outcome.status !== "completed" || events !== EXPECTED_EVENTS)
        throw new Error(
          `baseline session ${i}: ${outcome.status}, ${events} events ${outcome.error?.message ?? ""} ${outcome.stderrTail}`,
        );
      return performance.now() - started;
    }),
  );
  const wallMs = performance.now() - t0;
  const { selfPeak, childrenPeak } = memory.stop();
  return { wallMs, latencies: latencies.sort((a, b) => a - b), selfPeakKiB: selfPeak, childrenPeakKiB: childrenPeak };
}

async function throughSandbox(): Promise<RunStats & { problems: string[]; isolation: string }> {
  const root = mkdtempSync(path.join(os.tmpdir(), "oz0-bench-sandbox-"));
  const sandbox = await startSandbox({
    port: 0,
    root,
    isolation: ISOLATION,
    maxSessions: SESSIONS,
    readOnlyPaths: [REPO],
    auth: testCredentials.settingsFor("sandbox"),
  });
  try {
    return await loadSandbox(sandbox.url, sandbox.isolation);
  } finally {
    await sandbox.close();
    rmSync(root, { recursive: true, force: true });
  }
}

async function loadSandbox(
  url: string,
  isolation: string,
): Promise<RunStats & { problems: string[]; isolation: string }> {
  // The bench stands in for the orchestrator, with its credential.
  const client = createClient(
    SandboxService,
    createGrpcTransport({ baseUrl: url, interceptors: [testCredentials.caller] }),
  );
  const problems: string[] = [];
  const memory = sampleMemory();
  const t0 = performance.now();
  const latencies = await Promise.all(
    Array.from({ length: SESSIONS }, async (_, i) => {
      const started = performance.now();
      const received: RunSessionResponse[] = [];
      async function* requests() {
        yield {
          message: {
            case: "start" as const,
            value: { command: COMMAND, pluginDir: path.dirname(HARNESS), request: { ...REQUEST, jobId: "bench" } },
          },
        };
      }
      for await (const message of client.runSession(requests())) received.push(message);
      const seqs = received.map((m) => Number(m.seq));
      if (seqs.some((seq, index) => seq !== index + 1))
        problems.push(`session ${i}: seqs ${seqs.join(",")} are not 1..${seqs.length}`);
      const events = received.filter((m) => m.message.case === "event").length;
      if (events !== EXPECTED_EVENTS) problems.push(`session ${i}: ${events} events, expected ${EXPECTED_EVENTS}`);
      const last = received.at(-1)?.message;
      if (last?.case !== "exited" || last.value.status !== SessionStatus.COMPLETED)
        problems.push(`session ${i}: did not complete (${last?.case ?? "nothing"})`);
      return performance.now() - started;
    }),
  );
  const wallMs = performance.now() - t0;
  const { selfPeak, childrenPeak } = memory.stop();
  return {
    wallMs,
    latencies: latencies.sort((a, b) => a - b),
    selfPeakKiB: selfPeak,
    childrenPeakKiB: childrenPeak,
    problems,
    isolation,
  };
}

process.env.OZ0_LOG_LEVEL ??= "warn";
const report = startReport("sandbox-load");
const rate = (s: RunStats): number => (SESSIONS / s.wallMs) * 1000;
const row = (name: string, s: RunStats): string =>
  `${name.padEnd(22)} ${rate(s).toFixed(1).padStart(8)} ${percentile(s.latencies, 0.5).toFixed(0).padStart(8)} ${percentile(s.latencies, 0.99).toFixed(0).padStart(8)} ${(s.selfPeakKiB / SESSIONS).toFixed(0).padStart(12)} ${(s.childrenPeakKiB / SESSIONS).toFixed(0).padStart(14)}`;
console.log(
  `${SESSIONS} concurrent sessions of ${FAKE ? "oz0-fake-harness (one scripted model call each)" : `the chatty harness (${EVENTS} text events each)`}, isolation ${ISOLATION}, ${ROUNDS} rounds`,
);
console.log(
  `${"".padEnd(22)} ${"sess/s".padStart(8)} ${"p50 ms".padStart(8)} ${"p99 ms".padStart(8)} ${"host KiB/ses".padStart(12)} ${"harness KiB/ses".padStart(14)}`,
);
const ratios = { throughput: [] as number[], p50: [] as number[], p99: [] as number[] };
const problems: string[] = [];
for (let r = 0; r < ROUNDS; r++) {
  const base = await baseline();
  const load = await throughSandbox();
  console.log(row(`${r + 1}: baseline (host)`, base));
  console.log(row(`${r + 1}: sandbox (${load.isolation})`, load));
  ratios.throughput.push(rate(load) / rate(base));
  ratios.p50.push(percentile(load.latencies, 0.5) / percentile(base.latencies, 0.5));
  ratios.p99.push(percentile(load.latencies, 0.99) / percentile(base.latencies, 0.99));
  problems.push(...load.problems);
}
await model.close();
report.ratio("sandbox/baseline throughput", ratios.throughput);
report.ratio("sandbox/baseline p50", ratios.p50);
report.ratio("sandbox/baseline p99", ratios.p99);
report.end();
if (problems.length > 0) {
  console.error(`LOST OR DUPLICATED MESSAGES:\n${problems.join("\n")}`);
  process.exitCode = 1;
} else {
  console.log(
    `no message lost or duplicated in ${ROUNDS * SESSIONS} sessions (${ROUNDS * SESSIONS * (EXPECTED_EVENTS + 3)} messages)`,
  );
}
