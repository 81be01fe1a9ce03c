// Splits a byte stream into newline-terminated lines.
//
// Chunks are kept as bytes until a line is complete and only then decoded, so
// a multi-byte UTF-8 character split across two chunks is never mangled, and
// the common case (a whole line inside one chunk) decodes straight from the
// chunk with no copy.

const NEWLINE = 0x0a;

/** Options for {@link LineSplitter}. */
export interface LineSplitterOptions {
  /** Longest line accepted, in bytes, without its newline. */
  maxLineBytes: number;
  /**
   * Called with each complete line (without the newline or a trailing `\r`). Blank lines are skipped.
   * `unterminated` is true for a last line {@link LineSplitter.end} delivered with no newline after it.
   */
  onLine: (line: string, unterminated?: boolean) => void;
  /**
   * Called once for each line longer than `maxLineBytes`, as soon as it
   * exceeds the limit; the rest of that line is discarded without buffering.
   */
  onOversizedLine: (bytesSoFar: number) => void;
}

/** Incremental line framing over byte chunks, with a per-line size limit. */
export class LineSplitter {
  readonly #options: LineSplitterOptions;
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  /** True while skipping the rest of an oversized line. */
  #discarding = false;

  /** Creates a splitter that reports lines through `options.onLine`. */
  constructor(options: LineSplitterOptions) {
    this.#options = options;
  }

  /** Bytes held for a line not yet terminated. */
  get pendingBytes(): number {
    return this.#pendingBytes;
  }

  /** Feeds one chunk; calls the callbacks synchronously for every line it completes. */
  push(chunk: Buffer): void {
    const max = this.#options.maxLineBytes;
    let start = 0;
    for (;;) {
      const newline = chunk.indexOf(NEWLINE, start);
      if (newline === -1) break;
      if (this.#discarding) {
        this.#discarding = false;
      } else {
        const length = this.#pendingBytes + (newline - start);
        if (length > max) {
          this.#options.onOversizedLine(length);
        } else {
          const line =
            this.#pendingBytes === 0
              ? chunk.toString("utf8", start, newline)
              : Buffer.concat([...this.#pending, chunk.subarray(start, newline)]).toString("utf8");
          this.#emit(line);
        }
      }
      this.#pending = [];
      this.#pendingBytes = 0;
      start = newline + 1;
    }
    if (start >= chunk.length || this.#discarding) return;
    const rest = chunk.length - start;
    if (this.#pendingBytes + rest > max) {
      this.#options.onOversizedLine(this.#pendingBytes + rest);
      this.#pending = [];
      this.#pendingBytes = 0;
      this.#discarding = true;
      return;
    }
    this.#pending.push(start === 0 ? chunk : chunk.subarray(start));
    this.#pendingBytes += rest;
  }

  /**
   * Ends the stream. A last line without its newline is still delivered:
   * losing a harness's final `result` to a missing "\n" would help nobody.
   */
  end(): void {
    if (this.#pendingBytes > 0 && !this.#discarding) {
      this.#emit(Buffer.concat(this.#pending).toString("utf8"), true);
    }
    this.#pending = [];
    this.#pendingBytes = 0;
    this.#discarding = false;
  }

  #emit(line: string, unterminated = false): void {
    const trimmed = line.charCodeAt(line.length - 1) === 13 ? line.slice(0, -1) : line;
    // Only a line that starts with whitespace can be blank; avoid trimming every line.
    const first = trimmed.charCodeAt(0);
    if (Number.isNaN(first) || ((first === 32 || first === 9 || first === 13) && trimmed.trim().length === 0)) return;
    this.#options.onLine(trimmed, unterminated);
  }
}
