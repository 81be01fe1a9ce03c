// A job's live events folded into the rows the page shows: text by item,
// each tool call with its permission request, decision and result, state
// changes, the result, artifacts. Pure, so a reconnect that replays nothing
// twice (events are kept by sequence number) gives the same rows.
import { toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, type Value } from "@bufbuild/protobuf/wkt";
import type { JobEvent, PermissionDecision } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { Artifact } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { SessionResult } from "@oz0/proto/oz0/harness/v1/harness_pb";

export type Row =
  | { kind: "state"; seq: bigint; time: Date | undefined; state: number; reason: string }
  | { kind: "session"; seq: bigint; harness: string; version: string }
  | { kind: "text"; seq: bigint; itemId: string; role: string; text: string }
  | ToolRow
  | { kind: "served"; seq: bigint; tool: string; input: JsonObject | undefined; output: JsonValue | undefined; error: string }
  | { kind: "result"; seq: bigint; result: SessionResult }
  | { kind: "artifacts"; seq: bigint; artifacts: Artifact[] };

export interface ToolRow {
  kind: "tool";
  seq: bigint;
  callId: string;
  tool: string;
  title: string;
  input: JsonObject | undefined;
  /** Set when the call asked permission. */
  asked: boolean;
  decision: PermissionDecision | undefined;
  result: { output: JsonValue | undefined; isError: boolean } | undefined;
}

export interface Totals {
  inputTokens: bigint;
  outputTokens: bigint;
  costUsd: number;
}

export function fold(events: readonly JobEvent[]): { rows: Row[]; totals: Totals } {
  const rows: Row[] = [];
  const tools = new Map<string, ToolRow>();
  const texts = new Map<string, Extract<Row, { kind: "text" }>>();
  const totals: Totals = { inputTokens: 0n, outputTokens: 0n, costUsd: 0 };
  const toolRow = (callId: string, seq: bigint, tool: string): ToolRow => {
    let row = tools.get(callId);
    if (!row) {
      row = { kind: "tool", seq, callId, tool, title: "", input: undefined, asked: false, decision: undefined, result: undefined };
      tools.set(callId, row);
      rows.push(row);
    }
    return row;
  };
  for (const event of events) {
    const e = event.event;
    const seq = event.seq;
    switch (e.case) {
      case "stateChanged":
        rows.push({ kind: "state", seq, time: event.time ? new Date(Number(event.time.seconds) * 1000 + event.time.nanos / 1e6) : undefined, state: e.value.state, reason: e.value.reason });
        break;
      case "sessionStarted":
        rows.push({ kind: "session", seq, harness: e.value.harnessName, version: e.value.harnessVersion });
        break;
      case "text": {
        const key = e.value.itemId || `seq-${seq}`;
        const open = texts.get(key);
        if (open && e.value.delta) open.text += e.value.text;
        else if (open) open.text = e.value.text;
        else {
          const row = { kind: "text" as const, seq, itemId: key, role: e.value.role || "assistant", text: e.value.text };
          texts.set(key, row);
          rows.push(row);
        }
        break;
      }
      case "toolCall": {
        const row = toolRow(e.value.callId, seq, e.value.tool);
        row.tool = e.value.tool;
        row.title = e.value.title;
        row.input = e.value.input;
        break;
      }
      case "permissionRequested": {
        const row = toolRow(e.value.callId || e.value.id, seq, e.value.tool);
        row.asked = true;
        row.input ??= e.value.input;
        break;
      }
      case "permissionDecision": {
        const row = toolRow(e.value.callId || e.value.id, seq, e.value.tool);
        row.decision = e.value;
        break;
      }
      case "toolResult": {
        const row = tools.get(e.value.callId);
        if (row) row.result = { output: jsonOf(e.value.output), isError: e.value.isError };
        break;
      }
      case "servedToolCall":
        rows.push({ kind: "served", seq, tool: e.value.tool, input: e.value.input, output: jsonOf(e.value.output), error: e.value.error });
        break;
      case "usage":
        totals.inputTokens += e.value.inputTokens;
        totals.outputTokens += e.value.outputTokens;
        totals.costUsd += e.value.costUsd;
        break;
      case "result":
        rows.push({ kind: "result", seq, result: e.value });
        break;
      case "artifacts":
        rows.push({ kind: "artifacts", seq, artifacts: e.value.artifacts });
        break;
      default:
        break;
    }
  }
  return { rows, totals };
}

function jsonOf(value: Value | undefined): JsonValue | undefined {
  return value ? toJson(ValueSchema, value) : undefined;
}
