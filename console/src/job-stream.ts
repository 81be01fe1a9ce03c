// A job and its live events: GetJob, then WatchJob from the last sequence
// number seen; when the stream breaks (the orchestrator restarted, the
// network dropped) it reads the job again and resumes from that number, so
// no event is missed or shown twice. Events are batched into one render per
// task, so a burst of text deltas does not render once per delta.
import { useEffect, useRef, useState } from "preact/hooks";
import type { Job, JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { jobs, messageOf } from "./api.js";
import { isTerminal } from "./format.js";
import { waitBeforeRetry } from "./retry-delay.js";

export type StreamState = "connecting" | "live" | "reconnecting" | "ended";

export interface JobStream {
  job: Job | undefined;
  /** Every event so far, in sequence order (the same array, grown; `version` says when). */
  events: readonly JobEvent[];
  version: number;
  stream: StreamState;
  problem: string | undefined;
  /** How many times the stream was opened again after breaking. */
  reconnects: number;
  setJob(job: Job): void;
}

export function useJobStream(jobId: string): JobStream {
  const [job, setJob] = useState<Job | undefined>(undefined);
  const [version, setVersion] = useState(0);
  const [stream, setStream] = useState<StreamState>("connecting");
  const [problem, setProblem] = useState<string | undefined>(undefined);
  const [reconnects, setReconnects] = useState(0);
  const events = useRef<JobEvent[]>([]);

  useEffect(() => {
    const abort = new AbortController();
    events.current = [];
    setVersion(0);
    setJob(undefined);
    setStream("connecting");
    let lastSeq = 0n;
    let flush: ReturnType<typeof setTimeout> | undefined;
    const readJob = async (): Promise<Job | undefined> => {
      const { job: current } = await jobs.getJob({ jobId }, { signal: abort.signal });
      if (!abort.signal.aborted && current) setJob(current);
      return current;
    };
    const follow = async (): Promise<void> => {
      for (let attempt = 0; ; attempt++) {
        try {
          await readJob();
          // The orchestrator answers again: follow from the last event seen.
          setStream("live");
          setProblem(undefined);
          attempt = 0;
          for await (const { event } of jobs.watchJob({ jobId, afterSeq: lastSeq }, { signal: abort.signal })) {
            if (!event || event.seq <= lastSeq) continue;
            lastSeq = event.seq;
            events.current.push(event);
            flush ??= setTimeout(() => {
              flush = undefined;
              setVersion((v) => v + 1);
            }, 0);
            if (event.event.case === "stateChanged" || event.event.case === "result")
              void readJob().catch(() => undefined);
          }
          // The stream ends when the job has ended; read the job's last word.
          const final = await readJob();
          if (final && isTerminal(final.state)) {
            setStream("ended");
            return;
          }
        } catch (error) {
          if (abort.signal.aborted) return;
          setProblem(messageOf(error));
        }
        if (abort.signal.aborted) return;
        setStream("reconnecting");
        setReconnects((n) => n + 1);
        await waitBeforeRetry(attempt);
        if (abort.signal.aborted) return;
      }
    };
    void follow();
    return () => {
      abort.abort();
      clearTimeout(flush);
    };
  }, [jobId]);

  return { job, events: events.current, version, stream, problem, reconnects, setJob };
}
