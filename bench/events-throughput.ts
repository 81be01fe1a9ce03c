// End-to-end throughput and latency of the public lifecycle stream:
// producers' client → events service (its own process: redaction, SQLite
// outbox with synchronous=FULL, relay) → Kafka → a consumer, against kafkajs
// producing the same number of messages of the same size straight to Kafka
// (idempotent, acks=all, the same batch size), in the same run, on the same
// broker. Each round gets a fresh topic with the same partition count.
// Latency is from the moment an event is handed to the producer to the moment
// the consumer sees it. Prints events/s, p50/p99 latency and the ratios.
// `--warmup N` first sends N events down each path (the service is a fresh
// process every round; the direct producer's process is not) and times only
// what follows: a steady-state view. Off by default.
//   node --import tsx bench/events-throughput.ts [--events 20000] [--jobs 50] [--repeat 2] [--warmup 0]
// Uses KAFKA_BROKERS when set, else starts a broker with @oz0/test-infra.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { Kafka, logLevel, type Consumer } from "kafkajs";
import { createEventPublisher, rawEvent } from "@oz0/events";
import { startKafka, type RunningKafka } from "@oz0/test-infra";

const args = process.argv.slice(2);
const option = (name: string, fallback: number): number => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const EVENTS = option("events", 20_000);
const JOBS = option("jobs", 50);
const REPEAT = option("repeat", 2);
const WARMUP = option("warmup", 0);
const BATCH = 500;
const PARTITIONS = 3;

interface Result {
  perSecond: number;
  p50: number;
  p99: number;
}

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

// One public event's JSON, as the service would put it on Kafka: the direct
// baseline sends values of the same size.
const sampleValue = JSON.stringify({
  id: "00000000-0000-0000-0000-000000000000",
  type: "harness.operation_step",
  time: new Date().toISOString(),
  source: "sandbox",
  jobId: "job-00",
  sessionId: "job-00-s",
  toolCallId: "call-1",
  attributes: { step_index: 1, step_kind: "tool", label: "read uploads/order-4831.pdf", tool_name: "read", path: "uploads/order-4831.pdf" },
});

async function direct(): Promise<Result> {
  const topic = await freshTopic();
  const { done, warmedUp, consumer } = await consumeAll(topic, EVENTS, (h) => Number(h.sent_at));
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const produce = async (count: number, keyPrefix: string): Promise<void> => {
    for (let i = 0; i < count; i += BATCH) {
      const sentAt = String(Date.now());
      const messages = [];
      for (let j = i; j < Math.min(count, i + BATCH); j++) {
        messages.push({ key: `${keyPrefix}-${j % JOBS}`, value: sampleValue, headers: { sent_at: sentAt, ce_id: String(j) } });
      }
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
  const child = spawn(process.execPath, [main], {
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
      // Yield now and then, as a producer doing real work would.
      if (i % BATCH === BATCH - 1) await new Promise((r) => setImmediate(r));
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
const ratios: { throughput: number; p99: number }[] = [];
try {
  for (let round = 0; round < REPEAT; round++) {
    const d = await direct();
    const s = await throughService();
    ratios.push({ throughput: s.perSecond / d.perSecond, p99: s.p99 / Math.max(1, d.p99) });
    console.log(`round ${round + 1}  kafkajs direct: ${format(d)}`);
    console.log(`round ${round + 1}  via events:     ${format(s)}   throughput ratio ${ratios[round]!.throughput.toFixed(2)}`);
  }
} finally {
  await ownBroker?.close();
}
// Rounds run back to back on the same broker, so each ratio compares like with
// like; the median is robust to a round disturbed by other work on the machine.
const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
console.log(`throughput ratio (events / direct, median of rounds): ${median(ratios.map((r) => r.throughput)).toFixed(2)}  (goal >= 0.5)`);
console.log(`p99 latency ratio (events / direct, median of rounds): ${median(ratios.map((r) => r.p99)).toFixed(2)}`);
