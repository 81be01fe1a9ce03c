// The job's own rows in the transcript: state changes, text, tool calls with
// their permission decision (who answered, whether the input was changed)
// and result, runtime answers, the session's result and its artifacts.
import { Decider, type PermissionDecision } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { clock, duration, json, stateName, stopReasonName, visible, visibleExactly } from "../format.js";
import type { Row, ToolRow } from "../transcript.js";

export function TranscriptRow({ row }: { row: Row }) {
  switch (row.kind) {
    case "state":
      return (
        <li class="row row-state">
          <span class={`state state-${stateName(row.state)}`}>{stateName(row.state)}</span> {clock(row.time)}{" "}
          {row.reason ? <span class="muted">{visible(row.reason)}</span> : null}
        </li>
      );
    case "session":
      return (
        <li class="row row-session muted">
          session started: {visible(row.harness)} {visible(row.version)}
        </li>
      );
    case "text":
      return (
        <li class={`row row-text role-${row.role}`}>
          <span class="who">{visible(row.role)}</span>
          <div class="text prose">{visible(row.text)}</div>
        </li>
      );
    case "tool":
      return <ToolCallRow row={row} />;
    case "served":
      return (
        <li class="row row-tool">
          <span class="who">runtime</span> <code>{visibleExactly(row.tool)}</code>{" "}
          {row.error ? <span class="error">{visible(row.error)}</span> : <pre>{json(row.output)}</pre>}
        </li>
      );
    case "result":
      return (
        <li class="row row-result">
          <span class="who">result</span> {stopReasonName(row.result.stopReason)}, {row.result.turns} turns
          {row.result.error ? <span class="error"> {visible(row.result.error)}</span> : null}
        </li>
      );
    case "artifacts":
      return (
        <li class="row row-artifacts">
          <span class="who">artifacts</span>{" "}
          {visible(row.artifacts.map((a) => `${a.name} (${a.sizeBytes} bytes)`).join(", "))}
          {row.error ? <span class="error"> {visible(row.error)}</span> : null}
        </li>
      );
  }
}

function ToolCallRow({ row }: { row: ToolRow }) {
  return (
    <li class="row row-tool" data-call={row.callId}>
      <span class="who">tool</span> <code>{visibleExactly(row.tool)}</code>{" "}
      {row.title ? <span class="muted">{visible(row.title)}</span> : null} <CallOutcome row={row} />
      <CallDetails row={row} />
    </li>
  );
}

/** Who let the call run (or not), and how it ended. */
export function CallOutcome({ row }: { row: ToolRow }) {
  return (
    <>
      <Decision asked={row.asked} decision={row.decision} />{" "}
      {row.result ? (
        <span class={row.result.isError ? "mark error" : "mark ok"}>{row.result.isError ? "✗ failed" : "✓ done"}</span>
      ) : null}
      {row.time && row.endedAt ? (
        <span class="muted"> in {duration(row.endedAt.getTime() - row.time.getTime())}</span>
      ) : null}
    </>
  );
}

function Decision({ asked, decision: d }: { asked: boolean; decision: PermissionDecision | undefined }) {
  if (!asked && !d) return null;
  if (d?.pending)
    return (
      <span class="decision pending" data-testid="pending">
        waiting for a person
      </span>
    );
  if (!d) return <span class="decision pending">asked permission</span>;
  return (
    <span class={`decision ${d.allow ? "allowed" : "denied"}`} data-testid="decision">
      {d.allow ? "allowed" : "denied"} by{" "}
      {d.decider === Decider.PERSON ? visible(d.answeredBy) || "a person" : deciderName(d.decider)}
      {d.reason ? `: ${visible(d.reason)}` : ""}
      {d.input ? " (input changed)" : ""}
    </span>
  );
}

/** The call's input (and the changed one a person answered with), and its output. */
export function CallDetails({ row }: { row: ToolRow }) {
  const changed = row.decision?.input;
  return (
    <details>
      <summary>input{row.result ? " and output" : ""}</summary>
      <pre>{json(row.input)}</pre>
      {row.announcedInput ? (
        <>
          <p class="muted" data-testid="announced-input">
            The harness announced this call with another input than it asked about (the input above is the one
            answered):
          </p>
          <pre>{json(row.announcedInput)}</pre>
        </>
      ) : null}
      {changed ? (
        <>
          <p class="muted">changed by {visible(row.decision?.answeredBy ?? "") || "the answer"} to:</p>
          <pre>{json(changed)}</pre>
        </>
      ) : null}
      {row.result ? <pre>{json(row.result.output)}</pre> : null}
    </details>
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
