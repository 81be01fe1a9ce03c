// How many bytes of model calls' bodies the proxy holds at once, per session
// and for the whole process. A request body (up to OZ0_MAX_MODEL_REQUEST_BYTES)
// is held from its first byte until its call ends (retries send it again), and
// a whole answer is held until it is scrubbed, metered and sent; nothing else
// bounds how many calls a session token opens at once, so without these
// budgets one session could make the proxy hold 32 MiB per call until it runs
// out of memory, and every other job's calls die with it.
//
// Bytes are counted as they are taken, before they are read where the size is
// known (a request's Content-Length), else chunk by chunk: a read that would
// cross a budget stops there. Each call's bytes are given back at once when
// the call lets go of its bodies (`CallBytes.release`).

/** The budget that refused: which, how large, and the setting that raises it. */
export interface BytesRefusal {
  scope: "session" | "process";
  limit: number;
  setting: "OZ0_MAX_SESSION_BYTES_IN_FLIGHT" | "OZ0_MAX_BYTES_IN_FLIGHT";
  /** True when the call alone needs more than the budget: it will never fit, however long the caller waits. */
  never: boolean;
}

export interface BytesInFlightLimits {
  /** Bytes one session's calls may hold together (OZ0_MAX_SESSION_BYTES_IN_FLIGHT). */
  perSession: number;
  /** Bytes all calls may hold together (OZ0_MAX_BYTES_IN_FLIGHT). */
  perProcess: number;
}

/**
 * 64 MiB a session: twice the largest request (OZ0_MAX_MODEL_REQUEST_BYTES'
 * 32 MiB default), so a session's largest call always fits beside a few of
 * the usual ones (10 KB to 2 MB; long contexts about 10 MB), and a session
 * runs one or a few calls at a time.
 */
export const DEFAULT_SESSION_BYTES_IN_FLIGHT = 64 * 1024 * 1024;
/**
 * 128 MiB for the process: what is counted is the bytes received, and the
 * process holds more for them (a rewritten request is copied to be sent; a
 * whole answer is decoded to text and parsed), so this leaves the deployment's
 * 512 MiB limit room; dozens of sessions at usual sizes fit in it together.
 */
export const DEFAULT_PROCESS_BYTES_IN_FLIGHT = 128 * 1024 * 1024;

export class BytesInFlight {
  readonly limits: BytesInFlightLimits;
  #total = 0;
  /** Only sessions holding bytes: an entry goes when its count returns to 0. */
  readonly #bySession = new Map<string, number>();

  constructor(limits: Partial<BytesInFlightLimits> = {}) {
    this.limits = {
      perSession: limits.perSession ?? DEFAULT_SESSION_BYTES_IN_FLIGHT,
      perProcess: limits.perProcess ?? DEFAULT_PROCESS_BYTES_IN_FLIGHT,
    };
  }

  /** Bytes held by every call, or by one session's calls. */
  held(session?: string): number {
    return session === undefined ? this.#total : (this.#bySession.get(session) ?? 0);
  }

  /** A call's account: what it takes is counted against its session's budget and the process's. */
  call(session: string): CallBytes {
    return new CallBytes(this, session);
  }

  /** @internal CallBytes' step: takes `bytes` for `session`, or says which budget refuses (taking nothing). */
  take(session: string, bytes: number, callHeld: number): BytesRefusal | undefined {
    const sessionHeld = this.#bySession.get(session) ?? 0;
    const { perSession, perProcess } = this.limits;
    if (sessionHeld + bytes > perSession)
      return {
        scope: "session",
        limit: perSession,
        setting: "OZ0_MAX_SESSION_BYTES_IN_FLIGHT",
        never: callHeld + bytes > perSession,
      };
    if (this.#total + bytes > perProcess)
      return {
        scope: "process",
        limit: perProcess,
        setting: "OZ0_MAX_BYTES_IN_FLIGHT",
        never: callHeld + bytes > perProcess,
      };
    this.#bySession.set(session, sessionHeld + bytes);
    this.#total += bytes;
    return undefined;
  }

  /** @internal CallBytes' step: gives back bytes `session` took. */
  give(session: string, bytes: number): void {
    const left = (this.#bySession.get(session) ?? 0) - bytes;
    if (left > 0) this.#bySession.set(session, left);
    else this.#bySession.delete(session);
    this.#total -= bytes;
  }
}

/** The bytes one call holds: taken as its bodies arrive, given back all at once by `release`. */
export class CallBytes {
  readonly #budget: BytesInFlight;
  readonly #session: string;
  #held = 0;
  /** What the current attempt's answer holds (given back when another attempt replaces it). */
  #answer = 0;

  constructor(budget: BytesInFlight, session: string) {
    this.#budget = budget;
    this.#session = session;
  }

  get held(): number {
    return this.#held;
  }

  /** What the current attempt's answer holds. */
  get answer(): number {
    return this.#answer;
  }

  /** Takes `bytes` more for this call, or says which budget refuses (and takes nothing). */
  take(bytes: number): BytesRefusal | undefined {
    const refusal = this.#budget.take(this.#session, bytes, this.#held);
    if (!refusal) this.#held += bytes;
    return refusal;
  }

  /** Takes `bytes` more of an answer being read. */
  takeAnswer(bytes: number): BytesRefusal | undefined {
    const refusal = this.take(bytes);
    if (!refusal) this.#answer += bytes;
    return refusal;
  }

  /**
   * Holds `total` bytes for the answer (a stream's part of an event still
   * arriving): more is taken, or refused; less gives the difference back.
   */
  holdAnswer(total: number): BytesRefusal | undefined {
    if (total > this.#answer) return this.takeAnswer(total - this.#answer);
    if (total < this.#answer) {
      this.#budget.give(this.#session, this.#answer - total);
      this.#held -= this.#answer - total;
      this.#answer = total;
    }
    return undefined;
  }

  /** Gives back what an answer took, once nothing holds it any more (an attempt that failed and is retried). */
  dropAnswer(): void {
    if (this.#answer === 0) return;
    this.#budget.give(this.#session, this.#answer);
    this.#held -= this.#answer;
    this.#answer = 0;
  }

  /** Gives back everything this call holds; once is enough, more is harmless. */
  release(): void {
    if (this.#held === 0) return;
    this.#budget.give(this.#session, this.#held);
    this.#held = 0;
    this.#answer = 0;
  }
}

/** What a refused call is told: which budget, its size, and what to do. */
export function bytesRefusalMessage(refusal: BytesRefusal, what: string): string {
  const whose = refusal.scope === "session" ? "this session's calls" : "all sessions' calls";
  const wait = refusal.never
    ? "it can never fit"
    : refusal.scope === "session"
      ? "retry once the session's other calls end"
      : "retry shortly";
  return `${what} would take the bytes ${whose} hold at once in the LLM proxy past its limit (${refusal.limit} bytes); ${wait}, or raise ${refusal.setting} on the LLM proxy`;
}
