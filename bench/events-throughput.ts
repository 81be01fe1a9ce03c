// End-to-end throughput and latency of the public lifecycle stream:
// producers' client → events service (its own process: redaction, SQLite
// outbox with synchronous=FULL, relay) → Kafka → a consumer, against kafkajs
// producing the same messages (value, key and CloudEvents headers) straight to
// Kafka (idempotent, acks=all, the same batch size), in the same run, on the same
// broker. Each round gets a fresh topic with the same partition count.
// Latency is from the moment an event is handed to the producer to the moment
// the consumer sees it. Prints events/s, p50/p99 latency and the ratios.
// `--warmup N` (2,000 by default) first sends N events down each path and
// times what follows: the goal is judged on services that have been running,
// as a deployment's do. The service is a fresh process every round (the
// direct producer's process is not), and V8 compiles its hot paths during its
// first events, so the warm-up's own latency is printed apart as the cold
// start (`--warmup 0` times a fresh process's first events with the rest, as
// this bench did before 2026-12-02). `--trail` prints each path's highest
// latency per tenth of the run.
//   node --import tsx bench/events-throughput.ts [--events 20000] [--jobs 50] [--repeat 3] [--warmup 2000] [--profile DIR] [--trail]
// Uses KAFKA_BROKERS when set, else starts a broker with @oz0/test-infra.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { Kafka, logLevel, type Consumer } from "kafkajs";
import { poolSmallZeroFilledBuffers, toKafkaMessage, type KafkaMessage } from "@oz0/events";
import { createEventPublisher, rawAttributes, rawEvent } from "@oz0/events-client";
import type { RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { credentialDigest, newCredential } from "@oz0/serving";
import { startKafka, type RunningKafka } from "@oz0/test-infra";
import { benchOptions } from "./bench-options.js";
import { percentile, startReport } from "./bench-report.js";
import { readProcessCpu, ticksPerSecond } from "./process-cpu.js";

const {
  events: EVENTS,
  jobs: JOBS,
  repeat: REPEAT,
  warmup: WARMUP,
  profile: PROFILE,
  compare: COMPARE,
  "compare-struct": COMPARE_STRUCT,
  producers: PRODUCERS,
  trail: TRAIL,
} = benchOptions({
  events: { type: "number", default: 20_000 },
  jobs: { type: "number", default: 50 },
  repeat: { type: "number", default: 3 },
  warmup: { type: "number", default: 2_000 },
  /** `--profile DIR` writes the service's CPU profiles (main thread and workers) there. */
  profile: { type: "string" },
  /**
   * `--compare FILE`: the `main.js` of another build of the service (an
   * earlier commit's `services/events/dist`, copied beside it), run as one
   * more contender in every round, so a change is judged before/after in the
   * same run.
   */
  compare: { type: "string" },
  /**
   * `--compare-struct`: send the `--compare` build the attributes as a Struct,
   * as producers did before RawEvent.attributes_json (a build from before it
   * ignores the JSON text, and would be spared the attributes' decoding and
   * redaction).
   */
  "compare-struct": { type: "boolean" },
  /**
   * `--producers N`: the service path's events come from N publishers at
   * once (each job's from one of them), as the orchestrator, the sandboxes
   * and the LLM proxy publish side by side; the batch of 500 in flight is
   * then N concurrent Publish calls. The direct producers are unchanged.
   */
  producers: { type: "number", default: 1 },
  /**
   * `--trail`: also print each path's highest latency in each tenth of the
   * run, in the order the consumer saw the events, so a slow start (a fresh
   * service process compiling its hot paths) is told apart from a slow run.
   */
  trail: { type: "boolean" },
});
const BATCH = 500;
const PARTITIONS = 3;

interface Result {
  perSecond: number;
  p50: number;
  p99: number;
  /** The highest latency in each tenth of the run, in arrival order. */
  trail: number[];
  /** p99 latency of the warm-up's events (a fresh service process's first events); undefined without a warm-up. */
  coldP99: number | undefined;
  /** CPU per event in µs while timed: this process (producer and consumer), the service process (all its threads), the broker. */
  cpu: { bench: number; service?: number; broker?: number };
}

// Everything here is CPU-bound on a small machine, so each path's CPU per
// event says where its time went: read from /proc (Linux), all threads.
const TICKS = ticksPerSecond();
function processCpuMs(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    return readProcessCpu(pid, TICKS).ownMs;
  } catch {
    return undefined;
  }
}

/** The broker's process, found by its listening port (`ss`), so its CPU can be counted too; undefined when it cannot be found. */
function brokerPid(address: string): number | undefined {
  try {
    const port = address.slice(address.lastIndexOf(":") + 1);
    const out = execFileSync("ss", ["-Hltnp", `sport = :${port}`], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    });
    const pid = /pid=(\d+)/.exec(out)?.[1];
    return pid ? Number(pid) : undefined;
  } catch {
    return undefined;
  }
}

/** Starts counting CPU; the returned function gives µs per event for `events` events since. */
function cpuMeter(servicePid?: number): (events: number) => Result["cpu"] {
  const bench0 = process.cpuUsage();
  const service0 = processCpuMs(servicePid);
  const broker0 = processCpuMs(BROKER_PID);
  return (events) => {
    const bench = process.cpuUsage(bench0);
    const service1 = processCpuMs(servicePid);
    const broker1 = processCpuMs(BROKER_PID);
    const per = (ms: number): number => (ms * 1000) / events;
    return {
      bench: (bench.user + bench.system) / events,
      ...(service0 !== undefined && service1 !== undefined ? { service: per(service1 - service0) } : {}),
      ...(broker0 !== undefined && broker1 !== undefined ? { broker: per(broker1 - broker0) } : {}),
    };
  };
}

// The direct producer gets the allocation tuning the service's producer
// thread has, so the baseline is kafkajs at its best (it also speeds up this
// process's consumer, for both paths alike).
poolSmallZeroFilledBuffers();
let ownBroker: RunningKafka | undefined;
const brokers = process.env.KAFKA_BROKERS
  ? process.env.KAFKA_BROKERS.split(",")
  : (ownBroker = await startKafka()).brokers;
const kafka = new Kafka({ clientId: "oz0-bench", brokers, logLevel: logLevel.NOTHING });
const BROKER_PID = brokerPid(brokers[0]!);
let topicNo = 0;

async function freshTopic(): Promise<string> {
  const topic = `oz0.bench.${process.pid}.${topicNo++}`;
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS }], waitForLeaders: true });
  await admin.disconnect();
  return topic;
}

/**
 * Consume `topic` until `count` messages arrived; `sentAt` gives each message's
 * start time. Warm-up messages (keyed `warmup-*`) are only counted, into `warmedUp`.
 */
async function consumeAll(
  topic: string,
  count: number,
  sentAt: (headers: Record<string, string>) => number,
): Promise<{ done: Promise<number[]>; warmedUp: Promise<number[]>; consumer: Consumer }> {
  const consumer = kafka.consumer({ groupId: `${topic}.consumer`, maxWaitTimeInMs: 20 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const latencies: number[] = [];
  let resolveDone: (v: number[]) => void;
  const done = new Promise<number[]>((r) => (resolveDone = r));
  const warmLatencies: number[] = [];
  let resolveWarm: (v: number[]) => void;
  const warmedUp = new Promise<number[]>((r) => (resolveWarm = r));
  if (WARMUP === 0) resolveWarm!(warmLatencies);
  // Produce only once the group has joined and owns the partitions.
  const joined = new Promise<void>((resolve) => {
    const off = consumer.on(consumer.events.GROUP_JOIN, () => {
      off();
      resolve();
    });
  });
  await consumer.run({
    eachBatch: async ({ batch }) => {
      const now = Date.now();
      for (const message of batch.messages) {
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(message.headers ?? {})) headers[k] = String(v);
        if (WARMUP > 0 && message.key?.toString().startsWith("warmup-")) {
          warmLatencies.push(now - sentAt(headers));
          if (warmLatencies.length === WARMUP) resolveWarm(warmLatencies);
          continue;
        }
        latencies.push(now - sentAt(headers));
      }
      if (latencies.length >= count) resolveDone(latencies);
    },
  });
  await joined;
  return { done, warmedUp, consumer };
}

/** The latency at quantile q of `latencies`, sorted once for every quantile asked. */
function quantiles(latencies: number[]): (q: number) => number {
  const sorted = [...latencies].sort((a, b) => a - b);
  return (q) => percentile(sorted, q);
}

function summarise(started: number, latencies: number[], cpu: Result["cpu"], warm: number[]): Result {
  const elapsed = (performance.now() - started) / 1000;
  const at = quantiles(latencies);
  const tenth = Math.ceil(latencies.length / 10);
  const trail = Array.from({ length: 10 }, (_, i) =>
    latencies.slice(i * tenth, (i + 1) * tenth).reduce((a, b) => Math.max(a, b), 0),
  );
  return {
    perSecond: latencies.length / elapsed,
    p50: at(0.5),
    p99: at(0.99),
    trail,
    coldP99: warm.length > 0 ? quantiles(warm)(0.99) : undefined,
    cpu,
  };
}

// Two baselines, both kafkajs producing straight to the same broker, with the
// messages built before the clock starts (only ce_time is set per batch) and
// the same buffer pooling as the service's producer thread:
// - "same messages": the very messages the service sends (value, key and all
//   CloudEvents headers), so the ratio is what the service adds. The goal is
//   judged against this one.
// - "bare": values of the same size with two headers, as a producer that
//   skipped the CloudEvents binding would send. kafkajs encodes every header
//   in buffers of its own, so this one is much faster; the ratio against it
//   shows what the binding costs on top.
type Baseline = "same messages" | "bare";

const sampleEvent = {
  type: "harness.operation_step",
  source: "orchestrator",
  toolCallId: "call-1",
  attributes: {
    step_index: 1,
    step_kind: "tool",
    label: "read uploads/order-4831.pdf",
    tool_name: "read",
    path: "uploads/order-4831.pdf",
  },
};

function baselineMessage(baseline: Baseline, jobId: string): KafkaMessage {
  const json = JSON.stringify({
    id: randomUUID(),
    ...sampleEvent,
    time: new Date().toISOString(),
    jobId,
    sessionId: `${jobId}-s`,
  });
  if (baseline === "same messages") return toKafkaMessage(json);
  return { key: jobId, value: json, headers: { ce_time: "", ce_id: randomUUID() } };
}

async function direct(baseline: Baseline): Promise<Result> {
  const topic = await freshTopic();
  const { done, warmedUp, consumer } = await consumeAll(topic, EVENTS, (h) => Date.parse(h.ce_time!));
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const produce = async (count: number, keyPrefix: string): Promise<void> => {
    const built = Array.from({ length: count }, (_, j) => baselineMessage(baseline, `${keyPrefix}-${j % JOBS}`));
    for (let i = 0; i < count; i += BATCH) {
      const time = new Date().toISOString();
      const messages = built.slice(i, i + BATCH);
      for (const message of messages) message.headers.ce_time = time;
      await producer.send({ topic, acks: -1, messages });
    }
  };
  await produce(WARMUP, "warmup");
  const warm = await warmedUp;
  const started = performance.now();
  const cpu = cpuMeter();
  await produce(EVENTS, "job");
  const result = summarise(started, await done, cpu(EVENTS), warm);
  await producer.disconnect();
  await consumer.disconnect();
  return result;
}

// The service takes Publish only from the suite's services, and each event
// type only from the service that sends it: the benchmark's publisher presents
// the orchestrator's credential, which sends harness.operation_step.
const PRODUCER_TOKEN = newCredential();
const services = new Set<ChildProcess>();

const SERVICE_MAIN = createRequire(import.meta.url)
  .resolve("@oz0/events")
  .replace(/index\.js$/, "main.js");

async function startService(
  topic: string,
  main: string,
): Promise<{ url: string; pid: number | undefined; stop: () => Promise<void> }> {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-bench-events-"));
  const child = spawn(process.execPath, [...(PROFILE ? ["--cpu-prof", `--cpu-prof-dir=${PROFILE}`] : []), main], {
    env: {
      ...process.env,
      OZ0_PORT: "0",
      OZ0_EVENTS_DATA: dataDir,
      KAFKA_BROKERS: brokers.join(","),
      OZ0_KAFKA_TOPIC: topic,
      OZ0_LOG_LEVEL: "info",
      OZ0_PEER_ORCHESTRATOR_SHA256: credentialDigest(PRODUCER_TOKEN),
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  services.add(child);
  child.once("exit", () => services.delete(child));
  let output = "";
  const url = await new Promise<string>((resolve, reject) => {
    child.stderr!.on("data", (chunk: Buffer) => {
      output += chunk.toString();
      const match = /"url":"(http:\/\/[^"]+)"/.exec(output);
      if (match) resolve(match[1]!);
    });
    child.once("exit", (code) => reject(new Error(`events exited with ${code}:\n${output}`)));
  });
  return {
    url,
    pid: child.pid,
    stop: async () => {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

async function throughService(main = SERVICE_MAIN): Promise<Result> {
  const topic = await freshTopic();
  const service = await startService(topic, main);
  // ce_time is when the event was built, just before it is handed to publish().
  const { done, warmedUp, consumer } = await consumeAll(topic, EVENTS, (h) => Date.parse(h.ce_time!));
  // A publisher retries what the service refuses until it closes; here a
  // refusal (a credential the service does not take) ends the run instead.
  const publishers = Array.from({ length: PRODUCERS }, () =>
    createEventPublisher({
      url: service.url,
      token: PRODUCER_TOKEN,
      maxBatch: BATCH,
      logger: {
        warn: (obj, msg) => fail(`the publisher could not publish: ${msg} ${JSON.stringify(obj)}`),
        error: (obj, msg) => fail(`the publisher dropped events: ${msg} ${JSON.stringify(obj)}`),
      },
    }),
  );
  const flushAll = (): Promise<unknown> => Promise.all(publishers.map((p) => p.flush()));
  // A build from before attributes_json (`--compare-struct`) is sent the
  // attributes as a Struct, as the producers of its time sent them.
  const structAttributes = COMPARE_STRUCT && main !== SERVICE_MAIN;
  const build = (event: RawEvent): RawEvent =>
    structAttributes ? { ...event, attributes: rawAttributes(event), attributesJson: "" } : event;
  const publish = async (count: number, jobPrefix: string): Promise<void> => {
    for (let i = 0; i < count; i++) {
      publishers[(i % JOBS) % PRODUCERS]!.publish(
        build(
          rawEvent("harness.operation_step", {
            source: "orchestrator",
            jobId: `${jobPrefix}-${i % JOBS}`,
            sessionId: `${jobPrefix}-${i % JOBS}-s`,
            toolCallId: "call-1",
            attributes: {
              step_index: i,
              step_kind: "tool",
              tool_name: "read",
              path: "uploads/order-4831.pdf",
              output: "redacted away",
            },
          }),
        ),
      );
      // The same flow control as the direct producer, which waits for each
      // batch's acknowledgement: each batch waits until the service has it
      // durably in its outbox. Without it the whole run queues in the
      // publisher at once and latency measures that queue, not the path.
      if (i % BATCH === BATCH - 1) await flushAll();
    }
    await flushAll();
  };
  await publish(WARMUP, "warmup");
  const warm = await warmedUp;
  const started = performance.now();
  const cpu = cpuMeter(service.pid);
  await publish(EVENTS, "job");
  const result = summarise(started, await done, cpu(EVENTS), warm);
  for (const publisher of publishers) await publisher.close();
  await consumer.disconnect();
  await service.stop();
  return result;
}

/** Ends the run at once, stopping the service processes and the broker it started. */
function fail(why: string): never {
  process.stderr.write(`events-throughput: ${why}\n`);
  for (const child of services) child.kill("SIGKILL");
  void (ownBroker?.close() ?? Promise.resolve()).finally(() => process.exit(1));
  throw new Error(why);
}

const us = (x: number | undefined): string => (x === undefined ? "?" : x.toFixed(0));
const format = (r: Result): string =>
  `${Math.round(r.perSecond).toString().padStart(7)} events/s  p50 ${String(r.p50).padStart(5)} ms  p99 ${String(r.p99).padStart(5)} ms  ` +
  `CPU µs/event: bench ${us(r.cpu.bench)}${r.cpu.service === undefined ? "" : `, service ${us(r.cpu.service)}`}, broker ${us(r.cpu.broker)}` +
  (r.coldP99 === undefined ? "" : `; warm-up p99 ${r.coldP99} ms`) +
  (TRAIL ? `\n           highest latency per tenth of the run: ${r.trail.join(" ")} ms` : "");

const report = startReport("events-throughput");
console.log(
  `${EVENTS} events over ${JOBS} jobs, ${PARTITIONS} partitions, batches of ${BATCH}, ${PRODUCERS} producer${PRODUCERS === 1 ? "" : "s"} into the service, ${REPEAT} rounds${WARMUP ? `, ${WARMUP} warm-up events first` : ""}${COMPARE ? `; compared with ${COMPARE}` : ""}`,
);
const ratios: {
  same: number;
  bare: number;
  p99: number;
  /** The warm-up's p99 against the direct producer's warm-up (a fresh service process against a fresh producer in a running process). */
  coldP99?: number;
  compare?: { same: number; p99: number; throughput: number };
}[] = [];
try {
  // Contenders alternate within each round, so each round's ratios compare like with like.
  for (let round = 0; round < REPEAT; round++) {
    const same = await direct("same messages");
    const bare = await direct("bare");
    // With --compare, the two builds take turns going first: whichever runs
    // first in a round met other conditions (the broker just written to by
    // the direct producers, the bench process's heap), and in a run against
    // an identical build the one always going first had the higher p99 in 3
    // of 5 rounds.
    const compareFirst = COMPARE !== undefined && round % 2 === 1;
    const early = compareFirst ? await throughService(path.resolve(COMPARE)) : undefined;
    const s = await throughService();
    const c = COMPARE ? (early ?? (await throughService(path.resolve(COMPARE)))) : undefined;
    ratios.push({
      same: s.perSecond / same.perSecond,
      bare: s.perSecond / bare.perSecond,
      p99: s.p99 / Math.max(1, same.p99),
      ...(s.coldP99 !== undefined && same.coldP99 !== undefined
        ? { coldP99: s.coldP99 / Math.max(1, same.coldP99) }
        : {}),
      ...(c
        ? {
            compare: {
              same: c.perSecond / same.perSecond,
              p99: c.p99 / Math.max(1, same.p99),
              throughput: s.perSecond / c.perSecond,
            },
          }
        : {}),
    });
    console.log(`round ${round + 1}  kafkajs, same messages: ${format(same)}`);
    console.log(`round ${round + 1}  kafkajs, bare:          ${format(bare)}`);
    console.log(
      `round ${round + 1}  via events:             ${format(s)}   ratio ${ratios[round]!.same.toFixed(2)} (bare ${ratios[round]!.bare.toFixed(2)})`,
    );
    if (c)
      console.log(
        `round ${round + 1}  via events (compare):   ${format(c)}   ratio ${ratios[round]!.compare!.same.toFixed(2)}${compareFirst ? " (ran first)" : ""}`,
      );
  }
} finally {
  await ownBroker?.close();
}
report.ratio(
  "throughput ratio, events / kafkajs with the same messages",
  ratios.map((r) => r.same),
  { goal: ">= 0.8" },
);
report.ratio(
  "throughput ratio, events / kafkajs bare",
  ratios.map((r) => r.bare),
);
report.ratio(
  "p99 latency ratio, events / kafkajs with the same messages",
  ratios.map((r) => r.p99),
  { goal: "<= 1.5" },
);
if (WARMUP > 0)
  report.ratio(
    `cold start: p99 latency ratio of the ${WARMUP} warm-up events, a fresh service process / a fresh kafkajs producer in the running bench`,
    ratios.map((r) => r.coldP99!),
  );
if (COMPARE) {
  report.ratio(
    "compare build: throughput ratio against the same messages",
    ratios.map((r) => r.compare!.same),
  );
  report.ratio(
    "compare build: p99 latency ratio",
    ratios.map((r) => r.compare!.p99),
  );
  report.ratio(
    "this build / compare build, throughput",
    ratios.map((r) => r.compare!.throughput),
  );
}
report.end();
