// Every job's state changes as they happen (WatchJobs), for lists that stay
// current without reading again on a timer: `changed` is called (at most
// once per GATHER_MS, for a burst) when a job changed, and each time the
// stream is live (its first message, which carries no job): whatever changed
// before, while the page read its list or while the stream was down, is read
// again then, and nothing after it is missed.
import { useEffect, useRef } from "preact/hooks";
import type { Job } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { jobs } from "./api.js";
import { usePageVisible } from "./page-visible.js";
import { waitBeforeRetry } from "./retry-delay.js";

const GATHER_MS = 100;

export function useJobChanges(changed: (jobs: readonly Job[]) => void): void {
  const latest = useRef(changed);
  latest.current = changed;
  const visible = usePageVisible();
  useEffect(() => {
    // A tab not shown holds no stream (page-visible.ts); shown again, the stream's first message reads the list again.
    if (!visible) return;
    const abort = new AbortController();
    let pending: Job[] = [];
    let timer: ReturnType<typeof setTimeout> | undefined;
    const soon = (job: Job | undefined): void => {
      if (job) pending.push(job);
      timer ??= setTimeout(() => {
        timer = undefined;
        const batch = pending;
        pending = [];
        latest.current(batch);
      }, GATHER_MS);
    };
    const follow = async (): Promise<void> => {
      for (let attempt = 0; !abort.signal.aborted; attempt++) {
        try {
          // The first message has no job: the stream is live, so the list is read again.
          for await (const { job } of jobs.watchJobs({}, { signal: abort.signal })) {
            attempt = 0;
            soon(job);
          }
        } catch {
          if (abort.signal.aborted) return;
        }
        await waitBeforeRetry(attempt);
      }
    };
    void follow();
    return () => {
      abort.abort();
      clearTimeout(timer);
    };
  }, [visible]);
}
