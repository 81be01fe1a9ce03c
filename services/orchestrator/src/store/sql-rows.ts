// The stores' rows and their records, once for both engines: a column that
// each engine returns its own way (sql-database.ts: Time, Json, Bool,
// Count) is read through the decoders here, and a record's values are
// written through the engine's `time`, `bool` and `jsonText`.
import type { Selectable, Updateable } from "kysely";
import type { GraphDefinition } from "@oz0/graph";
import type {
  AgentVersionRecord,
  JobPatch,
  JobRecord,
  JobStateName,
  JsonObject,
  PermissionRecord,
  PluginRecord,
} from "./job-store.js";
import type { GraphJobRecord, GraphVersionRecord } from "./graph-store.js";
import type {
  AgentVersionsTable,
  Bool,
  Count,
  GraphJobsTable,
  JobsTable,
  Json,
  PermissionsTable,
  PluginsTable,
  SqlEngine,
  Time,
  VersionsTable,
} from "./sql-database.js";

export function toDate(value: Time): Date {
  return value instanceof Date ? value : new Date(Number(value));
}

export function fromJson<T>(value: Json<T>): T {
  return typeof value === "string" ? (JSON.parse(value) as T) : value;
}

export function toBool(value: Bool): boolean {
  return value === true || value === 1;
}

/** bigint columns: sequence numbers and byte counts stay far below 2^53. */
export function toNumber(value: Count): number {
  return Number(value);
}

function optionalDate(value: Time | null): Date | undefined {
  return value === null ? undefined : toDate(value);
}

export function toJob(row: Selectable<JobsTable>): JobRecord {
  const finishedAt = optionalDate(row.finished_at);
  const cancelRequestedAt = optionalDate(row.cancel_requested_at);
  const startedAt = optionalDate(row.started_at);
  return {
    id: row.id,
    agentName: row.agent_name,
    agentVersion: row.agent_version,
    input: row.input,
    state: row.state as JobStateName,
    createdAt: toDate(row.created_at),
    updatedAt: toDate(row.updated_at),
    ...(finishedAt ? { finishedAt } : {}),
    resultText: row.result_text,
    stopReason: row.stop_reason,
    error: row.error,
    sessionId: row.session_id,
    sandboxUrl: row.sandbox_url,
    lastSeq: toNumber(row.last_seq),
    sandboxSeq: toNumber(row.sandbox_seq),
    attachments: fromJson(row.attachments),
    tokenId: row.token_id,
    ...(cancelRequestedAt ? { cancelRequestedAt } : {}),
    servedTools: row.served_tools,
    startedBy: row.started_by,
    ...(startedAt ? { startedAt } : {}),
    ...(row.trace_id ? { traceId: row.trace_id } : {}),
    ...(row.traceparent ? { traceparent: row.traceparent } : {}),
    ruleBroken: row.rule_broken,
  };
}

/** A job's columns, for its first INSERT. */
export function jobColumns(engine: SqlEngine, job: JobRecord): JobsTable {
  return {
    id: job.id,
    agent_name: job.agentName,
    agent_version: job.agentVersion,
    input: job.input,
    state: job.state,
    created_at: engine.time(job.createdAt),
    updated_at: engine.time(job.updatedAt),
    finished_at: job.finishedAt ? engine.time(job.finishedAt) : null,
    result_text: job.resultText,
    stop_reason: job.stopReason,
    error: job.error,
    session_id: job.sessionId,
    sandbox_url: job.sandboxUrl,
    last_seq: job.lastSeq,
    sandbox_seq: job.sandboxSeq,
    attachments: engine.jsonText(JSON.stringify(job.attachments)),
    token_id: job.tokenId,
    cancel_requested_at: job.cancelRequestedAt ? engine.time(job.cancelRequestedAt) : null,
    served_tools: job.servedTools,
    started_by: job.startedBy,
    started_at: job.startedAt ? engine.time(job.startedAt) : null,
    trace_id: job.traceId ?? "",
    traceparent: job.traceparent ?? "",
    rule_broken: job.ruleBroken,
  };
}

// Column names are fixed here, never taken from input; values always go as parameters.
const JOB_COLUMNS = {
  agentName: "agent_name",
  agentVersion: "agent_version",
  input: "input",
  state: "state",
  updatedAt: "updated_at",
  finishedAt: "finished_at",
  resultText: "result_text",
  stopReason: "stop_reason",
  error: "error",
  sessionId: "session_id",
  sandboxUrl: "sandbox_url",
  sandboxSeq: "sandbox_seq",
  attachments: "attachments",
  tokenId: "token_id",
  cancelRequestedAt: "cancel_requested_at",
  servedTools: "served_tools",
  startedBy: "started_by",
  startedAt: "started_at",
  traceId: "trace_id",
  traceparent: "traceparent",
  ruleBroken: "rule_broken",
} as const satisfies Record<keyof JobPatch, keyof JobsTable>;

/** The columns a patch sets (keys it has, unknown keys ignored), with values as the engine takes them. */
export function jobPatchColumns(engine: SqlEngine, patch: JobPatch): Updateable<JobsTable> {
  const columns: Record<string, unknown> = {};
  for (const key of Object.keys(patch) as (keyof JobPatch)[]) {
    if (!(key in JOB_COLUMNS)) continue;
    const value: unknown = patch[key];
    columns[JOB_COLUMNS[key]] =
      value instanceof Date
        ? engine.time(value)
        : key === "attachments"
          ? engine.jsonText(JSON.stringify(value))
          : (value ?? null);
  }
  return columns as Updateable<JobsTable>;
}

function versionFields(row: Selectable<VersionsTable>) {
  return {
    name: row.name,
    version: row.version,
    contentHash: row.content_hash,
    plugin: row.plugin,
    pluginVersion: row.plugin_version,
    pluginPath: row.plugin_path,
    publishedAt: toDate(row.published_at),
  };
}

export function toAgent(row: Selectable<AgentVersionsTable>): AgentVersionRecord {
  return {
    ...versionFields(row),
    definition: fromJson(row.definition) as AgentVersionRecord["definition"],
    instructions: row.instructions,
    harness: fromJson(row.harness) as AgentVersionRecord["harness"],
  };
}

export function toGraphVersion(row: Selectable<VersionsTable>): GraphVersionRecord {
  return { ...versionFields(row), definition: fromJson(row.definition) as GraphDefinition };
}

export function toGraphJob(row: Selectable<GraphJobsTable>): GraphJobRecord {
  return {
    jobId: row.job_id,
    graph: row.graph,
    version: row.version,
    pinnedAgents: fromJson(row.pinned_agents),
    createdAt: toDate(row.created_at),
  };
}

export function toPermission(row: Selectable<PermissionsTable>): PermissionRecord {
  const answeredAt = optionalDate(row.answered_at);
  return {
    jobId: row.job_id,
    id: row.id,
    callId: row.call_id,
    sessionId: row.session_id,
    tool: row.tool,
    ...(row.input !== null ? { input: fromJson(row.input) as JsonObject } : {}),
    title: row.title,
    needsPerson: toBool(row.needs_person),
    status: row.status as PermissionRecord["status"],
    reason: row.reason,
    ...(row.decider !== null ? { decider: row.decider as PermissionRecord["decider"] } : {}),
    answeredBy: row.answered_by,
    ...(row.answer_input !== null ? { answerInput: fromJson(row.answer_input) as JsonObject } : {}),
    ...(row.input_changed_by !== "" ? { inputChangedBy: row.input_changed_by } : {}),
    requestedAt: toDate(row.requested_at),
    ...(answeredAt ? { answeredAt } : {}),
    delivered: toBool(row.delivered),
    ...(row.runtime_call !== "" ? { runtimeCall: row.runtime_call } : {}),
  };
}

export function permissionColumns(engine: SqlEngine, p: PermissionRecord): PermissionsTable {
  return {
    job_id: p.jobId,
    id: p.id,
    call_id: p.callId,
    session_id: p.sessionId,
    tool: p.tool,
    input: p.input ? engine.jsonText(JSON.stringify(p.input)) : null,
    title: p.title,
    needs_person: engine.bool(p.needsPerson),
    status: p.status,
    reason: p.reason,
    decider: p.decider ?? null,
    answered_by: p.answeredBy,
    answer_input: p.answerInput ? engine.jsonText(JSON.stringify(p.answerInput)) : null,
    input_changed_by: p.inputChangedBy ?? "",
    requested_at: engine.time(p.requestedAt),
    answered_at: p.answeredAt ? engine.time(p.answeredAt) : null,
    delivered: engine.bool(p.delivered),
    runtime_call: p.runtimeCall ?? "",
  };
}

export function toPlugin(row: Selectable<PluginsTable>): PluginRecord {
  return {
    name: row.name,
    version: row.version,
    description: row.description,
    source: row.source,
    path: row.path,
    manifest: fromJson(row.manifest) as PluginRecord["manifest"],
    installedAt: toDate(row.installed_at),
  };
}
