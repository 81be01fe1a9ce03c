// The relay's replacements of kafkajs's hot paths against kafkajs's own: the
// same record bytes for every shape of message the relay sends (kafkajs's
// encoder for the rest), the same grouping by partition and the same CRC.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { describe, mock, test } from "node:test";
import { toKafkaMessage } from "@oz0/events";
import {
  crc32c,
  encodeRecord,
  frameRequest,
  groupByPartition,
  KAFKAJS_CRC32C,
  REPLACED_VERSION,
  KAFKAJS_GROUPING,
  KAFKAJS_MURMUR2,
  KAFKAJS_PRODUCE_REQUEST,
  KAFKAJS_REQUEST_FRAME,
  KAFKAJS_RECORD,
  KAFKAJS_RECORD_BATCH,
  KAFKAJS_REQUEST_QUEUE,
  ProducePayload,
  produceRequestInParts,
  recordBatchInOneBuffer,
  rememberedPerKey,
  scheduleCheckPendingRequests,
  useFasterKafkajsPaths,
  type EncodedRecord,
  type FrameRequest,
  type GroupingInput,
  type KafkajsRequest,
  type ProduceRequestFactory,
  type ProduceRequestInput,
  type RecordBatchInput,
  type RecordBatchModule,
  type RecordInput,
} from "../src/kafkajs-hot-paths.js";

const require = createRequire(import.meta.url);
const RECORD_FILE = require.resolve(KAFKAJS_RECORD);
const GROUPING_FILE = require.resolve(KAFKAJS_GROUPING);
const CRC_FILE = require.resolve(KAFKAJS_CRC32C);
const RECORD_BATCH_FILE = require.resolve(KAFKAJS_RECORD_BATCH);
const kafkajsRecordBatch = (require(RECORD_BATCH_FILE) as RecordBatchModule).RecordBatch;
const Long = require("kafkajs/src/utils/long.js") as { fromValue(value: unknown): unknown };
const MURMUR2_FILE = require.resolve(KAFKAJS_MURMUR2);
const kafkajsMurmur2 = require(MURMUR2_FILE) as (key: unknown) => number;
const kafkajsCrc = require(CRC_FILE) as (buffer: Buffer) => number;
const kafkajsRecord = require(RECORD_FILE) as (input: RecordInput) => EncodedRecord;
const kafkajsGrouping = require(GROUPING_FILE) as <M>(input: GroupingInput<M>) => Record<number, M[]>;
const PRODUCE_FILE = require.resolve(KAFKAJS_PRODUCE_REQUEST);
const FRAME_FILE = require.resolve(KAFKAJS_REQUEST_FRAME);
const kafkajsProduce = require(PRODUCE_FILE) as ProduceRequestFactory;
const kafkajsFrame = require(FRAME_FILE) as FrameRequest;

const event = {
  id: "3f2b1c9e-8a7d-4e6f-9b1a-2c3d4e5f6a7b",
  type: "harness.operation_step",
  time: "2026-12-02T01:23:45.678Z",
  source: "orchestrator",
  jobId: "job-17",
  attributes: { step_index: 3, label: "Requested read" },
  traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
};

const cases: Record<string, RecordInput> = {
  "a CloudEvents message as the relay sends it": { ...toKafkaMessage(JSON.stringify(event)), offsetDelta: 7 },
  "an event outside a job (no key)": {
    ...toKafkaMessage(JSON.stringify({ ...event, jobId: undefined, sessionId: "s-1" })),
    offsetDelta: 0,
  },
  "multi-byte text in the key, the value and a header": {
    key: "job-é✓",
    value: JSON.stringify({ label: "read naïve 📄" }),
    headers: { ce_subject: "ü", "content-type": "application/json" },
    offsetDelta: 1,
  },
  "offsets and timestamps past one varint byte": {
    key: "k",
    value: "v",
    headers: {},
    offsetDelta: 999,
    timestampDelta: 300_000,
  },
  "ASCII and other text at and past the length written a character at a time": {
    key: "k".repeat(64),
    value: `${"v".repeat(63)}\u0080`,
    headers: { [`h${"x".repeat(63)}`]: "y".repeat(65), a: "\u007f", b: `${"z".repeat(63)}é`, c: "" },
  },
  "a negative timestamp delta": { key: "k", value: "v", offsetDelta: 128, timestampDelta: -5 },
  "a value of 200 KB": { key: "big", value: "x".repeat(200_000), headers: { a: "b" } },
  "Buffers for the value and a header": {
    key: null,
    value: Buffer.from([0, 1, 2, 255]),
    headers: { h: Buffer.from("x") },
  },
  "no headers field at all": { key: "k", value: "" },
};

void describe("kafkajs's hot paths, replaced", () => {
  for (const [name, input] of Object.entries(cases)) {
    void test(`is kafkajs's bytes: ${name}`, () => {
      const ours = encodeRecord(input);
      assert.ok(ours, "encoded here, not left to kafkajs");
      assert.ok(Buffer.isBuffer(ours.buf) && ours.buffer === ours.buf);
      assert.deepEqual(ours.buffer, kafkajsRecord(input).buffer);
    });
  }

  void test("leaves to kafkajs what the relay never sends: arrays of header values, numbers, huge deltas", () => {
    assert.equal(encodeRecord({ key: "k", value: "v", headers: { h: ["a", "b"] } }), undefined);
    assert.equal(encodeRecord({ key: "k", value: 42 }), undefined);
    assert.equal(encodeRecord({ key: "k", value: "v", timestampDelta: 2 ** 40 }), undefined);
  });

  void test("messages grouped by partition in one pass land where kafkajs puts them, in order", () => {
    const messages = Array.from({ length: 1_000 }, (_, i) => ({ key: `job-${(i * 7) % 50}`, value: String(i) }));
    const calls: string[][] = [[], []];
    const partitioner = (call: string[]) => (args: { message: { key: string } }) => {
      call.push(args.message.key);
      return Number(args.message.key.slice(4)) % 3;
    };
    const input = { topic: "t", partitionMetadata: [{}, {}, {}], messages };
    const ours = groupByPartition({ ...input, partitioner: partitioner(calls[0]!) });
    assert.deepEqual(ours, kafkajsGrouping({ ...input, partitioner: partitioner(calls[1]!) }));
    assert.deepEqual(calls[0], calls[1], "the partitioner is asked about the same messages in the same order");
    assert.deepEqual(groupByPartition({ ...input, partitionMetadata: [], partitioner: () => 0 }), {});
  });

  void test("a key's hash, remembered, is kafkajs's murmur2 of it: first time, again, for Buffers and past the memory's size", () => {
    const remembered = rememberedPerKey(kafkajsMurmur2);
    const keys = ["job-17", "", "k", "job-é✓📄", "3f2b1c9e-8a7d-4e6f-9b1a-2c3d4e5f6a7b"];
    for (let i = 0; i < 12_000; i++) keys.push(`job-${i}`);
    for (const round of [1, 2])
      for (const key of keys) assert.equal(remembered(key), kafkajsMurmur2(key), `${key} (round ${round})`);
    const buffer = Buffer.from("job-17");
    assert.equal(remembered(buffer), kafkajsMurmur2(buffer));
  });

  void describe("a record batch in one buffer is kafkajs's bytes", () => {
    const ours = recordBatchInOneBuffer(kafkajsRecordBatch);
    const records = Array.from({ length: 40 }, (_, i) =>
      kafkajsRecord({
        ...toKafkaMessage(JSON.stringify({ ...event, id: `e-${i}` })),
        offsetDelta: i,
        timestampDelta: i * 3,
      }),
    );
    const batches: Record<string, RecordBatchInput> = {
      "as the idempotent producer sends it": {
        compression: 0,
        records,
        firstTimestamp: 1_764_640_000_123,
        maxTimestamp: 1_764_640_000_246,
        producerId: Long.fromValue(4_000_000_017),
        producerEpoch: 3,
        firstSequence: 1_234,
        transactional: false,
        lastOffsetDelta: records.length - 1,
      },
      "transactional, with a leader epoch, a first offset and a negative producer id": {
        records: records.slice(0, 3),
        firstOffset: Long.fromValue(99),
        partitionLeaderEpoch: 7,
        firstTimestamp: 5,
        maxTimestamp: 9,
        producerId: -1,
        transactional: true,
        lastOffsetDelta: 2,
      },
      "one record, every other field left to the defaults": { records: records.slice(0, 1) },
      "no records": { records: [] },
      "gzip (left to kafkajs)": { compression: 1, records: records.slice(0, 5), firstTimestamp: 1, maxTimestamp: 2 },
      "a record that is not an encoded one (left to kafkajs)": { records: [records[0], 42], firstTimestamp: 1 },
    };
    for (const [name, input] of Object.entries(batches)) {
      void test(name, async () => {
        // The defaults read the clock: the same clock for both.
        mock.method(Date, "now", () => 1_764_640_000_000);
        try {
          const [mine, theirs] = [await ours(input), await kafkajsRecordBatch(input)];
          assert.deepEqual(mine.buffer, theirs.buffer);
          assert.equal(mine.size(), theirs.size());
          assert.ok(Buffer.isBuffer(mine.buf));
        } finally {
          mock.restoreAll();
        }
      });
    }
  });

  void describe("a produce request framed in one buffer is kafkajs's bytes", () => {
    const messages = (count: number, from = 0) =>
      Array.from({ length: count }, (_, i) => toKafkaMessage(JSON.stringify({ ...event, id: `e-${from + i}` })));
    const requests: Record<string, ProduceRequestInput> = {
      "as the relay's idempotent producer sends it": {
        acks: -1,
        timeout: 30_000,
        producerId: Long.fromValue(4_000_000_017),
        producerEpoch: 3,
        compression: 0,
        topicData: [
          {
            topic: "oz0.events",
            partitions: [
              { partition: 0, firstSequence: 1_234, messages: messages(40) },
              { partition: 2, firstSequence: 0, messages: messages(3, 40) },
            ],
          },
        ],
      },
      "two topics, a multi-byte transactional id, timestamps out of order, some missing, as strings and numbers": {
        acks: 1,
        timeout: 5_000,
        transactionalId: "tx-é✓",
        producerId: Long.fromValue(7),
        topicData: [
          {
            topic: "tópico",
            partitions: [
              {
                partition: 1,
                messages: [
                  { key: "a", value: "1", timestamp: "1764640000300" },
                  { key: "b", value: "2" },
                  { key: "c", value: "3", timestamp: 1_764_640_000_200, headers: { h: "x" } },
                  // Sorted as kafkajs sorts them, as strings: this one last, though it is the earliest.
                  { key: "d", value: "4", timestamp: 99_999_999_999 },
                ],
              },
            ],
          },
          { topic: "second", partitions: [{ partition: 0, firstSequence: 5, messages: messages(2) }] },
        ],
      },
      "kafkajs's defaults: no transactional id, producer id, epoch or compression": {
        acks: 0,
        timeout: 1,
        topicData: [{ topic: "t", partitions: [{ partition: 0, messages: messages(1) }] }],
      },
      "a partition with no messages, and a topic with no partitions": {
        acks: -1,
        timeout: 30_000,
        topicData: [
          { topic: "t", partitions: [{ partition: 3, messages: [] }] },
          { topic: "u", partitions: [] },
        ],
      },
      "no topics": { acks: -1, timeout: 30_000, topicData: [] },
      "gzip (left to kafkajs)": {
        acks: -1,
        timeout: 30_000,
        compression: 1,
        topicData: [{ topic: "t", partitions: [{ partition: 0, messages: messages(5) }] }],
      },
    };
    // With kafkajs's own records and batches, the layout alone differs; with this file's, all of it.
    const layoutOnly = produceRequestInParts(kafkajsProduce, {
      record: kafkajsRecord,
      recordBatch: kafkajsRecordBatch,
    });
    const all = produceRequestInParts(kafkajsProduce, {
      record: (input) => encodeRecord(input) ?? kafkajsRecord(input),
      recordBatch: recordBatchInOneBuffer(kafkajsRecordBatch),
    });
    for (const [name, input] of Object.entries(requests)) {
      void test(name, async () => {
        // A batch with no timestamps given reads the clock: the same clock for all.
        mock.method(Date, "now", () => 1_764_640_000_000);
        try {
          const theirs = kafkajsProduce(input);
          const frame = { correlationId: 2_147_483_000, clientId: "oz0-events" };
          const expected = (await kafkajsFrame({ ...frame, request: theirs })).buffer;
          for (const ours of [layoutOnly, all]) {
            const request = ours(input);
            assert.deepEqual(
              { apiKey: request.apiKey, apiVersion: request.apiVersion, apiName: request.apiName },
              { apiKey: theirs.apiKey, apiVersion: theirs.apiVersion, apiName: theirs.apiName },
            );
            assert.equal(request.expectResponse?.(), theirs.expectResponse?.());
            assert.deepEqual((await frameRequest({ ...frame, request })).buffer, expected);
            // Read as an encoder (joined), the payload is kafkajs's too.
            const payload = await request.encode();
            assert.equal(payload instanceof ProducePayload, input.compression !== 1);
            assert.deepEqual(payload.buffer, (await theirs.encode()).buffer);
            assert.equal(payload.size(), (await theirs.encode()).size());
          }
        } finally {
          mock.restoreAll();
        }
      });
    }

    void test("any other request is framed as kafkajs frames it, with every kind of client id", async () => {
      const metadata = require("kafkajs/src/protocol/requests/metadata/v0/request.js") as (input: {
        topics: string[];
      }) => KafkajsRequest;
      const apiVersions = require("kafkajs/src/protocol/requests/apiVersions/v0/request.js") as () => KafkajsRequest;
      for (const request of [metadata({ topics: ["oz0.events", "ü"] }), metadata({ topics: [] }), apiVersions()])
        for (const clientId of ["oz0-events", "client-é✓", "", null, undefined]) {
          const frame = { correlationId: 9, clientId, request };
          assert.deepEqual(
            (await frameRequest(frame)).buffer,
            (await kafkajsFrame(frame)).buffer,
            `${request.apiName}, client id ${String(clientId)}`,
          );
        }
    });

    void test("a request whose payload is no encoder fails as kafkajs's framing does", async () => {
      const request = { apiKey: 3, apiVersion: 0, apiName: "Metadata", encode: () => ({}) as never };
      const frame = { correlationId: 1, clientId: "c", request };
      await assert.rejects(kafkajsFrame(frame), { message: "value should be an instance of Encoder" });
      await assert.rejects(frameRequest(frame), { message: "value should be an instance of Encoder" });
    });
  });

  void test("the CRC-32C is kafkajs's for every length, at every alignment", () => {
    const bytes = Buffer.from(Array.from({ length: 70_000 }, (_, i) => (i * 2654435761) >>> 24));
    for (let length = 0; length <= 41; length++)
      for (let start = 0; start < 8; start++) {
        const slice = bytes.subarray(start, start + length);
        assert.equal(crc32c(slice), kafkajsCrc(slice), `${length} bytes from ${start}`);
      }
    assert.equal(crc32c(bytes), kafkajsCrc(bytes));
    // The standard check value of CRC-32C.
    assert.equal(crc32c(Buffer.from("123456789")), 0xe3069283);
  });

  void test("all eight are what kafkajs's modules load once installed", async () => {
    // The modules kafkajs's produce request (v3; v4 to v7 reuse it) and its producer require are the ones replaced.
    const produce = require.resolve("kafkajs/src/protocol/requests/produce/v3/request.js");
    assert.equal(createRequire(produce).resolve("../../../recordBatch/record/v0"), RECORD_FILE);
    const sendMessages = require.resolve("kafkajs/src/producer/sendMessages.js");
    assert.equal(createRequire(sendMessages).resolve("./groupMessagesPerPartition"), GROUPING_FILE);
    const recordBatch = require.resolve("kafkajs/src/protocol/recordBatch/v0/index.js");
    assert.equal(createRequire(recordBatch).resolve("../crc32C"), CRC_FILE);
    assert.equal(createRequire(produce).resolve("../../../recordBatch/v0"), RECORD_BATCH_FILE);
    const partitioner = require.resolve("kafkajs/src/producer/partitioners/default/index.js");
    assert.equal(createRequire(partitioner).resolve("./murmur2"), MURMUR2_FILE);
    // A kafkajs release other than the one these were written against is left as it is; a bump fails here first.
    assert.equal((require("kafkajs/package.json") as { version: string }).version, REPLACED_VERSION);
    assert.deepEqual(useFasterKafkajsPaths(), {
      records: true,
      grouping: true,
      crc: true,
      keyHash: true,
      recordBatch: true,
      produceRequest: true,
      requestFrame: true,
      idleQueues: true,
    });
    // Every connection frames its requests with the frame installed; produce requests of v3 to v7 are in parts.
    assert.equal(createRequire(connection()).resolve("../protocol/request"), FRAME_FILE);
    assert.equal(require(FRAME_FILE), frameRequest);
    const produceVersions = require("kafkajs/src/protocol/requests/produce/index.js") as {
      protocol(of: { version: number }): (input: ProduceRequestInput) => { request: KafkajsRequest };
    };
    for (const version of [3, 4, 5, 6, 7]) {
      const { request } = produceVersions.protocol({ version })({
        acks: -1,
        timeout: 30_000,
        topicData: [{ topic: "t", partitions: [{ partition: 0, messages: [{ key: "k", value: "v" }] }] }],
      });
      assert.equal(request.apiVersion, version);
      assert.ok((await request.encode()) instanceof ProducePayload, `produce v${version}`);
    }
    const queue = require(KAFKAJS_REQUEST_QUEUE) as { prototype: { scheduleCheckPendingRequests: unknown } };
    assert.equal(queue.prototype.scheduleCheckPendingRequests, scheduleCheckPendingRequests);
    assert.equal(createRequire(connection()).resolve("./requestQueue"), require.resolve(KAFKAJS_REQUEST_QUEUE));
    assert.notEqual((require(RECORD_BATCH_FILE) as RecordBatchModule).RecordBatch, kafkajsRecordBatch);
    assert.equal(require(CRC_FILE), crc32c);
    const installed = require(RECORD_FILE) as (input: RecordInput) => EncodedRecord;
    assert.notEqual(installed, kafkajsRecord);
    assert.equal(require(GROUPING_FILE), groupByPartition);
    const installedHash = require(MURMUR2_FILE) as (key: unknown) => number;
    assert.notEqual(installedHash, kafkajsMurmur2);
    assert.equal(installedHash("job-17"), kafkajsMurmur2("job-17"));
    const input = { ...cases["a CloudEvents message as the relay sends it"]! };
    assert.deepEqual(installed(input).buffer, kafkajsRecord(input).buffer);
    // A shape left to kafkajs is still encoded, by kafkajs.
    const array = { key: "k", value: "v", headers: { h: ["a", "b"] } };
    assert.deepEqual(installed(array).buffer, kafkajsRecord(array).buffer);
  });
});

function connection(): string {
  return require.resolve("kafkajs/src/network/connection.js");
}
