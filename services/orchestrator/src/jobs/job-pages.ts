// Jobs a page at a time, newest first, as ListJobs answers them: the page
// token is the id of the last job of the previous page, and the store lists
// the jobs after it in the same order (by creation time, then insertion), so
// jobs created while someone pages through do not shift the pages after the
// first, and a page costs the same however deep it is.
import { invalidArgument } from "../orchestrator-error.js";
import { pageSize } from "../page-size.js";
import type { JobRecord, JobStateName, JobStore } from "../store/job-store.js";

export const DEFAULT_PAGE_SIZE = 50;
/** The most a page may hold (page-size.ts says why there is a most). */
export const MAX_PAGE_SIZE = 500;

export interface JobsPageQuery {
  /** At most this many (DEFAULT_PAGE_SIZE when 0, MAX_PAGE_SIZE at most). */
  limit: number;
  state?: JobStateName;
  agent?: string;
  /** A job id, or words its input contains (any case). */
  text?: string;
  /** A previous page's nextPageToken, or "" for the first page. */
  pageToken: string;
}

export async function listJobsPage(
  store: Pick<JobStore, "listJobs" | "getJob">,
  query: JobsPageQuery,
): Promise<{ jobs: JobRecord[]; nextPageToken: string }> {
  const limit = pageSize(query.limit, { default: DEFAULT_PAGE_SIZE, max: MAX_PAGE_SIZE });
  if (query.pageToken && !(await store.getJob(query.pageToken))) {
    throw invalidArgument("page_token is not one ListJobs gave: list again without it for the first page");
  }
  const text = query.text?.trim();
  const found = await store.listJobs({
    limit: limit + 1,
    ...(query.state ? { state: query.state } : {}),
    ...(query.agent ? { agent: query.agent } : {}),
    ...(text ? { text } : {}),
    ...(query.pageToken ? { after: query.pageToken } : {}),
  });
  const jobs = found.slice(0, limit);
  return { jobs, nextPageToken: found.length > limit ? jobs[jobs.length - 1]!.id : "" };
}
