// The nesting limit on harness stdout lines (harness.proto, rule 8). A line
// is checked here, as its bytes arrive and before the host side of
// @oz0/harness parses it, so nothing recursive ever sees a line nested
// deeper than the limit: JSON.parse itself copes with any depth, but what
// follows does not (protobuf's recursion limit when the event is sent to the
// orchestrator, plain recursion on the call stack past a few thousand
// levels), and a failure there surfaced as a lost stream, or took the
// session's RPC down, instead of naming the harness's line.
import { Transform, pipeline, type TransformCallback } from "node:stream";
import type { HarnessLauncher, LaunchedHarness } from "@oz0/harness/host";

/**
 * How deep a line may nest objects and arrays, its own object counting as
 * level 1. Each JSON level is two protobuf messages once the event is a
 * message (a google.protobuf.Struct or ListValue and the Value holding it),
 * and the event travels inside envelopes of a few more (the sandbox's
 * RunSessionResponse, the orchestrator's job events, the events service's
 * transcript rows), so a line of depth 32 is at most about 66 messages deep
 * anywhere: below protobuf-es's default recursion limit of 100, which every
 * service decodes with, with margin. From depth 51 on, the very first hop
 * (sandbox to orchestrator) fails to decode; 64 would be about 130.
 */
export const MAX_LINE_NESTING = 32;

const NEWLINE = 0x0a;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;
const SPACE = 0x20;
const TAB = 0x09;
const CARRIAGE_RETURN = 0x0d;

/** A line that nests too deep: which one (counted as the host counts, blank lines skipped). */
export interface TooDeepLine {
  line: number;
  limit: number;
}

/**
 * Follows the bracket depth of each line across chunks: a linear scan of
 * `{` `[` `}` `]` outside strings. Every byte it looks at is ASCII, and no
 * byte of a multi-byte UTF-8 character is, so it works on raw bytes and a
 * character split between chunks changes nothing. It does not validate
 * JSON; a line it lets through may still be refused by the host.
 */
export class LineNestingScanner {
  readonly #limit: number;
  #depth = 0;
  #inString = false;
  #escaped = false;
  #lineHasContent = false;
  /** Non-blank lines completed so far. */
  #lines = 0;

  constructor(options: { limit: number }) {
    this.#limit = options.limit;
  }

  /**
   * Scans one chunk. Returns undefined when every line in it stays within
   * the limit, else the line that does not and the offset in this chunk at
   * which that line starts (0 when it started in an earlier chunk).
   */
  scan(chunk: Uint8Array): (TooDeepLine & { lineStart: number }) | undefined {
    let lineStart = 0;
    for (let i = 0; i < chunk.length; i++) {
      const byte = chunk[i]!;
      if (byte === NEWLINE) {
        if (this.#lineHasContent) this.#lines++;
        this.#depth = 0;
        this.#inString = false;
        this.#escaped = false;
        this.#lineHasContent = false;
        lineStart = i + 1;
        continue;
      }
      if (!this.#lineHasContent && byte !== SPACE && byte !== TAB && byte !== CARRIAGE_RETURN)
        this.#lineHasContent = true;
      if (this.#inString) {
        if (this.#escaped) this.#escaped = false;
        else if (byte === BACKSLASH) this.#escaped = true;
        else if (byte === QUOTE) this.#inString = false;
        continue;
      }
      if (byte === QUOTE) this.#inString = true;
      else if (byte === OPEN_BRACE || byte === OPEN_BRACKET) {
        if (++this.#depth > this.#limit) return { line: this.#lines + 1, limit: this.#limit, lineStart };
      } else if ((byte === CLOSE_BRACE || byte === CLOSE_BRACKET) && this.#depth > 0) this.#depth--;
    }
    return undefined;
  }
}

/** Options of {@link nestingLimitLauncher}. */
export interface NestingLimitOptions {
  /** The launcher that really starts the harness. */
  inner: HarnessLauncher;
  limit: number;
  /**
   * Called once, with the first line that nests too deep. Neither that line
   * nor anything after it reaches the host; the caller ends the session.
   */
  onTooDeep: (line: TooDeepLine) => void;
}

/**
 * A launcher whose harness's stdout passes through the nesting check before
 * the host reads it. From the first line over the limit on, the rest of
 * stdout is read and dropped (the harness may keep writing until it is
 * stopped), and the host's stdout ends with an error rather than an end, so
 * the part of the refused line it already has is never parsed as a line.
 */
export function nestingLimitLauncher(options: NestingLimitOptions): HarnessLauncher {
  return {
    launch(spec) {
      const launched: LaunchedHarness = options.inner.launch(spec);
      const child = launched.child;
      const source = child.stdout;
      const scanner = new LineNestingScanner({ limit: options.limit });
      let refused = false;
      const guarded = new Transform({
        transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback) {
          if (refused) {
            callback();
            return;
          }
          const tooDeep = scanner.scan(chunk);
          if (tooDeep === undefined) {
            callback(null, chunk);
            return;
          }
          refused = true;
          if (tooDeep.lineStart > 0) this.push(chunk.subarray(0, tooDeep.lineStart));
          options.onTooDeep({ line: tooDeep.line, limit: tooDeep.limit });
          callback();
        },
        flush(callback: TransformCallback) {
          // After a refusal an end would make the host parse the refused line's start as a last line.
          callback(refused ? new Error("stdout ended after a line the sandbox refused") : null);
        },
      });
      // pipeline destroys the harness's stdout when the host destroys its end (a process outside
      // the group keeping the pipe open), and ends the host's end when stdout ends or fails.
      pipeline(source, guarded, () => undefined);
      // The host reads the harness's output from `child.stdout` only.
      child.stdout = guarded;
      return launched;
    },
  };
}
