// Model calls refused before they became calls (a body over the size limit,
// bytes in flight over a budget) are logged, but a session can send them as
// fast as it likes: a line each would let one job flood the proxy's log.
// The first of a session after a quiet minute is logged at once, with what
// was refused; the rest are counted by why, and summed up in at most one line
// a minute for that session (`SummarisedLog`).
import { SummarisedLog, type Logger } from "@oz0/serving";

export type RefusedCallCode =
  "MODEL_REQUEST_OVER_BYTES_IN_FLIGHT" | "MODEL_REQUEST_TOO_LARGE" | "MODEL_REQUEST_PROVIDER_SIDE";

export class RefusedCallsLog {
  readonly #logger: Logger;
  /** By session, by reason; one kind: a session's refusals of both codes are summed up together. */
  readonly #log: SummarisedLog<"refused">;

  constructor(options: { logger: Logger; intervalMs?: number }) {
    this.#logger = options.logger;
    this.#log = new SummarisedLog<"refused">({
      ...(options.intervalMs !== undefined ? { intervalMs: options.intervalMs } : {}),
      otherSources: "(other sessions)",
      summarise: (session, { details, total }) =>
        this.#logger.warn(
          { code: "MODEL_CALLS_REFUSED", session, calls: total, reasons: Object.fromEntries(details) },
          `${total} more model call${total === 1 ? " was" : "s were"} of session ${session} refused before reaching a provider`,
        ),
    });
  }

  /**
   * A refused call: `fields` and `message` are its line when it is the first of its session in a while; otherwise
   * it is counted under its code and `reason` (a budget's scope, say).
   */
  refused(call: {
    code: RefusedCallCode;
    session: string;
    reason: string;
    fields: Record<string, unknown>;
    message: string;
  }): void {
    this.#log.add(call.session, "refused", `${call.code}: ${call.reason}`, () =>
      this.#logger.warn(
        { code: call.code, session: call.session, ...call.fields },
        `${call.message}; more of this session's in the next minute are summed up in one line`,
      ),
    );
  }

  /** Writes what was counted and not yet logged. */
  close(): void {
    this.#log.close();
  }
}
