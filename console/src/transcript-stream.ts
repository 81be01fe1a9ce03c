// A job's transcript as the events service builds it (its public, redacted
// events: operation rows, a graph run's step events), followed through
// WatchJobTranscript: the orchestrator sends it now and again each time it
// changed, so the page never asks again on a timer. When the stream breaks
// (the orchestrator restarted, the network dropped) it is opened again and
// its first answer is the whole transcript; so too when a tab that was not
// shown (its stream closed) is shown again. A job whose orchestrator has no
// events service (FailedPrecondition) or that does not exist is not asked again.
import { useEffect, useRef, useState } from "preact/hooks";
import { Code, ConnectError } from "@connectrpc/connect";
import type { TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";
import { jobs, messageOf } from "./api.js";
import { usePageVisible } from "./page-visible.js";
import { waitBeforeRetry } from "./retry-delay.js";

export interface TranscriptStream {
  value: TranscriptResponse | undefined;
  error: string | undefined;
}

export function useTranscriptStream(jobId: string): TranscriptStream {
  const [value, setValue] = useState<TranscriptResponse | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const followed = useRef<string | undefined>(undefined);
  const visible = usePageVisible();
  useEffect(() => {
    // Another job: nothing of the last one's is shown. The same job shown again keeps its transcript until the
    // stream's first answer (a tab not shown closes its streams, page-visible.ts).
    if (followed.current !== jobId) {
      followed.current = jobId;
      setValue(undefined);
      setError(undefined);
    }
    if (!visible) return;
    const abort = new AbortController();
    const follow = async (): Promise<void> => {
      for (let attempt = 0; !abort.signal.aborted; attempt++) {
        try {
          for await (const { transcript } of jobs.watchJobTranscript({ jobId }, { signal: abort.signal })) {
            attempt = 0;
            setValue(transcript);
            setError(undefined);
          }
        } catch (e) {
          if (abort.signal.aborted) return;
          setError(messageOf(e));
          const code = ConnectError.from(e).code;
          if (code === Code.FailedPrecondition || code === Code.NotFound || code === Code.PermissionDenied) return;
        }
        await waitBeforeRetry(attempt);
      }
    };
    void follow();
    return () => abort.abort();
  }, [jobId, visible]);
  return { value, error };
}
