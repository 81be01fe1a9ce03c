// The queue of tool calls waiting for a person, across jobs, oldest first;
// read again every second, so one answered elsewhere leaves the queue.
import { jobs } from "../api.js";
import { usePolling } from "../polling.js";
import { ApprovalCard } from "./approval-card.js";

export function ApprovalsPage({ roles }: { roles: string[] }) {
  const queue = usePolling(() => jobs.listApprovals({}), 1_000, []);
  const canAnswer = roles.includes("approver");
  return (
    <section aria-labelledby="approvals-title">
      <h1 id="approvals-title">Approvals</h1>
      {queue.error ? (
        <p role="alert" class="error">
          {queue.error}
        </p>
      ) : null}
      {queue.value === undefined ? <p>Loading…</p> : queue.value.approvals.length === 0 ? <p data-testid="queue-empty">Nothing waits for an answer.</p> : null}
      {queue.value?.approvals.map((approval) => (
        <ApprovalCard key={`${approval.jobId}/${approval.callId}`} approval={approval} canAnswer={canAnswer} onAnswered={queue.refresh} />
      ))}
    </section>
  );
}
