// The events service's Transcript (GetJobTranscript) merged into the job's own
// rows: each harness operation invocation is one "Harness · operation_key"
// row; invocations that overlapped in time form a group ("N parallel") shown
// together, at the place of the first one's tool call (or, when the job's
// stream has no such call, at its start time). Pure.
import type { OperationRow, TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";
import { dateOf } from "./format.js";
import type { Row, ToolRow } from "./transcript.js";

export interface OperationGroup {
  /** The parallel group's id, or the lone invocation's. */
  id: string;
  /** "N parallel" when above 1. */
  size: number;
  /** Which rail colour the group has (0, 1, …; parallel groups only). */
  colour: number | undefined;
  operations: OperationRow[];
  start: Date | undefined;
}

export type Entry = { kind: "row"; row: Row } | { kind: "operations"; group: OperationGroup };

/** The rail colours groups take in turn (see style.css `.rail-N`). */
export const RAIL_COLOURS = 4;

export function operationsOf(transcript: TranscriptResponse | undefined): OperationRow[] {
  return (transcript?.rows ?? []).flatMap((r) => (r.row.case === "operation" ? [r.row.value] : []));
}

export function groupOperations(operations: readonly OperationRow[]): OperationGroup[] {
  const groups = new Map<string, OperationGroup>();
  for (const op of operations) {
    const id = op.parallelGroupSize > 1 && op.parallelGroupId ? op.parallelGroupId : op.operationInvocationId;
    let group = groups.get(id);
    if (!group) {
      group = { id, size: Math.max(1, op.parallelGroupSize), colour: undefined, operations: [], start: undefined };
      groups.set(id, group);
    }
    group.operations.push(op);
  }
  let colour = 0;
  const ordered = [...groups.values()];
  for (const group of ordered) {
    group.operations.sort(
      (a, b) => a.parallelPosition - b.parallelPosition || time(dateOf(a.startedAt)) - time(dateOf(b.startedAt)),
    );
    group.start = dateOf(group.operations[0]?.startedAt);
    group.size = Math.max(group.size, group.operations.length);
    if (group.size > 1) group.colour = colour++ % RAIL_COLOURS;
  }
  return ordered.sort((a, b) => time(a.start) - time(b.start));
}

export interface Placed {
  entries: Entry[];
  /** The job's tool call each operation invocation stands for, by invocation id. */
  calls: Map<string, ToolRow>;
}

/**
 * The job's rows with each operation group in its place; the tool rows the
 * operations stand for are left out (their decision and input show on the
 * operation's row). An operation stands for the call with its tool call id,
 * else for the earliest call of a tool named as its key made before it
 * started (the harness's call id and the runtime's differ).
 */
export function placeOperations(rows: readonly Row[], groups: readonly OperationGroup[]): Placed {
  const tools = rows.filter((r): r is ToolRow => r.kind === "tool");
  const calls = new Map<string, ToolRow>();
  const groupOfCall = new Map<string, OperationGroup>();
  const taken = new Set<ToolRow>();
  const operations = groups
    .flatMap((g) => g.operations.map((op) => ({ op, group: g })))
    .sort((a, b) => time(dateOf(a.op.startedAt)) - time(dateOf(b.op.startedAt)));
  for (const { op, group } of operations) {
    const start = time(dateOf(op.startedAt));
    const call =
      tools.find((r) => !taken.has(r) && op.toolCallId !== "" && r.callId === op.toolCallId) ??
      tools.find(
        (r) => !taken.has(r) && r.tool === op.operationKey && (r.time === undefined || r.time.getTime() <= start),
      );
    if (!call) continue;
    taken.add(call);
    calls.set(op.operationInvocationId, call);
    groupOfCall.set(call.callId, group);
  }
  const placed = new Set<OperationGroup>();
  const entries: Entry[] = [];
  for (const row of rows) {
    const group = row.kind === "tool" ? groupOfCall.get(row.callId) : undefined;
    if (!group) {
      entries.push({ kind: "row", row });
      continue;
    }
    if (!placed.has(group)) {
      placed.add(group);
      entries.push({ kind: "operations", group });
    }
  }
  // Groups the stream has no call for: before the first row that came later.
  for (const group of groups) {
    if (placed.has(group)) continue;
    const at = time(group.start);
    const index = entries.findIndex((e) => e.kind === "row" && e.row.time !== undefined && e.row.time.getTime() > at);
    entries.splice(index < 0 ? entries.length : index, 0, { kind: "operations", group });
  }
  return { entries, calls };
}

function time(date: Date | undefined): number {
  return date ? date.getTime() : Number.MAX_SAFE_INTEGER;
}
