// A session's messages in order, each with its seq (1, 2, 3, ...). Readers
// follow it from any position, so a client that lost its stream re-attaches
// with the last seq it saw and gets every later message exactly once.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { RunSessionResponseSchema, type RunSessionResponse } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { SandboxError } from "./sandbox-errors.js";

/** A message of the log, as a message or its init object; the log gives it its seq. */
export type LogBody = MessageInitShape<typeof RunSessionResponseSchema>["message"];

export class SessionEventLog {
  readonly sessionId: string;
  readonly #messages: RunSessionResponse[] = [];
  #ended = false;
  #wake: (() => void)[] = [];

  constructor(sessionId: string) {
    this.sessionId = sessionId;
  }

  get lastSeq(): number {
    return this.#messages.length;
  }

  /** The latest message, if any. */
  get latest(): RunSessionResponse | undefined {
    return this.#messages[this.#messages.length - 1];
  }

  /** True once the last message (`exited`) is in. */
  get ended(): boolean {
    return this.#ended;
  }

  /** Appends a message, giving it the next seq; `last` marks the end of the log. */
  append(message: LogBody, options: { last?: boolean } = {}): RunSessionResponse {
    if (this.#ended) throw new Error(`the log of session ${this.sessionId} has ended; nothing may follow its last message`);
    const entry = create(RunSessionResponseSchema, {
      seq: BigInt(this.#messages.length + 1),
      sessionId: this.sessionId,
      message,
    });
    this.#messages.push(entry);
    if (options.last === true) this.#ended = true;
    const wake = this.#wake;
    this.#wake = [];
    for (const resolve of wake) resolve();
    return entry;
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
    let next = afterSeq;
    while (!signal.aborted) {
      while (next < this.#messages.length) {
        const message = this.#messages[next];
        next++;
        if (message !== undefined) yield message;
      }
      if (this.#ended) return;
      await new Promise<void>((resolve) => {
        const done = (): void => {
          signal.removeEventListener("abort", done);
          resolve();
        };
        this.#wake.push(done);
        signal.addEventListener("abort", done, { once: true });
      });
    }
  }
}
