// kafkajs's hot paths, replaced in the relay's producer thread by code
// that gives the same result for less CPU. kafkajs is at its last release
// (2.2.4), so the files replaced here do not move; should they, nothing is
// replaced and kafkajs runs as it is.
//
// - A record (record batch v2's Record) is written in one buffer. kafkajs
//   encodes each through an encoder of its own, one more per header and a
//   fresh buffer per varint: about 20-30 µs a CloudEvents message of eight
//   headers on this project's 2-core machine, against about 50 µs for all
//   kafkajs does per event; here 5-9 µs. The bytes are the same (a test
//   compares them with kafkajs's for every shape the relay sends); the record
//   batch around them, its CRC and the idempotent producer's sequence numbers
//   stay kafkajs's. Anything else (an array of header values, a value that is
//   neither a string nor a Buffer) goes to kafkajs's own encoder.
// - Messages are grouped by partition in one pass. kafkajs copies a
//   partition's array for each message it adds (quadratic: about 5 µs a
//   message in a batch of 1 000 over 3 partitions); the partitioner is called
//   the same way, in the same order, so every message lands where it did.
// - The record batch's CRC-32C is @node-rs/crc32's (native, with the CPU's
//   CRC instruction where it has one) instead of kafkajs's byte-at-a-time
//   loop in JavaScript, which took about 9 µs a message of 640 bytes at load
//   7-12. A test compares both on every length and alignment.
// - A partition's record batch is written in one buffer: the batch's header,
//   then each record copied once. kafkajs writes the records into an encoder
//   that grows by doubling (zero-filled), then copies the whole into a second
//   encoder for the CRC and into a third for the length, each batch of about
//   640 KB; compressed batches stay kafkajs's.
// - A produce request is framed in one buffer: the frame's size, the request
//   header, the produce fields, and each partition's record batch copied once.
//   kafkajs wraps the batch in an encoder per level (partition, topic,
//   request, header, frame), each a fresh zero-filled buffer of the next power
//   of two that the level below is copied into: five copies of every batch. In
//   the relay's producer thread those allocations and copies were 42% of its
//   time against a broker that had run for a while (its batches grow as its
//   answers slow). Every other request is framed in one buffer too, its
//   payload copied once; compressed produce requests stay kafkajs's.
// - The default partitioner's murmur2 hash of a key is remembered per key. It
//   is computed with a Long object per operation (about 1 µs a message of a
//   job id's length); the relay keys by job id, so a batch holds few keys,
//   each many times. The hash is a pure function of the key: same partitions.
// - A broker connection's request queue stops checking for requests waiting
//   to be sent when none waits. kafkajs re-arms that check after every
//   response and every check, with a delay it computes from a throttle time
//   of -1 when there is no throttle: a negative delay, which Node runs after
//   1 ms (with a TimeoutNegativeWarning). So every connection that had one
//   response spun a 1 ms timer for the rest of its life: about 50 ms of CPU
//   a second in an idle producer, on this machine (tulios/kafkajs#1704,
//   #1751). A request that has to wait is queued by push(), which arms the
//   check again; with something waiting, the check runs as kafkajs's does.
import { crc32c } from "@node-rs/crc32";
import { createRequire } from "node:module";

export { crc32c };

/** What kafkajs's produce request hands its record encoder. */
export interface RecordInput {
  offsetDelta?: number;
  timestampDelta?: number;
  key?: unknown;
  value?: unknown;
  headers?: Record<string, unknown>;
}

/** What kafkajs's record batch reads from an encoded record: its bytes, as `buf` and `buffer`. */
export interface EncodedRecord {
  buf: Buffer;
  buffer: Buffer;
}

/** Where kafkajs's produce request (v3, which v4 to v7 reuse) takes its record encoder from. */
export const KAFKAJS_RECORD = "kafkajs/src/protocol/recordBatch/record/v0/index.js";
/** Where kafkajs's producer takes its grouping of messages by partition from. */
export const KAFKAJS_GROUPING = "kafkajs/src/producer/groupMessagesPerPartition.js";
/** Where kafkajs's record batch takes its CRC-32C from. */
export const KAFKAJS_CRC32C = "kafkajs/src/protocol/recordBatch/crc32C/index.js";
/** Where kafkajs's produce request takes its record batch from. */
export const KAFKAJS_RECORD_BATCH = "kafkajs/src/protocol/recordBatch/v0/index.js";
/** Where kafkajs's encoder and its 64-bit integers live (the record batch returns the one, writes the other). */
const KAFKAJS_ENCODER = "kafkajs/src/protocol/encoder.js";
const KAFKAJS_LONG = "kafkajs/src/utils/long.js";
/** Where kafkajs's produce request v3 lives; v4 to v7 take it and change only the version. */
export const KAFKAJS_PRODUCE_REQUEST = "kafkajs/src/protocol/requests/produce/v3/request.js";
/** Where each broker connection takes the framing of a request from (size, header, payload). */
export const KAFKAJS_REQUEST_FRAME = "kafkajs/src/protocol/request.js";
/** Where each broker connection's request queue (its RequestQueue class) lives. */
export const KAFKAJS_REQUEST_QUEUE = "kafkajs/src/network/requestQueue/index.js";
/** kafkajs's delay before checking a queue again when a request waits but no throttle does (CHECK_PENDING_REQUESTS_INTERVAL). */
const CHECK_PENDING_REQUESTS_INTERVAL_MS = 10;
/** Where kafkajs's default partitioner takes its murmur2 hash of a key from. */
export const KAFKAJS_MURMUR2 = "kafkajs/src/producer/partitioners/default/murmur2.js";
/** Keys whose hash is remembered at most; past it the memory starts again (a service runs many jobs over time). */
const MAX_REMEMBERED_KEYS = 10_000;
/** Deltas within this magnitude have the same zigzag varint in 32 and 64 bits. */
const SMALL = 2 ** 30;

/** What kafkajs's producer hands its grouping. */
export interface GroupingInput<M> {
  topic: string;
  partitionMetadata: unknown[];
  messages: M[];
  partitioner: (args: { topic: string; partitionMetadata: unknown[]; message: M }) => number;
}

/**
 * Makes kafkajs, in this thread, encode records with `encodeRecord`, group
 * messages with `groupByPartition`, take the CRC-32C from `crc32c`,
 * remember each key's hash (`rememberedPerKey`), write each record batch in
 * one buffer (`recordBatchInOneBuffer`), keep a produce request's payload in
 * parts (`produceRequestInParts`) and frame every request in one buffer
 * (`frameRequest`), and leave an idle request queue unchecked
 * (`scheduleCheckPendingRequests`). Call it before kafkajs is
 * imported: its modules take them when they load. Says which it replaced: none when kafkajs
 * is another release than the one they were written against, or keeps them
 * somewhere else.
 */
export function useFasterKafkajsPaths(): {
  records: boolean;
  grouping: boolean;
  crc: boolean;
  keyHash: boolean;
  recordBatch: boolean;
  produceRequest: boolean;
  requestFrame: boolean;
  idleQueues: boolean;
} {
  // The contracts replaced (what each module takes and gives) are 2.2.4's; another release that
  // kept the files but changed a contract would send wrong bytes, so it runs kafkajs as it is.
  if (kafkajsVersion() !== REPLACED_VERSION)
    return {
      records: false,
      grouping: false,
      crc: false,
      keyHash: false,
      recordBatch: false,
      produceRequest: false,
      requestFrame: false,
      idleQueues: false,
    };
  const records = replaceModule<(input: RecordInput) => EncodedRecord>(
    KAFKAJS_RECORD,
    (original) => (input) => encodeRecord(input) ?? original(input),
  );
  const grouping = replaceModule<(input: GroupingInput<unknown>) => Record<number, unknown[]>>(
    KAFKAJS_GROUPING,
    () => groupByPartition,
  );
  const crc = replaceModule<(buffer: Buffer) => number>(KAFKAJS_CRC32C, () => crc32c);
  const keyHash = replaceModule<(key: unknown) => number>(KAFKAJS_MURMUR2, rememberedPerKey);
  const recordBatch = replaceModule<RecordBatchModule>(KAFKAJS_RECORD_BATCH, (original) => ({
    ...original,
    RecordBatch: recordBatchInOneBuffer(original.RecordBatch),
  }));
  // After the record and the record batch: the request encodes with whichever of them is installed.
  const require = createRequire(import.meta.url);
  const produceRequest =
    records &&
    recordBatch &&
    replaceModule<ProduceRequestFactory>(KAFKAJS_PRODUCE_REQUEST, (original) =>
      produceRequestInParts(original, {
        record: require(KAFKAJS_RECORD) as (input: RecordInput) => EncodedRecord,
        recordBatch: (require(KAFKAJS_RECORD_BATCH) as RecordBatchModule).RecordBatch,
      }),
    );
  const requestFrame = replaceModule<FrameRequest>(KAFKAJS_REQUEST_FRAME, () => frameRequest);
  const idleQueues = replaceModule<RequestQueueModule>(KAFKAJS_REQUEST_QUEUE, (RequestQueue) => {
    if (typeof RequestQueue.prototype?.scheduleCheckPendingRequests !== "function") return RequestQueue;
    RequestQueue.prototype.scheduleCheckPendingRequests = scheduleCheckPendingRequests;
    return RequestQueue;
  });
  return { records, grouping, crc, keyHash, recordBatch, produceRequest, requestFrame, idleQueues };
}

/** What a kafkajs request queue's check of waiting requests reads and arms. */
export interface RequestQueueState {
  /** When the broker's throttle ends (epoch ms), or -1 when it never throttled. */
  throttledUntil: number;
  throttleCheckTimeoutId: ReturnType<typeof setTimeout> | null;
  pending: unknown[];
  checkPendingRequests(): void;
}

/** kafkajs's RequestQueue class, as its module exports it. */
type RequestQueueModule = { prototype: Partial<RequestQueueState> & { scheduleCheckPendingRequests?: unknown } };

/**
 * kafkajs's RequestQueue#scheduleCheckPendingRequests, arming nothing when
 * no request waits (kafkajs armed a 1 ms check then, forever). With one
 * waiting, as kafkajs: when the throttle ends, or after its interval.
 */
export function scheduleCheckPendingRequests(this: RequestQueueState): void {
  if (this.throttleCheckTimeoutId || this.pending.length === 0) return;
  const untilUnthrottled = this.throttledUntil - Date.now();
  this.throttleCheckTimeoutId = setTimeout(
    () => {
      this.throttleCheckTimeoutId = null;
      this.checkPendingRequests();
    },
    untilUnthrottled > 0 ? untilUnthrottled : CHECK_PENDING_REQUESTS_INTERVAL_MS,
  );
}

/** The kafkajs release whose modules these replacements were written and tested against. */
export const REPLACED_VERSION = "2.2.4";

function kafkajsVersion(): string | undefined {
  try {
    return (createRequire(import.meta.url)("kafkajs/package.json") as { version?: string }).version;
  } catch {
    return undefined;
  }
}

function replaceModule<F>(specifier: string, replacement: (original: F) => F): boolean {
  const require = createRequire(import.meta.url);
  let file: string;
  try {
    file = require.resolve(specifier);
  } catch {
    return false;
  }
  const original = require(file) as F;
  const cached = require.cache[file];
  if (!cached || (typeof original !== "function" && typeof original !== "object")) return false;
  cached.exports = replacement(original);
  return true;
}

/** What kafkajs's record batch module exports. */
export interface RecordBatchModule {
  RecordBatch: (input: RecordBatchInput) => Promise<KafkajsEncoder>;
  MAGIC_BYTE: number;
}

/** What kafkajs's produce request hands its record batch (kafkajs's defaults apply to what is left out). */
export interface RecordBatchInput {
  compression?: number;
  firstOffset?: unknown;
  firstTimestamp?: unknown;
  maxTimestamp?: unknown;
  partitionLeaderEpoch?: number;
  lastOffsetDelta?: number;
  transactional?: boolean;
  producerId?: unknown;
  producerEpoch?: number;
  firstSequence?: number;
  records?: unknown[];
}

/** kafkajs's Encoder, as far as the produce request reads the record batch: `buf`, `buffer` and `size()`. */
export interface KafkajsEncoder {
  buf: Buffer;
  offset: number;
  readonly buffer: Buffer;
  size(): number;
}

interface KafkajsLong {
  getHighBits(): number;
  getLowBits(): number;
}

/** Record batch v2's header before its records: offset, length, leader epoch, magic, CRC, then the CRC'd fields and the record count. */
const BATCH_HEADER = 61;
/** Where the part the CRC covers starts (attributes onward). */
const CRC_FROM = 21;
const TRANSACTIONAL = 16;

/**
 * kafkajs's RecordBatch (v0, record batch format v2) writing the same bytes
 * into one buffer; a compressed batch, or records that are not encoded
 * records, go to `original`.
 */
export function recordBatchInOneBuffer(original: RecordBatchModule["RecordBatch"]): RecordBatchModule["RecordBatch"] {
  const Long = kafkajsLong();
  return async (input) => {
    // kafkajs's defaults apply to what is undefined, as its parameters' defaults do.
    const records = input.records === undefined ? [] : input.records;
    if (input.compression !== undefined && input.compression !== 0) return original(input);
    const bytes = new Array<Buffer>(records.length);
    let size = BATCH_HEADER;
    for (let i = 0; i < records.length; i++) {
      const record = records[i] as Partial<EncodedRecord> | null | undefined;
      if (record === null || typeof record !== "object" || !Buffer.isBuffer(record.buf)) return original(input);
      const buffer = record.buffer!;
      bytes[i] = buffer;
      size += buffer.length;
    }
    const buf = Buffer.allocUnsafe(size);
    writeInt64(buf, 0, input.firstOffset === undefined ? Long.fromInt(0) : input.firstOffset, Long);
    buf.writeInt32BE(size - 12, 8);
    buf.writeInt32BE(input.partitionLeaderEpoch === undefined ? 0 : input.partitionLeaderEpoch, 12);
    buf.writeInt8(2, 16); // magic: record batch v2
    buf.writeInt16BE(input.transactional ? TRANSACTIONAL : 0, 21);
    buf.writeInt32BE(input.lastOffsetDelta === undefined ? 0 : input.lastOffsetDelta, 23);
    writeInt64(buf, 27, input.firstTimestamp === undefined ? Date.now() : input.firstTimestamp, Long);
    writeInt64(buf, 35, input.maxTimestamp === undefined ? Date.now() : input.maxTimestamp, Long);
    writeInt64(buf, 43, input.producerId === undefined ? Long.fromValue(-1) : input.producerId, Long);
    buf.writeInt16BE(input.producerEpoch === undefined ? 0 : input.producerEpoch, 51);
    buf.writeInt32BE(input.firstSequence === undefined ? 0 : input.firstSequence, 53);
    buf.writeInt32BE(records.length, 57);
    let at = BATCH_HEADER;
    for (const record of bytes) at += record.copy(buf, at);
    buf.writeUInt32BE(crc32c(buf.subarray(CRC_FROM)), 17);
    return asKafkajsEncoder(buf);
  };
}

function writeInt64(buf: Buffer, at: number, value: unknown, Long: KafkajsLongModule): void {
  const long = Long.fromValue(value);
  buf.writeInt32BE(long.getHighBits(), at);
  buf.writeInt32BE(long.getLowBits(), at + 4);
}

/** A message as kafkajs's producer hands the produce request (what the record reads of it, and its timestamp). */
export interface ProduceMessage {
  key?: unknown;
  value?: unknown;
  headers?: Record<string, unknown>;
  timestamp?: unknown;
}

/** What kafkajs's producer hands its produce request (v3, which v4 to v7 reuse; kafkajs's defaults apply to what is left out). */
export interface ProduceRequestInput {
  acks: number;
  timeout: number;
  transactionalId?: string | null;
  producerId?: unknown;
  producerEpoch?: number;
  compression?: number;
  topicData: {
    topic: string;
    partitions: { partition: number; firstSequence?: number; messages: ProduceMessage[] }[];
  }[];
}

/** A kafkajs request: what the connection frames and sends. */
export interface KafkajsRequest {
  apiKey: number;
  apiVersion: number;
  apiName: string;
  expectResponse?: () => boolean;
  encode(): Promise<KafkajsEncoder | ProducePayload> | KafkajsEncoder | ProducePayload;
}

/** kafkajs's produce request v3 module: the request for a producer's input. */
export type ProduceRequestFactory = (input: ProduceRequestInput) => KafkajsRequest;

/** kafkajs's `protocol/request.js`: a request framed for the socket (its `buffer` is what is written). */
export type FrameRequest = (input: {
  correlationId: number;
  clientId?: string | null;
  request: KafkajsRequest;
}) => Promise<KafkajsEncoder>;

/**
 * A produce request's payload kept as its parts (the fields between the
 * batches, and the batches), so that the frame copies each batch once. It
 * reads as a kafkajs encoder too (`buf`, `buffer`, `offset`, `size()`),
 * joined on first reading, for any code that takes it as one.
 */
export class ProducePayload {
  readonly #parts: Buffer[];
  readonly #length: number;
  #joined: Buffer | undefined;

  constructor(parts: Buffer[], length: number) {
    this.#parts = parts;
    this.#length = length;
  }

  /** Writes the payload into `target` from `at`; returns where it ended. */
  writeTo(target: Buffer, at: number): number {
    for (const part of this.#parts) at += part.copy(target, at);
    return at;
  }

  get buf(): Buffer {
    return (this.#joined ??= Buffer.concat(this.#parts, this.#length));
  }

  get buffer(): Buffer {
    return this.buf;
  }

  get offset(): number {
    return this.#length;
  }

  size(): number {
    return this.#length;
  }
}

/** The record and record batch encoders a produce request builds its batches with. */
export interface ProduceEncoders {
  record: (input: RecordInput) => EncodedRecord;
  recordBatch: RecordBatchModule["RecordBatch"];
}

/**
 * kafkajs's produce request (v3) whose payload is a `ProducePayload`: the
 * same bytes (the same records and batches, by `encoders`), with no encoder
 * around each partition, topic and the request. A compressed request is
 * `original`'s.
 */
export function produceRequestInParts(
  original: ProduceRequestFactory,
  encoders: ProduceEncoders,
): ProduceRequestFactory {
  return (input) => {
    const request = original(input);
    if (input.compression !== undefined && input.compression !== 0) return request;
    return { ...request, encode: () => producePayload(input, encoders) };
  };
}

/** kafkajs's produce request v3's payload, as its encoders write it, in parts. */
async function producePayload(input: ProduceRequestInput, encoders: ProduceEncoders): Promise<ProducePayload> {
  // kafkajs's defaults, as its parameters' defaults apply them (to undefined only).
  const transactionalId = input.transactionalId === undefined ? null : input.transactionalId;
  const producerId = input.producerId === undefined ? kafkajsLong().fromInt(-1) : input.producerId;
  const producerEpoch = input.producerEpoch === undefined ? 0 : input.producerEpoch;
  const parts: Buffer[] = [];
  let length = 0;
  const head = Buffer.allocUnsafe(stringSize(transactionalId) + 2 + 4 + 4);
  let at = writeString(head, 0, transactionalId);
  at = head.writeInt16BE(input.acks, at);
  at = head.writeInt32BE(input.timeout, at);
  head.writeInt32BE(input.topicData.length, at);
  parts.push(head);
  length += head.length;
  for (const { topic, partitions } of input.topicData) {
    const topicHead = Buffer.allocUnsafe(stringSize(topic) + 4);
    topicHead.writeInt32BE(partitions.length, writeString(topicHead, 0, topic));
    parts.push(topicHead);
    length += topicHead.length;
    for (const { partition, messages, firstSequence } of partitions) {
      const batch = await recordBatch(
        { messages, firstSequence, transactionalId, producerId, producerEpoch },
        encoders,
      );
      const batchBytes = batch.buffer;
      const partitionHead = Buffer.allocUnsafe(8);
      partitionHead.writeInt32BE(partition, 0);
      partitionHead.writeInt32BE(batch.size(), 4);
      parts.push(partitionHead, batchBytes);
      length += 8 + batchBytes.length;
    }
  }
  return new ProducePayload(parts, length);
}

/** kafkajs's produce request v3's record batch of one partition's messages (its partitionsEncoder). */
function recordBatch(
  partition: {
    messages: ProduceMessage[];
    firstSequence: number | undefined;
    transactionalId: string | null;
    producerId: unknown;
    producerEpoch: number;
  },
  encoders: ProduceEncoders,
): Promise<KafkajsEncoder> {
  const { messages } = partition;
  const dateNow = Date.now();
  // As kafkajs: the timestamps given, sorted as strings (Array#sort's default); the clock when none is.
  const given = messages.map((m) => m.timestamp).filter((timestamp) => timestamp != null);
  const timestamps = given.length === 0 ? [dateNow] : given.sort();
  const firstTimestamp = timestamps[0];
  const records = messages.map((message, i) =>
    // The record reads only these of the message (kafkajs spreads the whole message in).
    encoders.record({
      key: message.key,
      value: message.value,
      headers: message.headers,
      offsetDelta: i,
      timestampDelta: ((message.timestamp || dateNow) as number) - (firstTimestamp as number),
    }),
  );
  return encoders.recordBatch({
    compression: 0,
    records,
    firstTimestamp,
    maxTimestamp: timestamps[timestamps.length - 1],
    producerId: partition.producerId,
    producerEpoch: partition.producerEpoch,
    firstSequence: partition.firstSequence,
    transactional: !!partition.transactionalId,
    lastOffsetDelta: records.length - 1,
  });
}

/** A request header's fields before the client id: api key, api version, correlation id. */
const REQUEST_HEADER = 2 + 2 + 4;

/**
 * kafkajs's framing of a request (its size, then the header: api key, api
 * version, correlation id, client id; then the payload) written in one
 * buffer, the payload copied once. Returns a kafkajs encoder, as kafkajs's
 * does.
 */
export const frameRequest: FrameRequest = async ({ correlationId, clientId, request }) => {
  const payload = await request.encode();
  let payloadLength: number;
  if (payload instanceof ProducePayload) payloadLength = payload.size();
  else if (payload != null && Buffer.isBuffer(payload.buf)) payloadLength = payload.offset;
  // kafkajs's own words when a payload is not an encoder.
  else throw new Error("value should be an instance of Encoder");
  const id = clientId === undefined ? null : clientId;
  const size = REQUEST_HEADER + stringSize(id) + payloadLength;
  const buf = Buffer.allocUnsafe(4 + size);
  let at = buf.writeInt32BE(size, 0);
  at = buf.writeInt16BE(request.apiKey, at);
  at = buf.writeInt16BE(request.apiVersion, at);
  at = buf.writeInt32BE(correlationId, at);
  at = writeString(buf, at, id);
  at = payload instanceof ProducePayload ? payload.writeTo(buf, at) : at + payload.buf.copy(buf, at, 0, payloadLength);
  // Every byte of the unzeroed buffer must be written.
  if (at !== buf.length) throw new Error(`a kafkajs request framed as ${at} of its ${buf.length} bytes`);
  return asKafkajsEncoder(buf);
};

/** The size of kafkajs's STRING / NULLABLE_STRING: an int16 length (-1 for null) and the UTF-8 bytes. */
function stringSize(text: string | null): number {
  return text == null ? 2 : 2 + Buffer.byteLength(text, "utf8");
}

function writeString(buf: Buffer, at: number, text: string | null): number {
  if (text == null) return buf.writeInt16BE(-1, at);
  const length = Buffer.byteLength(text, "utf8");
  at = buf.writeInt16BE(length, at);
  return at + buf.write(text, at, length, "utf8");
}

/** kafkajs's 64-bit integers, as its record batch and produce request take them. */
interface KafkajsLongModule {
  fromValue(value: unknown): KafkajsLong;
  fromInt(value: number): KafkajsLong;
}

let KafkajsLongClass: KafkajsLongModule | undefined;

function kafkajsLong(): KafkajsLongModule {
  return (KafkajsLongClass ??= createRequire(import.meta.url)(KAFKAJS_LONG) as KafkajsLongModule);
}

let KafkajsEncoderClass: (new (initialSize?: number) => KafkajsEncoder) | undefined;

/** A kafkajs Encoder holding exactly `buf`. */
function asKafkajsEncoder(buf: Buffer): KafkajsEncoder {
  KafkajsEncoderClass ??= createRequire(import.meta.url)(KAFKAJS_ENCODER) as new (
    initialSize?: number,
  ) => KafkajsEncoder;
  const encoder = new KafkajsEncoderClass(0);
  encoder.buf = buf;
  encoder.offset = buf.length;
  return encoder;
}

/** `hash`, remembering its value for each string key (a Buffer key is hashed each time). */
export function rememberedPerKey(hash: (key: unknown) => number): (key: unknown) => number {
  const known = new Map<string, number>();
  return (key) => {
    if (typeof key !== "string") return hash(key);
    let value = known.get(key);
    if (value === undefined) {
      if (known.size >= MAX_REMEMBERED_KEYS) known.clear();
      value = hash(key);
      known.set(key, value);
    }
    return value;
  };
}

/** kafkajs's grouping of messages by partition (in the order given), in one pass. */
export function groupByPartition<M>(input: GroupingInput<M>): Record<number, M[]> {
  const groups: Record<number, M[]> = {};
  if (input.partitionMetadata.length === 0) return groups;
  const { topic, partitionMetadata, partitioner } = input;
  for (const message of input.messages) {
    const partition = partitioner({ topic, partitionMetadata, message });
    (groups[partition] ??= []).push(message);
  }
  return groups;
}

/** The record's bytes as kafkajs's encoder writes them; undefined for a shape it leaves to kafkajs. */
export function encodeRecord(input: RecordInput): EncodedRecord | undefined {
  const offsetDelta = input.offsetDelta ?? 0;
  const timestampDelta = input.timestampDelta ?? 0;
  if (!small(offsetDelta) || !small(timestampDelta)) return undefined;
  const keySize = bytesSize(input.key);
  const valueSize = bytesSize(input.value);
  if (keySize === undefined || valueSize === undefined) return undefined;
  const headers = input.headers ?? {};
  let headerCount = 0;
  let headersSize = 0;
  for (const name in headers) {
    if (!Object.hasOwn(headers, name)) continue;
    const value = headers[name];
    if (typeof value !== "string" && !Buffer.isBuffer(value)) return undefined;
    headersSize += bytesSize(name)! + bytesSize(value)!;
    headerCount++;
  }
  headersSize += varintSize(zigzag(headerCount));
  const body =
    1 + varintSize(zigzag(timestampDelta)) + varintSize(zigzag(offsetDelta)) + keySize + valueSize + headersSize;
  const size = varintSize(zigzag(body)) + body;
  const buf = Buffer.allocUnsafe(size);
  let at = writeVarint(buf, 0, zigzag(body));
  buf[at++] = 0; // attributes: none used
  at = writeVarint(buf, at, zigzag(timestampDelta));
  at = writeVarint(buf, at, zigzag(offsetDelta));
  at = writeBytes(buf, at, input.key);
  at = writeBytes(buf, at, input.value);
  at = writeVarint(buf, at, zigzag(headerCount));
  for (const name in headers) {
    if (!Object.hasOwn(headers, name)) continue;
    at = writeBytes(buf, at, name);
    at = writeBytes(buf, at, headers[name]);
  }
  // Every byte of the unzeroed buffer must be written: anything else is a bug here, and kafkajs encodes instead.
  if (at !== size) return undefined;
  return { buf, buffer: buf };
}

function small(n: number): boolean {
  return Number.isInteger(n) && n > -SMALL && n < SMALL;
}

function zigzag(n: number): number {
  return ((n << 1) ^ (n >> 31)) >>> 0;
}

function varintSize(u: number): number {
  let size = 1;
  while (u >= 0x80) {
    u >>>= 7;
    size++;
  }
  return size;
}

function writeVarint(buf: Buffer, at: number, u: number): number {
  while (u >= 0x80) {
    buf[at++] = (u & 0x7f) | 0x80;
    u >>>= 7;
  }
  buf[at++] = u;
  return at;
}

/**
 * Strings up to this length are measured and written here, a character at a
 * time, when they are ASCII (header names, ids, times, types): a record has
 * ten of them, and a call into Buffer's native code for each (measure, then
 * write) cost more than the loop. Longer ones (the value) go to Buffer.
 */
const SHORT = 64;

/** The UTF-8 length of a short ASCII string (its length), or -1 when it is neither. */
function shortAsciiLength(text: string): number {
  const length = text.length;
  if (length > SHORT) return -1;
  for (let i = 0; i < length; i++) if (text.charCodeAt(i) > 0x7f) return -1;
  return length;
}

function utf8Length(text: string): number {
  const ascii = shortAsciiLength(text);
  return ascii >= 0 ? ascii : Buffer.byteLength(text, "utf8");
}

/** A varint length and the bytes (-1 for none), as kafkajs's writeVarIntBytes; undefined for what it leaves to kafkajs. */
function bytesSize(value: unknown): number | undefined {
  if (value === null || value === undefined) return varintSize(zigzag(-1));
  const length = typeof value === "string" ? utf8Length(value) : Buffer.isBuffer(value) ? value.length : undefined;
  return length === undefined ? undefined : varintSize(zigzag(length)) + length;
}

function writeBytes(buf: Buffer, at: number, value: unknown): number {
  if (value === null || value === undefined) return writeVarint(buf, at, zigzag(-1));
  if (Buffer.isBuffer(value)) {
    at = writeVarint(buf, at, zigzag(value.length));
    return at + value.copy(buf, at);
  }
  const text = value as string;
  const ascii = shortAsciiLength(text);
  if (ascii < 0) {
    at = writeVarint(buf, at, zigzag(Buffer.byteLength(text, "utf8")));
    return at + buf.write(text, at, "utf8");
  }
  at = writeVarint(buf, at, zigzag(ascii));
  for (let i = 0; i < ascii; i++) buf[at++] = text.charCodeAt(i);
  return at;
}
