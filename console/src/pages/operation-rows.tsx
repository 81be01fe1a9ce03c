// Harness operation invocations in the transcript: one "Harness ·
// operation_key" row each, which opens a modal with everything public about
// it; invocations that overlapped share a coloured rail under an "N
// parallel" badge. Nothing here is the task, the result or a document: the
// events service's transcript never carries them.
import { useEffect, useRef, useState } from "preact/hooks";
import { OperationStatus, type OperationRow, type TokenCounts } from "@oz0/proto/oz0/events/v1/events_pb";
import { clockMs, count, dateOf, seconds, visible } from "../format.js";
import type { OperationGroup } from "../operations.js";
import type { ToolRow } from "../transcript.js";
import { CallDetails, CallOutcome } from "./transcript-rows.js";

export function OperationGroupRow({ group, calls }: { group: OperationGroup; calls: ReadonlyMap<string, ToolRow> }) {
  if (group.size <= 1) {
    const op = group.operations[0]!;
    return (
      <li class="row row-operation">
        <OperationLine op={op} call={calls.get(op.operationInvocationId)} />
      </li>
    );
  }
  const titleId = `group-${group.id}`;
  return (
    <li class={`row row-parallel rail-${group.colour ?? 0}`} data-group={group.id}>
      <span class="badge parallel" id={titleId}>
        {group.size} parallel
      </span>
      <ul class="parallel-members" aria-labelledby={titleId}>
        {group.operations.map((op) => (
          <li key={op.operationInvocationId}>
            <OperationLine op={op} call={calls.get(op.operationInvocationId)} />
          </li>
        ))}
      </ul>
    </li>
  );
}

function OperationLine({ op, call }: { op: OperationRow; call: ToolRow | undefined }) {
  const [open, setOpen] = useState(false);
  const status = statusName(op.status);
  return (
    <>
      <button
        type="button"
        class="operation"
        data-testid="operation"
        aria-haspopup="dialog"
        onClick={() => setOpen(true)}
      >
        {op.title || `Harness · ${op.operationKey}`}
      </button>{" "}
      <span class={`status status-${status.replace(" ", "-")}`}>{status}</span>
      {op.durationMs > 0 ? <span class="muted"> in {seconds(op.durationMs)}</span> : null}
      {op.parallelGroupSize > 1 ? (
        <span class="muted">
          {" "}
          · {op.parallelPosition} of {op.parallelGroupSize} parallel
        </span>
      ) : null}
      {op.attributionPartial ? <span class="muted"> · attribution partial</span> : null}
      {call ? (
        <>
          {" "}
          <CallOutcome row={call} />
          <CallDetails row={call} />
        </>
      ) : null}
      {open ? <OperationModal op={op} onClose={() => setOpen(false)} /> : null}
    </>
  );
}

function OperationModal({ op, onClose }: { op: OperationRow; onClose: () => void }) {
  const dialog = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = dialog.current;
    if (d && !d.open) d.showModal();
  }, []);
  const started = dateOf(op.startedAt);
  const ended = dateOf(op.endedAt);
  const titleId = `operation-${op.operationInvocationId}`;
  return (
    <dialog ref={dialog} class="modal" aria-labelledby={titleId} data-testid="operation-modal" onClose={onClose}>
      <h2 id={titleId}>{op.title || `Harness · ${op.operationKey}`}</h2>
      <dl class="facts">
        <dt>Status</dt>
        <dd data-testid="operation-status">
          {statusName(op.status)}
          {op.errorCode ? <span class="error"> ({op.errorCode})</span> : null}
        </dd>
        <dt>Started</dt>
        <dd>{clockMs(started)}</dd>
        <dt>Ended</dt>
        <dd>{ended ? clockMs(ended) : "still running"}</dd>
        <dt>Took</dt>
        <dd>{op.durationMs > 0 || ended ? seconds(op.durationMs) : "—"}</dd>
        <dt>Task</dt>
        <dd data-testid="task-chars">{count(op.taskChars)} characters (the task itself is not shown)</dd>
        <dt>Timeout</dt>
        <dd>{op.timeoutMs > 0 ? seconds(op.timeoutMs) : "none"}</dd>
        <dt>Result</dt>
        <dd data-testid="validation">{op.resultValidation || "unknown"}</dd>
        <dt>Tokens</dt>
        <dd>{tokens(op.tokens)}</dd>
        {op.parallelGroupSize > 1 ? (
          <>
            <dt>Parallel</dt>
            <dd>
              {op.parallelPosition} of {op.parallelGroupSize}, by start time
            </dd>
          </>
        ) : null}
        <dt>Tool call</dt>
        <dd>
          <code>{op.toolCallId || "—"}</code>
        </dd>
        {op.attributionPartial ? (
          <>
            <dt>Attribution</dt>
            <dd data-testid="attribution">partial{op.attributionNote ? `: ${op.attributionNote}` : ""}</dd>
          </>
        ) : null}
      </dl>
      <h3>Steps</h3>
      {op.steps.length === 0 ? (
        <p class="muted">No step recorded yet.</p>
      ) : (
        <ol class="steps" data-testid="steps">
          {op.steps.map((step) => {
            const at = dateOf(step.time);
            return (
              <li key={step.eventId}>
                <span class="muted">{at && started ? `+${seconds(at.getTime() - started.getTime())}` : ""}</span>{" "}
                <span class="step-kind">{step.kind}</span> {visible(step.label)}
                {step.status ? <span class="muted"> · {step.status}</span> : null}
                {step.durationMs > 0 ? <span class="muted"> · {seconds(step.durationMs)}</span> : null}
                {step.tokens && (step.tokens.inputTokens || step.tokens.outputTokens) ? (
                  <span class="muted"> · {tokens(step.tokens)}</span>
                ) : null}
              </li>
            );
          })}
        </ol>
      )}
      <form method="dialog">
        <button type="submit" autofocus>
          Close
        </button>
      </form>
    </dialog>
  );
}

function statusName(status: OperationStatus): string {
  return (OperationStatus[status] ?? "unspecified").toLowerCase().replace("_", " ");
}

function tokens(t: TokenCounts | undefined): string {
  if (!t) return "none reported";
  const cache =
    t.cacheReadTokens || t.cacheWriteTokens
      ? `, cache ${count(t.cacheReadTokens)} read / ${count(t.cacheWriteTokens)} written`
      : "";
  return `${count(t.inputTokens)} in, ${count(t.outputTokens)} out${cache}`;
}
