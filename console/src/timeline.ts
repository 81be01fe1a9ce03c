// The elapsed timeline: the job's time from its start, as stacked bars. The
// first lane is the job itself, each moment coloured by what it was doing
// (waiting for a person over running tools or operations over the model's
// own work); below it one lane per tool call (time waiting for a person, then
// running) and per harness operation. Pure.
import type { OperationRow } from "@oz0/proto/oz0/events/v1/events_pb";
import { dateOf } from "./format.js";
import type { Row } from "./transcript.js";

export type Phase = "model" | "tool" | "operation" | "waiting";

export interface Segment {
  phase: Phase;
  /** Milliseconds from the job's start. */
  from: number;
  to: number;
}

export interface Lane {
  label: string;
  segments: Segment[];
  /** The rail colour of the operation's parallel group, when it has one. */
  colour: number | undefined;
}

/** At most this many call lanes are drawn (the job lane covers every call). */
export const MAX_LANES = 60;

const RANK: Record<Phase, number> = { model: 0, tool: 1, operation: 1, waiting: 2 };

export function timelineOf(o: {
  rows: readonly Row[];
  operations: readonly OperationRow[];
  /** The job's tool calls that operations stand for. */
  operationCalls: ReadonlySet<string>;
  colours: ReadonlyMap<string, number>;
  start: Date;
  end: Date;
}): { totalMs: number; job: Lane; lanes: Lane[] } {
  const origin = o.start.getTime();
  const totalMs = Math.max(1, o.end.getTime() - origin);
  const at = (date: Date | undefined, fallback: number): number =>
    Math.min(totalMs, Math.max(0, date ? date.getTime() - origin : fallback));
  const lanes: Lane[] = [];
  for (const row of o.rows) {
    // A call a harness operation stands for is drawn as the operation.
    if (row.kind !== "tool" || o.operationCalls.has(row.callId)) continue;
    const called = at(row.time, 0);
    const segments: Segment[] = [];
    let running = called;
    if (row.pendingAt) {
      running = at(row.decidedAt, totalMs);
      segments.push({ phase: "waiting", from: at(row.pendingAt, called), to: running });
    }
    segments.push({ phase: "tool", from: running, to: at(row.endedAt, totalMs) });
    lanes.push({ label: row.tool, segments, colour: undefined });
  }
  for (const op of o.operations) {
    lanes.push({
      label: op.title || op.operationKey,
      segments: [{ phase: "operation", from: at(dateOf(op.startedAt), 0), to: at(dateOf(op.endedAt), totalMs) }],
      colour: o.colours.get(op.operationInvocationId),
    });
  }
  lanes.sort((a, b) => (a.segments[0]?.from ?? 0) - (b.segments[0]?.from ?? 0));
  return { totalMs, job: { label: "job", segments: jobPhases(lanes, totalMs), colour: undefined }, lanes };
}

/** The job's own lane: at each moment, the highest-ranked phase any call lane is in; the model's otherwise. */
function jobPhases(lanes: readonly Lane[], totalMs: number): Segment[] {
  const all = lanes.flatMap((l) => l.segments);
  const cuts = [...new Set([0, totalMs, ...all.flatMap((s) => [s.from, s.to])])].sort((a, b) => a - b);
  const out: Segment[] = [];
  for (let i = 0; i + 1 < cuts.length; i++) {
    const from = cuts[i]!;
    const to = cuts[i + 1]!;
    const mid = (from + to) / 2;
    let phase: Phase = "model";
    for (const s of all) if (s.from <= mid && mid < s.to && RANK[s.phase] > RANK[phase]) phase = s.phase;
    const last = out[out.length - 1];
    if (last && last.phase === phase) last.to = to;
    else out.push({ phase, from, to });
  }
  return out;
}
