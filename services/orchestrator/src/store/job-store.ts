// The orchestrator's durable state behind one interface: plugins, immutable
// agent versions, jobs, every job event with its sequence number, and
// permission requests (the durable approval records). One implementation of
// its queries for both engines (sql-job-store.ts, on Kysely): SQLite for the
// embedded default (sqlite-store.ts), PostgreSQL for replicas
// (postgres-store.ts); both pass the same suite (test/job-store-suite.ts).
import { fromJsonString } from "@bufbuild/protobuf";
import { RawEventSchema, type RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import type { JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { OrchestratorError } from "../orchestrator-error.js";
import type { AgentDefinition, HarnessManifest, PluginManifest } from "../plugins/plugin-types.js";

export type JobStateName = "pending" | "running" | "waiting" | "succeeded" | "failed" | "cancelled";

export const ACTIVE_JOB_STATES: readonly JobStateName[] = ["pending", "running", "waiting"];

export function isTerminal(state: JobStateName): boolean {
  return !ACTIVE_JOB_STATES.includes(state);
}

export type JsonObject = { [key: string]: unknown };

/**
 * A decision on a call that another replica decided after this one read it waiting: nothing of the append is
 * stored. The first decision stands; the caller reads it back to say what became of the call.
 */
export class DecidedMeanwhileError extends OrchestratorError {
  constructor(p: { jobId: string; id: string; status: string }, current: { status: string; answeredBy: string }) {
    super(
      "failed_precondition",
      `call ${p.id} of job ${p.jobId} was already ${current.status}${current.answeredBy ? ` by ${current.answeredBy}` : ""} meanwhile; this ${p.status} answer is refused`,
    );
    this.name = "DecidedMeanwhileError";
  }
}

export interface PluginRecord {
  name: string;
  version: string;
  description: string;
  /** Where it was installed from (git URL or path). */
  source: string;
  /** Its immutable copy in the data directory. */
  path: string;
  manifest: PluginManifest;
  installedAt: Date;
}

/** The harness an agent version runs, resolved at publication. */
export interface ResolvedHarness {
  /** The plugin that declares the harness. */
  plugin: string;
  /** That plugin's copy in the data directory (relative commands resolve here). */
  pluginPath: string;
  manifest: HarnessManifest;
}

/** What publishing an agent version takes. */
export interface NewAgentVersion {
  name: string;
  contentHash: string;
  plugin: string;
  pluginVersion: string;
  /** The plugin copy this version comes from. */
  pluginPath: string;
  definition: AgentDefinition;
  /** The instructions file's content, rendered at publication. */
  instructions: string;
  harness: ResolvedHarness;
}

/** One immutable, published agent version. */
export interface AgentVersionRecord extends NewAgentVersion {
  version: number;
  publishedAt: Date;
}

export interface JobRecord {
  id: string;
  agentName: string;
  agentVersion: number;
  input: string;
  state: JobStateName;
  createdAt: Date;
  updatedAt: Date;
  finishedAt?: Date;
  resultText: string;
  /** oz0.harness.v1.StopReason number; 0 until the session ends. */
  stopReason: number;
  error: string;
  sessionId: string;
  sandboxUrl: string;
  /** Sequence number of the job's last stored event. */
  lastSeq: number;
  /** The sandbox's sequence number of the last session message handled (for re-attach). */
  sandboxSeq: number;
  attachments: string[];
  /** The LLM proxy's id for the session token, to revoke it. */
  tokenId: string;
  /** Set once someone asked to cancel; the job ends `cancelled`. */
  cancelRequestedAt?: Date;
  /**
   * The runtime tools the orchestrator serves this job itself, by name
   * (`graph-manager`), or "" for none. Stored so any replica that runs the
   * job, after a restart or a takeover, serves them the same way.
   */
  servedTools: string;
  /** The principal who started the job (a person's id, or "" before identities were kept); approvals.prevent_self_approval refuses their answers. */
  startedBy: string;
  /** When it began running: its first session started (a graph run: when it was created). */
  startedAt?: Date;
  /** Its trace's id when its spans were exported (tracing.ts), for `oz0 jobs show` and a link to a trace viewer. */
  traceId?: string;
  /**
   * Its root span (`invoke_agent`) as a W3C traceparent, stored when it is
   * created: a replica that resumes the job continues this trace, and calls
   * about the job link this span (tracing.ts). Absent on jobs from before.
   */
  traceparent?: string;
  /**
   * The rule its session broke (the tool policy, the protocol), "" when none: the job fails with it and its
   * artifacts are withheld, whichever replica ends it (a restart in between included).
   */
  ruleBroken: string;
}

/** What a new job is made of; the rest of its record starts empty (nothing ran yet). */
export type NewJob = Pick<
  JobRecord,
  | "id"
  | "agentName"
  | "agentVersion"
  | "input"
  | "state"
  | "sessionId"
  | "attachments"
  | "servedTools"
  | "startedBy"
  | "startedAt"
>;

/** A job's record as it is first stored: the one place a JobRecord is made from nothing. */
export function newJobRecord(job: NewJob, now: Date): JobRecord {
  return {
    ...job,
    createdAt: now,
    updatedAt: now,
    resultText: "",
    stopReason: 0,
    error: "",
    // Set when the session is placed on a node.
    sandboxUrl: "",
    lastSeq: 0,
    sandboxSeq: 0,
    tokenId: "",
    ruleBroken: "",
  };
}

export type JobPatch = Partial<Omit<JobRecord, "id" | "createdAt" | "lastSeq">>;

export type PermissionStatus = "pending" | "approved" | "denied" | "cancelled" | "timed_out";
export type DeciderName = "policy" | "hook" | "person" | "runtime";

/** One permission request of a session and what became of it. */
export interface PermissionRecord {
  jobId: string;
  /** The PermissionRequest's id. */
  id: string;
  callId: string;
  sessionId: string;
  tool: string;
  input?: JsonObject;
  title: string;
  /** True when it waits (or waited) for a person: an approval. */
  needsPerson: boolean;
  status: PermissionStatus;
  reason: string;
  decider?: DeciderName;
  answeredBy: string;
  /** The changed input an answer carries: a hook's (also while the call waits for a person), or an approver's edit. */
  answerInput?: JsonObject;
  /** Who chose `answerInput`: the hook's label (`hook quiet-tests (agent coder)`) or `person ID`. */
  inputChangedBy?: string;
  requestedAt: Date;
  answeredAt?: Date;
  /** The answer has been written to the session. */
  delivered: boolean;
  /**
   * The runtime tool call that used this permission (ApprovalService.permitRuntimeCall): an approved
   * permission allows one such call. Stored, so a restart or another replica cannot let it allow a second.
   */
  runtimeCall?: string;
}

/** `text` for a LIKE pattern: its %, _ and \ match only themselves (with ESCAPE '\'). */
export function likeEscaped(text: string): string {
  return text.replace(/[\\%_]/g, (c) => `\\${c}`);
}

export interface ListJobsQuery {
  limit?: number;
  state?: JobStateName;
  agent?: string;
  /** Only the job with this id, or jobs whose input contains it (any case). */
  text?: string;
  /** Only jobs listed after the job with this id (older, in the list's order): the next page. */
  after?: string;
}

export interface ListPermissionsQuery {
  jobId?: string;
  /** Only approvals (requests that need a person). */
  approvalsOnly?: boolean;
  /** Only undecided ones. */
  pendingOnly?: boolean;
  /** Only decided but not yet delivered to the session. */
  undeliveredOnly?: boolean;
  /** Only those listed after this one (job id and request id), in the list's order: the next page. */
  after?: { jobId: string; id: string };
  /** At most this many. */
  limit?: number;
}

/** Everything one step of a job changes, written in one transaction. */
export interface JobAppend {
  jobId: string;
  /** Stored in order with the next sequence numbers; `seq` and `jobId` are filled in. */
  events: JobEvent[];
  job?: JobPatch;
  permissions?: PermissionRecord[];
  /**
   * Lifecycle events reporting this change, kept for the events service in
   * the same transaction (cluster/lifecycle-outbox.ts ships them): durable exactly
   * when the change is, whatever happens to the process after.
   */
  lifecycle?: RawEvent[];
  /** A piece of a session's stderr, stored with the sandbox seq that passes it. */
  stderr?: StderrAppend;
}

/** What a job is created with besides its row, in the same transaction. */
export interface JobCreation {
  /** Its first events; `seq` and `jobId` are filled in. */
  events?: JobEvent[];
  /** The lifecycle events reporting its creation (see JobAppend.lifecycle). */
  lifecycle?: RawEvent[];
}

/** A piece of a session's stderr as the sandbox logged it (the session token already scrubbed). */
export interface StderrPiece {
  /** The sandbox's seq of the piece. */
  seq: number;
  /** UTF-8 text; may be empty when the sandbox dropped the whole piece. */
  text: string;
  /** Bytes the session wrote just before `text` that are not kept. */
  droppedBytes: number;
}

/**
 * Storing one piece: a piece whose seq is not above the last one stored for
 * its session is a repeat (a re-attach) and changes nothing. The session
 * keeps at most `maxBytes` of text: a longer piece keeps its end, and the
 * oldest pieces go (their bytes counted in `droppedBytes`) once the kept
 * ones exceed it.
 */
export interface StderrAppend {
  sessionId: string;
  piece: StderrPiece;
  maxBytes: number;
}

/** A session's stored stderr, without its pieces. */
export interface SessionStderr {
  sessionId: string;
  /** Bytes of text its pieces hold. */
  keptBytes: number;
  /** Bytes written before its first piece that are not kept. */
  droppedBytes: number;
  /** Bytes written after its last piece that are not kept (pieces the sandbox dropped whole). */
  trailingDroppedBytes: number;
}

/**
 * A lifecycle event waiting to reach the events service; `seq` orders them as stored. `unreadable` instead of
 * `event`: its stored JSON no longer reads as a RawEvent (why), so it can never be sent.
 */
export type StoredLifecycleEvent = { seq: number; event: RawEvent } | { seq: number; unreadable: string };

/**
 * Claimed outbox rows as events, each read alone: a row that does not read (a field out of its range, from a
 * producer before its checks) is marked unreadable rather than failing the claim, which would leave it, and
 * every event claimed with it (other jobs' too), in the outbox for good. Oldest first (RETURNING gives no order).
 */
export function storedLifecycleEvents(rows: { seq: number; json: string }[]): StoredLifecycleEvent[] {
  return rows
    .map(({ seq, json }): StoredLifecycleEvent => {
      try {
        return { seq, event: fromJsonString(RawEventSchema, json) };
      } catch (error) {
        return { seq, unreadable: (error as Error).message };
      }
    })
    .sort((a, b) => a.seq - b.seq);
}

export interface PublishResult {
  record: AgentVersionRecord;
  /** False when the latest version already had this content. */
  published: boolean;
}

/**
 * A harness operation invocation's durable record (operation-runner.ts),
 * keyed by job and runtime tool call id: written when the call is accepted,
 * again when its result validated (the checkpoint) and when it was delivered.
 */
export interface OperationCheckpoint {
  jobId: string;
  /** The RuntimeToolCall's id. */
  callId: string;
  invocationId: string;
  operationKey: string;
  /** Kept so a crash before the checkpoint can run the operation again. */
  task: string;
  startedAt: string;
  status: "running" | "validated" | "failed";
  /** The validated result, once status is validated. */
  result?: JsonObject;
  /** What the parent's model was told, once status is failed. */
  error?: string;
  errorCode?: string;
  /** The answer reached the parent's session stream. */
  delivered: boolean;
  /** Scratch sessions started for it, so a restart can stop leftovers. */
  scratchSessionIds: string[];
}

export interface JobStore {
  putPlugin(record: PluginRecord): Promise<void>;
  getPlugin(name: string): Promise<PluginRecord | undefined>;
  listPlugins(): Promise<PluginRecord[]>;

  /** Publish a new version unless the latest one has the same content hash. */
  publishAgentVersion(version: NewAgentVersion): Promise<PublishResult>;
  /** The latest version when `version` is unset. */
  getAgentVersion(name: string, version?: number): Promise<AgentVersionRecord | undefined>;
  /** Every agent at its latest version, by name. */
  listAgents(): Promise<AgentVersionRecord[]>;
  /** Oldest first. */
  listAgentVersions(name: string): Promise<AgentVersionRecord[]>;

  /**
   * Stores a new job; with `first`, its first events (numbered after `job.lastSeq`) and the lifecycle events
   * reporting it in the same transaction. Returns the stored events.
   */
  createJob(job: JobRecord, first?: JobCreation): Promise<JobEvent[]>;
  getJob(id: string): Promise<JobRecord | undefined>;
  /** Newest first. */
  listJobs(query?: ListJobsQuery): Promise<JobRecord[]>;
  updateJob(id: string, patch: JobPatch): Promise<JobRecord>;
  /**
   * Appends events (assigning seq), applies the job patch and upserts permissions atomically; returns the stored
   * events. A decision on a call already decided (by another replica, since the caller read it waiting) refuses
   * the whole append with {@link DecidedMeanwhileError}.
   */
  append(change: JobAppend): Promise<JobEvent[]>;
  /** Events with seq > afterSeq, in order. */
  listJobEvents(jobId: string, afterSeq: number, limit?: number): Promise<JobEvent[]>;
  /** The sessions of the job with stored stderr, in the order they first wrote. */
  listStderrSessions(jobId: string): Promise<SessionStderr[]>;
  /** A session's stored stderr pieces with seq > afterSeq, in order, at most `limit` (default 1000). */
  listStderrPieces(jobId: string, sessionId: string, afterSeq: number, limit?: number): Promise<StderrPiece[]>;

  getPermission(jobId: string, id: string): Promise<PermissionRecord | undefined>;
  listPermissions(query: ListPermissionsQuery): Promise<PermissionRecord[]>;
  markPermissionDelivered(jobId: string, id: string): Promise<void>;
  /**
   * Lets an approved permission allow the runtime tool call `callId`, once: true when the permission is now
   * that call's (or already was), false when it is not approved or another call has it. Atomic, so two
   * replicas (or a process before and after a restart) never both have it.
   */
  usePermissionForRuntimeCall(jobId: string, id: string, callId: string): Promise<boolean>;
  /**
   * The approved permissions of a job's `tool` that runtime call `callId` may
   * use (none other has), oldest first, at most `limit`: what
   * usePermissionForRuntimeCall is asked for, without reading the job's
   * every permission.
   */
  runtimeCallPermits(query: {
    jobId: string;
    tool: string;
    callId: string;
    limit: number;
  }): Promise<PermissionRecord[]>;

  /** Insert or replace a harness operation's record. */
  putOperationCheckpoint(record: OperationCheckpoint): Promise<void>;

  /** Keeps lifecycle events that go with no job write of their own, for the events service. */
  putLifecycleEvents(events: RawEvent[]): Promise<void>;
  /**
   * Up to `limit` kept lifecycle events, oldest first, claimed for `claimMs`:
   * no other caller gets them until the claim runs out, so a shipper that
   * died lets go of them by itself.
   */
  claimLifecycleEvents(options: { limit: number; claimMs: number }): Promise<StoredLifecycleEvent[]>;
  /** The events service accepted them: they are no longer kept. */
  deleteLifecycleEvents(seqs: number[]): Promise<void>;
  /** Not delivered this time: the claim ends, and the next claim gets them again. */
  releaseLifecycleEvents(seqs: number[]): Promise<void>;
  /** Keeps a session token just minted for `jobId` until {@link forgetSessionToken}. */
  recordSessionToken(tokenId: string, jobId: string): Promise<void>;
  /** A revoke of the token was asked for and did not succeed: {@link claimSessionTokensToRevoke} gets it. */
  markSessionTokenRevokeAsked(tokenId: string): Promise<void>;
  /** The token's revoke succeeded: it is no longer kept. */
  forgetSessionToken(tokenId: string): Promise<void>;
  /**
   * Up to `limit` kept tokens to revoke now (those whose revoke was asked
   * for, and those of jobs that have ended), claimed for `claimMs`: no other
   * sweep gets them until the claim runs out, so a sweep that died lets go
   * of them by itself.
   */
  claimSessionTokensToRevoke(options: { limit: number; claimMs: number }): Promise<string[]>;
  /** Not revoked this time: the claim ends, and the next sweep gets them again. */
  releaseSessionTokens(tokenIds: string[]): Promise<void>;
  getOperationCheckpoint(jobId: string, callId: string): Promise<OperationCheckpoint | undefined>;
  /** The job's operation records, by call id. */
  listOperationCheckpoints(jobId: string): Promise<OperationCheckpoint[]>;

  close(): Promise<void>;
}

/**
 * What storing `piece` keeps of it: its text cut to its last `maxBytes`
 * (starting on a whole character), and the bytes dropped before that text.
 */
export function keptPiece(piece: StderrPiece, maxBytes: number): { text: string; bytes: number; droppedBytes: number } {
  const buffer = Buffer.from(piece.text);
  if (buffer.length <= maxBytes) return { text: piece.text, bytes: buffer.length, droppedBytes: piece.droppedBytes };
  let start = buffer.length - maxBytes;
  // Skip continuation bytes (10xxxxxx): a character cut in two is dropped whole.
  while (start < buffer.length && (buffer[start]! & 0xc0) === 0x80) start++;
  return {
    text: buffer.subarray(start).toString("utf8"),
    bytes: buffer.length - start,
    droppedBytes: piece.droppedBytes + start,
  };
}
