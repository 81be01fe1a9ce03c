// The console's view of one job, built from its PUBLIC events only (so it can
// show nothing the redaction policy removed):
// - one row per harness-operation invocation, merging its lifecycle events
//   and the inner steps attributed to it (by operation invocation id, or by
//   the owning tool-call id that new inner-step events carry);
// - rows whose lifecycle windows overlap form a parallel group ("N parallel"),
//   each row knowing its position in the group (by start time);
// - inner activity that carries neither id (legacy sessions) is never
//   guessed onto a row: it stays in the parent timeline, and every row whose
//   window it falls in says its attribution is partial.
import { create, type JsonObject } from "@bufbuild/protobuf";
import { timestampDate, timestampFromMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import { isLifecycleType, type LifecycleType } from "@oz0/events-client";
import {
  OperationRowSchema,
  OperationStatus,
  OperationStepSchema,
  ParallelGroupSchema,
  TokenCountsSchema,
  TranscriptResponseSchema,
  TranscriptRowSchema,
  type OperationRow,
  type OperationStep,
  type PublicEvent,
  type TokenCounts,
  type TranscriptResponse,
} from "@oz0/proto/oz0/events/v1/events_pb";

const OPERATION_PREFIX = "harness.operation_";
const STEP_TYPE: LifecycleType = "harness.operation_step";
const STARTED_TYPE: LifecycleType = "harness.operation_started";

const TERMINAL: Readonly<Partial<Record<LifecycleType, OperationStatus>>> = {
  "harness.operation_completed": OperationStatus.COMPLETED,
  "harness.operation_failed": OperationStatus.FAILED,
  "harness.operation_cancelled": OperationStatus.CANCELLED,
  "harness.operation_timed_out": OperationStatus.TIMED_OUT,
};

interface Invocation {
  row: OperationRow;
  startMs: number;
  /** Infinity while running: a running operation overlaps everything after it. */
  endMs: number;
  firstPosition: bigint;
  unattributed: number;
}

const ms = (t: Timestamp | undefined): number => (t ? timestampDate(t).getTime() : 0);

export function buildTranscript(jobId: string, events: PublicEvent[]): TranscriptResponse {
  const ordered = [...events].sort((a, b) => (a.position < b.position ? -1 : a.position > b.position ? 1 : 0));
  const invocations = new Map<string, Invocation>();
  const byToolCall = new Map<string, Invocation>();

  // Only the lifecycle types this service knows shape operation rows: a type it does not know
  // keeps its envelope (ids, status, token counts) from any producer, and a producer could
  // otherwise open a row, or add steps and tokens to another's row, with ids it made up.
  const operationLifecycle = (event: PublicEvent): boolean =>
    event.type.startsWith(OPERATION_PREFIX) && event.type !== STEP_TYPE && isLifecycleType(event.type);

  // First pass: every invocation's lifecycle, so steps can find their owner.
  for (const event of ordered) {
    if (!operationLifecycle(event)) continue;
    if (!event.operationInvocationId) continue;
    const invocation = invocationFor(invocations, event);
    mergeLifecycle(invocation, event);
    if (invocation.row.toolCallId) byToolCall.set(invocation.row.toolCallId, invocation);
  }

  const parent: PublicEvent[] = [];
  const unattributedSteps: PublicEvent[] = [];
  for (const event of ordered) {
    if (operationLifecycle(event) && event.operationInvocationId) continue;
    const known = isLifecycleType(event.type);
    const owner = !known
      ? undefined
      : ((event.operationInvocationId ? invocations.get(event.operationInvocationId) : undefined) ??
        (event.type === STEP_TYPE && event.toolCallId ? byToolCall.get(event.toolCallId) : undefined));
    if (owner && (event.type === STEP_TYPE || event.operationInvocationId)) {
      owner.row.steps.push(stepOf(event));
      addTokens(owner.row, event.tokens);
      continue;
    }
    // An inner step that names an invocation this job never started keeps its
    // own row rather than vanishing.
    if (event.type === STEP_TYPE && event.operationInvocationId) {
      const orphan = invocationFor(invocations, event);
      orphan.row.steps.push(stepOf(event));
      continue;
    }
    if (event.type === STEP_TYPE) unattributedSteps.push(event);
    parent.push(event);
  }

  // Legacy inner activity: every row whose window holds it is partial.
  for (const step of unattributedSteps) {
    const at = ms(step.time);
    for (const invocation of invocations.values()) {
      if (at >= invocation.startMs && at <= invocation.endMs) invocation.unattributed++;
    }
  }

  const rows = [...invocations.values()].sort(
    (a, b) => a.startMs - b.startMs || compare(a.firstPosition, b.firstPosition),
  );
  const response = create(TranscriptResponseSchema, { jobId });
  for (const invocation of rows) finishRow(invocation);
  assignParallelGroups(rows, response);

  // The timeline: parent events and operation rows, by time then position.
  const timeline: { at: number; position: bigint; row: TranscriptResponse["rows"][number] }[] = [
    ...parent.map((event) => ({
      at: ms(event.time),
      position: event.position,
      row: create(TranscriptRowSchema, { row: { case: "event", value: event } }),
    })),
    ...rows.map((invocation) => ({
      at: invocation.startMs,
      position: invocation.firstPosition,
      row: create(TranscriptRowSchema, { row: { case: "operation", value: invocation.row } }),
    })),
  ];
  timeline.sort((a, b) => a.at - b.at || compare(a.position, b.position));
  response.rows = timeline.map((t) => t.row);
  return response;
}

function compare(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function invocationFor(invocations: Map<string, Invocation>, event: PublicEvent): Invocation {
  let invocation = invocations.get(event.operationInvocationId);
  if (!invocation) {
    invocation = {
      row: create(OperationRowSchema, {
        operationInvocationId: event.operationInvocationId,
        toolCallId: event.toolCallId,
        status: OperationStatus.RUNNING,
        startedAt: event.time,
        resultValidation: "pending",
        parallelGroupSize: 1,
        parallelPosition: 1,
      }),
      startMs: ms(event.time),
      endMs: Number.POSITIVE_INFINITY,
      firstPosition: event.position,
      unattributed: 0,
    };
    invocations.set(event.operationInvocationId, invocation);
  }
  return invocation;
}

function mergeLifecycle(invocation: Invocation, event: PublicEvent): void {
  const attributes: JsonObject = event.attributes ?? {};
  const row = invocation.row;
  if (!row.toolCallId && event.toolCallId) row.toolCallId = event.toolCallId;
  if (typeof attributes.operation_key === "string" && !row.operationKey) row.operationKey = attributes.operation_key;
  if (typeof attributes.timeout_ms === "number" && !row.timeoutMs) row.timeoutMs = attributes.timeout_ms;
  if (event.type === STARTED_TYPE) {
    row.startedAt = event.time;
    invocation.startMs = ms(event.time);
    if (typeof attributes.task_chars === "number") row.taskChars = attributes.task_chars;
    return;
  }
  const status = isLifecycleType(event.type) ? TERMINAL[event.type] : undefined;
  if (status === undefined) return;
  row.status = status;
  row.endedAt = event.time;
  invocation.endMs = ms(event.time);
  if (typeof attributes.error_code === "string") row.errorCode = attributes.error_code;
  row.resultValidation =
    typeof attributes.result_validation === "string"
      ? attributes.result_validation
      : status === OperationStatus.COMPLETED
        ? "valid"
        : "unknown";
  addTokens(row, event.tokens);
}

function stepOf(event: PublicEvent): OperationStep {
  const a: JsonObject = event.attributes ?? {};
  const str = (v: unknown): string => (typeof v === "string" ? v : "");
  return create(OperationStepSchema, {
    eventId: event.id,
    time: event.time,
    kind: str(a.step_kind) || (event.type.startsWith("model.") ? "model" : "tool"),
    label: str(a.label) || str(a.tool_name) || event.type,
    toolName: str(a.tool_name) || str(a.requested_tool),
    path: str(a.path),
    status: event.status,
    durationMs: typeof a.duration_ms === "number" ? a.duration_ms : 0,
    tokens: event.tokens,
  });
}

/** The most a TokenCounts field holds (uint32). */
const MAX_TOKEN_COUNT = 0xffff_ffff;

/**
 * Adds an event's counts to its row's, saturating at the fields' range: a harness's steps can each report
 * up to 2^32 - 1, and a sum past it made a transcript that could not be encoded, so the job's Transcript
 * (and the orchestrator's GetJobTranscript and WatchJobTranscript) failed for good.
 */
function addTokens(row: OperationRow, tokens: TokenCounts | undefined): void {
  if (!tokens) return;
  const sum = (row.tokens ??= create(TokenCountsSchema));
  sum.inputTokens = Math.min(sum.inputTokens + tokens.inputTokens, MAX_TOKEN_COUNT);
  sum.outputTokens = Math.min(sum.outputTokens + tokens.outputTokens, MAX_TOKEN_COUNT);
  sum.cacheReadTokens = Math.min(sum.cacheReadTokens + tokens.cacheReadTokens, MAX_TOKEN_COUNT);
  sum.cacheWriteTokens = Math.min(sum.cacheWriteTokens + tokens.cacheWriteTokens, MAX_TOKEN_COUNT);
}

function finishRow(invocation: Invocation): void {
  const row = invocation.row;
  row.title = `Harness · ${row.operationKey || "operation"}`;
  if (Number.isFinite(invocation.endMs)) row.durationMs = Math.max(0, invocation.endMs - invocation.startMs);
  if (invocation.unattributed > 0) {
    row.attributionPartial = true;
    row.attributionNote =
      `${invocation.unattributed} inner step(s) during this operation carry no invocation id ` +
      "and cannot be attributed to exactly one invocation; they stay in the parent timeline";
  }
}

// Rows whose windows overlap, directly or through a chain, share one group.
function assignParallelGroups(rows: Invocation[], response: TranscriptResponse): void {
  let group: Invocation[] = [];
  let groupEnd = Number.NEGATIVE_INFINITY;
  const close = (): void => {
    if (group.length > 1) {
      const id = `parallel-${response.parallelGroups.length + 1}`;
      group.forEach((member, index) => {
        member.row.parallelGroupId = id;
        member.row.parallelGroupSize = group.length;
        member.row.parallelPosition = index + 1;
      });
      const end = Math.max(...group.map((m) => m.endMs));
      response.parallelGroups.push(
        create(ParallelGroupSchema, {
          id,
          operationInvocationIds: group.map((m) => m.row.operationInvocationId),
          startedAt: group[0]!.row.startedAt,
          endedAt: Number.isFinite(end) ? timestampFromMs(end) : undefined,
        }),
      );
    }
    group = [];
  };
  for (const invocation of rows) {
    // Strictly before: one ending exactly when the next starts ran in sequence.
    if (group.length > 0 && invocation.startMs >= groupEnd) close();
    groupEnd = group.length === 0 ? invocation.endMs : Math.max(groupEnd, invocation.endMs);
    group.push(invocation);
  }
  close();
}
