// Framing throughput of the harness host: events/s that @oz0/harness/host
// frames, decodes (proto3 JSON → SessionEvent, unknown fields ignored) and
// validates (ordering, ids, one result) from one harness's stdout, against
// JSON.parse of the same lines already split, in the same run. The host runs
// for real, fed through a launcher whose child is in-memory streams, so no
// process or pipe cost is counted on either side. Goal: ratio ≤ 2.
//   node --import tsx bench/harness-framing.ts [--events 100000] [--repeat 7]
import { EventEmitter } from "node:events";
import { performance } from "node:perf_hooks";
import { PassThrough } from "node:stream";
import { create } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { startHostSession } from "@oz0/harness/host";
import type { HarnessLauncher, PipedChildProcess } from "@oz0/harness/host";
import { benchOptions } from "./bench-options.js";
import { median, startReport } from "./bench-report.js";

const { events: EVENTS, repeat: REPEAT } = benchOptions({
  events: { type: "number", default: 100_000 },
  repeat: { type: "number", default: 7 },
});
const CHUNK = 64 * 1024; // what a pipe read usually hands over

/** A realistic mix: mostly text deltas, some tool calls and results, usage, heartbeats, permission requests. */
function eventLines(count: number): string[] {
  const lines = [
    JSON.stringify({
      started: {
        protocolVersion: "PROTOCOL_VERSION_1",
        harnessName: "bench",
        harnessVersion: "1",
        capabilities: { permissions: true },
      },
    }),
  ];
  for (let i = 1; i < count - 1; i++) {
    switch (i % 10) {
      case 0:
        lines.push(
          JSON.stringify({
            toolCall: {
              callId: `c${i}`,
              tool: "run_command",
              input: { command: "npm test -- --grep 'dates'", timeout: 120 },
              title: "Run npm test",
            },
          }),
        );
        break;
      case 1:
        lines.push(
          JSON.stringify({
            toolResult: {
              callId: `c${i - 1}`,
              output: { exitCode: 0, stdout: "ok 1 - parses dates\nok 2 - formats dates\n" },
              isError: false,
            },
          }),
        );
        break;
      case 2:
        lines.push(
          JSON.stringify({
            usage: { model: "claude-sonnet-5-5", inputTokens: "1834", outputTokens: "212", cacheReadTokens: "1200" },
          }),
        );
        break;
      case 3:
        lines.push(
          JSON.stringify({
            permissionRequest: {
              id: `p${i}`,
              tool: "write_file",
              input: { path: "src/dates.ts", content: "export const x = 1;\n" },
              title: "Write src/dates.ts",
            },
          }),
        );
        break;
      case 4:
        lines.push(JSON.stringify({ heartbeat: {}, time: "2026-11-29T20:00:00.123Z" }));
        break;
      default:
        lines.push(
          JSON.stringify({
            text: {
              itemId: `item-${i >> 4}`,
              text: "The failing test expects ISO dates; the parser drops the zone. ✨ ",
              delta: true,
            },
          }),
        );
    }
  }
  lines.push(JSON.stringify({ result: { stopReason: "STOP_REASON_COMPLETED", text: "Fixed the parser.", turns: 12 } }));
  return lines;
}

function chunked(lines: string[]): Buffer[] {
  const all = Buffer.from(lines.join("\n") + "\n");
  const chunks: Buffer[] = [];
  for (let at = 0; at < all.length; at += CHUNK) chunks.push(all.subarray(at, at + CHUNK));
  return chunks;
}

/** A launcher whose "process" is three in-memory streams; ends when the test says so. */
function inMemoryLauncher(chunks: Buffer[]): HarnessLauncher {
  return {
    launch() {
      const child = Object.assign(new EventEmitter(), {
        pid: 4242,
        stdin: new PassThrough(),
        stdout: new PassThrough({ highWaterMark: CHUNK }),
        stderr: new PassThrough(),
      });
      child.stdin.resume();
      setImmediate(() => {
        for (const chunk of chunks) child.stdout.write(chunk);
        child.stdout.end();
        // The host drains stderr too before its outcome; left open it waited out the 10 s grace.
        child.stderr.end();
        child.stdout.once("end", () => setImmediate(() => child.emit("exit", 0, null)));
      });
      return { child: child as unknown as PipedChildProcess, terminate() {}, kill() {} };
    },
  };
}

async function hostRun(chunks: Buffer[]): Promise<number> {
  let events = 0;
  const started = performance.now();
  const session = startHostSession({
    command: ["in-memory"],
    cwd: process.cwd(),
    env: {},
    request: create(SessionRequestSchema, { protocolVersion: 1 }),
    launcher: inMemoryLauncher(chunks),
    onEvent: () => events++,
  });
  const outcome = await session.outcome;
  const elapsed = performance.now() - started;
  if (outcome.status !== "completed" || events !== EVENTS)
    throw new Error(`host run went wrong: ${outcome.status} ${outcome.error?.message ?? ""} after ${events} events`);
  return elapsed;
}

function baselineRun(lines: string[]): number {
  const started = performance.now();
  let kinds = 0;
  for (const line of lines) if (Object.keys(JSON.parse(line) as object).length > 0) kinds++;
  if (kinds !== lines.length) throw new Error("baseline went wrong");
  return performance.now() - started;
}

const report = startReport("harness-framing");
const lines = eventLines(EVENTS);
const chunks = chunked(lines);
const megabytes = chunks.reduce((n, c) => n + c.length, 0) / 1e6;
// Warm both paths up so the JIT has seen them.
baselineRun(lines);
await hostRun(chunks);
const host: number[] = [];
const baseline: number[] = [];
for (let i = 0; i < REPEAT; i++) {
  baseline.push(baselineRun(lines));
  host.push(await hostRun(chunks));
}
const rate = (ms: number): string => `${Math.round(EVENTS / (ms / 1000)).toLocaleString("en-US")} events/s`;
console.log(`${EVENTS} events, ${megabytes.toFixed(1)} MB, ${REPEAT} runs each`);
console.log(`plain JSON.parse of split lines: ${median(baseline).toFixed(1)} ms (${rate(median(baseline))})`);
console.log(`host frame+decode+validate:      ${median(host).toFixed(1)} ms (${rate(median(host))})`);
if (
  report.ratio(
    "ratio host/JSON.parse, run by run",
    host.map((ms, i) => ms / baseline[i]!),
    { unit: "x", goal: "≤ 2x" },
  ) !== undefined
) {
  // On a busy machine the best-of ratio is the steadier estimate of the intrinsic cost.
  console.log(`ratio host/JSON.parse, best of ${REPEAT}: ${(Math.min(...host) / Math.min(...baseline)).toFixed(2)}x`);
}
report.end();
