// The approvals queue grouped per job: one job may have many calls waiting
// at once (a harness asking thousands buried every other job's call a
// million pixels down the page), so each job shows its first few cards and
// how many more of its calls wait, and another job's call stays near the top.
import type { Approval } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";

/** Cards shown per job until the person asks for the rest. */
export const CARDS_PER_JOB = 3;

export interface ApprovalGroup {
  jobId: string;
  /** Every waiting call of the job the queue read. */
  approvals: Approval[];
  /** Those shown: the first CARDS_PER_JOB, or all when the job is expanded. */
  shown: Approval[];
}

/** The calls grouped by job, jobs in the order of their oldest call (the queue comes oldest first). */
export function approvalGroups(approvals: Approval[], expanded: ReadonlySet<string>): ApprovalGroup[] {
  const byJob = new Map<string, Approval[]>();
  for (const approval of approvals) {
    const calls = byJob.get(approval.jobId);
    if (calls) calls.push(approval);
    else byJob.set(approval.jobId, [approval]);
  }
  return [...byJob].map(([jobId, calls]) => ({
    jobId,
    approvals: calls,
    shown: expanded.has(jobId) ? calls : calls.slice(0, CARDS_PER_JOB),
  }));
}
