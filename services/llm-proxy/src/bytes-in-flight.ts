// How many bytes of model calls' bodies the proxy holds at once, per session
// and for the whole process. A request body (up to OZ0_MAX_MODEL_REQUEST_BYTES)
// is held from its first byte until its call ends (retries send it again), and
// a whole answer is held until it is scrubbed, metered and sent; nothing else
// bounds how many calls a session token opens at once, so without these
// budgets one session could make the proxy hold 32 MiB per call until it runs
// out of memory, and every other job's calls die with it.
//
// Bytes are counted chunk by chunk as they arrive: a read that would cross a
// budget stops there. A request's declared size (its Content-Length) is
// reserved at once, before any of it is read, but against its session's
// budget only: a session can declare sizes it never sends, and what it
// declares may block its own calls, never other sessions'. The process's
// budget counts the bytes the process really holds. Each call's bytes are
// given back at once when the call lets go of its bodies
// (`CallBytes.release`).
//
// Requests may take three quarters of the process's budget, answers all of
// it: the last quarter is kept for answers. A request body is held for as
// long as its call lasts, so calls waiting on the provider (or bodies sent
// slowly on purpose) could fill the whole budget, and the answers of those
// very calls, which the provider has already billed, were then dropped. Now
// a new request is refused first (503, retried by the SDKs, nothing spent)
// and answers still find room.

/** The budget that refused: which, how large, and the setting that raises it. */
export interface BytesRefusal {
  scope: "session" | "process";
  /** What the refused bytes could take: the budget, or for a request the process's budget less what is kept for answers. */
  limit: number;
  /** For a request refused by the process's budget: the bytes of it kept for answers. */
  keptForAnswers?: number;
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

  /** A call's account: what it takes is counted against its session's budget and the process's. */
  call(session: string): CallBytes {
    return new CallBytes(this, session);
  }

  /** Of the process's budget, what requests may not take: a quarter, kept for answers. */
  get keptForAnswers(): number {
    return Math.floor(this.limits.perProcess / 4);
  }

  /**
   * @internal CallBytes' step: takes `session` bytes of the session's budget
   * and `process` bytes of the process's (a declared size is reserved in the
   * session's only), or says which budget refuses (taking nothing). `call`:
   * what the call already holds of each, to tell a call that can never fit.
   * A request's bytes may not take what is kept for answers.
   */
  take(
    owner: string,
    want: { session: number; process: number; request: boolean },
    call: { session: number; process: number },
  ): BytesRefusal | undefined {
    const sessionHeld = this.#bySession.get(owner) ?? 0;
    const { perSession } = this.limits;
    const kept = want.request ? this.keptForAnswers : 0;
    const perProcess = this.limits.perProcess - kept;
    if (want.session > 0 && sessionHeld + want.session > perSession)
      return {
        scope: "session",
        limit: perSession,
        setting: "OZ0_MAX_SESSION_BYTES_IN_FLIGHT",
        never: call.session + want.session > perSession,
      };
    if (want.process > 0 && this.#total + want.process > perProcess)
      return {
        scope: "process",
        limit: perProcess,
        ...(kept > 0 ? { keptForAnswers: kept } : {}),
        setting: "OZ0_MAX_BYTES_IN_FLIGHT",
        never: call.process + want.process > perProcess,
      };
    if (want.session > 0) this.#bySession.set(owner, sessionHeld + want.session);
    this.#total += want.process;
    return undefined;
  }

  /** @internal CallBytes' step: gives back what `session` took of each budget. */
  give(owner: string, back: { session: number; process: number }): void {
    const left = (this.#bySession.get(owner) ?? 0) - back.session;
    if (left > 0) this.#bySession.set(owner, left);
    else this.#bySession.delete(owner);
    this.#total -= back.process;
  }
}

/** The bytes one call holds: taken as its bodies arrive, given back all at once by `release`. */
export class CallBytes {
  readonly #budget: BytesInFlight;
  readonly #session: string;
  /** What the call holds of its session's budget (a reservation included) and of the process's. */
  #held = { session: 0, process: 0 };
  /** Of the session's: what the request's declared size reserved and has not arrived yet. */
  #reserved = 0;
  /** What the current attempt's answer holds, of each budget alike (given back when another attempt replaces it). */
  #answer = 0;

  constructor(budget: BytesInFlight, session: string) {
    this.#budget = budget;
    this.#session = session;
  }

  /** What the current attempt's answer holds. */
  get answer(): number {
    return this.#answer;
  }

  /** Reserves a request's declared size in its session's budget, before a byte of it is read. */
  reserve(declared: number): BytesRefusal | undefined {
    const refusal = this.#take({ session: declared, process: 0, request: true });
    if (!refusal) this.#reserved += declared;
    return refusal;
  }

  /** `bytes` more of the request's body arrived: the process's budget, and the session's past what was reserved. */
  arrived(bytes: number): BytesRefusal | undefined {
    const reserved = Math.min(bytes, this.#reserved);
    const refusal = this.#take({ session: bytes - reserved, process: bytes, request: true });
    if (!refusal) this.#reserved -= reserved;
    return refusal;
  }

  /** Takes `bytes` more of an answer being read. */
  takeAnswer(bytes: number): BytesRefusal | undefined {
    const refusal = this.#take({ session: bytes, process: bytes, request: false });
    if (!refusal) this.#answer += bytes;
    return refusal;
  }

  /**
   * Holds `total` bytes for the answer (a stream's part of an event still
   * arriving): more is taken, or refused; less gives the difference back.
   */
  holdAnswer(total: number): BytesRefusal | undefined {
    if (total > this.#answer) return this.takeAnswer(total - this.#answer);
    if (total < this.#answer) this.#giveAnswer(this.#answer - total);
    return undefined;
  }

  /** Gives back what an answer took, once nothing holds it any more (an attempt that failed and is retried). */
  dropAnswer(): void {
    if (this.#answer > 0) this.#giveAnswer(this.#answer);
  }

  /** Gives back everything this call holds; once is enough, more is harmless. */
  release(): void {
    if (this.#held.session === 0 && this.#held.process === 0) return;
    this.#budget.give(this.#session, this.#held);
    this.#held = { session: 0, process: 0 };
    this.#reserved = 0;
    this.#answer = 0;
  }

  #take(want: { session: number; process: number; request: boolean }): BytesRefusal | undefined {
    const refusal = this.#budget.take(this.#session, want, this.#held);
    if (!refusal)
      this.#held = { session: this.#held.session + want.session, process: this.#held.process + want.process };
    return refusal;
  }

  #giveAnswer(bytes: number): void {
    this.#budget.give(this.#session, { session: bytes, process: bytes });
    this.#held = { session: this.#held.session - bytes, process: this.#held.process - bytes };
    this.#answer -= bytes;
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
  const limit =
    refusal.keptForAnswers === undefined
      ? `its limit (${refusal.limit} bytes)`
      : `what requests may take (${refusal.limit} bytes; ${refusal.keptForAnswers} more are kept for answers)`;
  return `${what} would take the bytes ${whose} hold at once in the LLM proxy past ${limit}; ${wait}, or raise ${refusal.setting} on the LLM proxy`;
}
