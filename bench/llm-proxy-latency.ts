// The LLM proxy against the floor of any Node proxy, in one run: the same
// scripted upstream called directly, through a bare Node forwarder
// (llm-proxy-bare-forwarder.ts: no auth, no metering, no parsing) and
// through the proxy with everything on (session token, metering, a budget,
// retries). Upstream, forwarder and proxy each run in their own process, as in
// production; the load generator is this process, with keep-alive connections.
// For each wire format (Anthropic Messages, OpenAI Chat Completions, OpenAI
// Responses), whole answers and streams:
//   - latency: sequential calls, the contenders alternating call by call, in
//     as many blocks as rounds; added p50 and p99 over the direct call, the
//     proxy's added p50 against the forwarder's round by round (median and range),
//     and the CPU each serving process spent a call;
//   - throughput: calls per second at each concurrency, the contenders
//     alternating round by round, with the CPU each serving process spent per call;
//   - with --profile, a CPU profile of the proxy over one throughput window
//     and another over sequential calls (V8's profiler, what --cpu-prof runs),
//     summarised as the functions with the most self time per call; the
//     .cpuprofile files stay for DevTools;
//   - with --timeline, where the wall time of a sequential call goes in the
//     forwarder and each proxy, step by step (llm-proxy-timeline.ts; calls
//     that overlap are left out).
// Goal (issue 24): ≥ 50% of the forwarder's calls/s at 16 and 32
// connections, added p50 ≤ 1.5x the forwarder's. `--body-kb` gives every
// request a conversation of about that many kilobytes, which the proxy does
// not parse; `--answer-chars` answers of about that many characters, which
// the upstream streams 16 characters an event (the proxy's work per event).
// `--baseline-module` runs another build of @oz0/llm-proxy beside
// this one (its dist/index.js, for example a copy of the previous commit's),
// so a change is measured before and after in the same run.
//   node --import tsx bench/llm-proxy-latency.ts [--calls 500] [--seconds 2] [--rounds 2] [--concurrency 16,32]
//     [--wires anthropic,openai,responses] [--body-kb 0] [--answer-chars 0] [--profile] [--profile-dir DIR] [--baseline-module PATH] [--timeline]
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";
import type * as LlmProxyPackage from "@oz0/llm-proxy";
import { benchOptions } from "./bench-options.js";
import { median, percentile, startReport } from "./bench-report.js";
import { formatProfileSummary, summariseCpuProfile } from "./llm-proxy-cpu-profile.js";
import {
  askRole,
  closePostConnections,
  cpuOf,
  postJson,
  serveRoleControl,
  startRoleProcess,
  type Role,
} from "./llm-proxy-role-process.js";

const options = benchOptions({
  calls: { type: "number", default: 500 },
  seconds: { type: "number", default: 2 },
  rounds: { type: "number", default: 2 },
  concurrency: { type: "string", default: "16,32" },
  wires: { type: "string", default: "anthropic,openai,responses" },
  "body-kb": { type: "number", default: 0 },
  // Answers of about this many characters (the sentence below repeated); 0: the sentence alone.
  "answer-chars": { type: "number", default: 0 },
  // The proxy's SQLite store in a file (as deployed: OZ0_LLM_PROXY_DATA) or in memory.
  store: { type: "string", default: "file" },
  profile: { type: "boolean" },
  "profile-dir": { type: "string", default: "" },
  "baseline-module": { type: "string", default: "" },
  timeline: { type: "boolean" },
  // This file runs itself as the upstream and the proxy, picked by --role.
  role: { type: "string", default: "bench", internal: true },
  upstream: { type: "string", default: "", internal: true },
  module: { type: "string", default: "", internal: true },
  "data-dir": { type: "string", default: "", internal: true },
});
const role = options.role;

if (role !== "bench") serveRoleControl();

type LlmProxyModule = typeof LlmProxyPackage;

const SENTENCE =
  "The scripted upstream answers every call with this sentence, which is about a hundred characters long.";
/**
 * What the upstream answers: the sentence, or with --answer-chars about that
 * many characters of it, which the scripted model streams 16 characters an
 * event (a real answer of 500 tokens is some 2,000 characters).
 */
const ANSWER =
  options["answer-chars"] > 0
    ? `${SENTENCE} `
        .repeat(Math.ceil(options["answer-chars"] / (SENTENCE.length + 1)))
        .slice(0, options["answer-chars"])
    : SENTENCE;

/** With --timeline, the serving processes load llm-proxy-timeline.ts first; it writes its steps here when they exit. */
const timelineDir =
  options.timeline && role === "bench" ? mkdtempSync(path.join(os.tmpdir(), "llm-proxy-timeline-")) : "";
if (timelineDir) process.env.OZ0_BENCH_TIMELINE_DIR = timelineDir;
const timelineImport = timelineDir
  ? ["--import", fileURLToPath(new URL("./llm-proxy-timeline.ts", import.meta.url))]
  : [];

function startBare(url: string): Promise<Role> {
  return startRoleProcess([
    "--import",
    "tsx",
    ...timelineImport,
    fileURLToPath(new URL("./llm-proxy-bare-forwarder.ts", import.meta.url)),
    url,
  ]);
}

function startRole(name: string, extra: string[] = []): Promise<Role> {
  const timeline = name === "proxy" ? timelineImport : [];
  return startRoleProcess(["--import", "tsx", ...timeline, fileURLToPath(import.meta.url), "--role", name, ...extra]);
}

/** Earlier turns of about `kb` kilobytes, then the question. */
function conversation(kb: number): { role: string; content: string }[] {
  const turns: { role: string; content: string }[] = [];
  for (let size = 0; size < kb * 1024; size += 1024) {
    turns.push({
      role: turns.length % 2 === 0 ? "user" : "assistant",
      content: `Turn ${turns.length}: ${'an earlier "quoted" part of the conversation, '.repeat(20)}`.slice(0, 1000),
    });
  }
  if (turns.length % 2 === 1) turns.push({ role: "assistant", content: "Noted." });
  return [...turns, { role: "user", content: "Say something short." }];
}

/**
 * What each request allows the model to write: the whole answer. The proxy holds the session's
 * budget for that many tokens and cuts a stream that outgrows its hold (budget_exhausted); the
 * scripted upstream does not stop at max_tokens, so a smaller one measured streams the proxy cut
 * short (with 256, a 2,000-character answer at about half its events) against whole ones.
 */
const MAX_TOKENS = Math.max(256, ANSWER.length);

/** One wire format: where it is served, a request body for it, and what a whole stream of it ends with. */
interface Wire {
  name: string;
  provider: "anthropic" | "openai";
  route: string;
  body(stream: boolean): Buffer;
  streamEnd: string;
}

const WIRES: Record<string, Wire> = {
  anthropic: {
    name: "Anthropic Messages",
    provider: "anthropic",
    route: "messages",
    streamEnd: "event: message_stop",
    body: (stream) =>
      Buffer.from(
        JSON.stringify({
          model: "claude-sonnet-5",
          max_tokens: MAX_TOKENS,
          stream,
          messages: conversation(options["body-kb"]),
        }),
      ),
  },
  openai: {
    name: "OpenAI chat",
    provider: "openai",
    route: "chat/completions",
    streamEnd: "data: [DONE]",
    body: (stream) =>
      Buffer.from(
        JSON.stringify({
          model: "gpt-5",
          max_completion_tokens: MAX_TOKENS,
          stream,
          // OpenAI pads each streamed chunk with an `obfuscation` member unless told not to; the
          // scripted upstream pads only when asked, so the bench asks, as a client's default gets it.
          ...(stream ? { stream_options: { include_obfuscation: true } } : {}),
          messages: conversation(options["body-kb"]),
        }),
      ),
  },
  responses: {
    name: "OpenAI Responses",
    provider: "openai",
    route: "responses",
    streamEnd: '"type":"response.completed"',
    body: (stream) =>
      Buffer.from(
        JSON.stringify({
          model: "gpt-5",
          max_output_tokens: MAX_TOKENS,
          stream,
          input: conversation(options["body-kb"]),
        }),
      ),
  },
};

interface Contender {
  name: string;
  /** The process whose CPU a call costs (the upstream's for the direct call). */
  process: Role;
  target(wire: Wire): { url: URL; headers: Record<string, string> };
}

function call(contender: Contender, wire: Wire, body: Buffer): Promise<string> {
  const { url, headers } = contender.target(wire);
  return postJson({ url, headers, body, label: contender.name });
}

/**
 * Fails the bench unless every contender answers whole: a stream that ends with its format's last
 * event and no error event, an answer with the whole text. Ratios over answers cut short (by a
 * budget's hold, a size limit) would measure less work as if it were the same.
 */
async function checkWhole(contenders: Contender[], wire: Wire, body: Buffer, stream: boolean): Promise<void> {
  const tail = ANSWER.slice(-40);
  for (const c of contenders) {
    const { url, headers } = c.target(wire);
    const answer = await postJson({ url, headers, body, label: c.name, keepBody: true });
    const whole = stream
      ? answer.includes(wire.streamEnd) && !/"type":"error"|"error":\{/.test(answer)
      : answer.includes(JSON.stringify(tail).slice(1, -1));
    if (!whole)
      fail(`${c.name} did not answer ${wire.name} ${stream ? "streaming" : "whole"} in full: …${answer.slice(-300)}`);
  }
}

interface LatencyReading {
  p50: number;
  p99: number;
  cpuMicrosPerCall: number;
}

/**
 * Sequential calls, the contenders taking turns call by call (so drift in the machine's load hits all alike), in
 * `rounds` blocks of `calls / rounds` each: every contender's p50 in each block, for ratios taken round by round (a
 * ratio of one block is noise on a shared machine), and the p50, p99 and CPU of all the calls pooled.
 */
async function latency(
  contenders: Contender[],
  wire: Wire,
  body: Buffer,
  options: { calls: number; rounds: number },
): Promise<{ pooled: Map<Contender, LatencyReading>; p50ByRound: Map<Contender, number[]> }> {
  const { calls, rounds } = options;
  const times = new Map(contenders.map((c) => [c, [] as number[]]));
  const p50ByRound = new Map(contenders.map((c) => [c, [] as number[]]));
  for (let i = 0; i < 200; i += 1) for (const c of contenders) await call(c, wire, body); // warm-up: JIT, pools
  // Each serving process does nothing but these calls: its CPU over them is theirs, one at a time.
  const cpuBefore = new Map<Contender, number>();
  for (const c of contenders) cpuBefore.set(c, await cpuOf(c.process));
  const perRound = Math.ceil(calls / rounds);
  for (let round = 0; round < rounds; round += 1) {
    const block = new Map(contenders.map((c) => [c, [] as number[]]));
    for (let i = round * perRound; i < Math.min(calls, (round + 1) * perRound); i += 1) {
      for (let k = 0; k < contenders.length; k += 1) {
        const c = contenders[(i + k) % contenders.length]!;
        const start = performance.now();
        await call(c, wire, body);
        block.get(c)!.push(performance.now() - start);
      }
    }
    for (const c of contenders) {
      const sorted = block.get(c)!.sort((a, b) => a - b);
      p50ByRound.get(c)!.push(percentile(sorted, 0.5));
      times.get(c)!.push(...sorted);
    }
  }
  const cpuAfter = new Map<Contender, number>();
  for (const c of contenders) cpuAfter.set(c, await cpuOf(c.process));
  const pooled = new Map(
    contenders.map((c) => {
      const sorted = times.get(c)!.sort((a, b) => a - b);
      const cpuMicrosPerCall = (cpuAfter.get(c)! - cpuBefore.get(c)!) / calls;
      return [c, { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), cpuMicrosPerCall }];
    }),
  );
  return { pooled, p50ByRound };
}

/** Each round's added p50 of `c` over `baseline`'s (both over the direct call's, in the same round). */
function addedRatios(
  p50ByRound: Map<Contender, number[]>,
  c: Contender,
  baseline: Contender,
  direct: Contender,
): number[] {
  const d = p50ByRound.get(direct)!;
  const b = p50ByRound.get(baseline)!;
  return p50ByRound.get(c)!.map((p50, round) => (p50 - d[round]!) / (b[round]! - d[round]!));
}

/** Calls per second at `concurrency` for `seconds`, and the serving process's CPU per call. */
async function throughput(
  c: Contender,
  wire: Wire,
  body: Buffer,
  concurrency: number,
  seconds: number,
): Promise<{ perSecond: number; cpuMicrosPerCall: number; calls: number }> {
  let done = 0;
  const cpuBefore = await cpuOf(c.process);
  const start = performance.now();
  const end = start + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        await call(c, wire, body);
        done += 1;
      }
    }),
  );
  const perSecond = done / ((performance.now() - start) / 1000);
  return { perSecond, cpuMicrosPerCall: ((await cpuOf(c.process)) - cpuBefore) / done, calls: done };
}

const fmt = (n: number, digits = 0): string =>
  n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
const range = (values: number[], digits = 2): string => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[0]!.toFixed(digits) === sorted.at(-1)!.toFixed(digits)
    ? sorted[0]!.toFixed(digits)
    : `${sorted[0]!.toFixed(digits)}–${sorted.at(-1)!.toFixed(digits)}`;
};

async function bench(): Promise<void> {
  const report = startReport("llm-proxy-latency");
  const { calls, seconds, rounds } = options;
  const concurrencies = options.concurrency.split(",").map(Number);
  const wires = options.wires
    .split(",")
    .map((name) => WIRES[name] ?? fail(`--wires: no wire ${name}; known: ${Object.keys(WIRES).join(", ")}`));
  const profileDir = !options.profile
    ? ""
    : options["profile-dir"]
      ? (mkdirSync(options["profile-dir"], { recursive: true }), options["profile-dir"])
      : mkdtempSync(path.join(os.tmpdir(), "llm-proxy-profile-"));
  if (options.store !== "file" && options.store !== "memory") fail(`--store is file or memory, not ${options.store}`);
  const dataDirs: string[] = [];
  const store = (): string[] => {
    if (options.store === "memory") return [];
    dataDirs.push(mkdtempSync(path.join(os.tmpdir(), "llm-proxy-bench-")));
    return ["--data-dir", dataDirs.at(-1)!];
  };
  const upstream = await startRole("upstream", ["--answer-chars", String(options["answer-chars"])]);
  const roles: Role[] = [upstream];
  try {
    const proxy = await startRole("proxy", ["--upstream", upstream.info.url, ...store()]);
    roles.push(proxy);
    const bare = await startBare(upstream.info.url);
    roles.push(bare);
    const baseline = options["baseline-module"]
      ? await startRole("proxy", [
          "--upstream",
          upstream.info.url,
          "--module",
          path.resolve(options["baseline-module"]),
          ...store(),
        ])
      : undefined;
    if (baseline) roles.push(baseline);

    const proxied = (name: string, p: Role): Contender => ({
      name,
      process: p,
      target: (wire) => ({
        url: new URL(`/${wire.provider}/v1/${wire.route}`, p.info.url),
        headers: {
          "x-api-key": p.info.token!,
          "Oz0-Job": "bench",
          "Oz0-Agent": "bench",
          "anthropic-version": "2023-06-01",
        },
      }),
    });
    const direct: Contender = {
      name: "direct",
      process: upstream,
      target: (wire) => ({
        url: new URL(`/v1/${wire.route}`, upstream.info.url),
        headers: { "x-api-key": "sk-bench", "anthropic-version": "2023-06-01" },
      }),
    };
    const forwarder: Contender = {
      name: "forwarder",
      process: bare,
      target: (wire) => ({ url: new URL(`/v1/${wire.route}`, bare.info.url), headers: {} }),
    };
    const proxy1 = proxied("proxy", proxy);
    const before = baseline ? proxied("baseline proxy", baseline) : undefined;
    const contenders = [direct, forwarder, proxy1, ...(before ? [before] : [])];
    const measured = [forwarder, proxy1, ...(before ? [before] : [])];

    console.log(
      `llm-proxy against a bare Node forwarder: ${calls} sequential calls per contender in ${rounds} round(s); ${seconds}s per throughput window at ${concurrencies.join(" and ")} connections, ${rounds} round(s), contenders alternating; ` +
        `requests of ${options["body-kb"] > 0 ? `about ${options["body-kb"]} KB` : "a short question"}, answers of ${ANSWER.length} characters; the proxy's store ${options.store === "file" ? "a SQLite file" : "SQLite in memory"}; the proxy with a session token, metering, a budget and retries on` +
        (before ? `; baseline proxy: ${options["baseline-module"]}` : ""),
    );
    const ratios = rounds >= 2;
    if (!ratios) console.log("(one round: no ratios are printed; --rounds 2 or more)");
    const summary: string[] = [];
    for (const wire of wires) {
      for (const stream of [false, true]) {
        const kind = `${wire.name}, ${stream ? "streaming" : "whole answers"}`;
        const body = wire.body(stream);
        await checkWhole(contenders, wire, body, stream);
        const { pooled: l, p50ByRound } = await latency(contenders, wire, body, { calls, rounds });
        const d = l.get(direct)!;
        const addedVsForwarder = (c: Contender): number[] => addedRatios(p50ByRound, c, forwarder, direct);
        console.log(`\n${kind}`);
        console.log(`  latency, sequential: direct p50 ${d.p50.toFixed(3)} ms p99 ${d.p99.toFixed(3)} ms`);
        for (const c of measured) {
          const m = l.get(c)!;
          const vsForwarder =
            c === forwarder || !ratios
              ? ""
              : `; added p50 ${range(addedVsForwarder(c))}x the forwarder's (median ${median(addedVsForwarder(c)).toFixed(2)}x over ${rounds} rounds)`;
          console.log(
            `    ${c.name.padEnd(15)} p50 ${m.p50.toFixed(3)} ms p99 ${m.p99.toFixed(3)} ms; added p50 ${(m.p50 - d.p50).toFixed(3)} ms p99 ${(m.p99 - d.p99).toFixed(3)} ms; CPU ${m.cpuMicrosPerCall.toFixed(0)} µs a call${vsForwarder}`,
          );
        }
        for (const concurrency of concurrencies) {
          const results = new Map(contenders.map((c) => [c, [] as { perSecond: number; cpuMicrosPerCall: number }[]]));
          for (let round = 0; round < rounds; round += 1) {
            // Each round starts with another contender, so none always runs on the warmest or coolest machine.
            for (let k = 0; k < contenders.length; k += 1) {
              const c = contenders[(round + k) % contenders.length]!;
              results.get(c)!.push(await throughput(c, wire, body, concurrency, seconds));
            }
          }
          const perSecond = (c: Contender): number => median(results.get(c)!.map((r) => r.perSecond));
          const cpu = (c: Contender): number => median(results.get(c)!.map((r) => r.cpuMicrosPerCall));
          console.log(
            `  ${concurrency} connections: direct ${fmt(perSecond(direct))}/s (upstream CPU ${cpu(direct).toFixed(0)} µs a call)`,
          );
          for (const c of measured) {
            // Round by round: both measured under the same conditions.
            const vs = results.get(c)!.map((r, i) => r.perSecond / results.get(forwarder)!.at(i)!.perSecond);
            const ratio =
              c === forwarder || !ratios
                ? ""
                : `; ${range(vs)}x the forwarder's calls/s (median ${median(vs).toFixed(2)}x), CPU ${(cpu(c) / cpu(forwarder)).toFixed(2)}x`;
            console.log(
              `    ${c.name.padEnd(15)} ${fmt(perSecond(c)).padStart(6)}/s, CPU ${cpu(c).toFixed(0)} µs a call${ratio}`,
            );
          }
          if (ratios) {
            const vs = results.get(proxy1)!.map((r, i) => r.perSecond / results.get(forwarder)!.at(i)!.perSecond);
            const added = median(addedVsForwarder(proxy1));
            const baselineVs = before
              ? results.get(before)!.map((r, i) => r.perSecond / results.get(forwarder)!.at(i)!.perSecond)
              : [];
            const baselineText = before
              ? `; baseline ${median(baselineVs).toFixed(2)}x, added p50 ${median(addedVsForwarder(before)).toFixed(2)}x, CPU ${cpu(before).toFixed(0)} µs`
              : "";
            summary.push(
              `  ${kind.padEnd(38)} ${String(concurrency).padStart(2)} conn: ${median(vs).toFixed(2)}x the forwarder's calls/s (goal ≥ 0.50), added p50 ${added.toFixed(2)}x (goal ≤ 1.5), proxy CPU ${cpu(proxy1).toFixed(0)} µs vs ${cpu(forwarder).toFixed(0)} µs a call${baselineText}`,
            );
          }
        }
        if (profileDir) {
          // One more window at the first concurrency, the proxy's profiler on.
          const file = path.join(
            profileDir,
            `proxy-${wire.route.replace("/", "-")}${stream ? "-stream" : ""}.cpuprofile`,
          );
          await askRole(proxy, "profile-start");
          const run = await throughput(proxy1, wire, body, concurrencies[0]!, seconds);
          await stopProfile(proxy, file);
          console.log(
            `  CPU profile of the proxy at ${concurrencies[0]} connections (${fmt(run.perSecond)}/s, ${run.cpuMicrosPerCall.toFixed(0)} µs CPU a call while profiled): ${file}`,
          );
          for (const line of formatProfileSummary(summariseCpuProfile(file, run.calls, 12), "  ")) console.log(line);
          // And one call at a time: what the added latency is made of, besides waiting.
          const sequentialFile = file.replace(/\.cpuprofile$/, "-sequential.cpuprofile");
          await askRole(proxy, "profile-start");
          for (let i = 0; i < calls; i += 1) await call(proxy1, wire, body);
          await stopProfile(proxy, sequentialFile);
          console.log(`  CPU profile of the proxy, ${calls} calls one at a time: ${sequentialFile}`);
          for (const line of formatProfileSummary(summariseCpuProfile(sequentialFile, calls, 12), "  "))
            console.log(line);
        }
      }
    }
    if (summary.length > 0) console.log(`\nsummary (medians of ${rounds} rounds)\n${summary.join("\n")}`);
  } finally {
    closePostConnections();
    await Promise.all(roles.map((r) => new Promise((resolve) => r.child.once("exit", resolve).stdin!.end())));
    for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
    if (timelineDir) {
      console.log("\ntimeline of sequential calls in each serving process (llm-proxy-timeline.ts)");
      for (const name of ["forwarder", "proxy", "baseline-proxy"]) {
        const file = path.join(timelineDir, `${name}.txt`);
        if (existsSync(file)) process.stdout.write(readFileSync(file, "utf8"));
      }
      rmSync(timelineDir, { recursive: true, force: true });
    }
    report.end();
  }
}

/** Stops the proxy's profiler, its profile written to `file`; throws what the proxy could not do. */
async function stopProfile(proxy: Role, file: string): Promise<void> {
  const answer = await askRole<{ error?: string }>(proxy, `profile-stop ${file}`);
  if (answer.error !== undefined) throw new Error(`the proxy's profile: ${answer.error}`);
}

function fail(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

if (role === "upstream") {
  const { startScriptedModel } = await import("@oz0/harness/testing");
  const model = await startScriptedModel({
    turns: () => ({ text: ANSWER, usage: { input: 50, output: 25 } }),
    isSideCall: () => false,
  });
  process.stdout.write(`${JSON.stringify({ url: model.url })}\n`);
} else if (role === "proxy") {
  const { startLlmProxy } = (
    options.module ? await import(pathToFileURL(options.module).href) : await import("@oz0/llm-proxy")
  ) as LlmProxyModule;
  const pino = (await import("pino")).default;
  const { testCredentials } = await import("@oz0/serving/testing");
  const prices = { "*": { input: 3, output: 15 } };
  const proxy = await startLlmProxy({
    dataDir: options["data-dir"] || ":memory:",
    // The control API answers the orchestrator's credential: this process holds it, as the orchestrator does.
    auth: testCredentials.settingsFor("llm-proxy"),
    kek: Buffer.alloc(32, 1),
    providers: [
      { name: "anthropic", baseUrl: options.upstream, keySecret: "ANTHROPIC_API_KEY", prices },
      { name: "openai", baseUrl: options.upstream, keySecret: "OPENAI_API_KEY", auth: "bearer", prices },
    ],
    logger: pino({ level: "warn" }),
  });
  const { createClient } = await import("@connectrpc/connect");
  const { createGrpcTransport } = await import("@connectrpc/connect-node");
  const { LlmProxyService, SecretService } = await import("@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb");
  const transport = createGrpcTransport({ baseUrl: proxy.url, interceptors: [testCredentials.caller] });
  const secrets = createClient(SecretService, transport);
  await secrets.setSecret({ name: "ANTHROPIC_API_KEY", value: "sk-bench-key-0123456789" });
  await secrets.setSecret({ name: "OPENAI_API_KEY", value: "sk-bench-key-9876543210" });
  // A budget, so the reservation path is measured too.
  const minted = await createClient(LlmProxyService, transport).mintSessionToken({
    job: "bench",
    agent: "bench",
    session: "bench",
    budgetUsd: 1_000_000,
  });
  process.stdout.write(`${JSON.stringify({ url: proxy.url, token: minted.token })}\n`);
} else {
  await bench();
}
