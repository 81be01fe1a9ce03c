// The smallest correct harness main: open the session, run the work, and turn
// whatever happens (a return value, a throw, a cancellation) into exactly one
// result.
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { exitProcess } from "./exit-process.js";
import { HarnessSessionError } from "./harness-errors.js";
import { openSession } from "./harness-session.js";
import type { HarnessSession, OpenSessionOptions, ResultInit } from "./harness-session.js";

/** Options of {@link runHarness}. */
export interface RunHarnessOptions extends OpenSessionOptions {
  /**
   * Exit the process once the work has settled and the result is out, even
   * if handles (idle keep-alive sockets, timers) remain. Default false: a
   * harness that still has children to reap (an agent CLI shutting down)
   * must not exit before they are gone, or they are left behind in its
   * process group.
   */
  exitWhenDone?: boolean;
}

/** What the work function may return: the final text, a full result, or nothing when it wrote the result itself. */
export type HarnessWorkResult = string | ResultInit | void;

/**
 * Runs `work` in a session. A returned string or {@link ResultInit} becomes
 * the result (unless the work wrote one); a throw becomes a
 * STOP_REASON_ERROR result with the error's message and exit code 1; a
 * cancellation ends with the SDK's `cancelled` result. Resolves when the
 * result is out.
 */
export async function runHarness(
  options: RunHarnessOptions,
  work: (session: HarnessSession) => Promise<HarnessWorkResult>,
): Promise<void> {
  const session = await runWork(options, work);
  if (options.exitWhenDone ?? false) {
    await session?.flushSpans();
    // Exit only once the result has reached the pipe.
    const output = options.output ?? process.stdout;
    await new Promise<void>((resolve) => output.write("", () => resolve()));
    exitProcess();
  }
}

/** Runs the work to its result; the session, once one was opened. */
async function runWork(
  options: RunHarnessOptions,
  work: (session: HarnessSession) => Promise<HarnessWorkResult>,
): Promise<HarnessSession | undefined> {
  let session: HarnessSession;
  try {
    session = await openSession(options);
  } catch (error) {
    // openSession has already answered with an error result.
    process.stderr.write(`${options.name}: ${(error as Error).message}\n`);
    process.exitCode = 1;
    return undefined;
  }
  try {
    const value = await work(session);
    if (session.resultSent) return session;
    if (typeof value === "string") session.result({ text: value });
    else if (value !== undefined) session.result(value);
    else session.result({ stopReason: StopReason.ERROR, error: "the harness finished without a result" });
  } catch (error) {
    if (session.resultSent || (error instanceof HarnessSessionError && error.code === "cancelled")) return session;
    session.log("error", "the harness failed", { error: (error as Error).message });
    session.result({ stopReason: StopReason.ERROR, error: (error as Error).message });
    process.exitCode = 1;
  }
  return session;
}
