// What the access gate refused, in the service's log. The gate runs before
// tracing (so a refused caller makes a service read nothing of its body), so
// a refused call has no SERVER span: these lines are where an operator sees
// refusals.
//
// - A caller who proved who they are and was refused (PermissionDenied: a
//   viewer approving a tool call, a service or a sandbox node calling outside
//   its rights): `ACCESS_DENIED`, by name.
// - A call with no credential, a bad one, or to a method in no access rule,
//   from someone the service cannot name: `CALLS_REFUSED_UNAUTHENTICATED`.
//
// Either may come as often as the caller likes (a sandbox node's credential
// is in the hands of whoever runs the node), so the log cannot follow each
// call: the first refusal of a caller (strangers count as one) after a quiet
// minute is logged at once, and the rest are summed up by method, at most one
// line a minute for that caller, so a flood of requests is not a flood of log
// lines.
import type { Logger } from "../logger.js";
import { describePrincipal, type Principal } from "./principal.js";

/** How many distinct methods a summary counts by name; the rest are counted together (an unknown path is the caller's to choose). */
const METHODS_NAMED = 32;
/** How many named callers are counted apart; the rest are counted together. */
const CALLERS_NAMED = 64;
/** Strangers' refusals, counted as one caller's. */
const STRANGERS = "";

type Code = "ACCESS_DENIED" | "CALLS_REFUSED_UNAUTHENTICATED";

/** The refusals of one caller since its last line: by method. */
interface Counting {
  code: Code;
  methods: Map<string, number>;
}

export class RefusalLog {
  readonly #logger: Logger;
  readonly #intervalMs: number;
  /** Callers refused in the current minute (their name; STRANGERS for the unnamed), with what came since their last line. */
  readonly #counting = new Map<string, Counting>();
  #timer: NodeJS.Timeout | undefined;

  constructor(options: { logger: Logger; intervalMs?: number }) {
    this.#logger = options.logger;
    this.#intervalMs = options.intervalMs ?? 60_000;
  }

  /** An authenticated caller refused by the access table. */
  denied(refusal: { method: string; principal: Principal; message: string }): void {
    const name = describePrincipal(refusal.principal);
    this.#refused(name, "ACCESS_DENIED", refusal.method, () =>
      this.#logger.warn({ code: "ACCESS_DENIED", method: refusal.method, principal: name }, refusal.message),
    );
  }

  /** A call refused before anyone could be named (no or a bad credential, or a method in no access rule). */
  unauthenticated(refusal: { method: string; message: string }): void {
    this.#refused(STRANGERS, "CALLS_REFUSED_UNAUTHENTICATED", refusal.method, () =>
      this.#logger.warn(
        { code: "CALLS_REFUSED_UNAUTHENTICATED", calls: 1, methods: { [refusal.method]: 1 } },
        `a call was refused before its caller could be named: ${refusal.message}; more in the next minute are summed up in one line`,
      ),
    );
  }

  /** Writes what was counted and not yet logged; the log is quiet again. */
  close(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const [caller, counting] of this.#counting) this.#summarise(caller, counting);
    this.#counting.clear();
  }

  #refused(caller: string, code: Code, method: string, logAtOnce: () => void): void {
    const key =
      caller === STRANGERS || this.#counting.has(caller) || this.#counting.size < CALLERS_NAMED
        ? caller
        : "(other callers)";
    const counting = this.#counting.get(key);
    if (!counting) {
      logAtOnce();
      this.#counting.set(key, { code, methods: new Map() });
      this.#timer ??= this.#startTimer();
      return;
    }
    const named = counting.methods.has(method) || counting.methods.size < METHODS_NAMED ? method : "(other)";
    counting.methods.set(named, (counting.methods.get(named) ?? 0) + 1);
  }

  #startTimer(): NodeJS.Timeout {
    const timer = setTimeout(() => {
      // A caller that goes on is summed up once a minute; one with a quiet minute is logged at once again.
      for (const [caller, counting] of this.#counting) {
        if (this.#summarise(caller, counting)) counting.methods = new Map();
        else this.#counting.delete(caller);
      }
      this.#timer = this.#counting.size > 0 ? this.#startTimer() : undefined;
    }, this.#intervalMs);
    timer.unref();
    return timer;
  }

  /** Logs a caller's counts, if any; whether there were some. */
  #summarise(caller: string, counting: Counting): boolean {
    if (counting.methods.size === 0) return false;
    let calls = 0;
    for (const count of counting.methods.values()) calls += count;
    const methods = Object.fromEntries(counting.methods);
    const were = calls === 1 ? "call was" : "calls were";
    if (counting.code === "CALLS_REFUSED_UNAUTHENTICATED")
      this.#logger.warn(
        { code: counting.code, calls, methods },
        `${calls} more ${were} refused before their callers could be named (no or a bad credential, or a method in no access rule)`,
      );
    else
      this.#logger.warn(
        { code: counting.code, principal: caller, calls, methods },
        `${calls} more ${were} of ${caller} refused by the access table`,
      );
    return true;
  }
}
