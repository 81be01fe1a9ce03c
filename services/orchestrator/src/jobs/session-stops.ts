// A sandbox node is trusted to run a session, not to end it. A node asked to
// stop a session (a cancel, a broken rule, a passed deadline) may let it run
// on, and a hostile one never ends its stream: its job would run forever.
// So the orchestrator keeps two clocks of its own per job:
// - a session still running well past its deadline (`limits.timeout`) is
//   asked to stop by the orchestrator, as if the node had never been told of
//   the deadline;
// - a node asked to stop a session that has not ended it a while later no
//   longer decides: the job ends without it. Ending the job revokes the
//   session's token and frees its slot (job-runner.ts), so a harness left
//   running there reaches no model.
// Both clocks are this process's: a restart or a takeover arms them again
// from what the store says (job-sessions.ts), and a cancel stored at another
// replica starts the wait at the one that owns the job (JobRunner.heedCancel).
// A harness operation's scratch session is not a job's own: it is stopped with
// stopFollowedSession, its caller waiting for the stream's end and no longer a
// while after asking. (A custom graph step's stream is let go when its run
// ends, which a cancel of the run does without waiting for its steps.)
import type { SessionChannel, SessionRunner } from "../sessions/session-runner.js";

/** The sandbox stops a harness within its grace after the deadline (10 s by default): a minute is well past that. */
export const DEFAULT_OVERDUE_AFTER_MS = 60_000;
/** An honest node ends a cancelled session within its grace (10 s by default). */
export const DEFAULT_STOP_WAIT_MS = 30_000;

export interface SessionStopsOptions {
  /** How long after a session's deadline its job may still run before the orchestrator asks its node to stop it. */
  overdueAfterMs?: number;
  /** How long after its node was asked to stop a session the job still waits for the session to end. */
  stopWaitMs?: number;
  /** Ask the node to stop the job's session (it ran past its deadline), storing why. */
  stopOverdue(jobId: string, reason: string): Promise<void>;
  /** End the job without its node, with this failure (a cancelled job stays cancelled). */
  endWithoutNode(jobId: string, failure: string): Promise<void>;
  /** Runs the work a clock starts, awaited at close. */
  track(work: Promise<void>): void;
}

export class SessionStops {
  readonly #o: SessionStopsOptions;
  readonly #overdue = new Map<string, NodeJS.Timeout>();
  readonly #waits = new Map<string, NodeJS.Timeout>();
  /** Closed with its process's job runner: work still under way starts no clock. */
  #closed = false;

  constructor(options: SessionStopsOptions) {
    this.#o = options;
  }

  /** The job's session must have ended by `deadline` (from `limits.timeout`, named in what the job says). */
  watchDeadline(jobId: string, deadline: Date, timeout: string): void {
    if (this.#closed) return;
    clearTimeout(this.#overdue.get(jobId));
    const overdueAfterMs = this.#o.overdueAfterMs ?? DEFAULT_OVERDUE_AFTER_MS;
    const reason = `the session ran past its deadline (limits.timeout ${timeout}) and its sandbox node had not ended it ${Math.round(overdueAfterMs / 1000)}s later; the orchestrator stopped it`;
    const ms = deadline.getTime() + overdueAfterMs - Date.now();
    this.#overdue.set(
      jobId,
      // setTimeout waits at most about 24.8 days: a deadline further off is watched again then.
      ms > MAX_DELAY_MS
        ? later(MAX_DELAY_MS, () => this.watchDeadline(jobId, deadline, timeout))
        : later(ms, () => {
            this.#overdue.delete(jobId);
            this.#o.track(this.#o.stopOverdue(jobId, reason));
          }),
    );
  }

  /** The job's node was asked to stop its session: unless the job ends first, it ends without the node. Once per job. */
  askedToStop(jobId: string, reason: string): void {
    if (this.#closed || this.#waits.has(jobId)) return;
    const waitMs = this.#o.stopWaitMs ?? DEFAULT_STOP_WAIT_MS;
    const failure = `${reason}; its sandbox node did not end the session within ${Math.round(waitMs / 1000)}s of being asked to, so the job was ended without it`;
    this.#waits.set(
      jobId,
      later(Math.min(waitMs, MAX_DELAY_MS), () => {
        this.#waits.delete(jobId);
        this.#o.track(this.#o.endWithoutNode(jobId, failure));
      }),
    );
  }

  /** Whether the job's node was asked to stop its session and the wait for its end runs. */
  asked(jobId: string): boolean {
    return this.#waits.has(jobId);
  }

  /** The job ended, or this process no longer follows it. */
  forget(jobId: string): void {
    clearTimeout(this.#overdue.get(jobId));
    clearTimeout(this.#waits.get(jobId));
    this.#overdue.delete(jobId);
    this.#waits.delete(jobId);
  }

  close(): void {
    this.#closed = true;
    for (const jobId of [...this.#overdue.keys(), ...this.#waits.keys()]) this.forget(jobId);
  }
}

/**
 * Asks a session's node to stop it, and stops following its stream when the
 * node has not ended it `waitMs` later: the caller's follow then returns as
 * if the session had ended (it knows it asked). Returns what disarms that
 * wait, for when the stream ends first.
 */
export function stopFollowedSession(o: {
  sandbox: SessionRunner;
  channel: SessionChannel;
  sessionId: string;
  reason: string;
  waitMs?: number | undefined;
  /** Told when the node did not end the session in time, just before the stream is let go. */
  onGiveUp?: (message: string) => void;
}): () => void {
  void o.sandbox.cancel({ sessionId: o.sessionId, reason: o.reason }).catch(() => undefined);
  const waitMs = o.waitMs ?? DEFAULT_STOP_WAIT_MS;
  const timer = later(waitMs, () => {
    o.onGiveUp?.(
      `its sandbox node did not end the session within ${Math.round(waitMs / 1000)}s of being asked to (${o.reason}); it is no longer followed`,
    );
    o.channel.close();
  });
  return () => clearTimeout(timer);
}

const MAX_DELAY_MS = 2_147_483_647;

/** A timer that keeps no process alive. */
function later(ms: number, fn: () => void): NodeJS.Timeout {
  return setTimeout(fn, Math.max(0, ms)).unref();
}
