// A session's messages in order, each with its seq (1, 2, 3, ...). Readers
// follow it from any position, so a client that lost its stream re-attaches
// with the last seq it saw and gets every later message exactly once. Old
// stderr pieces can be dropped to bound memory (stderr-capture.ts): their seq
// stays, and a reader gets their size instead of their text.
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { WireType } from "@bufbuild/protobuf/wire";
import { RunSessionResponseSchema, type RunSessionResponse } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { SandboxError } from "./sandbox-errors.js";

/** A message of the log, as a message or its init object; the log gives it its seq. */
export type LogBody = MessageInitShape<typeof RunSessionResponseSchema>["message"];

/**
 * How many bytes of its latest messages' encodings a log keeps for its live
 * followers (and at least the latest's): more than a burst of lines read at
 * once, little beside the log itself.
 */
const RECENT_ENCODED_BYTES = 256 * 1024;

/** The tag of RunSessionResponse.seq (field 1, varint), the first byte of every logged message's encoding. */
const SEQ_TAG = (1 << 3) | WireType.Varint;

/**
 * A message that protobuf-es's binary serialization writes as `bytes`, the
 * encoding of `entry` (from {@link SessionEventLog.encoded}), instead of
 * encoding `entry` again: it has no known field set and one unknown field,
 * which toBinary writes as its tag and then its raw data. The tag is seq's,
 * which every logged message's encoding starts with (its seq is at least 1
 * and is field 1); the data is the rest of the encoding, so the bytes
 * written are the encoding itself. For binary codecs only: JSON does not
 * write unknown fields, so a JSON stream gets `entry`. `entry` is returned
 * as it is when its encoding does not start with seq's tag.
 */
export function preEncoded(entry: RunSessionResponse, bytes: Uint8Array): RunSessionResponse {
  if (bytes[0] !== SEQ_TAG) return entry;
  const message = create(RunSessionResponseSchema);
  message.$unknown = [{ no: 1, wireType: WireType.Varint, data: bytes.subarray(1) }];
  return message;
}

export class SessionEventLog {
  readonly sessionId: string;
  /** A number stands for a dropped stderr piece: the bytes it held (and any dropped before it). */
  readonly #messages: (RunSessionResponse | number)[] = [];
  #ended = false;
  #wake: (() => void)[] = [];

  readonly #onAppend: ((entry: RunSessionResponse) => void) | undefined;
  /** The latest messages' encodings, oldest first: see {@link encoded}. */
  readonly #recentBytes = new Map<RunSessionResponse, Uint8Array>();
  #recentSize = 0;

  /**
   * `restored`: the messages a previous run of the sandbox logged for this
   * session (their seqs go on); `onAppend`: called with each new message, to
   * keep the log where a restarted sandbox finds it.
   */
  constructor(
    sessionId: string,
    options: { restored?: readonly RunSessionResponse[]; onAppend?: (entry: RunSessionResponse) => void } = {},
  ) {
    this.sessionId = sessionId;
    this.#messages.push(...(options.restored ?? []));
    const last = this.#messages.at(-1);
    this.#ended = typeof last === "object" && last.message.case === "exited";
    this.#onAppend = options.onAppend;
  }

  get lastSeq(): number {
    return this.#messages.length;
  }

  /** The latest message, if any. */
  get latest(): RunSessionResponse | undefined {
    return this.#at(this.#messages.length - 1);
  }

  /** True once the last message (`exited`) is in. */
  get ended(): boolean {
    return this.#ended;
  }

  /** Appends a message, giving it the next seq; `last` marks the end of the log. */
  append(message: LogBody, options: { last?: boolean } = {}): RunSessionResponse {
    if (this.#ended)
      throw new Error(`the log of session ${this.sessionId} has ended; nothing may follow its last message`);
    const entry = create(RunSessionResponseSchema, {
      seq: BigInt(this.#messages.length + 1),
      sessionId: this.sessionId,
      message,
    });
    this.#messages.push(entry);
    this.#onAppend?.(entry);
    if (options.last === true) this.#ended = true;
    const wake = this.#wake;
    this.#wake = [];
    for (const resolve of wake) resolve();
    return entry;
  }

  /**
   * The message's protobuf encoding, made once for the log file and every
   * stream following the log live (issue 24: the sandbox encoded each
   * message for its file and again for each stream). Only the latest
   * messages' are kept (RECENT_ENCODED_BYTES), so the log holds no second copy of itself; an
   * attach from further back encodes them again.
   */
  encoded(entry: RunSessionResponse): Uint8Array {
    let bytes = this.#recentBytes.get(entry);
    if (bytes === undefined) {
      bytes = toBinary(RunSessionResponseSchema, entry);
      this.#recentBytes.set(entry, bytes);
      this.#recentSize += bytes.byteLength;
      for (const [older, olderBytes] of this.#recentBytes) {
        if (this.#recentSize <= RECENT_ENCODED_BYTES || older === entry) break;
        this.#recentBytes.delete(older);
        this.#recentSize -= olderBytes.byteLength;
      }
    }
    return bytes;
  }

  /**
   * Forgets the text of the stderr piece at `seq`, so it holds no memory:
   * readers that come later get a piece with its size in `dropped_bytes`.
   * Returns the bytes dropped; 0 when `seq` is no stderr piece.
   */
  dropStderr(seq: number): number {
    const message = this.#messages[seq - 1];
    if (typeof message !== "object" || message.message.case !== "stderr") return 0;
    const piece = message.message.value;
    const bytes = Number(piece.droppedBytes) + Buffer.byteLength(piece.text);
    this.#messages[seq - 1] = bytes;
    // Its encoding holds the text too.
    const encoding = this.#recentBytes.get(message);
    if (encoding !== undefined) {
      this.#recentBytes.delete(message);
      this.#recentSize -= encoding.byteLength;
    }
    return bytes;
  }

  #at(index: number): RunSessionResponse | undefined {
    const message = this.#messages[index];
    if (typeof message !== "number") return message;
    return create(RunSessionResponseSchema, {
      seq: BigInt(index + 1),
      sessionId: this.sessionId,
      message: { case: "stderr", value: { droppedBytes: BigInt(message) } },
    });
  }

  /**
   * Every message after `afterSeq`, then new ones as they come, until the
   * last message or until `signal` aborts.
   */
  async *follow(afterSeq: number, signal: AbortSignal): AsyncGenerator<RunSessionResponse> {
    if (!Number.isSafeInteger(afterSeq) || afterSeq < 0 || afterSeq > this.#messages.length) {
      throw new SandboxError(
        "invalid_argument",
        `attach.after_seq: ${afterSeq} is past the last seq of session ${this.sessionId} (${this.#messages.length}); attach with the last seq you received`,
      );
    }
    // One abort listener for the whole follow, not one added and removed per wait: an AbortSignal's
    // listeners are EventTarget's, whose bookkeeping cost more than the rest of a message's wait (issue 24).
    let wake: (() => void) | undefined;
    const onAbort = (): void => wake?.();
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      let next = afterSeq;
      while (!signal.aborted) {
        while (next < this.#messages.length) {
          const message = this.#at(next);
          next++;
          if (message !== undefined) yield message;
        }
        if (this.#ended) return;
        await new Promise<void>((resolve) => {
          wake = resolve;
          this.#wake.push(resolve);
        });
        wake = undefined;
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }
}
