// End-to-end throughput and latency of the public lifecycle stream:
// producers' client → events service (its own process: redaction, SQLite
// outbox with synchronous=FULL, relay) → Kafka → a consumer, against kafkajs
// producing the same messages (value, key and CloudEvents headers) straight to
// Kafka (idempotent, acks=all, the same batch size), in the same run, on the same
// broker. Each round gets a fresh topic with the same partition count.
// Latency is from the moment an event is handed to the producer to the moment
// the consumer sees it. Prints events/s, p50/p99 latency and the ratios.
// `--warmup N` first sends N events down each path (the service is a fresh
// process every round; the direct producer's process is not) and times only
// what follows: a steady-state view. Off by default.
//   node --import tsx bench/events-throughput.ts [--events 20000] [--jobs 50] [--repeat 3] [--warmup 0] [--profile DIR]
// Uses KAFKA_BROKERS when set, else starts a broker with @oz0/test-infra.
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { Kafka, logLevel, type Consumer } from "kafkajs";
import { createEventPublisher, poolSmallZeroFilledBuffers, rawEvent, toKafkaMessage, type KafkaMessage } from "@oz0/events";
import { startKafka, type RunningKafka } from "@oz0/test-infra";
import { benchOptions } from "./bench-options.js";

const { events: EVENTS, jobs: JOBS, repeat: REPEAT, warmup: WARMUP, profile: PROFILE } = benchOptions({
  events: { type: "number", default: 20_000 },
  jobs: { type: "number", default: 50 },
  repeat: { type: "number", default: 3 },
  warmup: { type: "number", default: 0 },
  /** `--profile DIR` writes the service's CPU profiles (main thread and workers) there. */
  profile: { type: "string" },
});
const BATCH = 500;
const PARTITIONS = 3;

interface Result {
  perSecond: number;
  p50: number;
  p99: number;
}

// The direct producer gets the allocation tuning the service's producer
// thread has, so the baseline is kafkajs at its best (it also speeds up this
// process's consumer, for both paths alike).
poolSmallZeroFilledBuffers();
let ownBroker: RunningKafka | undefined;
const brokers = process.env.KAFKA_BROKERS ? process.env.KAFKA_BROKERS.split(",") : (ownBroker = await startKafka()).brokers;
const kafka = new Kafka({ clientId: "oz0-bench", brokers, logLevel: logLevel.NOTHING });
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
): Promise<{ done: Promise<number[]>; warmedUp: Promise<void>; consumer: Consumer }> {
  const consumer = kafka.consumer({ groupId: `${topic}.consumer`, maxWaitTimeInMs: 20 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const latencies: number[] = [];
  let resolveDone: (v: number[]) => void;
  const done = new Promise<number[]>((r) => (resolveDone = r));
  let warm = 0;
  let resolveWarm: () => void;
  const warmedUp = new Promise<void>((r) => (resolveWarm = r));
  if (WARMUP === 0) resolveWarm!();
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
        if (WARMUP > 0 && message.key?.toString().startsWith("warmup-")) {
          if (++warm === WARMUP) resolveWarm();
          continue;
        }
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(message.headers ?? {})) headers[k] = String(v);
        latencies.push(now - sentAt(headers));
      }
      if (latencies.length >= count) resolveDone(latencies);
    },
  });
  await joined;
  return { done, warmedUp, consumer };
}

function summarise(started: number, latencies: number[]): Result {
  const elapsed = (performance.now() - started) / 1000;
  const sorted = [...latencies].sort((a, b) => a - b);
  const at = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return { perSecond: latencies.length / elapsed, p50: at(0.5), p99: at(0.99) };
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
  source: "sandbox",
  toolCallId: "call-1",
  attributes: { step_index: 1, step_kind: "tool", label: "read uploads/order-4831.pdf", tool_name: "read", path: "uploads/order-4831.pdf" },
};

function baselineMessage(baseline: Baseline, jobId: string): KafkaMessage {
  const json = JSON.stringify({ id: randomUUID(), ...sampleEvent, time: new Date().toISOString(), jobId, sessionId: `${jobId}-s` });
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
  await warmedUp;
  const started = performance.now();
  await produce(EVENTS, "job");
  const result = summarise(started, await done);
  await producer.disconnect();
  await consumer.disconnect();
  return result;
}

async function startService(topic: string): Promise<{ url: string; stop: () => Promise<void> }> {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-bench-events-"));
  const main = createRequire(import.meta.url).resolve("@oz0/events").replace(/index\.js$/, "main.js");
  const child = spawn(process.execPath, [...(PROFILE ? ["--cpu-prof", `--cpu-prof-dir=${PROFILE}`] : []), main], {
    env: { ...process.env, OZ0_PORT: "0", OZ0_EVENTS_DATA: dataDir, KAFKA_BROKERS: brokers.join(","), OZ0_KAFKA_TOPIC: topic, OZ0_LOG_LEVEL: "info" },
    stdio: ["ignore", "ignore", "pipe"],
  });
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
    stop: async () => {
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await exited;
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

async function throughService(): Promise<Result> {
  const topic = await freshTopic();
  const service = await startService(topic);
  // ce_time is when the event was built, just before it is handed to publish().
  const { done, warmedUp, consumer } = await consumeAll(topic, EVENTS, (h) => Date.parse(h.ce_time!));
  const publisher = createEventPublisher({ url: service.url, maxBatch: BATCH });
  const publish = async (count: number, jobPrefix: string): Promise<void> => {
    for (let i = 0; i < count; i++) {
      publisher.publish(
        rawEvent("harness.operation_step", {
          source: "sandbox",
          jobId: `${jobPrefix}-${i % JOBS}`,
          sessionId: `${jobPrefix}-${i % JOBS}-s`,
          toolCallId: "call-1",
          attributes: { step_index: i, step_kind: "tool", tool_name: "read", path: "uploads/order-4831.pdf", output: "redacted away" },
        }),
      );
      // The same flow control as the direct producer, which waits for each
      // batch's acknowledgement: each batch waits until the service has it
      // durably in its outbox. Without it the whole run queues in the
      // publisher at once and latency measures that queue, not the path.
      if (i % BATCH === BATCH - 1) await publisher.flush();
    }
    await publisher.flush();
  };
  await publish(WARMUP, "warmup");
  await warmedUp;
  const started = performance.now();
  await publish(EVENTS, "job");
  const result = summarise(started, await done);
  await publisher.close();
  await consumer.disconnect();
  await service.stop();
  return result;
}

const format = (r: Result): string => `${Math.round(r.perSecond).toString().padStart(7)} events/s  p50 ${String(r.p50).padStart(5)} ms  p99 ${String(r.p99).padStart(5)} ms`;

console.log(`events-throughput: ${EVENTS} events over ${JOBS} jobs, ${PARTITIONS} partitions, batches of ${BATCH}, ${REPEAT} rounds${WARMUP ? `, ${WARMUP} warm-up events first` : ""}`);
const ratios: { same: number; bare: number; p99: number }[] = [];
try {
  for (let round = 0; round < REPEAT; round++) {
    const same = await direct("same messages");
    const bare = await direct("bare");
    const s = await throughService();
    ratios.push({ same: s.perSecond / same.perSecond, bare: s.perSecond / bare.perSecond, p99: s.p99 / Math.max(1, same.p99) });
    console.log(`round ${round + 1}  kafkajs, same messages: ${format(same)}`);
    console.log(`round ${round + 1}  kafkajs, bare:          ${format(bare)}`);
    console.log(`round ${round + 1}  via events:             ${format(s)}   ratio ${ratios[round]!.same.toFixed(2)} (bare ${ratios[round]!.bare.toFixed(2)})`);
  }
} finally {
  await ownBroker?.close();
}
// Rounds run back to back on the same broker, so each ratio compares like with
// like; the median is robust to a round disturbed by other work on the machine.
const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  // An even count averages the middle two: the upper one alone would flatter.
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
console.log(`throughput ratio, events / kafkajs with the same messages (median of rounds): ${median(ratios.map((r) => r.same)).toFixed(2)}  (goal >= 0.5)`);
console.log(`throughput ratio, events / kafkajs bare (median of rounds): ${median(ratios.map((r) => r.bare)).toFixed(2)}`);
console.log(`p99 latency ratio, events / kafkajs with the same messages (median of rounds): ${median(ratios.map((r) => r.p99)).toFixed(2)}`);
