// What the LLM proxy does to each event of a stream, in one process: the
// scripted upstream's stream of each wire format (fetched once), split into
// events, metered and scrubbed for a provider key as the proxy's stream loop
// does (model-call.ts), against splitting the same bytes into events alone
// (the least any proxy that reads events does). No sockets, no processes:
// the per-event work alone, precisely, where llm-proxy-latency.ts measures
// it among everything else a call costs. `--baseline-dir` adds another
// build's stream work in the same rounds: a folder holding that build's
// `llm-proxy/dist` and, where its imports find it, its own `@oz0/serving`
// (`node_modules/@oz0/serving` with `package.json` and `dist`, beside
// `llm-proxy`; link that package's `node_modules` too).
//   node --import tsx bench/llm-proxy-stream-work.ts [--answer-chars 2000] [--streams 500] [--rounds 8] [--baseline-dir DIR]
//     [--wires anthropic,openai,openai-responses]
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";
import type { createScrubber } from "@oz0/serving";
import { startScriptedModel } from "@oz0/harness/testing";
import { benchOptions } from "./bench-options.js";
import { median, startReport } from "./bench-report.js";

const options = benchOptions({
  "answer-chars": { type: "number", default: 2000 },
  streams: { type: "number", default: 500 },
  rounds: { type: "number", default: 8 },
  "baseline-dir": { type: "string", default: "" },
  wires: { type: "string", default: "anthropic,openai,openai-responses" },
});

/** The key the proxy would hold, of an Anthropic key's length and alphabet: its hundred-odd pairs are what the scrub's quick reading looks for. */
const KEY =
  "sk-ant-api03-DMaJPNzygVsbcNypPru8VULQKeitsS5_F-b_N28-csBo2MOWHYWFA1-zvVBCbtkUNuXnBKBN0nMdPaSFY8bpt76mIQh5uur";

interface WireFormatLike {
  name: string;
  calls: {
    /** Takes the build's own request body (its request-body.js). */
    readRequest(body: unknown): {
      streamMeter(): { onEvent(event: string): string | undefined };
    };
    streamScrubber(scrubber: unknown): { push(event: string): string };
  };
}
interface Build {
  name: string;
  formats: readonly WireFormatLike[];
  Splitter: new () => { push(chunk: Buffer): string[] };
  scrubber: unknown;
  /** A request body as the build reads it. */
  parseBody(raw: Buffer): unknown;
}

async function loadBuild(name: string, dist: string, servingIndex: string): Promise<Build> {
  const formats = (await import(pathToFileURL(path.join(dist, "wire-formats/formats.js")).href)) as {
    WIRE_FORMATS: readonly WireFormatLike[];
  };
  const splitter = (await import(pathToFileURL(path.join(dist, "sse-event-splitter.js")).href)) as {
    SseEventSplitter: Build["Splitter"];
  };
  const requestBody = (await import(pathToFileURL(path.join(dist, "request-body.js")).href)) as {
    JsonRequestBody: { parse(raw: Buffer): unknown };
  };
  const serving = (await import(pathToFileURL(servingIndex).href)) as { createScrubber: typeof createScrubber };
  return {
    name,
    formats: formats.WIRE_FORMATS,
    Splitter: splitter.SseEventSplitter,
    scrubber: serving.createScrubber(KEY),
    parseBody: (raw) => requestBody.JsonRequestBody.parse(raw),
  };
}

const here = path.dirname(new URL(import.meta.url).pathname);
const builds = [
  await loadBuild(
    "this build",
    path.join(here, "../services/llm-proxy/dist"),
    createRequire(import.meta.url).resolve("@oz0/serving"),
  ),
];
if (options["baseline-dir"]) {
  const dist = path.resolve(options["baseline-dir"], "llm-proxy/dist");
  const serving = createRequire(path.join(dist, "index.js")).resolve("@oz0/serving");
  builds.push(await loadBuild("baseline", dist, serving));
}

const SENTENCE =
  "The scripted upstream answers every call with this sentence, which is about a hundred characters long. ";
const ANSWER = SENTENCE.repeat(Math.ceil(options["answer-chars"] / SENTENCE.length)).slice(0, options["answer-chars"]);
const ALL_WIRES = [
  { format: "anthropic", path: "/v1/messages", body: { model: "m", max_tokens: 8192, stream: true } },
  {
    format: "openai",
    path: "/v1/chat/completions",
    body: { model: "m", max_completion_tokens: 8192, stream: true, stream_options: { include_obfuscation: true } },
  },
  { format: "openai-responses", path: "/v1/responses", body: { model: "m", max_output_tokens: 8192, stream: true } },
];

const WIRES = ALL_WIRES.filter((wire) => options.wires.split(",").includes(wire.format));
if (WIRES.length === 0) throw new Error(`--wires: name one or more of ${ALL_WIRES.map((w) => w.format).join(", ")}`);

const report = startReport("llm-proxy-stream-work");
const model = await startScriptedModel({
  turns: () => ({ text: ANSWER, usage: { input: 50, output: 25 } }),
  isSideCall: () => false,
});
/** Each wire's stream as the proxy reads it from its socket: 16 KB chunks. */
const streams = new Map<string, Buffer[]>();
for (const wire of WIRES) {
  const messages = [{ role: "user", content: "Say something." }];
  const body = wire.format === "openai-responses" ? { ...wire.body, input: messages } : { ...wire.body, messages };
  const res = await fetch(model.url + wire.path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const raw = Buffer.from(await res.arrayBuffer());
  const chunks: Buffer[] = [];
  for (let at = 0; at < raw.length; at += 16_384) chunks.push(raw.subarray(at, at + 16_384));
  streams.set(wire.format, chunks);
}
await model.close();

/** One stream through a build's meter and scrubber, as forwardStream reads it; the bytes that would go out. */
function streamThrough(build: Build, wire: (typeof ALL_WIRES)[number]): number {
  const format = build.formats.find((f) => f.name === wire.format)!;
  const meter = format.calls.readRequest(build.parseBody(Buffer.from(JSON.stringify(wire.body)))).streamMeter();
  const scrubber = format.calls.streamScrubber(build.scrubber);
  const splitter = new build.Splitter();
  let out = 0;
  for (const chunk of streams.get(wire.format)!) {
    for (const event of splitter.push(chunk)) {
      const forward = meter.onEvent(event);
      if (forward !== undefined) out += scrubber.push(forward).length;
    }
  }
  return out;
}

/** The floor: the same bytes split into events, nothing read in them. */
function splitOnly(build: Build, wire: (typeof ALL_WIRES)[number]): number {
  const splitter = new build.Splitter();
  let out = 0;
  for (const chunk of streams.get(wire.format)!) for (const event of splitter.push(chunk)) out += event.length;
  return out;
}

/** CPU µs a stream over `count` streams. */
function timed(count: number, run: () => number): number {
  const start = process.cpuUsage();
  for (let i = 0; i < count; i += 1) run();
  const used = process.cpuUsage(start);
  return (used.user + used.system) / count;
}

try {
  for (const wire of WIRES) {
    const contenders = [
      { name: "split only", run: () => splitOnly(builds[0]!, wire) },
      ...builds.map((build) => ({ name: build.name, run: () => streamThrough(build, wire) })),
    ];
    // Every build sends the same bytes (a key-free answer passes whole), and each warms up first.
    const sent = new Set(builds.map((build) => streamThrough(build, wire)));
    if (sent.size !== 1)
      throw new Error(`${wire.format}: the builds sent different streams (${[...sent].join(", ")} bytes)`);
    for (const c of contenders) timed(options.streams, c.run);
    const perRound = contenders.map(() => [] as number[]);
    for (let round = 0; round < options.rounds; round += 1) {
      // Each round in another order, so no contender always runs first.
      for (let k = 0; k < contenders.length; k += 1) {
        const i = (k + round) % contenders.length;
        perRound[i]!.push(timed(options.streams, contenders[i]!.run));
      }
    }
    const eventCount = new builds[0]!.Splitter().push(Buffer.concat(streams.get(wire.format)!)).length;
    console.log(
      `\n${wire.format}: ${eventCount} events, ${Buffer.concat(streams.get(wire.format)!).length} bytes a stream`,
    );
    contenders.forEach((c, i) =>
      console.log(`  ${c.name.padEnd(11)} ${median(perRound[i]!).toFixed(1)} µs CPU a stream`),
    );
    report.ratio(
      `  this build vs split only`,
      perRound[1]!.map((x, r) => x / perRound[0]![r]!),
      { unit: "x" },
    );
    if (builds.length > 1)
      report.ratio(
        `  this build vs baseline`,
        perRound[1]!.map((x, r) => x / perRound[2]![r]!),
        { unit: "x" },
      );
  }
} finally {
  report.end();
}
