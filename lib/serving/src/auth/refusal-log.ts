// What the access gate refused, in the service's log. The gate runs before
// tracing (so a refused caller makes a service read nothing of its body), so
// a refused call has no SERVER span: these lines are where an operator sees
// refusals.
//
// - A caller who proved who they are and was refused (PermissionDenied: a
//   viewer approving a tool call, a service calling outside its rights) is
//   logged each time, by name: `ACCESS_DENIED`. Authenticated callers are
//   accountable, and a refusal of one is worth a line each.
// - A call with no credential, a bad one, or to a method in no access rule
//   comes from someone the service cannot name, as often as they like: the
//   first after a quiet minute is logged at once and the rest are summed up,
//   at most one line a minute (`CALLS_REFUSED_UNAUTHENTICATED`, with counts
//   by method), so a stranger's flood of requests cannot flood the log too.
import type { Logger } from "../logger.js";
import { describePrincipal, type Principal } from "./principal.js";

/** How many distinct methods a summary counts by name; the rest are counted together (an unknown path is the caller's to choose). */
const METHODS_NAMED = 32;

export class RefusalLog {
  readonly #logger: Logger;
  readonly #intervalMs: number;
  /** Refusals of callers nobody can name since the last line, by method; undefined while quiet. */
  #counting: Map<string, number> | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: { logger: Logger; intervalMs?: number }) {
    this.#logger = options.logger;
    this.#intervalMs = options.intervalMs ?? 60_000;
  }

  /** An authenticated caller refused by the access table. */
  denied(refusal: { method: string; principal: Principal; message: string }): void {
    this.#logger.warn(
      { code: "ACCESS_DENIED", method: refusal.method, principal: describePrincipal(refusal.principal) },
      refusal.message,
    );
  }

  /** A call refused before anyone could be named (no or a bad credential, or a method in no access rule). */
  unauthenticated(refusal: { method: string; message: string }): void {
    if (this.#counting) {
      const key =
        this.#counting.has(refusal.method) || this.#counting.size < METHODS_NAMED ? refusal.method : "(other)";
      this.#counting.set(key, (this.#counting.get(key) ?? 0) + 1);
      return;
    }
    this.#logger.warn(
      { code: "CALLS_REFUSED_UNAUTHENTICATED", calls: 1, methods: { [refusal.method]: 1 } },
      `a call was refused before its caller could be named: ${refusal.message}; more in the next minute are summed up in one line`,
    );
    this.#counting = new Map();
    this.#startTimer();
  }

  /** Writes what was counted and not yet logged; the log is quiet again. */
  close(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#summarise();
    this.#counting = undefined;
  }

  #startTimer(): void {
    this.#timer = setTimeout(() => {
      // A flood goes on counting, one line a minute; a minute with none ends the counting.
      if (this.#summarise()) {
        this.#counting = new Map();
        this.#startTimer();
      } else {
        this.#counting = undefined;
        this.#timer = undefined;
      }
    }, this.#intervalMs);
    this.#timer.unref();
  }

  /** Logs the counts, if any; whether there were some. */
  #summarise(): boolean {
    if (!this.#counting || this.#counting.size === 0) return false;
    let calls = 0;
    for (const count of this.#counting.values()) calls += count;
    this.#logger.warn(
      { code: "CALLS_REFUSED_UNAUTHENTICATED", calls, methods: Object.fromEntries(this.#counting) },
      `${calls} more call${calls === 1 ? " was" : "s were"} refused before their callers could be named (no or a bad credential, or a method in no access rule)`,
    );
    return true;
  }
}
