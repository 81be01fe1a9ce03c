// The queue of tool calls waiting for a person, across jobs, oldest first;
// read again whenever WatchJobs says a job's calls started or stopped
// waiting (a deadline passing too: the runtime's answer is such a change),
// and after the stream was opened again, so one answered elsewhere leaves
// the queue at once. Nothing is read on a timer: how long each call has
// waited moves with the page's one clock, shared by every card.
//
// One job may have many calls waiting (up to OZ0_MAX_WAITING_APPROVALS per
// session): the queue is grouped per job (approval-groups.ts), so another
// job's call is never far down the page. ListApprovals answers a page at a
// time; "Show more" reads the next.
import { useState } from "preact/hooks";
import type { Approval } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { jobs } from "../api.js";
import { approvalGroups } from "../approval-groups.js";
import { useJobChanges } from "../job-changes.js";
import { useNow } from "../now.js";
import { usePolling } from "../polling.js";
import { href } from "../router.js";
import { ApprovalCard } from "./approval-card.js";

/** The first `pages` pages of the queue, and whether more wait after them. */
async function readQueue(pages: number): Promise<{ approvals: Approval[]; more: boolean }> {
  const approvals: Approval[] = [];
  let pageToken = "";
  for (let page = 0; page < pages; page++) {
    const answer = await jobs.listApprovals({ pageToken });
    approvals.push(...answer.approvals);
    pageToken = answer.nextPageToken;
    if (!pageToken) break;
  }
  return { approvals, more: pageToken !== "" };
}

/**
 * How many of a job's calls wait. With pages of the queue still unread, any job's count may go on in them (the
 * queue is ordered by when each call asked, across jobs), so it is a floor.
 */
function waitingCount(n: number, more: boolean): string {
  const counted = n === 1 ? "1 call waits" : `${n} calls wait`;
  return more ? `at least ${counted}` : counted;
}

export function ApprovalsPage({ roles }: { roles: string[] }) {
  const [pages, setPages] = useState(1);
  const queue = usePolling(() => readQueue(pages), undefined, [pages]);
  useJobChanges(() => queue.refresh());
  const now = useNow(true);
  const [expanded, setExpanded] = useState<ReadonlySet<string>>(new Set());
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
      {approvalGroups(queue.value?.approvals ?? [], expanded).map((group) => {
        const hidden = group.approvals.length - group.shown.length;
        return (
          <section
            class="approval-job"
            key={group.jobId}
            data-job={group.jobId}
            aria-label={`Calls of job ${group.jobId}`}
          >
            <h2>
              Job <a href={href({ page: "job", jobId: group.jobId })}>{group.jobId}</a>{" "}
              <span class="muted" data-testid="job-waiting-count">
                {waitingCount(group.approvals.length, queue.value?.more ?? false)}
              </span>
            </h2>
            {group.shown.map((approval) => (
              <ApprovalCard
                key={`${approval.jobId}/${approval.callId}`}
                approval={approval}
                canAnswer={canAnswer}
                onAnswered={queue.refresh}
                now={now}
              />
            ))}
            {hidden > 0 ? (
              <button type="button" onClick={() => setExpanded(new Set([...expanded, group.jobId]))}>
                Show the other {hidden} {hidden === 1 ? "call" : "calls"} of this job
              </button>
            ) : null}
          </section>
        );
      })}
      {queue.value?.more ? (
        <p>
          More calls wait than these.{" "}
          <button type="button" onClick={() => setPages(pages + 1)}>
            Show more
          </button>
        </p>
      ) : null}
    </section>
  );
}
