// ListApprovals a page at a time, oldest first, with the job and the pinned
// agent version each call needs (its agent, deadline and approvers). A queue
// one job flooded (3000 calls) took 1.8 s a read: every row, and a read of
// its job and agent version per row, on the event loop every caller shares.
// A page holds at most MAX_APPROVALS_PAGE calls, and each job and agent
// version is read once per page, however many of its calls the page holds.
import { invalidArgument } from "../orchestrator-error.js";
import { pageSize } from "../page-size.js";
import type { AgentVersionRecord, JobRecord, JobStore, PermissionRecord } from "../store/job-store.js";

export const DEFAULT_APPROVALS_PAGE = 100;
export const MAX_APPROVALS_PAGE = 500;

export interface ApprovalsPageQuery {
  jobId?: string;
  includeAnswered: boolean;
  /** At most this many (DEFAULT_APPROVALS_PAGE when 0, MAX_APPROVALS_PAGE at most). */
  limit: number;
  /** A previous page's nextPageToken: the calls after its last. */
  pageToken: string;
}

export interface ApprovalRow {
  permission: PermissionRecord;
  job: JobRecord | undefined;
  agent: AgentVersionRecord | undefined;
}

/** A page's token names its last call: job ids hold no `/`, so the first one ends the job's. */
function pageTokenOf(p: PermissionRecord): string {
  return `${p.jobId}/${p.id}`;
}

function positionOf(pageToken: string): { jobId: string; id: string } | undefined {
  const slash = pageToken.indexOf("/");
  return slash > 0 ? { jobId: pageToken.slice(0, slash), id: pageToken.slice(slash + 1) } : undefined;
}

export async function listApprovalsPage(
  store: JobStore,
  query: ApprovalsPageQuery,
): Promise<{ rows: ApprovalRow[]; nextPageToken: string }> {
  const limit = pageSize(query.limit, { default: DEFAULT_APPROVALS_PAGE, max: MAX_APPROVALS_PAGE });
  const after = query.pageToken ? positionOf(query.pageToken) : undefined;
  if (query.pageToken && (!after || (await store.getPermission(after.jobId, after.id))?.id !== after.id))
    throw invalidArgument("page_token is not one ListApprovals gave: list again without it for the first page");
  const found = await store.listPermissions({
    approvalsOnly: true,
    pendingOnly: !query.includeAnswered,
    ...(query.jobId ? { jobId: query.jobId } : {}),
    ...(after ? { after } : {}),
    limit: limit + 1,
  });
  const page = found.slice(0, limit);
  const jobs = new Map<string, JobRecord | undefined>();
  const agents = new Map<string, AgentVersionRecord | undefined>();
  const rows: ApprovalRow[] = [];
  for (const permission of page) {
    if (!jobs.has(permission.jobId)) jobs.set(permission.jobId, await store.getJob(permission.jobId));
    const job = jobs.get(permission.jobId);
    const agentKey = job ? `${job.agentName}@${job.agentVersion}` : "";
    if (job && !agents.has(agentKey))
      agents.set(agentKey, await store.getAgentVersion(job.agentName, job.agentVersion));
    rows.push({ permission, job, agent: job ? agents.get(agentKey) : undefined });
  }
  const last = page[page.length - 1];
  return { rows, nextPageToken: found.length > limit && last ? pageTokenOf(last) : "" };
}
