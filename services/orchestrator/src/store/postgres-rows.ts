// The rows of the orchestrator's PostgreSQL tables as node-postgres returns
// them, and their mapping to the JobStore's records (postgres-store.ts). Kept
// apart from the queries so a column added to a table is one place here.
import type {
  AgentVersionRecord,
  JobPatch,
  JobRecord,
  JobStateName,
  JsonObject,
  PermissionRecord,
  PluginRecord,
} from "./job-store.js";

export interface JobRow {
  id: string;
  agent_name: string;
  agent_version: number;
  input: string;
  state: string;
  created_at: Date;
  updated_at: Date;
  finished_at: Date | null;
  result_text: string;
  stop_reason: number;
  error: string;
  session_id: string;
  sandbox_url: string;
  last_seq: string;
  sandbox_seq: string;
  attachments: string[];
  token_id: string;
  cancel_requested_at: Date | null;
  served_tools: string;
  started_by: string;
  started_at: Date | null;
  trace_id: string;
}

export interface AgentRow {
  name: string;
  version: number;
  content_hash: string;
  plugin: string;
  plugin_version: string;
  plugin_path: string;
  definition: AgentVersionRecord["definition"];
  instructions: string;
  harness: AgentVersionRecord["harness"];
  published_at: Date;
}

export interface PermissionRow {
  job_id: string;
  id: string;
  call_id: string;
  session_id: string;
  tool: string;
  input: JsonObject | null;
  title: string;
  needs_person: boolean;
  status: string;
  reason: string;
  decider: string | null;
  answered_by: string;
  answer_input: JsonObject | null;
  requested_at: Date;
  answered_at: Date | null;
  delivered: boolean;
}

export interface PluginRow {
  name: string;
  version: string;
  description: string;
  source: string;
  path: string;
  manifest: PluginRecord["manifest"];
  installed_at: Date;
}

// Column names are fixed here, never taken from input; values always go as parameters.
export const JOB_COLUMNS: Record<keyof JobPatch, string> = {
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
};

export function toJob(row: JobRow): JobRecord {
  return {
    id: row.id,
    agentName: row.agent_name,
    agentVersion: row.agent_version,
    input: row.input,
    state: row.state as JobStateName,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    ...(row.finished_at !== null ? { finishedAt: row.finished_at } : {}),
    resultText: row.result_text,
    stopReason: row.stop_reason,
    error: row.error,
    sessionId: row.session_id,
    sandboxUrl: row.sandbox_url,
    // bigint columns arrive as strings; sequence numbers stay far below 2^53.
    lastSeq: Number(row.last_seq),
    sandboxSeq: Number(row.sandbox_seq),
    attachments: row.attachments,
    tokenId: row.token_id,
    ...(row.cancel_requested_at !== null ? { cancelRequestedAt: row.cancel_requested_at } : {}),
    servedTools: row.served_tools,
    startedBy: row.started_by,
    ...(row.started_at !== null ? { startedAt: row.started_at } : {}),
    ...(row.trace_id ? { traceId: row.trace_id } : {}),
  };
}

export function toAgent(row: AgentRow): AgentVersionRecord {
  return {
    name: row.name,
    version: row.version,
    contentHash: row.content_hash,
    plugin: row.plugin,
    pluginVersion: row.plugin_version,
    pluginPath: row.plugin_path,
    definition: row.definition,
    instructions: row.instructions,
    harness: row.harness,
    publishedAt: row.published_at,
  };
}

export function toPermission(row: PermissionRow): PermissionRecord {
  return {
    jobId: row.job_id,
    id: row.id,
    callId: row.call_id,
    sessionId: row.session_id,
    tool: row.tool,
    ...(row.input !== null ? { input: row.input } : {}),
    title: row.title,
    needsPerson: row.needs_person,
    status: row.status as PermissionRecord["status"],
    reason: row.reason,
    ...(row.decider !== null ? { decider: row.decider as PermissionRecord["decider"] } : {}),
    answeredBy: row.answered_by,
    ...(row.answer_input !== null ? { answerInput: row.answer_input } : {}),
    requestedAt: row.requested_at,
    ...(row.answered_at !== null ? { answeredAt: row.answered_at } : {}),
    delivered: row.delivered,
  };
}

export function toPlugin(row: PluginRow): PluginRecord {
  return {
    name: row.name,
    version: row.version,
    description: row.description,
    source: row.source,
    path: row.path,
    manifest: row.manifest,
    installedAt: row.installed_at,
  };
}

// node-postgres sends a JS array as a PostgreSQL array, so jsonb values go as JSON text.
export function patchValue(key: keyof JobPatch, value: unknown): unknown {
  if (key === "attachments") return JSON.stringify(value);
  return value ?? null;
}

export function jsonOrNull(value: JsonObject | undefined): string | null {
  return value === undefined ? null : JSON.stringify(value);
}
