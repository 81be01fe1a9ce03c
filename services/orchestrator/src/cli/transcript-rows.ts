// `oz0 jobs transcript JOB`: the events service's Transcript as rows a
// person reads. Each public event of the parent timeline is a row (its type,
// status and the attributes the redaction policy kept); each harness
// operation invocation is one "Harness · KEY" row with its status, timing,
// task size, timeout, validation, tokens and safe inner steps; rows whose
// windows overlapped are marked as one "N parallel" group. Times are from
// the first row, to the millisecond.
import type { JsonValue } from "@bufbuild/protobuf";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  OperationStatus,
  type OperationRow,
  type PublicEvent,
  type TokenCounts,
  type TranscriptResponse,
} from "@oz0/proto/oz0/events/v1/events_pb";
import { terminalLine } from "./terminal-text.js";
import { durationText, tokensText } from "./usage-format.js";

const RAIL = "┃";

function value(v: JsonValue): string {
  return typeof v === "string" ? v : JSON.stringify(v);
}

function tokens(counts: TokenCounts | undefined): string {
  return counts && counts.inputTokens + counts.outputTokens > 0
    ? tokensText({ input: counts.inputTokens, output: counts.outputTokens })
    : "";
}

function statusName(status: OperationStatus): string {
  return (OperationStatus[status] ?? "UNSPECIFIED").toLowerCase();
}

export function transcriptRows(transcript: TranscriptResponse): string[] {
  const times = transcript.rows.map((r) =>
    r.row.case === "event" ? r.row.value.time : r.row.case === "operation" ? r.row.value.startedAt : undefined,
  );
  const first = times.find((t) => t !== undefined);
  const origin = first ? timestampDate(first).getTime() : 0;
  const at = (t: Timestamp | undefined): string =>
    (t ? `+${((timestampDate(t).getTime() - origin) / 1000).toFixed(3)}s` : "").padStart(10);
  const lines = [
    `transcript of job ${transcript.jobId}${first ? ` (times from ${timestampDate(first).toISOString()})` : ""}`,
  ];
  if (transcript.omittedEvents > 0)
    lines.push(
      `(the job's oldest ${transcript.omittedEvents} events are left out: a transcript is built from a job's newest events)`,
    );
  const announced = new Set<string>();
  for (const { row } of transcript.rows) {
    if (row.case === "event") lines.push(eventRow(row.value, at));
    else if (row.case === "operation") {
      const op = row.value;
      const grouped = op.parallelGroupSize > 1;
      if (grouped && !announced.has(op.parallelGroupId)) {
        announced.add(op.parallelGroupId);
        lines.push(`${" ".repeat(10)}  ${RAIL} ${op.parallelGroupSize} parallel`);
      }
      lines.push(...operationRows(op, at, grouped));
    }
  }
  // Labels and attributes hold a harness's words (a tool's name, an operation's title).
  return lines.map(terminalLine);
}

function eventRow(event: PublicEvent, at: (t: Timestamp | undefined) => string): string {
  const facts: string[] = [];
  if (event.status) facts.push(event.status);
  if (event.type === "job.created" && event.agentName)
    facts.push(`${event.agentName}${event.agentVersion ? ` v${event.agentVersion}` : ""}`);
  for (const [key, v] of Object.entries(event.attributes ?? {})) facts.push(`${key}=${value(v)}`);
  const counted = tokens(event.tokens);
  if (counted) facts.push(counted);
  if (event.reduced) facts.push("(reduced: a type this events service does not know)");
  return `${at(event.time)}  ${event.type.padEnd(26)} ${facts.join(" · ")}`.trimEnd();
}

function operationRows(op: OperationRow, at: (t: Timestamp | undefined) => string, grouped: boolean): string[] {
  const rail = grouped ? RAIL : " ";
  const facts = [
    op.status === OperationStatus.RUNNING ? "running" : `${statusName(op.status)} in ${durationText(op.durationMs)}`,
  ];
  if (op.errorCode) facts.push(`error ${op.errorCode}`);
  facts.push(`task ${op.taskChars} chars`);
  if (op.timeoutMs) facts.push(`timeout ${durationText(op.timeoutMs)}`);
  facts.push(`result ${op.resultValidation || "unknown"}`);
  const counted = tokens(op.tokens);
  if (counted) facts.push(counted);
  if (grouped) facts.push(`${op.parallelPosition} of ${op.parallelGroupSize} parallel`);
  const lines = [`${at(op.startedAt)}  ${rail} ${op.title} · ${facts.join(" · ")}`];
  for (const step of op.steps) {
    const detail = [step.label, step.durationMs ? `(${step.durationMs} ms)` : "", tokens(step.tokens)]
      .filter(Boolean)
      .join(" ");
    lines.push(`${" ".repeat(10)}  ${rail}   ${at(step.time).trim()} ${step.kind.padEnd(5)} ${detail}`);
  }
  if (op.attributionPartial) lines.push(`${" ".repeat(10)}  ${rail}   ! ${op.attributionNote}`);
  return lines;
}
