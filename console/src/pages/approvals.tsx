// The queue of tool calls waiting for a person, across jobs, oldest first;
// read again whenever WatchJobs says a job's calls started or stopped
// waiting (a deadline passing too: the runtime's answer is such a change),
// and after the stream was opened again, so one answered elsewhere leaves
// the queue at once. Nothing is read on a timer: how long each call has
// waited moves with the page's clock.
import { jobs } from "../api.js";
import { useJobChanges } from "../job-changes.js";
import { usePolling } from "../polling.js";
import { ApprovalCard } from "./approval-card.js";

export function ApprovalsPage({ roles }: { roles: string[] }) {
  const queue = usePolling(() => jobs.listApprovals({}), undefined, []);
  useJobChanges(() => queue.refresh());
  const canAnswer = roles.includes("approver");
  return (
    <section aria-labelledby="approvals-title">
      <h1 id="approvals-title">Approvals</h1>
      {queue.error ? (
        <p role="alert" class="error">
          {queue.error}
        </p>
      ) : null}
      {queue.value === undefined ? (
        <p>Loading…</p>
      ) : queue.value.approvals.length === 0 ? (
        <p data-testid="queue-empty">Nothing waits for an answer.</p>
      ) : null}
      {queue.value?.approvals.map((approval) => (
        <ApprovalCard
          key={`${approval.jobId}/${approval.callId}`}
          approval={approval}
          canAnswer={canAnswer}
          onAnswered={queue.refresh}
        />
      ))}
    </section>
  );
}
