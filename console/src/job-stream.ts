// A job and its live events: GetJob, then WatchJob from the last sequence
// number seen; when the stream breaks (the orchestrator restarted, the
// network dropped) it reads the job again and resumes from that number, so
// no event is missed or shown twice. Events are batched into one render per
// task, so a burst of text deltas does not render once per delta. A tab that
// is not shown closes the stream, and resumes it from there when shown.
import { Code, ConnectError } from "@connectrpc/connect";
import { useEffect, useRef, useState } from "preact/hooks";
import type { Job, JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { jobs, messageOf } from "./api.js";
import { isTerminal } from "./format.js";
import { usePageVisible } from "./page-visible.js";
import { waitBeforeRetry } from "./retry-delay.js";

/** `refused`: the job cannot be followed (no such job, or not this person's to see); not tried again. */
export type StreamState = "connecting" | "live" | "reconnecting" | "ended" | "refused";

/** Answers that reading again will not change: the page says so once instead of "reconnecting…" for ever. */
const FINAL_REFUSALS = new Set([Code.NotFound, Code.PermissionDenied, Code.InvalidArgument]);

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
  // Where the job's stream is, kept while the tab is not shown (its stream closed, page-visible.ts).
  const followed = useRef<{ jobId: string; lastSeq: bigint; ended: boolean } | undefined>(undefined);
  const visible = usePageVisible();

  useEffect(() => {
    if (followed.current?.jobId !== jobId) {
      followed.current = { jobId, lastSeq: 0n, ended: false };
      events.current = [];
      setVersion(0);
      setJob(undefined);
      setStream("connecting");
    }
    const position = followed.current;
    if (!visible || position.ended) return;
    const abort = new AbortController();
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
          for await (const { event } of jobs.watchJob(
            { jobId, afterSeq: position.lastSeq },
            { signal: abort.signal },
          )) {
            if (!event || event.seq <= position.lastSeq) continue;
            position.lastSeq = event.seq;
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
            position.ended = true;
            setStream("ended");
            return;
          }
        } catch (error) {
          if (abort.signal.aborted) return;
          setProblem(messageOf(error));
          if (FINAL_REFUSALS.has(ConnectError.from(error).code)) {
            position.ended = true;
            setStream("refused");
            return;
          }
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
      // Events gathered for a render that the abort cancels are shown at once: they are in events already.
      if (flush !== undefined) setVersion((v) => v + 1);
      clearTimeout(flush);
    };
  }, [jobId, visible]);

  return { job, events: events.current, version, stream, problem, reconnects, setJob };
}
