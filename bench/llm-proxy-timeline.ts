// Where the time of one model call goes inside a serving process (the proxy
// or the bare forwarder), one call at a time: llm-proxy-latency.ts --timeline
// loads this module into them first (`--import`). It stamps
// `performance.now()` when the server emits a request, when Node calls
// http.request and the request's end(), when the request upstream is written
// (the socket's write to the upstream's port), when the upstream's response
// is emitted, when the answer's first bytes are written to the client, and
// around each fs.writeSync (the proxy's slot `pwrite`s), and, on exit, writes
// the median and quartiles of each step between two stamps, whole answers
// and streams apart, to a file in OZ0_BENCH_TIMELINE_DIR. A CPU profile of
// calls one at a time cannot say this: the proxy hardly waits, but every
// step runs with cold caches, so what costs is the steps and the code they
// touch, in wall time. Code under test may stamp steps of its own with
// `globalThis.__mark?.("name")` in a copy of its build (never committed).
// Calls that overlap (the throughput windows) are left out: only a request
// that comes while no other is being answered, and is the only one until it
// is answered, counts.
import fs from "node:fs";
import http from "node:http";
import { syncBuiltinESMExports } from "node:module";
import net from "node:net";
import path from "node:path";
import { performance } from "node:perf_hooks";

const argv = process.argv.join(" ");
const label = argv.includes("--role proxy")
  ? argv.includes("--module")
    ? "baseline proxy"
    : "proxy"
  : argv.includes("llm-proxy-bare-forwarder")
    ? "forwarder"
    : undefined;
const dir = process.env.OZ0_BENCH_TIMELINE_DIR;

if (label && dir) installTimeline(label, dir);

function installTimeline(name: string, into: string): void {
  const upstreamPort = Number(/(?:--upstream |bare-forwarder\.ts )https?:\/\/[^:/]+:(\d+)/.exec(argv)?.[1]);
  /** The current call's stamps; undefined between calls. */
  let stamps: [string, number][] | undefined;
  /** 1 after the request, 2 once written upstream, 3 once answered, 4 once written to the client. */
  let state = 0;
  // The current call's client connection and request upstream: another call's events are not its
  // steps (a request that comes while a call is under way drops the call: they overlap).
  let client: net.Socket | undefined;
  let upstream: http.ClientRequest | undefined;
  /** Requests the server has not finished answering. */
  let inFlight = 0;
  let kind = "";
  /** By kind (whole, stream), by step: its durations (ms) and where it falls in a call. */
  const steps = new Map<string, Map<string, { ms: number[]; at: number }>>();
  const stamp = (what: string): void => void stamps?.push([what, performance.now()]);
  (globalThis as { __mark?: (what: string) => void }).__mark = stamp;

  const closeCall = (): void => {
    if (stamps && state === 4) {
      const byStep = steps.get(kind) ?? new Map<string, { ms: number[]; at: number }>();
      steps.set(kind, byStep);
      for (let i = 1; i < stamps.length; i += 1) {
        const step = `${stamps[i - 1]![0]} → ${stamps[i]![0]}`;
        const entry = byStep.get(step) ?? { ms: [], at: 0 };
        byStep.set(step, entry);
        entry.ms.push(stamps[i]![1] - stamps[i - 1]![1]);
        entry.at += i;
      }
      const time = (what: string): number => stamps!.find(([w]) => w === what)![1];
      const total = byStep.get("in the process (upstream's wait excluded)") ?? { ms: [], at: Infinity };
      byStep.set("in the process (upstream's wait excluded)", total);
      total.ms.push(stamps.at(-1)![1] - stamps[0]![1] - (time("upstream answers") - time("upstream write")));
    }
    stamps = undefined;
    state = 0;
  };

  const serverEmit = http.Server.prototype.emit as (this: http.Server, ...args: unknown[]) => boolean;
  http.Server.prototype.emit = function (this: http.Server, ...args: unknown[]) {
    if (args[0] === "request") {
      // Only calls that had the process to themselves: one that overlaps another is no one's timeline.
      const alone = inFlight === 0;
      inFlight += 1;
      (args[2] as http.ServerResponse).once("close", () => (inFlight -= 1));
      if (alone) closeCall();
      stamps = alone ? [["request", performance.now()]] : undefined;
      state = alone ? 1 : 0;
      client = (args[1] as http.IncomingMessage).socket;
      upstream = undefined;
    }
    return serverEmit.apply(this, args);
  } as typeof http.Server.prototype.emit;

  const clientEmit = http.ClientRequest.prototype.emit as (this: http.ClientRequest, ...args: unknown[]) => boolean;
  http.ClientRequest.prototype.emit = function (this: http.ClientRequest, ...args: unknown[]) {
    if (args[0] === "response" && state === 2 && this === upstream) {
      stamp("upstream answers");
      state = 3;
      kind = String((args[1] as http.IncomingMessage).headers["content-type"]).includes("event-stream")
        ? "streams"
        : "whole answers";
    }
    return clientEmit.apply(this, args);
  } as typeof http.ClientRequest.prototype.emit;

  const socket = net.Socket.prototype as unknown as { _writeGeneric: (...args: unknown[]) => unknown };
  const writeGeneric = socket._writeGeneric;
  socket._writeGeneric = function (this: net.Socket, ...args: unknown[]) {
    if (state === 1 && this === upstream?.socket && this.remotePort === upstreamPort) {
      stamp("upstream write");
      state = 2;
    } else if (state === 3 && this === client) {
      stamp("client write");
      state = 4;
    }
    return writeGeneric.apply(this, args);
  };

  const request = http.request;
  http.request = function (...args: unknown[]) {
    if (state !== 1) return (request as (...a: unknown[]) => http.ClientRequest)(...args);
    stamp("http.request");
    upstream = (request as (...a: unknown[]) => http.ClientRequest)(...args);
    stamp("http.request done");
    return upstream;
  } as typeof http.request;

  const end = http.ClientRequest.prototype.end;
  http.ClientRequest.prototype.end = function (this: http.ClientRequest, ...args: unknown[]) {
    if (state === 1) stamp("req.end");
    try {
      return (end as (...a: unknown[]) => http.ClientRequest).apply(this, args);
    } finally {
      if (state === 1) stamp("req.end done");
    }
  } as typeof end;

  const writeSync = fs.writeSync;
  fs.writeSync = function (...args: unknown[]) {
    stamp("pwrite");
    try {
      return (writeSync as (...a: unknown[]) => number)(...args);
    } finally {
      stamp("pwrite done");
    }
  } as typeof fs.writeSync;
  // ES module imports of node:fs (the proxy's `import { writeSync }`) see the wrapper too.
  syncBuiltinESMExports();

  const quantile = (sorted: number[], q: number): number => sorted[Math.floor((sorted.length - 1) * q)]!;
  process.on("exit", () => {
    closeCall();
    const lines: string[] = [];
    for (const [callKind, byStep] of steps) {
      lines.push(`  ${name}, ${callKind} (µs: p50, p25–p75, how many)`);
      const ordered = [...byStep].sort(([, a], [, b]) => a.at / a.ms.length - b.at / b.ms.length);
      for (const [step, { ms }] of ordered) {
        // Steps seen in a few calls only (a retry, a slow path) would read as noise.
        if (ms.length < 50) continue;
        const sorted = ms.sort((a, b) => a - b).map((v) => v * 1000);
        lines.push(
          `    ${quantile(sorted, 0.5).toFixed(1).padStart(7)}  ${quantile(sorted, 0.25).toFixed(1)}–${quantile(sorted, 0.75).toFixed(1)}  ${ms.length}  ${step}`,
        );
      }
    }
    fs.writeFileSync(path.join(into, `${name.replace(/ /g, "-")}.txt`), `${lines.join("\n")}\n`);
  });
}
