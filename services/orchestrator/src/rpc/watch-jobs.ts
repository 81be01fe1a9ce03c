// WatchJobs: every job as it changes state, or a call of it starts or stops
// waiting for a person, from now on, for lists that stay current (the
// console's jobs and approvals pages). The feed says which job
// changed; the job is read from the store when its turn to be sent comes, so
// a burst of changes to one job sends it once, as it is by then.
//
// The first message carries no job: it goes out once the stream hears every
// change, so a list read after it misses none. A client that listed first
// and then opened the stream lost what changed in between (the console's
// approvals page never showed a call that started waiting then, and so never
// saw it leave either).
import type { HandlerContext } from "@connectrpc/connect";
import type { Job, WatchJobsResponse } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { JobFeed } from "../jobs/job-feed.js";
import type { JobRecord, JobStore } from "../store/job-store.js";
import { Doorbell } from "../doorbell.js";

export async function* watchJobs(
  deps: { feed: JobFeed; store: Pick<JobStore, "getJob">; toProto: (job: JobRecord) => Job },
  context: HandlerContext,
): AsyncGenerator<WatchJobsResponse> {
  // Job ids changed and not sent yet, oldest change first (a Set keeps one of each).
  const changed = new Set<string>();
  const bell = new Doorbell(context.signal);
  const unsubscribe = deps.feed.subscribeChanges((jobId) => {
    changed.add(jobId);
    bell.ring();
  });
  try {
    yield {} as WatchJobsResponse;
    while (!context.signal.aborted) {
      for (const jobId of changed) {
        changed.delete(jobId);
        const job = await deps.store.getJob(jobId);
        if (job) yield { job: deps.toProto(job) } as WatchJobsResponse;
      }
      await bell.wait(() => changed.size > 0);
    }
  } finally {
    unsubscribe();
    bell.close();
  }
}
