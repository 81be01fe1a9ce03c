// How a job ends, decided from what is known when its session can no longer
// be followed: a cancel wins, then a failure the orchestrator saw (a lost
// session, a node that would not stop it), then a rule the harness broke (or
// messages the store refused), then the failure stored with the job (how the
// sandbox said the session failed, a deadline passed, or a rule broken before
// a restart), then the session's result. A job that fails gets no result from
// its session. One that failed because of how its session ended says what the
// harness last wrote to stderr.
import { create } from "@bufbuild/protobuf";
import { SessionResultSchema, StopReason, type SessionResult } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { storedStderrTail, withStderr } from "../sessions/harness-stderr.js";
import type { JobRecord, JobStateName, JobStore } from "../store/job-store.js";
import type { ActiveJob } from "./active-jobs.js";

/** Why a job was cancelled when its cancel gave no reason. */
export const CANCELLED_BY_REQUEST = "cancelled by request";

/** The reason a job whose cancel is stored ends with: the one stored with it, else the default. */
export function cancelReason(job: Pick<JobRecord, "error">): string {
  return job.error || CANCELLED_BY_REQUEST;
}

/**
 * The failure stored with a job that has not ended: the rule its harness broke, the deadline it passed, how its
 * session failed. A running job's error is only ever written by a cancel (with cancelRequestedAt) or by such a
 * failure (the job runner's, or one the sandbox reported), and either way the job ends with it.
 */
export function storedFailure(job: Pick<JobRecord, "error" | "cancelRequestedAt">): string | undefined {
  return job.error && !job.cancelRequestedAt ? job.error : undefined;
}

export interface JobEnding {
  state: JobStateName;
  error: string;
  /** What the job's result is recorded as; undefined when there is none. */
  result?: SessionResult;
}

export async function jobEnding(o: {
  store: JobStore;
  job: JobRecord;
  active: ActiveJob | undefined;
  failure?: string;
}): Promise<JobEnding> {
  const { job, active } = o;
  // The result as this process saw it, else as stored: a session that ended before a
  // restart or a takeover delivered its result to the replica that followed it then.
  let result =
    active?.result ??
    (job.stopReason ? create(SessionResultSchema, { stopReason: job.stopReason, text: job.resultText }) : undefined);
  const sessionFailure = active?.sessionFailure ?? storedFailure(job);
  let state: JobStateName;
  let error = "";
  // The job fails because of how its session ended: the failure says what the harness last wrote to stderr.
  let failedBySession = false;
  // A harness that took a stop (a cancel, a broken rule) only as SIGKILL: said beside why it was stopped.
  const killed = active?.killedAfterStop ? `; then ${active.killedAfterStop}` : "";
  if (job.cancelRequestedAt) {
    state = "cancelled";
    error = `${cancelReason(job)}${killed}`;
  } else if (o.failure || active?.violation || sessionFailure) {
    state = "failed";
    error = o.failure || (active?.violation ? `${active.violation}${killed}` : sessionFailure!);
    failedBySession = !o.failure && !active?.violation;
    // Whatever the harness wrote as its result came from a session that broke the rules, failed, was lost or
    // whose messages could not be stored: not the job's result.
    result = create(SessionResultSchema, { stopReason: StopReason.UNSPECIFIED, text: "" });
  } else if (result && result.stopReason === StopReason.COMPLETED) {
    state = "succeeded";
  } else {
    state = "failed";
    error = !result
      ? `the session ended without a result${active?.exitError ? `: ${active.exitError}` : ""}`
      : result.stopReason === StopReason.UNSPECIFIED
        ? `the session's result gave no stop reason (stopReason unset, or STOP_REASON_UNSPECIFIED): a harness ends with STOP_REASON_COMPLETED, or the stop reason that says why not${result.error ? `; its error: ${result.error}` : ""}`
        : `the session ended ${StopReason[result.stopReason]?.toLowerCase() ?? "badly"}${result.error ? `: ${result.error}` : ""}`;
    failedBySession = true;
  }
  if (failedBySession)
    error = withStderr(error, {
      stderr: await storedStderrTail(o.store, { jobId: job.id, sessionId: job.sessionId }),
      jobId: job.id,
    });
  return { state, error, ...(result ? { result } : {}) };
}
