// What the events relay's producer thread spends encoding a produce request,
// in one process: the service's own messages (toKafkaMessage of a stored
// event), 1 000 to a request over 3 partitions as the relay sends them, each
// request framed for the socket, by
//   - kafkajs 2.2.4 as it is,
//   - kafkajs with its records and record batches written in one buffer (the
//     relay before its produce requests were framed in one buffer),
//   - the relay's producer thread as it is now (src/kafkajs-hot-paths.ts).
// All three run with the small zero-filled buffers pooled, as that thread
// does. No broker and no sockets: the encoding alone, where
// events-throughput.ts measures it among everything else on two cores.
//   node --import tsx bench/events-produce-encoding.ts [--messages 1000] [--requests 40] [--rounds 8] [--value-bytes 0]
import { createRequire } from "node:module";
import { poolSmallZeroFilledBuffers, toKafkaMessage } from "@oz0/events";
import {
  KAFKAJS_PRODUCE_REQUEST,
  KAFKAJS_REQUEST_FRAME,
  useFasterKafkajsPaths,
  type FrameRequest,
  type ProduceRequestFactory,
  type ProduceRequestInput,
} from "../services/events/src/kafkajs-hot-paths.js";
import { benchOptions } from "./bench-options.js";
import { median, startReport } from "./bench-report.js";

const options = benchOptions({
  messages: { type: "number", default: 1000 },
  requests: { type: "number", default: 40 },
  rounds: { type: "number", default: 8 },
  /** Pads each event's attributes to this many bytes of value (0: as the control plane's events are). */
  "value-bytes": { type: "number", default: 0 },
});

const require = createRequire(import.meta.url);
const PRODUCE_FILE = require.resolve(KAFKAJS_PRODUCE_REQUEST);
const FRAME_FILE = require.resolve(KAFKAJS_REQUEST_FRAME);

poolSmallZeroFilledBuffers();
// kafkajs's own, loaded before anything is replaced.
const kafkajs = { produce: require(PRODUCE_FILE) as ProduceRequestFactory, frame: require(FRAME_FILE) as FrameRequest };
const installed = useFasterKafkajsPaths();
if (!installed.produceRequest || !installed.requestFrame)
  throw new Error(`kafkajs's paths not replaced: ${JSON.stringify(installed)}`);
const now = { produce: require(PRODUCE_FILE) as ProduceRequestFactory, frame: require(FRAME_FILE) as FrameRequest };
// kafkajs's produce request loaded again, now that its records and record batches are replaced: the relay before.
delete require.cache[PRODUCE_FILE];
const before = { produce: require(PRODUCE_FILE) as ProduceRequestFactory, frame: kafkajs.frame };

const contenders = [
  { name: "kafkajs", ...kafkajs },
  { name: "before", ...before },
  { name: "now", ...now },
];

const PARTITIONS = 3;
const padding = "x".repeat(options["value-bytes"]);
const messages = Array.from({ length: options.messages }, (_, i) =>
  toKafkaMessage(
    JSON.stringify({
      id: `0193a6f4-1c2b-7d3e-8f4a-${String(i).padStart(12, "0")}`,
      type: "harness.operation_step",
      time: new Date(1_764_640_000_000 + i).toISOString(),
      source: "orchestrator",
      jobId: `job-${i % 50}`,
      attributes: { step_index: i, label: "Requested read", ...(padding ? { padding } : {}) },
      traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    }),
  ),
);
const request: ProduceRequestInput = {
  acks: -1,
  timeout: 30_000,
  producerId: 4_000_000_017,
  producerEpoch: 0,
  compression: 0,
  topicData: [
    {
      topic: "oz0.events",
      partitions: Array.from({ length: PARTITIONS }, (_, partition) => ({
        partition,
        firstSequence: 0,
        messages: messages.filter((_, i) => i % PARTITIONS === partition),
      })),
    },
  ],
};

async function encodeAll(contender: (typeof contenders)[number]): Promise<{ cpuUs: number; bytes: number }> {
  let bytes = 0;
  const start = process.cpuUsage();
  for (let i = 0; i < options.requests; i++) {
    const framed = await contender.frame({
      correlationId: i,
      clientId: "oz0-events",
      request: contender.produce(request),
    });
    bytes += framed.buffer.length;
  }
  const used = process.cpuUsage(start);
  return { cpuUs: used.user + used.system, bytes };
}

const report = startReport("events-produce-encoding");
try {
  console.log(
    `${options.requests} produce requests of ${options.messages} messages (${PARTITIONS} partitions) a round, ${options.rounds} rounds, the contenders taking turns going first`,
  );
  // The same bytes from all three, before anything is timed (the clock's reading aside: one request each, one clock).
  const sizes = new Set<number>();
  for (const c of contenders) sizes.add((await encodeAll({ ...c })).bytes);
  if (sizes.size !== 1) throw new Error(`the contenders framed different lengths: ${[...sizes].join(", ")}`);
  // Warm-up: each contender's code compiled before the rounds.
  for (let i = 0; i < 3; i++) for (const c of contenders) await encodeAll(c);
  const perMessage = contenders.map(() => [] as number[]);
  for (let round = 0; round < options.rounds; round++) {
    const order = contenders.map((_, i) => (i + round) % contenders.length);
    for (const i of order) {
      const { cpuUs } = await encodeAll(contenders[i]!);
      perMessage[i]!.push(cpuUs / (options.requests * options.messages));
    }
  }
  const [bytes] = sizes;
  console.log(`each request framed: ${bytes! / options.requests} bytes`);
  contenders.forEach((c, i) =>
    console.log(`  ${c.name.padEnd(8)} ${median(perMessage[i]!).toFixed(2)} µs CPU a message`),
  );
  const ratio = (a: number, b: number) => perMessage[a]!.map((x, round) => x / perMessage[b]![round]!);
  report.ratio("CPU a message, now / before", ratio(2, 1));
  report.ratio("CPU a message, now / kafkajs as it is", ratio(2, 0));
} finally {
  report.end();
}
