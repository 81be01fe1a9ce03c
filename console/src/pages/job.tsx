// One job: its facts (state, what it does now, the pinned agent version,
// times, the trace), usage and cost, the elapsed timeline, the live
// transcript with harness operations and their parallel groups, the
// artifacts (a patch as a diff), the result, and cancel for operators.
// Live through WatchJob (job-stream.ts) and the events service's transcript
// through WatchJobTranscript (transcript-stream.ts: operation rows); usage
// and artifacts are read again when the job's stream shows they changed.
import { useMemo, useState } from "preact/hooks";
import { type GetArtifactsResponse, type GetJobUsageResponse } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { Usage } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { jobs } from "../api.js";
import { clockMs, count, dateOf, duration, isTerminal, stateName, stopReasonName, usd, visible } from "../format.js";
import { useJobStream } from "../job-stream.js";
import { useNow } from "../now.js";
import { groupOperations, operationsOf, placeOperations, type Entry } from "../operations.js";
import { useRead } from "../reads.js";
import { useTranscriptStream } from "../transcript-stream.js";
import { href } from "../router.js";
import { saveTraceUrlTemplate, traceLink, traceUrlTemplate } from "../settings.js";
import { timelineOf } from "../timeline.js";
import type { Row, ToolRow, Totals } from "../transcript.js";
import { fold } from "../transcript.js";
import { ApprovalCard } from "./approval-card.js";
import { ArtifactsView } from "./artifacts-view.js";
import { CancelJob } from "./cancel-job.js";
import { OperationGroupRow } from "./operation-rows.js";
import { TimelineView } from "./timeline-view.js";
import { TranscriptRow } from "./transcript-rows.js";
import { UsageCells, UsageHeads } from "./usage-cells.js";

/** A graph run's job id begins so (the orchestrator's graphs/graph-jobs.ts). */
const GRAPH_RUN_PREFIX = "graph_";

/** Artifacts are read with their content when they hold at most this much together. */
const MAX_ARTIFACT_BYTES = 1_000_000;

export function JobPage({ jobId, roles }: { jobId: string; roles: string[] }) {
  const s = useJobStream(jobId);
  const job = s.job;
  const terminal = job !== undefined && isTerminal(job.state);
  const { rows, totals } = useMemo(() => fold(s.events), [s.version, jobId]);
  const now = useNow(!terminal);

  const transcript = useTranscriptStream(jobId);
  const usageEvents = s.events.reduce((n, e) => n + (e.event.case === "usage" || e.event.case === "result" ? 1 : 0), 0);
  const usage = useRead((signal) => jobs.getJobUsage({ jobId }, { signal }), `${jobId}|${usageEvents}|${job?.state}`);
  const artifactRows = rows.filter((r): r is Extract<Row, { kind: "artifacts" }> => r.kind === "artifacts");
  const artifactBytes = artifactRows.reduce((n, r) => n + r.artifacts.reduce((m, a) => m + Number(a.sizeBytes), 0), 0);
  const artifacts = useRead(
    (signal): Promise<GetArtifactsResponse> =>
      jobs.getArtifacts({ jobId, includeContent: artifactBytes <= MAX_ARTIFACT_BYTES }, { signal }),
    `${jobId}|${artifactRows.length}`,
    { enabled: artifactRows.length > 0 },
  );

  const waiting = rows.some((r) => r.kind === "tool" && r.decision?.pending === true);
  // The job's own stream carries every permission request and decision: read the waiting calls again on each.
  const permissionEvents = s.events.reduce(
    (n, e) => n + (e.event.case === "permissionRequested" || e.event.case === "permissionDecision" ? 1 : 0),
    0,
  );
  const approvals = useRead((signal) => jobs.listApprovals({ jobId }, { signal }), `${jobId}|${permissionEvents}`, {
    enabled: waiting,
  });
  const canCancel = roles.includes("operator") && job !== undefined && !terminal;

  const groups = useMemo(() => groupOperations(operationsOf(transcript.value)), [transcript.value]);
  const placed = useMemo(() => placeOperations(rows, groups), [rows, groups]);
  const created = dateOf(job?.createdAt);
  const started = dateOf(job?.startedAt) ?? created;
  const finished = dateOf(job?.finishedAt);
  const timeline = useMemo(() => {
    if (!started) return undefined;
    const colours = new Map<string, number>();
    for (const g of groups)
      for (const op of g.operations) if (g.colour !== undefined) colours.set(op.operationInvocationId, g.colour);
    const operationCalls = new Set([...placed.calls.values()].map((c) => c.callId));
    return timelineOf({
      rows,
      operations: groups.flatMap((g) => g.operations),
      operationCalls,
      colours,
      start: started,
      end: finished ?? new Date(now),
    });
  }, [rows, groups, placed, started?.getTime(), finished?.getTime(), terminal ? 0 : now]);

  return (
    <section aria-labelledby="job-title">
      <h1 id="job-title">
        {/* The id is the address's, anybody's to write into a link. */}
        Job <code>{visible(jobId)}</code>
      </h1>
      {s.problem ? (
        <p role="alert" class="error">
          {s.problem}
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
              <span class="muted" data-testid="stream" data-reconnects={s.reconnects}>
                {s.stream === "live"
                  ? "live"
                  : s.stream === "reconnecting"
                    ? "reconnecting…"
                    : s.stream === "connecting"
                      ? "connecting…"
                      : ""}
              </span>
            </dd>
            {!terminal && job.activity?.summary ? (
              <>
                <dt>Now</dt>
                <dd data-testid="activity">{visible(job.activity.summary)}</dd>
              </>
            ) : null}
            <dt>Agent</dt>
            <dd>
              <a
                href={href({ page: "agent", name: job.agent?.name ?? "", version: job.agent?.version ?? 0 })}
                data-testid="agent-version"
              >
                {job.agent?.name} v{job.agent?.version}
              </a>{" "}
              <span class="muted">(pinned)</span>
            </dd>
            {jobId.startsWith(GRAPH_RUN_PREFIX) ? (
              <>
                <dt>Graph</dt>
                <dd>
                  <a href={href({ page: "graph", name: job.agent?.name ?? "", run: jobId })}>
                    each node's status, live
                  </a>
                </dd>
              </>
            ) : null}
            <dt>Created</dt>
            <dd>{clockMs(created)}</dd>
            {started && started !== created ? (
              <>
                <dt>Started</dt>
                <dd>{clockMs(started)}</dd>
              </>
            ) : null}
            {finished ? (
              <>
                <dt>Ended</dt>
                <dd>{clockMs(finished)}</dd>
              </>
            ) : null}
            {started ? (
              <>
                <dt>{finished ? "Took" : "Running for"}</dt>
                <dd>{duration((finished?.getTime() ?? now) - started.getTime())}</dd>
              </>
            ) : null}
            <dt>Trace</dt>
            <dd>
              <TraceId traceId={job.traceId} />
            </dd>
          </dl>
          {canCancel ? <CancelJob jobId={jobId} onCancelled={(cancelled) => s.setJob(cancelled)} /> : null}
        </div>
      ) : null}
      {job ? (
        <>
          <h2>Input</h2>
          <pre class="input prose" data-testid="job-input">
            {visible(job.input)}
          </pre>
        </>
      ) : null}
      {(waiting ? (approvals.value?.approvals ?? []) : []).map((approval) => (
        <ApprovalCard
          key={approval.callId}
          approval={approval}
          canAnswer={roles.includes("approver")}
          onAnswered={() => undefined}
          now={now}
        />
      ))}
      <h2>Usage</h2>
      <UsageView usage={usage.value} error={usage.error} streamed={totals} />
      {timeline ? (
        <>
          <h2>Timeline</h2>
          <TimelineView totalMs={timeline.totalMs} job={timeline.job} lanes={timeline.lanes} />
        </>
      ) : null}
      <h2>Transcript</h2>
      {transcript.error && !/no lifecycle events/.test(transcript.error) ? (
        <p class="muted">Harness operations are not shown: {transcript.error}</p>
      ) : null}
      {transcript.value && transcript.value.omittedEvents > 0 ? (
        <p class="muted">
          Harness operations of the job's oldest {transcript.value.omittedEvents.toLocaleString("en")} lifecycle events
          are not shown: the events service builds a transcript from a job's newest events.
        </p>
      ) : null}
      <ol class="transcript" aria-live="polite">
        {placed.entries.map((entry) => (
          <EntryRow key={entryKey(entry)} entry={entry} calls={placed.calls} />
        ))}
      </ol>
      {artifactRows.length > 0 ? (
        <>
          <h2>Artifacts</h2>
          {artifactRows
            .filter((r) => r.error)
            .map((r) => (
              <p class="error artifacts-error">{visible(r.error)}</p>
            ))}
          {artifacts.error ? <p class="error">{artifacts.error}</p> : null}
          {artifacts.value ? (
            <ArtifactsView artifacts={artifacts.value.artifacts} contents={artifacts.value.contents} />
          ) : (
            <p>Loading…</p>
          )}
        </>
      ) : null}
      {job && terminal ? (
        <>
          <h2>Result</h2>
          {job.error ? <p class="error">{visible(job.error)}</p> : null}
          <pre class="result prose" data-testid="result">
            {visible(job.resultText) || "(no text)"}
          </pre>
          <p class="muted">
            {stateName(job.state)}, {stopReasonName(job.stopReason)}
          </p>
        </>
      ) : null}
    </section>
  );
}

function TraceId({ traceId }: { traceId: string }) {
  const [template, setTemplate] = useState(traceUrlTemplate());
  const [saved, setSaved] = useState(0);
  const [invalid, setInvalid] = useState(false);
  if (!traceId)
    return <span class="muted">none (the orchestrator exports no traces: set OTEL_EXPORTER_OTLP_ENDPOINT)</span>;
  const link = traceLink(traceId);
  return (
    <>
      {link ? (
        <a href={link} target="_blank" rel="noopener noreferrer" data-testid="trace-link">
          <code>{traceId}</code>
        </a>
      ) : (
        <code data-testid="trace-id">{traceId}</code>
      )}
      <details class="trace-settings" key={saved}>
        <summary>{link ? "change the trace viewer link" : "link to a trace viewer"}</summary>
        <form
          onSubmit={(e) => {
            e.preventDefault();
            const ok = saveTraceUrlTemplate(template);
            setInvalid(!ok);
            if (ok) setSaved((n) => n + 1);
          }}
        >
          <label>
            Trace URL (this browser only){" "}
            <input
              type="url"
              size={48}
              value={template}
              placeholder="https://jaeger.example/trace/{traceId}"
              onInput={(e) => setTemplate((e.target as HTMLInputElement).value)}
            />
          </label>{" "}
          <button type="submit">Save</button>
          {invalid ? (
            <p role="alert" class="error">
              An http(s) URL with {"{traceId}"} in it, please.
            </p>
          ) : null}
        </form>
      </details>
    </>
  );
}

function UsageView({
  usage,
  error,
  streamed,
}: {
  usage: GetJobUsageResponse | undefined;
  error: string | undefined;
  streamed: Totals;
}) {
  const total = usage?.usage?.total;
  if (!total) {
    // No meter to ask (or not yet): what the harness reported on the stream.
    return (
      <p data-testid="usage">
        {count(streamed.inputTokens)} tokens in, {count(streamed.outputTokens)} out
        {streamed.costUsd > 0 ? `, about ${usd(streamed.costUsd)} (the harness's estimate)` : ""}
        {error ? <span class="muted"> ({error})</span> : null}
      </p>
    );
  }
  const agents = usage.usage?.agents ?? [];
  return (
    <>
      <p data-testid="usage">
        {usageLine(total)}
        {total.nominal ? (
          <span class="muted"> (nominal: a scripted provider's price table, nobody was charged)</span>
        ) : null}
        {total.estimated ? <span class="muted"> (partly estimated)</span> : null}
      </p>
      {agents.length > 1 || usage.steps.length > 0 ? (
        <table class="usage">
          <caption class="muted">Per {usage.steps.length > 0 ? "step job" : "agent"}</caption>
          <thead>
            <tr>
              <th scope="col">{usage.steps.length > 0 ? "Step" : "Agent"}</th>
              <UsageHeads />
            </tr>
          </thead>
          <tbody>
            {(usage.steps.length > 0
              ? usage.steps.map((st) => ({
                  name: `${st.step} (${st.agent?.name ?? ""} v${st.agent?.version ?? ""})`,
                  jobId: st.jobId,
                  usage: st.usage,
                }))
              : agents.map((a) => ({ name: a.agent, jobId: "", usage: a.usage }))
            ).map((line) => (
              <tr key={line.name}>
                <td>{line.jobId ? <a href={href({ page: "job", jobId: line.jobId })}>{line.name}</a> : line.name}</td>
                <UsageCells usage={line.usage} />
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </>
  );
}

function usageLine(u: Usage): string {
  const cache =
    u.cacheReadTokens || u.cacheWriteTokens
      ? `, cache ${count(u.cacheReadTokens)} read / ${count(u.cacheWriteTokens)} written`
      : "";
  const failed = u.failedCalls ? `, ${count(u.failedCalls)} failed` : "";
  return `${count(u.calls)} model calls${failed} (${count(u.attempts)} attempts), ${count(u.inputTokens)} tokens in, ${count(u.outputTokens)} out${cache}, ${usd(u.costUsd)}`;
}

function entryKey(entry: Entry): string {
  if (entry.kind === "operations") return `ops-${entry.group.id}`;
  const row = entry.row;
  return row.kind === "tool" ? `tool-${row.callId}` : `${row.kind}-${row.seq}`;
}

function EntryRow({ entry, calls }: { entry: Entry; calls: ReadonlyMap<string, ToolRow> }) {
  return entry.kind === "operations" ? (
    <OperationGroupRow group={entry.group} calls={calls} />
  ) : (
    <TranscriptRow row={entry.row} />
  );
}
