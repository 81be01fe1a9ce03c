// A job's live events folded into the rows the page shows: text by item,
// each tool call with its permission request, decision and result, state
// changes, the result, artifacts. Pure, so a reconnect that replays nothing
// twice (events are kept by sequence number) gives the same rows. Every row
// keeps the time of the event that opened it, and tool calls the times of
// each step, for the elapsed timeline.
import { toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, type Value } from "@bufbuild/protobuf/wkt";
import type { Artifact, JobEvent, PermissionDecision } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { SessionResult } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { dateOf } from "./format.js";

interface Timed {
  seq: bigint;
  time: Date | undefined;
}

export type Row =
  | (Timed & { kind: "state"; state: number; reason: string })
  | (Timed & { kind: "session"; harness: string; version: string })
  | (Timed & { kind: "text"; itemId: string; role: "assistant" | "thinking" | "graph"; text: string })
  | ToolRow
  | (Timed & {
      kind: "served";
      tool: string;
      input: JsonObject | undefined;
      output: JsonValue | undefined;
      error: string;
    })
  | (Timed & { kind: "result"; result: SessionResult })
  | (Timed & { kind: "artifacts"; artifacts: Artifact[]; error: string });

export interface ToolRow extends Timed {
  kind: "tool";
  callId: string;
  tool: string;
  title: string;
  /** The input its permission was asked for, once it asked (what was allowed or denied); else its tool_call's. */
  input: JsonObject | undefined;
  /**
   * The input the harness's tool_call announced, when the call asked permission for another: the harness writes
   * both, and nothing makes them agree, so the row shows what was answered and this beside it.
   */
  announcedInput: JsonObject | undefined;
  /** Set when the call asked permission. */
  asked: boolean;
  decision: PermissionDecision | undefined;
  /** When the call began to wait for a person (a pending decision), if it did. */
  pendingAt: Date | undefined;
  decidedAt: Date | undefined;
  result: { output: JsonValue | undefined; isError: boolean } | undefined;
  endedAt: Date | undefined;
}

export interface Totals {
  inputTokens: bigint;
  outputTokens: bigint;
  costUsd: number;
}

/**
 * What a text row is labelled, and styled as (`role-<it>`): the roles the
 * protocol names (`assistant`, `thinking`) and the graph's own lines. A
 * harness's role is its own free text, which shown as the row's label (or put
 * in its class) let a job dress its words as a tool call or an approval.
 */
function textRole(role: string, itemId: string): "assistant" | "thinking" | "graph" {
  if (role === "thinking") return "thinking";
  if (role === "" && itemId === "graph") return "graph";
  return "assistant";
}

export function fold(events: readonly JobEvent[]): { rows: Row[]; totals: Totals } {
  const rows: Row[] = [];
  const tools = new Map<string, ToolRow>();
  const texts = new Map<string, Extract<Row, { kind: "text" }>>();
  const totals: Totals = { inputTokens: 0n, outputTokens: 0n, costUsd: 0 };
  const toolRow = (callId: string, at: Timed, tool: string): ToolRow => {
    let row = tools.get(callId);
    if (!row) {
      row = {
        kind: "tool",
        ...at,
        callId,
        tool,
        title: "",
        input: undefined,
        announcedInput: undefined,
        asked: false,
        decision: undefined,
        pendingAt: undefined,
        decidedAt: undefined,
        result: undefined,
        endedAt: undefined,
      };
      tools.set(callId, row);
      rows.push(row);
    }
    return row;
  };
  for (const event of events) {
    const e = event.event;
    const at: Timed = { seq: event.seq, time: dateOf(event.time) };
    switch (e.case) {
      case "stateChanged":
        rows.push({ kind: "state", ...at, state: e.value.state, reason: e.value.reason });
        break;
      case "sessionStarted":
        rows.push({ kind: "session", ...at, harness: e.value.harnessName, version: e.value.harnessVersion });
        break;
      case "text": {
        // Deltas grow their item's row; a whole text after them is that item's final form. Any
        // other whole text is a row of its own, even under an item id seen before (a graph run's
        // step lines all come as item `graph`).
        const key = e.value.itemId || `seq-${at.seq}`;
        const open = texts.get(key);
        if (open && e.value.delta) open.text += e.value.text;
        else if (open && !e.value.delta) {
          open.text = e.value.text;
          texts.delete(key);
        } else {
          const row = {
            kind: "text" as const,
            ...at,
            itemId: key,
            role: textRole(e.value.role, key),
            text: e.value.text,
          };
          if (e.value.delta) texts.set(key, row);
          rows.push(row);
        }
        break;
      }
      case "toolCall": {
        const row = toolRow(e.value.callId, at, e.value.tool);
        row.tool = e.value.tool;
        row.title = e.value.title;
        // Once asked, the input answered for stays the row's: a tool_call (before the request, or announced again
        // after the answer) showed an input nobody was asked about under "allowed by …".
        if (row.asked) row.announcedInput = differentInput(e.value.input, row.input) ?? row.announcedInput;
        else row.input = e.value.input;
        break;
      }
      case "permissionRequested": {
        const row = toolRow(e.value.callId || e.value.id, at, e.value.tool);
        if (!row.asked) row.announcedInput = differentInput(row.input, e.value.input);
        row.asked = true;
        row.input = e.value.input;
        break;
      }
      case "permissionDecision": {
        const row = toolRow(e.value.callId || e.value.id, at, e.value.tool);
        row.decision = e.value;
        if (e.value.pending) row.pendingAt ??= at.time;
        else row.decidedAt = at.time;
        break;
      }
      case "toolResult": {
        const row = tools.get(e.value.callId);
        if (row) {
          row.result = { output: jsonOf(e.value.output), isError: e.value.isError };
          row.endedAt = at.time;
        }
        break;
      }
      case "servedToolCall":
        rows.push({
          kind: "served",
          ...at,
          tool: e.value.tool,
          input: e.value.input,
          output: jsonOf(e.value.output),
          error: e.value.error,
        });
        break;
      case "usage":
        totals.inputTokens += e.value.inputTokens;
        totals.outputTokens += e.value.outputTokens;
        totals.costUsd += e.value.costUsd;
        break;
      case "result":
        rows.push({ kind: "result", ...at, result: e.value });
        break;
      case "artifacts":
        rows.push({ kind: "artifacts", ...at, artifacts: e.value.artifacts, error: e.value.error });
        break;
      default:
        break;
    }
  }
  return { rows, totals };
}

/** `announced`, when it is not the input that was asked about; undefined when they agree (in any key order). */
function differentInput(announced: JsonObject | undefined, asked: JsonObject | undefined): JsonObject | undefined {
  return announced === undefined || sameJson(announced, asked) ? undefined : announced;
}

function sameJson(a: JsonValue | undefined, b: JsonValue | undefined): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) || Array.isArray(b))
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((v, i) => sameJson(v, b[i]));
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && sameJson(a[k], b[k]));
}

function jsonOf(value: Value | undefined): JsonValue | undefined {
  return value ? toJson(ValueSchema, value) : undefined;
}
