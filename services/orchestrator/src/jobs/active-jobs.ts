// The jobs whose sessions this process follows right now, shared by the job
// runner, the session side of a job (job-sessions.ts) and the approval
// service: what each knows of a job's session, one lock per job so that
// everything that changes a job (its session's messages, answers, a cancel)
// happens one at a time, and the background work they start, awaited at close.
import type { Logger } from "@oz0/serving";
import type { SessionResult } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { RequestIds } from "../approvals/request-ids.js";
import type { AgentVersionRecord } from "../store/job-store.js";
import type { SessionState } from "../sessions/session-driver.js";
import type { SandboxMessage } from "../sessions/session-runner.js";

/** A job this process follows: its agent version and where its session is. */
export interface ActiveJob extends SessionState {
  agent: AgentVersionRecord;
  result?: SessionResult;
  exitError: string;
  /** How its node isolates its session, as the node's `started` said (for session.started). */
  isolation?: string;
  /** Its session's exit as the node reported it, once heard (published as session.ended when the job ends). */
  exit?: Extract<SandboxMessage, { kind: "exited" }>;
  /** Set when the harness broke the tool policy; the job fails with it. */
  violation?: string;
  /** Set when the sandbox failed the session (the harness broke the protocol or a limit); the job fails with it, whatever its result. */
  sessionFailure?: string;
  /** Set when its session, asked to stop, ignored SIGTERM and was killed: said beside the job's end (job-ending.ts). */
  killedAfterStop?: string;
  /** Another replica took the job's lease: stop following it without finishing it. */
  abandoned?: boolean;
  /**
   * The job ended (JobRunner #endJob): what its session sent after, still waiting for the job's lock, is not handled.
   * (Not `stopped`: a placement under way still stores, then revokes, the token it minted.)
   */
  ended?: boolean;
  /** Re-attached to a session that may never have started: start it if the sandbox does not know it. */
  startIfUnknown?: boolean;
  /** The job's events already say it waits for room on a node (said once, not per attempt). */
  waitSaid?: boolean;
  /** Its node went silent, and that is being dealt with (handleLostSession): once, whoever noticed first. */
  lostHandled?: boolean;
  /**
   * Call ids (and permission ids) of its calls this process stored as approved: the tool-call audit needs
   * no read for those (an approved call stays approved). Others are read from the store.
   */
  approvedCalls?: Set<string>;
  /**
   * The database refused its messages after `after` (to `last`, where the one refused must be) for their data,
   * `times` times in a row (JobRunner #refusedForGood). Forgotten once a write stores past `last`.
   */
  refusals?: { after: number; last: number; times: number };
  /** The ids and call ids its permission requests used (approvals/request-ids.ts): read from the store once, then kept here. */
  requestIds?: RequestIds;
  /** While a permission request of its session is decided (its hooks may run long): a cancel aborts it. */
  deciding?: AbortController;
  /**
   * Why its calls are no longer decided: a cancel under way (stopDeciding) and not stored yet, or its overdue
   * session being stopped. A call decided meanwhile, one that came with the call whose hooks were stopped, ends
   * cancelled, saying so, without running hooks that would hold the lock the cancel or stop waits for.
   */
  decisionsStopped?: string;
  /** Aborted once its session's exit is heard (ApprovalService.stopHooks): its calls' command hooks stop. */
  sessionExited?: AbortController;
}

export class ActiveJobs {
  readonly #jobs = new Map<string, ActiveJob>();
  readonly #locks = new Map<string, Promise<unknown>>();
  readonly #running = new Set<Promise<void>>();
  readonly #logger: Logger;
  #closing = false;

  constructor(options: { logger: Logger }) {
    this.#logger = options.logger;
  }

  get(jobId: string): ActiveJob | undefined {
    return this.#jobs.get(jobId);
  }

  has(jobId: string): boolean {
    return this.#jobs.has(jobId);
  }

  set(jobId: string, active: ActiveJob): void {
    this.#jobs.set(jobId, active);
  }

  delete(jobId: string): void {
    this.#jobs.delete(jobId);
  }

  ids(): string[] {
    return [...this.#jobs.keys()];
  }

  get size(): number {
    return this.#jobs.size;
  }

  /** Set once close began: nothing new starts. */
  get closing(): boolean {
    return this.#closing;
  }

  /** Whether following `active` is over for this process: it closes, or another replica took the job. */
  stopped(active: ActiveJob): boolean {
    return this.#closing || active.abandoned === true;
  }

  /** Serialize everything that changes one job (session messages, answers, cancel). */
  withLock<T>(jobId: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.#locks.get(jobId) ?? Promise.resolve();
    const next = previous.then(fn, fn);
    const settled = next.catch(() => undefined);
    this.#locks.set(jobId, settled);
    void settled.then(() => {
      if (this.#locks.get(jobId) === settled) this.#locks.delete(jobId);
    });
    return next;
  }

  /** Background work of a job: logged if it fails, awaited at close. */
  track(work: Promise<void>): void {
    const p = work.catch((error: unknown) => this.#logger.error({ err: error }, "job work failed"));
    this.#running.add(p);
    void p.finally(() => this.#running.delete(p));
  }

  /** Stop following sessions (they keep running on their sandboxes) and wait for the work under way. */
  async close(): Promise<void> {
    this.#closing = true;
    for (const active of this.#jobs.values()) active.channel?.close();
    await Promise.allSettled([...this.#running]);
  }
}
