// A session's stderr on its way into the session's log: decoded as UTF-8,
// the session token scrubbed (a harness's environment holds it as its
// provider key, and a harness may print that), gathered into pieces (one per
// STDERR_FLUSH_MS at most, sooner once STDERR_PIECE_BYTES wait) so a chatty
// harness adds few messages, and bounded: the log keeps the last `maxBytes`
// of it, older pieces are dropped to their size (event-log.ts).
import { StringDecoder } from "node:string_decoder";
import { createScrubber, type HeldTextScrubber } from "@oz0/serving";
import type { SessionEventLog } from "./event-log.js";

/** A piece is logged once this much waits, without waiting for the timer. */
export const STDERR_PIECE_BYTES = 64 * 1024;
/** At most one piece per this many milliseconds while less than STDERR_PIECE_BYTES wait. */
export const STDERR_FLUSH_MS = 200;
/** Default of what a session keeps (OZ0_MAX_SESSION_STDERR_BYTES): 1 MiB. */
export const DEFAULT_MAX_STDERR_BYTES = 1024 * 1024;
/** Default of what a session may write to stderr in all (OZ0_MAX_SESSION_STDERR_WRITTEN_BYTES): 256 MiB. */
export const DEFAULT_MAX_STDERR_WRITTEN_BYTES = 256 * 1024 * 1024;
/** How much `exited.stderr_tail` carries. */
const TAIL_CHARS = 4096;

export class StderrCapture {
  readonly #log: SessionEventLog;
  readonly #maxBytes: number;
  readonly #onPiece: ((text: string) => void) | undefined;
  readonly #decoder = new StringDecoder("utf8");
  readonly #scrubber: HeldTextScrubber;
  /** Scrubbed, not logged yet. */
  #pending = "";
  #timer: NodeJS.Timeout | undefined;
  /** The pieces the log still holds, oldest first, and their size. */
  readonly #kept: { seq: number; bytes: number }[] = [];
  #keptBytes = 0;
  #tail = "";
  #finished = false;
  /** Bytes the harness wrote to stderr so far, and the most it may (then `onTooMuch`, and the rest is ignored). */
  #written = 0;
  readonly #maxWritten: number;
  readonly #onTooMuch: (() => void) | undefined;

  /**
   * `secret`: the session token (nothing is scrubbed without one).
   * `maxBytes`: how much of the session's stderr the log keeps (0: none, only the sizes).
   * `onPiece`: each piece as logged, for the node's debug log.
   * `maxWritten`: the most the harness may write in all; past it `onTooMuch` is called once (the session is
   * stopped) and what follows is ignored. The keeper's file and the log on disk hold every byte read, and a
   * harness writing as fast as it can would fill the node's disk.
   */
  constructor(options: {
    log: SessionEventLog;
    secret: string | undefined;
    maxBytes: number;
    onPiece?: (text: string) => void;
    maxWritten?: number;
    onTooMuch?: () => void;
  }) {
    this.#log = options.log;
    this.#maxBytes = options.maxBytes;
    this.#onPiece = options.onPiece;
    this.#maxWritten = options.maxWritten ?? DEFAULT_MAX_STDERR_WRITTEN_BYTES;
    this.#onTooMuch = options.onTooMuch;
    this.#scrubber = createScrubber(options.secret).held();
  }

  /** Bytes of stderr the log still holds. */
  get keptBytes(): number {
    return this.#keptBytes;
  }

  /** The last few KiB logged, for `exited`. */
  get tail(): string {
    return this.#tail;
  }

  push(chunk: Buffer): void {
    if (this.#finished || this.#written > this.#maxWritten) return;
    this.#written += chunk.length;
    if (this.#written > this.#maxWritten) {
      this.#onTooMuch?.();
      return;
    }
    this.#pending += this.#scrubber.push(this.#decoder.write(chunk));
    if (Buffer.byteLength(this.#pending) >= STDERR_PIECE_BYTES) this.#flush();
    else if (this.#pending !== "" && this.#timer === undefined)
      this.#timer = setTimeout(() => this.#flush(), STDERR_FLUSH_MS);
  }

  /** Logs what is left; call before the log's last messages. Later chunks are ignored. */
  finish(): void {
    if (this.#finished) return;
    this.#pending += this.#scrubber.push(this.#decoder.end());
    this.#pending += this.#scrubber.flush();
    this.#finished = true;
    this.#flush();
  }

  #flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    let text = this.#pending;
    this.#pending = "";
    if (text === "" || this.#log.ended) return;
    let dropped = 0;
    const bytes = Buffer.byteLength(text);
    if (bytes > this.#maxBytes) {
      // A piece larger than the whole allowance keeps its end.
      const kept = lastBytes(text, this.#maxBytes);
      dropped = bytes - Buffer.byteLength(kept);
      text = kept;
    }
    const entry = this.#log.append({ case: "stderr", value: { text, droppedBytes: BigInt(dropped) } });
    this.#onPiece?.(text);
    this.#tail = (this.#tail + text).slice(-TAIL_CHARS);
    this.#kept.push({ seq: Number(entry.seq), bytes: Buffer.byteLength(text) });
    this.#keptBytes += Buffer.byteLength(text);
    while (this.#keptBytes > this.#maxBytes && this.#kept.length > 1) {
      const oldest = this.#kept.shift()!;
      this.#log.dropStderr(oldest.seq);
      this.#keptBytes -= oldest.bytes;
    }
  }
}

/** The end of `text`, at most `maxBytes` of UTF-8, starting on a whole character. */
function lastBytes(text: string, maxBytes: number): string {
  const buffer = Buffer.from(text);
  let start = buffer.length - maxBytes;
  // Skip continuation bytes (10xxxxxx): a character cut in two is dropped whole.
  while (start < buffer.length && (buffer[start]! & 0xc0) === 0x80) start++;
  return buffer.subarray(start).toString("utf8");
}
