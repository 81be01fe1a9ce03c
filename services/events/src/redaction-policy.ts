// The one redaction policy: what a public event may carry, per event type.
// It is an allowlist that fails closed: an attribute a type does not list is
// dropped, a value that does not look like what the list expects is dropped,
// and a type the policy does not know keeps only its envelope (ids, type,
// time, status, token counts) and is marked `reduced`. Nothing free-form ever
// passes: labels are composed here from identifiers and paths, never copied.
// The policy is keyed by @oz0/events-client's list of types, so the compiler
// refuses a policy that misses a type of the list or names one not in it.
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { timestampNow, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  holdsSessionToken,
  isIdentifier,
  isLifecycleType,
  publicIdentifier,
  rawAttributes,
  type LifecycleType,
} from "@oz0/events-client";
import type { PublicEvent, RawEvent, TokenCounts } from "@oz0/proto/oz0/events/v1/events_pb";

/** A step's summary when a model turn finished with the operation's result. */
export const FINISH_SUMMARY = "Returned the structured result for validation";

// An operation key as the agent version declares it.
const OPERATION_KEY = /^[a-z][a-z0-9_-]{0,63}$/;
const STATUS = /^[a-z][a-z_]{0,31}$/;
const EVENT_TYPE = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$/;
const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;
const MAX_PATH = 512;
// The times proto3 JSON (RFC 3339) can write: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
const MIN_TIME_SECONDS = -62_135_596_800n;
const MAX_TIME_SECONDS = 253_402_300_799n;
const MAX_COUNT = 2 ** 31 - 1;

type Extract = (attributes: JsonObject) => JsonValue | undefined;

/** An identifier (names, ids, codes, model names: no prose) holding no session token (@oz0/events-client). */
function identifier(value: JsonValue | undefined): string | undefined {
  return publicIdentifier(value);
}

/**
 * A path: POSIX's portable file name characters (letters, digits, `.`, `_`, `-`) in segments of at most 255
 * between `/`, at most MAX_PATH in all. A tool's path is the model's word: read as any one line, a model (or a
 * document steering it) wrote its task or its result into a `read_file` path, and the public step label carried
 * it. No space, quote, comma or colon passes, so prose does not; a path outside the set is dropped, and the
 * label names the tool alone. Text encoded into the set (base64url, hex) still passes, 512 characters a path.
 */
const PATH = /^\/?[A-Za-z0-9._-]{1,255}(?:\/[A-Za-z0-9._-]{1,255})*\/?$/;

function path(value: JsonValue | undefined): string | undefined {
  return typeof value === "string" && value.length <= MAX_PATH && PATH.test(value) && !holdsSessionToken(value)
    ? value
    : undefined;
}

function count(value: JsonValue | undefined): number | undefined {
  const n = typeof value === "string" && /^\d{1,10}$/.test(value) ? Number(value) : value;
  return typeof n === "number" && Number.isInteger(n) && n >= 0 && n <= MAX_COUNT ? n : undefined;
}

const id =
  (key: string): Extract =>
  (a) =>
    identifier(a[key]);
/** Who answered: an identifier that is not an email address (ids such as an OIDC `sub`, or `owner`). */
const principalId: Extract = (a) => {
  const value = identifier(a.answered_by);
  return value !== undefined && !value.includes("@") ? value : undefined;
};
const pathOf =
  (key: string): Extract =>
  (a) =>
    path(a[key]);
const countOf =
  (key: string): Extract =>
  (a) =>
    count(a[key]);
const flag =
  (key: string): Extract =>
  (a) =>
    typeof a[key] === "boolean" ? a[key] : undefined;
const oneOf =
  (key: string, values: readonly string[]): Extract =>
  (a) =>
    typeof a[key] === "string" && values.includes(a[key]) ? a[key] : undefined;
// A finite non-negative amount that need not be whole (a cost in dollars).
const amountOf =
  (key: string): Extract =>
  (a) => {
    const v = a[key];
    return typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : undefined;
  };
// An identifier, or a small enum number (producers that send proto enum values).
const codeOf =
  (key: string): Extract =>
  (a) => {
    const v = a[key];
    return typeof v === "number" ? (Number.isInteger(v) && v >= 0 && v < 1000 ? v : undefined) : identifier(v);
  };
const firstOf =
  (...extracts: Extract[]): Extract =>
  (a) => {
    for (const extract of extracts) {
      const value = extract(a);
      if (value !== undefined) return value;
    }
    return undefined;
  };
const operationKey: Extract = (a) =>
  typeof a.operation_key === "string" && OPERATION_KEY.test(a.operation_key) ? a.operation_key : undefined;
const exitCode: Extract = (a) =>
  typeof a.exit_code === "number" && Number.isInteger(a.exit_code) && Math.abs(a.exit_code) <= 255
    ? a.exit_code
    : undefined;

// A task is never public: only how long it was, in characters (code points).
const taskChars: Extract = (a) => (typeof a.task === "string" ? [...a.task].length : count(a.task_chars));

// A tool step's action summary: the tool and the path it touched, if any.
const toolLabel: Extract = (a) => {
  const tool = identifier(a.tool_name);
  if (!tool) return undefined;
  const target = path(a.path);
  return target ? `${tool} ${target}` : tool;
};

// A model turn is summarised only by the tool it requested or by finishing.
const modelLabel: Extract = (a) => {
  if (a.finish === true || a.action === "finish") return FINISH_SUMMARY;
  const tool = identifier(a.requested_tool);
  return tool ? `Requested ${tool}` : "Model turn";
};

const stepLabel: Extract = (a) => (a.step_kind === "model" ? modelLabel(a) : toolLabel(a));

type Allowlist = Readonly<Record<string, Extract>>;

const jobStart: Allowlist = {
  harness: id("harness"),
  plugin: id("plugin"),
  task_chars: taskChars,
  timeout_ms: countOf("timeout_ms"),
  attachment_count: countOf("attachment_count"),
};
const jobEnd: Allowlist = {
  stop_reason: codeOf("stop_reason"),
  error_code: id("error_code"),
  duration_ms: countOf("duration_ms"),
  turns: countOf("turns"),
};
const operationEnd: Allowlist = {
  operation_key: operationKey,
  duration_ms: countOf("duration_ms"),
  error_code: id("error_code"),
  result_validation: oneOf("result_validation", ["valid", "invalid", "unknown"]),
  timeout_ms: countOf("timeout_ms"),
};
const graphRunEnd: Allowlist = {
  graph_name: id("graph_name"),
  stop_reason: id("stop_reason"),
  error_code: id("error_code"),
  duration_ms: countOf("duration_ms"),
};
const graphStep: Allowlist = {
  step_name: id("step_name"),
  step_kind: id("step_kind"),
  attempt: countOf("attempt"),
  iteration: countOf("iteration"),
  branch: id("branch"),
  error_code: id("error_code"),
  duration_ms: countOf("duration_ms"),
};

/**
 * Every lifecycle type, with the public attributes it keeps.
 * Anything else a producer sends in `attributes` is dropped.
 */
export const EVENT_POLICY: Readonly<Record<LifecycleType, Allowlist>> = {
  "job.created": jobStart,
  "job.completed": jobEnd,
  "job.failed": jobEnd,
  "job.cancelled": jobEnd,
  "session.started": {
    harness: firstOf(id("harness"), id("harness_name")),
    node: id("node"),
    isolation: id("isolation"),
    resumed: flag("resumed"),
  },
  "session.ended": {
    exit_code: exitCode,
    signal: id("signal"),
    stop_reason: codeOf("stop_reason"),
    error_code: id("error_code"),
    turns: countOf("turns"),
    duration_ms: countOf("duration_ms"),
  },
  "tool.called": {
    tool_name: id("tool_name"),
    path: pathOf("path"),
    label: toolLabel,
  },
  // A hook or policy decided without a person.
  "permission.decided": {
    tool_name: id("tool_name"),
    path: pathOf("path"),
    label: toolLabel,
    decision: id("decision"),
    decided_by: firstOf(id("decided_by"), id("decider")),
    hook: id("hook"),
    input_changed: flag("input_changed"),
  },
  "approval.requested": {
    approval_id: id("approval_id"),
    tool_name: id("tool_name"),
    timeout_ms: countOf("timeout_ms"),
  },
  // Answered by a person, or by the runtime when the deadline passed (status `timed_out`).
  "approval.answered": {
    approval_id: id("approval_id"),
    tool_name: id("tool_name"),
    decision: id("decision"),
    waited_ms: countOf("waited_ms"),
    // The principal's id (an identifier; an email address is not one and is dropped), and whether the input was changed.
    answered_by: principalId,
    input_changed: flag("input_changed"),
  },
  // The LLM proxy's record of one logical call: counts and ids only.
  "llm.call_completed": {
    operation_id: id("operation_id"),
    provider: id("provider"),
    model: id("model"),
    wire: id("wire"),
    stream: flag("stream"),
    http_status: countOf("http_status"),
    attempts: countOf("attempts"),
    reasoning_tokens: countOf("reasoning_tokens"),
    cost_usd: amountOf("cost_usd"),
    latency_ms: countOf("latency_ms"),
    ttft_ms: countOf("ttft_ms"),
    estimated: flag("estimated"),
    nominal: flag("nominal"),
  },
  "harness.operation_started": {
    operation_key: operationKey,
    task_chars: taskChars,
    timeout_ms: countOf("timeout_ms"),
  },
  "harness.operation_step": {
    step_index: countOf("step_index"),
    step_kind: oneOf("step_kind", ["model", "tool"]),
    label: stepLabel,
    tool_name: (a) => (a.step_kind === "tool" ? identifier(a.tool_name) : undefined),
    requested_tool: (a) => (a.step_kind === "model" ? identifier(a.requested_tool) : undefined),
    finish: (a) => (a.step_kind === "model" && (a.finish === true || a.action === "finish") ? true : undefined),
    path: (a) => (a.step_kind === "tool" ? path(a.path) : undefined),
    duration_ms: countOf("duration_ms"),
  },
  "harness.operation_completed": {
    ...operationEnd,
    // Completion means the result validated against the schema.
    result_validation: () => "valid",
  },
  "harness.operation_failed": operationEnd,
  "harness.operation_cancelled": operationEnd,
  "harness.operation_timed_out": operationEnd,
  "graph.run_started": { graph_name: id("graph_name"), graph_version: id("graph_version") },
  "graph.run_completed": graphRunEnd,
  "graph.run_failed": graphRunEnd,
  "graph.run_cancelled": graphRunEnd,
  "graph.step_started": graphStep,
  "graph.step_completed": graphStep,
  "graph.step_failed": graphStep,
};

/** The public attribute names each known type keeps (for documentation and tests). */
export function publicAttributes(type: string): string[] {
  return isLifecycleType(type) ? Object.keys(EVENT_POLICY[type]) : [];
}

export type RedactionOutcome =
  { ok: true; event: PublicEvent } | { ok: false; code: "EVENT_ID_INVALID" | "EVENT_TYPE_INVALID" };

// Each allowlist as a list of [attribute, extract] pairs, walked per event.
const POLICY_ENTRIES: ReadonlyMap<string, readonly (readonly [string, Extract])[]> = new Map(
  Object.entries(EVENT_POLICY).map(([type, allowlist]) => [type, Object.entries(allowlist)]),
);

/**
 * The event's time when JSON can write it, else the time it is accepted (as for an event without one). A time
 * past year 9999 made Publish fail as an internal error, which producers retry for ever with every event queued
 * behind it; one with negative nanoseconds was stored as JSON no reader parses again, so Watch from before it,
 * the job's Transcript and Kafka's consumers failed on it until retention removed it.
 */
function eventTime(time: Timestamp | undefined): Timestamp {
  return time !== undefined &&
    time.seconds >= MIN_TIME_SECONDS &&
    time.seconds <= MAX_TIME_SECONDS &&
    Number.isInteger(time.nanos) &&
    time.nanos >= 0 &&
    time.nanos <= 999_999_999
    ? time
    : timestampNow();
}

// An envelope id: kept when it is an identifier, else cleared.
const ident = (value: string): string => (value === "" ? "" : (identifier(value) ?? ""));

/** Redact one raw event into its public form (position 0: the log assigns it). */
export function redactEvent(raw: RawEvent): RedactionOutcome {
  // The id is the dedup key and a Kafka header; the type names the policy.
  if (!isIdentifier(raw.id)) return { ok: false, code: "EVENT_ID_INVALID" };
  if (raw.type.length > 64 || !EVENT_TYPE.test(raw.type)) return { ok: false, code: "EVENT_TYPE_INVALID" };
  const allowlist = POLICY_ENTRIES.get(raw.type);
  const attributes: JsonObject = {};
  if (allowlist) {
    const source = rawAttributes(raw);
    for (const [key, extract] of allowlist) {
      const value = extract(source);
      if (value !== undefined) attributes[key] = value;
    }
  }
  const tokens: TokenCounts | undefined = raw.tokens
    ? {
        $typeName: "oz0.events.v1.TokenCounts",
        inputTokens: raw.tokens.inputTokens,
        outputTokens: raw.tokens.outputTokens,
        cacheReadTokens: raw.tokens.cacheReadTokens,
        cacheWriteTokens: raw.tokens.cacheWriteTokens,
      }
    : undefined;
  // Every field of the message is set, so a literal is a complete PublicEvent
  // (what create() would build, without its per-field walk).
  return {
    ok: true,
    event: {
      $typeName: "oz0.events.v1.PublicEvent",
      id: raw.id,
      type: raw.type,
      time: eventTime(raw.time),
      source: ident(raw.source),
      jobId: ident(raw.jobId),
      sessionId: ident(raw.sessionId),
      toolCallId: ident(raw.toolCallId),
      operationInvocationId: ident(raw.operationInvocationId),
      graphRunId: ident(raw.graphRunId),
      graphStepId: ident(raw.graphStepId),
      agentName: ident(raw.agentName),
      agentVersion: ident(raw.agentVersion),
      status: STATUS.test(raw.status) ? raw.status : "",
      tokens,
      attributes,
      traceparent: raw.traceparent === "" || !TRACEPARENT.test(raw.traceparent) ? "" : raw.traceparent,
      position: 0n,
      reduced: !allowlist,
    },
  };
}
