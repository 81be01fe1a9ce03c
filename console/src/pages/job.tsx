// One job: its facts, the live transcript (WatchJob from the last sequence
// number seen, again after every reconnect), tool calls with their decisions
// and who answered, the result, usage, and cancel.
import { useEffect, useMemo, useState } from "preact/hooks";
import { Decider, type Job, type JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { jobs, messageOf } from "../api.js";
import { clock, dateOf, duration, isTerminal, json, stateName, stopReasonName } from "../format.js";
import { usePolling } from "../polling.js";
import { fold, type Row, type ToolRow } from "../transcript.js";
import { ApprovalCard } from "./approval-card.js";

const RECONNECT_MS = 1_000;

export function JobPage({ jobId, roles }: { jobId: string; roles: string[] }) {
  const [job, setJob] = useState<Job | undefined>(undefined);
  const [events, setEvents] = useState<JobEvent[]>([]);
  const [stream, setStream] = useState<"live" | "reconnecting" | "ended">("live");
  const [problem, setProblem] = useState<string | undefined>(undefined);

  useEffect(() => {
    const abort = new AbortController();
    let lastSeq = 0n;
    const readJob = async (): Promise<Job | undefined> => {
      const { job: current } = await jobs.getJob({ jobId }, { signal: abort.signal });
      setJob(current);
      return current;
    };
    const follow = async (): Promise<void> => {
      setEvents([]);
      for (;;) {
        try {
          await readJob();
          setStream("live");
          setProblem(undefined);
          for await (const { event } of jobs.watchJob({ jobId, afterSeq: lastSeq }, { signal: abort.signal })) {
            if (!event || event.seq <= lastSeq) continue;
            lastSeq = event.seq;
            setEvents((seen) => [...seen, event]);
            if (event.event.case === "stateChanged" || event.event.case === "result") void readJob().catch(() => undefined);
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
        await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
        if (abort.signal.aborted) return;
      }
    };
    void follow();
    return () => abort.abort();
  }, [jobId]);

  const { rows, totals } = useMemo(() => fold(events), [events]);
  const waiting = rows.some((r) => r.kind === "tool" && r.decision?.pending);
  const approvals = usePolling(() => (waiting ? jobs.listApprovals({ jobId }) : Promise.resolve(undefined)), 1_000, [jobId, waiting]);
  const canCancel = roles.includes("operator") && job !== undefined && !isTerminal(job.state);
  const cancel = async (): Promise<void> => {
    try {
      const answer = await jobs.cancelJob({ jobId, reason: "cancelled in the console" });
      if (answer.job) setJob(answer.job);
    } catch (error) {
      setProblem(messageOf(error));
    }
  };
  const created = dateOf(job?.createdAt);
  const finished = dateOf(job?.finishedAt);
  return (
    <section aria-labelledby="job-title">
      <h1 id="job-title">
        Job <code>{jobId}</code>
      </h1>
      {problem ? (
        <p role="alert" class="error">
          {problem}
        </p>
      ) : null}
      {job ? (
        <div class="job-head">
          <dl class="facts">
            <dt>State</dt>
            <dd>
              <span class={`state state-${stateName(job.state)}`} data-testid="job-state">
                {stateName(job.state)}
              </span>{" "}
              <span class="muted" data-testid="stream">
                {stream === "live" ? "live" : stream === "reconnecting" ? "reconnecting…" : ""}
              </span>
            </dd>
            <dt>Agent</dt>
            <dd>
              {job.agent?.name} v{job.agent?.version} <span class="muted">(pinned)</span>
            </dd>
            <dt>Started</dt>
            <dd>{clock(created)}</dd>
            {finished && created ? (
              <>
                <dt>Took</dt>
                <dd>{duration(finished.getTime() - created.getTime())}</dd>
              </>
            ) : null}
            <dt>Tokens</dt>
            <dd>
              {String(totals.inputTokens)} in, {String(totals.outputTokens)} out{totals.costUsd > 0 ? `, $${totals.costUsd.toFixed(4)}` : ""}
            </dd>
          </dl>
          {canCancel ? (
            <button type="button" class="deny" onClick={() => void cancel()}>
              Cancel job
            </button>
          ) : null}
        </div>
      ) : null}
      {job ? (
        <>
          <h2>Input</h2>
          <pre class="input">{job.input}</pre>
        </>
      ) : null}
      {approvals.value?.approvals.map((approval) => (
        <ApprovalCard key={approval.callId} approval={approval} canAnswer={roles.includes("approver")} onAnswered={approvals.refresh} />
      ))}
      <h2>Transcript</h2>
      <ol class="transcript" aria-live="polite">
        {rows.map((row) => (
          <TranscriptRow key={rowKey(row)} row={row} />
        ))}
      </ol>
      {job && isTerminal(job.state) ? (
        <>
          <h2>Result</h2>
          {job.error ? <p class="error">{job.error}</p> : null}
          <pre class="result" data-testid="result">
            {job.resultText || "(no text)"}
          </pre>
          <p class="muted">
            {stateName(job.state)}, {stopReasonName(job.stopReason)}
          </p>
        </>
      ) : null}
    </section>
  );
}

function rowKey(row: Row): string {
  return row.kind === "tool" ? `tool-${row.callId}` : row.kind === "text" ? `text-${row.itemId}` : `${row.kind}-${row.seq}`;
}

function TranscriptRow({ row }: { row: Row }) {
  switch (row.kind) {
    case "state":
      return (
        <li class="row row-state">
          <span class={`state state-${stateName(row.state)}`}>{stateName(row.state)}</span> {clock(row.time)} {row.reason ? <span class="muted">{row.reason}</span> : null}
        </li>
      );
    case "session":
      return (
        <li class="row row-session muted">
          session started: {row.harness} {row.version}
        </li>
      );
    case "text":
      return (
        <li class={`row row-text role-${row.role}`}>
          <span class="who">{row.role}</span>
          <div class="text">{row.text}</div>
        </li>
      );
    case "tool":
      return <ToolCallRow row={row} />;
    case "served":
      return (
        <li class="row row-tool">
          <span class="who">runtime</span> <code>{row.tool}</code> {row.error ? <span class="error">{row.error}</span> : <pre>{json(row.output)}</pre>}
        </li>
      );
    case "result":
      return (
        <li class="row row-result">
          <span class="who">result</span> {stopReasonName(row.result.stopReason)}, {row.result.turns} turns{row.result.error ? <span class="error"> {row.result.error}</span> : null}
        </li>
      );
    case "artifacts":
      return (
        <li class="row row-artifacts">
          <span class="who">artifacts</span> {row.artifacts.map((a) => `${a.name} (${a.sizeBytes} bytes)`).join(", ")}
        </li>
      );
  }
}

function ToolCallRow({ row }: { row: ToolRow }) {
  const d = row.decision;
  const decision = !row.asked && !d ? null : d?.pending ? (
    <span class="decision pending">waiting for a person</span>
  ) : d ? (
    <span class={`decision ${d.allow ? "allowed" : "denied"}`} data-testid="decision">
      {d.allow ? "allowed" : "denied"} by {d.decider === Decider.PERSON ? d.answeredBy || "a person" : deciderName(d.decider)}
      {d.reason ? `: ${d.reason}` : ""}
      {d.input ? " (input changed)" : ""}
    </span>
  ) : (
    <span class="decision pending">asked permission</span>
  );
  return (
    <li class="row row-tool" data-call={row.callId}>
      <span class="who">tool</span> <code>{row.tool}</code> {row.title ? <span class="muted">{row.title}</span> : null} {decision}{" "}
      {row.result ? <span class={row.result.isError ? "mark error" : "mark ok"}>{row.result.isError ? "✗ failed" : "✓ done"}</span> : null}
      <details>
        <summary>input{row.result ? " and output" : ""}</summary>
        <pre>{json(row.input)}</pre>
        {row.result ? <pre>{json(row.result.output)}</pre> : null}
      </details>
    </li>
  );
}

function deciderName(decider: Decider): string {
  switch (decider) {
    case Decider.POLICY:
      return "the tool policy";
    case Decider.HOOK:
      return "a hook";
    case Decider.RUNTIME:
      return "the runtime (no answer in time, or cancelled)";
    default:
      return "—";
  }
}
