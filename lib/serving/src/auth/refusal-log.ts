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
import { SummarisedLog } from "../summarised-log.js";
import { describePrincipal, type Principal } from "./principal.js";

/** Strangers' refusals, counted as one caller's. */
const STRANGERS = "";

type Code = "ACCESS_DENIED" | "CALLS_REFUSED_UNAUTHENTICATED";

export class RefusalLog {
  readonly #logger: Logger;
  /** By caller (their name; STRANGERS for the unnamed), by method. */
  readonly #log: SummarisedLog<Code>;

  constructor(options: { logger: Logger; intervalMs?: number }) {
    this.#logger = options.logger;
    this.#log = new SummarisedLog<Code>({
      ...(options.intervalMs !== undefined ? { intervalMs: options.intervalMs } : {}),
      otherSources: "(other callers)",
      alwaysApart: STRANGERS,
      summarise: (caller, { kind, details, total: calls }) => {
        const methods = Object.fromEntries(details);
        const were = calls === 1 ? "call was" : "calls were";
        if (kind === "CALLS_REFUSED_UNAUTHENTICATED")
          this.#logger.warn(
            { code: kind, calls, methods },
            `${calls} more ${were} refused before their callers could be named (no or a bad credential, or a method in no access rule)`,
          );
        else
          this.#logger.warn(
            { code: kind, principal: caller, calls, methods },
            `${calls} more ${were} of ${caller} refused by the access table`,
          );
      },
    });
  }

  /** An authenticated caller refused by the access table. */
  denied(refusal: { method: string; principal: Principal; message: string }): void {
    const name = describePrincipal(refusal.principal);
    this.#log.add(name, "ACCESS_DENIED", refusal.method, () =>
      this.#logger.warn({ code: "ACCESS_DENIED", method: refusal.method, principal: name }, refusal.message),
    );
  }

  /** A call refused before anyone could be named (no or a bad credential, or a method in no access rule). */
  unauthenticated(refusal: { method: string; message: string }): void {
    this.#log.add(STRANGERS, "CALLS_REFUSED_UNAUTHENTICATED", refusal.method, () =>
      this.#logger.warn(
        { code: "CALLS_REFUSED_UNAUTHENTICATED", calls: 1, methods: { [refusal.method]: 1 } },
        `a call was refused before its caller could be named: ${refusal.message}; more in the next minute are summed up in one line`,
      ),
    );
  }

  /** Writes what was counted and not yet logged; the log is quiet again. */
  close(): void {
    this.#log.close();
  }
}
