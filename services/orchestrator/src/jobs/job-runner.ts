// Runs jobs: pins the agent version, stores the job, mints the session token,
// opens the session on a sandbox, stores every session event with its
// sequence number (and the sandbox's, for re-attach), answers permission
// requests through the policy, finishes the job with its result and
// artifacts. On start-up it re-attaches to every job that was running.
import { existsSync, lstatSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { create, fromJson, type JsonObject as ProtoJsonObject } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import {
  PermissionAnswer_Outcome,
  PermissionAnswerSchema,
  RuntimeToolResultSchema,
  SessionResultSchema,
  StopReason,
  type RuntimeTool,
  type RuntimeToolCall,
  type SessionEvent,
  type SessionResult,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { LifecycleType } from "@oz0/events-client";
import type { RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import {
  Decider,
  JobEventSchema,
  JobState,
  ServedToolCallSchema,
  type JobEvent,
  type ServedToolCall,
} from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { Logger } from "@oz0/serving";
import { AgentVersions, parseDuration } from "../agents/agent-versions.js";
import { answerRefusal, approvalDeadline, ApprovalDeadlines, type Answerer } from "../approvals/approval-deadlines.js";
import type { JobFeed } from "./job-feed.js";
import { JOB_STATE_TO_PROTO } from "./job-events.js";
import {
  ACTIVE_JOB_STATES,
  isTerminal,
  newJobRecord,
  type AgentVersionRecord,
  type DeciderName,
  type JobPatch,
  type JobRecord,
  type JobStateName,
  type JobStore,
  type JsonObject,
  type PermissionRecord,
  type StderrAppend,
} from "../store/job-store.js";
import { DEFAULT_MAX_STDERR_BYTES, stderrAppend, storedStderrTail, withStderr } from "../sessions/harness-stderr.js";
import { asBystander, soleOwnership, type JobOwnership } from "../cluster/job-ownership.js";
import { LeaseLostError } from "../cluster/lease-manager.js";
import { OperationRunner, operationRuntimeTools, type OperationParent } from "../operations/operation-runner.js";
import { failedPrecondition, invalidArgument, notFound, OrchestratorError, permissionDenied } from "../orchestrator-error.js";
import type { PermissionPolicy, PolicyDecision } from "../policy/permission-policy.js";
import {
  SessionNotFoundError,
  type LifecycleInit,
  type LifecycleSink,
  type SandboxMessage,
  type SessionArtifact,
  type SessionRunner,
  type TokenIssuer,
} from "../sessions/session-runner.js";
import { SessionDriver, type FollowOptions, type PlaceOptions, type SessionEnd, type SessionState } from "../sessions/session-driver.js";
import { agentSessionStart } from "../sessions/session-request.js";
import { newJobId, newSessionId } from "../store/ids.js";
import type { LostSession, SandboxPlacement } from "../sessions/sandbox-placement.js";
import { toolResultViolation } from "../policy/tool-call-audit.js";

const DECIDER_TO_PROTO: Record<DeciderName, Decider> = {
  policy: Decider.POLICY,
  hook: Decider.HOOK,
  person: Decider.PERSON,
  runtime: Decider.RUNTIME,
};

export interface JobRunnerOptions {
  store: JobStore;
  feed: JobFeed;
  /** Which sandbox node each session runs on (sandbox-placement.ts). */
  placement: SandboxPlacement;
  tokens: TokenIssuer;
  policy: PermissionPolicy;
  lifecycle?: LifecycleSink;
  /** The data directory; artifacts go under jobs/<id>/artifacts. */
  home: string;
  logger: Logger;
  /** How often a lost sandbox stream is re-attached before the job fails. Default 5. */
  reattachAttempts?: number;
  /** Repair sessions a harness operation gets when its result does not validate. Default 2. */
  operationRepairs?: number;
  /** Which jobs this replica works on (job-ownership.ts). Default: every job (one orchestrator). */
  ownership?: JobOwnership;
  /** Runtime tools the orchestrator serves jobs itself, by the name runAgent's `servedTools` gives. */
  servedTools?: Record<string, ServedRuntimeTools>;
  /** How much of each session's stderr is stored, its last bytes (OZ0_MAX_SESSION_STDERR_BYTES). Default 1 MiB. */
  maxStderrBytes?: number;
}

/**
 * Runtime tools the orchestrator serves some jobs itself (a graph's manager
 * agent gets its decision tools this way). Offering them is the
 * orchestrator's decision, so their calls are allowed without the tool
 * policy. A job names its set (`JobRecord.servedTools`), so any replica that
 * runs it, after a restart or a takeover, serves it alike. Each call and its
 * answer are recorded as the job's `servedToolCall` event before the answer
 * reaches the session; that record is what was decided.
 */
export interface ServedRuntimeTools {
  tools: RuntimeTool[];
  /** The answer to a call, from the call and the job's earlier served calls (oldest first) only. */
  answer(call: { name: string; input: ProtoJsonObject }, earlier: readonly ServedToolCall[]): { output: ProtoJsonObject } | { error: string };
}

/** A job whose session this process follows; `sandbox` (the session's node) is unset until it is placed. */
interface ActiveJob extends SessionState {
  agent: AgentVersionRecord;
  result?: SessionResult;
  exitError: string;
  /** Set when the harness broke the tool policy; the job fails with it. */
  violation?: string;
  /** Set when the sandbox failed the session (the harness broke the protocol or a limit); the job fails with it, whatever its result. */
  sessionFailure?: string;
  /** Another replica took the job's lease: stop following it without finishing it. */
  abandoned?: boolean;
  /** Re-attached to a session that may never have started: start it if the sandbox does not know it. */
  startIfUnknown?: boolean;
  /** The job's events already say it waits for room on a node (said once, not per attempt). */
  waitSaid?: boolean;
  /** Its node went silent, and that is being dealt with (handleLostSession): once, whoever noticed first. */
  lostHandled?: boolean;
}

/**
 * One step of a job, in one transaction: its events, the job's changes,
 * permission records, and the lifecycle events reporting it (from the sink's
 * `event`; undefined ones are left out). Once it committed, watchers in this
 * process hear of the events and the outbox ships the lifecycle events.
 */
export async function appendJobStep(
  deps: { store: JobStore; feed: JobFeed; lifecycle?: LifecycleSink },
  step: { jobId: string; events: Partial<JobEvent>[]; job?: JobPatch; permissions?: PermissionRecord[]; lifecycle?: (RawEvent | undefined)[]; stderr?: StderrAppend },
): Promise<JobEvent[]> {
  const lifecycle = (step.lifecycle ?? []).filter((e): e is RawEvent => e !== undefined);
  const stored = await deps.store.append({
    jobId: step.jobId,
    events: step.events.map((e) => create(JobEventSchema, e as JobEvent)),
    ...(step.job ? { job: step.job } : {}),
    ...(step.permissions ? { permissions: step.permissions } : {}),
    ...(lifecycle.length ? { lifecycle } : {}),
    ...(step.stderr ? { stderr: step.stderr } : {}),
  });
  if (lifecycle.length) deps.lifecycle?.committed();
  deps.feed.publish(step.jobId, stored);
  return stored;
}

/** Why a pending job has not started, in its events. */
export const WAITING_FOR_ROOM = "waiting for a sandbox node with free capacity: every node is full, or none sends heartbeats; the job starts when one has room";

/** A job's input is a prompt, not a payload: larger material goes in an attachment. */
export const MAX_JOB_INPUT_BYTES = 2 * 1024 * 1024;
/** What a job's attachments may add up to; the sandbox copies them into every session of the job. */
export const MAX_ATTACHMENT_BYTES = 256 * 1024 * 1024;

export function checkJobInput(input: string): void {
  const bytes = Buffer.byteLength(input);
  if (bytes > MAX_JOB_INPUT_BYTES) {
    throw invalidArgument(`the job's input is ${bytes} bytes; at most ${MAX_JOB_INPUT_BYTES} (2 MiB) are taken: put larger material in a file and pass it with --attach`);
  }
}

/** Walks the attachments (symbolic links are not followed) and refuses them past MAX_ATTACHMENT_BYTES. */
function checkAttachmentsSize(paths: readonly string[]): void {
  let total = 0;
  const walk = (p: string): void => {
    const stat = lstatSync(p);
    if (stat.isDirectory()) for (const entry of readdirSync(p)) walk(path.join(p, entry));
    else if (stat.isFile()) total += stat.size;
    if (total > MAX_ATTACHMENT_BYTES) {
      throw invalidArgument(`the job's attachments add up to more than ${MAX_ATTACHMENT_BYTES} bytes (256 MiB); attach less, or give the agent a way to fetch what it needs`);
    }
  };
  for (const p of paths) walk(p);
}

/** A person's answer to a call that waits for them; `answeredBy` is the authenticated principal, never a name from the request. */
export interface AnswerOptions {
  jobId: string;
  callId: string;
  allow: boolean;
  input?: JsonObject;
  reason?: string;
  answeredBy: Answerer;
}

export class JobRunner {
  readonly #o: JobRunnerOptions;
  readonly #agents: AgentVersions;
  readonly #active = new Map<string, ActiveJob>();
  readonly #running = new Set<Promise<void>>();
  readonly #locks = new Map<string, Promise<unknown>>();
  readonly #operations: OperationRunner;
  #nodeWatch: NodeJS.Timeout | undefined;
  #closing = false;
  readonly #deadlines: ApprovalDeadlines;
  readonly #ownership: JobOwnership;
  readonly #sessions: SessionDriver;

  constructor(options: JobRunnerOptions) {
    this.#o = options;
    this.#ownership = options.ownership ?? soleOwnership;
    this.#agents = new AgentVersions({ store: options.store });
    this.#operations = new OperationRunner({
      store: options.store,
      tokens: options.tokens,
      policy: options.policy,
      logger: options.logger,
      ...(options.lifecycle ? { lifecycle: options.lifecycle } : {}),
      ...(options.operationRepairs !== undefined ? { maxRepairs: options.operationRepairs } : {}),
      ...(options.maxStderrBytes !== undefined ? { maxStderrBytes: options.maxStderrBytes } : {}),
    });
    this.#sessions = new SessionDriver({
      placement: options.placement,
      logger: options.logger,
      ...(options.reattachAttempts !== undefined ? { reattachAttempts: options.reattachAttempts } : {}),
    });
    this.#deadlines = new ApprovalDeadlines({
      onDeadline: (jobId, permissionId) => this.#timeOut(jobId, permissionId),
      onError: (error) => options.logger.error({ err: error }, "could not time out an approval"),
    });
  }

  /** The parent side of a harness operation call: the job's session, its deadline, and its current stream. */
  #operationParent(job: JobRecord, active: ActiveJob): OperationParent {
    const timeout = active.agent.definition.limits?.timeout;
    const timeoutMs = timeout ? parseDuration(timeout) : 0;
    return {
      jobId: job.id,
      sessionId: job.sessionId,
      agent: active.agent,
      sandbox: active.sandbox!,
      // From the job's creation: never later than the deadline its session was given.
      ...(timeoutMs > 0 ? { deadline: new Date(job.createdAt.getTime() + timeoutMs) } : {}),
      answer: async (result) => {
        const channel = this.#active.get(job.id)?.channel;
        if (!channel) throw new Error("the job's session is not attached");
        await channel.answerRuntimeTool(result);
      },
    };
  }

  /** Serialize everything that changes one job (session messages, answers, cancel). */
  #withLock<T>(jobId: string, fn: () => Promise<T>): Promise<T> {
    const previous = this.#locks.get(jobId) ?? Promise.resolve();
    const next = previous.then(fn, fn);
    const settled = next.catch(() => undefined);
    this.#locks.set(jobId, settled);
    void settled.then(() => {
      if (this.#locks.get(jobId) === settled) this.#locks.delete(jobId);
    });
    return next;
  }

  #track(work: Promise<void>): void {
    const p = work.catch((error: unknown) => this.#o.logger.error({ err: error }, "job work failed"));
    this.#running.add(p);
    void p.finally(() => this.#running.delete(p));
  }

  #sandboxFor(url: string): SessionRunner {
    return this.#o.placement.runnerFor(url);
  }

  /**
   * How the job's session is placed: on a node with room, stored as the
   * job's node before the session starts (so a restart re-attaches there);
   * waiting while every node is full, until the job is cancelled, ends or
   * is abandoned.
   */
  #placing(job: JobRecord, active: ActiveJob): PlaceOptions {
    return {
      jobId: job.id,
      sessionId: job.sessionId,
      stop: async () => {
        if (this.#closing || active.abandoned) return true;
        const current = await this.#o.store.getJob(job.id);
        return !current || current.cancelRequestedAt !== undefined || isTerminal(current.state);
      },
      waiting: () => this.#sayWaiting(job.id, active),
      placed: async (sandbox) => {
        await this.#o.store.updateJob(job.id, { sandboxUrl: sandbox.url });
      },
    };
  }

  /** Once per job: otherwise a waiting job only shows "pending", and why is in the orchestrator's log alone. */
  async #sayWaiting(jobId: string, active: ActiveJob): Promise<void> {
    if (active.waitSaid) return;
    active.waitSaid = true;
    await this.#append(jobId, [{ event: { case: "stateChanged", value: { state: JobState.PENDING, reason: WAITING_FOR_ROOM } } } as Partial<JobEvent>]);
  }

  async #append(
    jobId: string,
    events: Partial<JobEvent>[],
    job?: JobPatch,
    more: { permissions?: PermissionRecord[]; lifecycle?: (RawEvent | undefined)[]; stderr?: StderrAppend } = {},
  ): Promise<JobEvent[]> {
    return appendJobStep(this.#o, { jobId, events, ...(job ? { job } : {}), ...more });
  }

  /** A lifecycle event for #append to store with the change it reports (undefined when events are not published). */
  #lifecycle(type: LifecycleType, init: LifecycleInit): RawEvent | undefined {
    return this.#o.lifecycle?.event(type, init);
  }

  /**
   * `version`: run that version instead of the latest (a graph run pins its agents' versions when it starts).
   * `servedTools`: a set of `JobRunnerOptions.servedTools` the session is offered.
   * `id`: the job's id, when the caller recorded it before asking (`newJobId`), so a crash in between
   * leaves an id to create, never a second job.
   */
  async runAgent(options: { agent: string; input: string; attachments?: string[]; version?: number; servedTools?: string; id?: string; startedBy?: string }): Promise<JobRecord> {
    if (this.#closing) throw new OrchestratorError("unavailable", "the orchestrator is shutting down; try again when it is back");
    if (options.servedTools && !this.#o.servedTools?.[options.servedTools]) throw new Error(`no runtime tools named ${options.servedTools} are served here`);
    checkJobInput(options.input);
    const agent = await this.#agents.resolve(options.agent, options.version);
    const attachments = (options.attachments ?? []).map((a) => {
      if (!path.isAbsolute(a)) throw invalidArgument(`attachment ${a} is not an absolute path; pass absolute paths on the orchestrator's host`);
      if (!existsSync(a)) throw invalidArgument(`attachment ${a} does not exist on the orchestrator's host; check the path`);
      return a;
    });
    checkAttachmentsSize(attachments);
    const job = newJobRecord(
      {
        id: options.id ?? newJobId(),
        agentName: agent.name,
        agentVersion: agent.version,
        input: options.input,
        state: "pending",
        sessionId: newSessionId(),
        attachments,
        servedTools: options.servedTools ?? "",
        startedBy: options.startedBy ?? "",
      },
      new Date(),
    );
    // Leased before it exists, so no other replica takes it for an orphan.
    await this.#ownership.claim(job.id);
    try {
      await this.#o.store.createJob(job);
    } catch (error) {
      // Not created: a lease kept (and renewed) would be for nothing.
      await this.#ownership.release(job.id).catch(() => undefined);
      throw error;
    }
    const created = this.#lifecycle("job.created", {
      jobId: job.id,
      agentName: agent.name,
      agentVersion: String(agent.version),
      status: "pending",
      attributes: { harness: agent.harness.manifest.name, plugin: agent.plugin, attachment_count: attachments.length },
    });
    // The job's trace begins with that event (tracing.ts); its id is kept for `oz0 jobs show`.
    const traceId = this.#o.lifecycle?.traceIdOf?.(job.id);
    await this.#append(job.id, [{ event: { case: "stateChanged", value: { state: JobState.PENDING, reason: "" } } } as Partial<JobEvent>], traceId ? { traceId } : undefined, {
      lifecycle: [created],
    });
    const active: ActiveJob = { agent, sandboxSeq: 0, exitError: "" };
    this.#active.set(job.id, active);
    this.#track(this.#startSession(job, active));
    return (await this.#o.store.getJob(job.id))!;
  }

  /**
   * Revokes the job's session token and answers whether that proves the
   * session never reached a model: no model call ever carried the token, and
   * revoked, none ever will. A model call is the first thing a harness does
   * beyond its own sandbox, so such a session may start again elsewhere
   * without anything done twice outside a sandbox that is gone. Without a
   * token the session was never started. A proxy that does not answer (after
   * a few tries) proves nothing.
   */
  async #revokeProvesUnused(job: JobRecord): Promise<boolean> {
    if (!job.tokenId) return true;
    for (let attempt = 1; ; attempt++) {
      try {
        return (await this.#o.tokens.revoke({ tokenId: job.tokenId })).neverUsed;
      } catch (error) {
        if (attempt >= 3) {
          this.#o.logger.warn({ jobId: job.id, err: String(error) }, "could not ask the LLM proxy whether the session used its token; it counts as started");
          return false;
        }
        await new Promise((resolve) => setTimeout(resolve, 300 * attempt));
      }
    }
  }

  /** A fenced write of nothing: throws LeaseLostError once another replica took the job over. */
  async #confirmOwner(jobId: string): Promise<void> {
    await this.#o.store.append({ jobId, events: [] });
  }

  async #startSession(job: JobRecord, active: ActiveJob): Promise<void> {
    const agent = active.agent;
    const definition = agent.definition;
    // A token minted for a start that never happened (before a restart or a takeover) is not used again.
    if (job.tokenId) await this.#o.tokens.revoke({ tokenId: job.tokenId }).catch(() => undefined);
    let token;
    try {
      token = await this.#o.tokens.mint({
        jobId: job.id,
        agent: agent.name,
        agentVersion: agent.version,
        sessionId: job.sessionId,
        ...(typeof definition.harness?.max_budget_usd === "number" ? { budgetUsd: definition.harness.max_budget_usd } : {}),
      });
    } catch (error) {
      await this.#finish(job.id, { failure: `could not mint a session token at the LLM proxy: ${(error as Error).message}` });
      return;
    }
    const current = await this.#o.store.updateJob(job.id, { tokenId: token.tokenId });
    if (current.cancelRequestedAt || isTerminal(current.state)) {
      await this.#finish(job.id, {});
      return;
    }
    const timeoutMs = definition.limits?.timeout ? parseDuration(definition.limits.timeout) : 0;
    const start = agentSessionStart({
      sessionId: job.sessionId,
      jobId: job.id,
      agent,
      token,
      input: job.input,
      ...(timeoutMs > 0 ? { deadline: new Date(Date.now() + timeoutMs) } : {}),
      // Harness operations, as runtime tools, and the tools this job is served.
      runtimeTools: [...operationRuntimeTools(agent), ...(this.#served(job)?.tools ?? [])],
      attachments: job.attachments,
    });
    if (this.#closing) return;
    const end = await this.#sessions.start({
      ...this.#following(job, active),
      place: this.#placing(job, active),
      start: (sandbox) => sandbox.start(start),
    });
    await this.#sessionEnded(job.id, active, end);
  }

  /** Re-attach to every job that was running when the orchestrator stopped. */
  async resumeAll(): Promise<number> {
    const jobs: JobRecord[] = [];
    for (const state of ACTIVE_JOB_STATES) jobs.push(...(await this.#o.store.listJobs({ state, limit: 100_000 })));
    // A graph run's job has no session of its own: GraphJobs (graph-jobs.ts) resumes it from its checkpoints.
    const agentJobs = jobs.filter((job) => !job.id.startsWith("graph_"));
    for (const job of agentJobs) await this.#resume(job);
    return agentJobs.length;
  }

  /**
   * Work on a job this replica just took over (its owner died): re-attach
   * its session, or start it if it never reached a sandbox. Nothing happens
   * when the job ended meanwhile or this replica already follows it.
   */
  async resumeJob(jobId: string): Promise<void> {
    const job = await this.#o.store.getJob(jobId);
    if (!job || isTerminal(job.state)) {
      // Ended, but its owner died before letting go: its node slot too, not only the lease.
      if (job?.sessionId) await this.#o.placement.release(job.sessionId);
      await this.#ownership.release(jobId);
      return;
    }
    if (this.#active.has(jobId)) return;
    await this.#resume(job);
  }

  async #resume(resumed: JobRecord): Promise<void> {
    let job = resumed;
    const agent = await this.#o.store.getAgentVersion(job.agentName, job.agentVersion);
    if (!agent) {
      await this.#finish(job.id, { failure: `agent version ${job.agentName} v${job.agentVersion} is missing from the store` });
      return;
    }
    let sandbox: SessionRunner | undefined;
    try {
      // No node yet: the session was never placed, so it is started below.
      sandbox = job.sandboxUrl ? this.#sandboxFor(job.sandboxUrl) : undefined;
      if (sandbox && job.state === "pending" && job.sandboxSeq === 0 && this.#o.placement.tracksNodes) {
        // Nothing heard from the session yet. On a node that went silent it is given up there and
        // started on a live one, but only when its token proves it never reached a model; otherwise it
        // died with its node, and is reported lost.
        const lost = await this.#o.placement.lostSession(job.sessionId);
        if (lost && (await this.#revokeProvesUnused(job))) {
          job = await this.#renewSession(job, lost);
          sandbox = undefined;
        } else {
          // Its node holds a slot for it only while the session may run there (a slot is given back once
          // a node refused it): without one it never started.
          const placed = await this.#o.placement.place({ jobId: job.id, sessionId: job.sessionId });
          // Placed elsewhere now (or waiting for room): started below, on that node.
          if (placed?.url !== sandbox.url) sandbox = undefined;
        }
      }
    } catch (error) {
      if (error instanceof LeaseLostError) throw error;
      await this.#finish(job.id, { failure: (error as Error).message });
      return;
    }
    const active: ActiveJob = { agent, ...(sandbox ? { sandbox } : {}), sandboxSeq: job.sandboxSeq, exitError: "" };
    this.#active.set(job.id, active);
    for (const p of await this.#o.store.listPermissions({ jobId: job.id, pendingOnly: true })) this.#armDeadline(agent, p);
    if (job.state === "pending" && (!job.tokenId || !sandbox)) {
      this.#track(this.#startSession(job, active));
    } else {
      // Pending with nothing heard from the sandbox: the start may never have reached it (its
      // replica died first, or it was full); then the session is started now (#consume).
      if (job.state === "pending" && job.sandboxSeq === 0) active.startIfUnknown = true;
      this.#track(this.#reattach(job.id, active));
    }
  }

  /**
   * Stop working on a job whose lease another replica took: stop following
   * its session and its deadlines without finishing it (the new owner does).
   */
  abandon(jobId: string): void {
    const active = this.#active.get(jobId);
    if (active) {
      active.abandoned = true;
      active.channel?.close();
      this.#active.delete(jobId);
    }
    this.#deadlines.clearJob(jobId);
    // Its unfinished harness operations run again at the new owner; they write nothing more here.
    this.#operations.abandonJob(jobId);
  }

  /** A waiting call of a job this replica works on was answered at another replica: write the answer to the session. */
  async deliverAnswer(answer: { jobId: string; permissionId: string }): Promise<void> {
    if (!this.#ownership.owns(answer.jobId) || !this.#active.has(answer.jobId)) return;
    await this.#withLock(answer.jobId, async () => {
      const p = await this.#o.store.getPermission(answer.jobId, answer.permissionId);
      if (!p || p.status === "pending" || p.delivered) return;
      this.#deadlines.clear(answer.jobId, p.id);
      await this.#deliver(answer.jobId, p);
    });
  }

  /** Deliver every decided, undelivered answer of the jobs this replica works on (notices may have been missed). */
  async deliverUndelivered(): Promise<void> {
    for (const jobId of [...this.#active.keys()]) {
      for (const p of await this.#o.store.listPermissions({ jobId, undeliveredOnly: true })) await this.deliverAnswer({ jobId, permissionId: p.id });
    }
  }

  async #reattach(jobId: string, active: ActiveJob): Promise<void> {
    const job = await this.#o.store.getJob(jobId);
    if (!job) return;
    active.channel = active.sandbox!.reattach({ sessionId: job.sessionId, afterSeq: active.sandboxSeq });
    await this.#catchUp(job, active);
    await this.#sessionEnded(jobId, active, await this.#sessions.follow(this.#following(job, active)));
  }

  /**
   * After any re-attach (a restart, a takeover, a lost stream): what the
   * session waits for that an earlier stream may never have carried.
   */
  async #catchUp(job: JobRecord, active: ActiveJob): Promise<void> {
    // Every decided answer is written again, not only those never written: "delivered" means handed to a
    // stream, and one that broke (or a process that died) right after may never have sent it. The sandbox
    // refuses an answer its harness already has, which changes nothing. A failure here is left for the
    // next re-attach: the session's stream is followed regardless.
    try {
      for (const p of await this.#o.store.listPermissions({ jobId: job.id })) if (p.status !== "pending") await this.#deliver(job.id, p);
      for (const call of this.#served(job) ? await servedToolCalls(this.#o.store, job.id) : []) await this.#sendServedAnswer(active, call);
    } catch (error) {
      this.#o.logger.warn({ jobId: job.id, err: String(error) }, "could not write the session's answers again after re-attaching; the next re-attach tries again");
    }
    // Harness operations the session still waits for: a checkpointed result is delivered, an unfinished one runs again.
    this.#track(this.#operations.resumeJob(this.#operationParent(job, active)));
  }

  /** How the job's session is followed: its messages handled one at a time under the job's lock, what it missed written again after a re-attach. */
  #following(job: JobRecord, active: ActiveJob): FollowOptions {
    return {
      jobId: job.id,
      sessionId: job.sessionId,
      state: active,
      handle: (message) => this.#withLock(job.id, () => this.#handle(job.id, active, message)),
      stopped: () => this.#closing || active.abandoned === true,
      // Gone from the store, or finished meanwhile (its node was lost): nothing is left to follow.
      stillFollowed: async () => (await this.#o.store.getJob(job.id)) !== undefined && this.#active.get(job.id) === active,
      reattached: async () => {
        const current = await this.#o.store.getJob(job.id);
        if (current) await this.#catchUp(current, active);
      },
    };
  }

  /** What the end of following a job's session means for the job. */
  async #sessionEnded(jobId: string, active: ActiveJob, end: SessionEnd): Promise<void> {
    switch (end.kind) {
      case "stopped":
        return;
      case "ended":
        await this.#finish(jobId, {});
        return;
      case "gave_up":
        // Cancelled or ended while it waited for room (not when this replica stops following it).
        if (!this.#closing && !active.abandoned) await this.#finish(jobId, {});
        return;
      case "unknown": {
        if (!active.startIfUnknown || active.sandboxSeq !== 0) {
          await this.#finish(jobId, { failure: "the session was lost: its sandbox no longer knows it (was the sandbox restarted?)" });
          return;
        }
        active.startIfUnknown = false;
        const job = await this.#o.store.getJob(jobId);
        if (!job) return;
        // Its node does not know it: the start never reached the node, or the node restarted after it.
        // Only the first is safe to start again, and only an unused token tells them apart.
        if (!(await this.#revokeProvesUnused(job))) {
          await this.#finish(jobId, { failure: "the session was lost: its sandbox no longer knows it, and it had already called the model (was the sandbox restarted?); run the job again" });
          return;
        }
        await this.#startSession(job, active);
        return;
      }
      case "refused":
        await this.#finish(jobId, { failure: end.error.message });
        return;
      case "lost":
        await this.#handleLostSession(jobId, end.lost);
        return;
      case "broken":
        await this.#finish(jobId, { failure: `lost the session's stream and could not re-attach: ${end.error.message}` });
        return;
    }
  }

  async #handle(jobId: string, active: ActiveJob, message: SandboxMessage): Promise<void> {
    active.sandboxSeq = message.seq;
    active.startIfUnknown = false;
    const seqPatch: JobPatch = { sandboxSeq: message.seq };
    switch (message.kind) {
      case "started":
        await this.#o.store.updateJob(jobId, seqPatch);
        return;
      case "exited":
        if (!active.result && message.result) active.result = message.result;
        active.exitError = message.error || (message.exitCode !== 0 || message.signal ? `the harness exited (code ${message.exitCode}${message.signal ? `, signal ${message.signal}` : ""})` : "");
        if (message.failure) {
          active.sessionFailure = message.failure;
          // Stored with the seq that passes it: a restart or a takeover after this point re-attaches
          // past `exited` and must fail the job alike (#endJob reads it back). A cancel keeps its reason.
          const job = await this.#o.store.getJob(jobId);
          if (job && !job.cancelRequestedAt) seqPatch.error = message.failure;
        }
        await this.#o.store.updateJob(jobId, seqPatch);
        return;
      case "artifacts": {
        // Stored as they arrive, with the seq that says they were handled: a restart or a
        // replica taking the job over re-attaches after them and must not lose them.
        const artifacts = this.#storeArtifacts(jobId, message.artifacts);
        await this.#append(jobId, artifacts.length ? [{ event: { case: "artifacts", value: { artifacts } } } as Partial<JobEvent>] : [], seqPatch);
        return;
      }
      case "event":
        await this.#handleEvent(jobId, active, message.event, seqPatch);
        return;
      case "stderr":
        // Stored with the seq that passes it, like artifacts: a re-attach starts after it.
        await this.#append(jobId, [], seqPatch, { stderr: stderrAppend(message, this.#o.maxStderrBytes ?? DEFAULT_MAX_STDERR_BYTES) });
        return;
    }
  }

  async #handleEvent(jobId: string, active: ActiveJob, event: SessionEvent, patch: JobPatch): Promise<void> {
    const e = event.event;
    const time = event.time;
    switch (e.case) {
      case "started": {
        const job = await this.#o.store.getJob(jobId);
        const events: Partial<JobEvent>[] = [{ time, event: { case: "sessionStarted", value: e.value } } as Partial<JobEvent>];
        if (job && job.state === "pending") {
          events.push({ event: { case: "stateChanged", value: { state: JobState.RUNNING, reason: "" } } } as Partial<JobEvent>);
          patch.state = "running";
        }
        // The first session's start is the job's (a session started afresh elsewhere keeps it), on
        // the orchestrator's clock like the job's creation and end, so durations compare one clock.
        if (job && !job.startedAt) patch.startedAt = new Date();
        await this.#append(jobId, events, patch, {
          lifecycle: [this.#lifecycle("session.started", { jobId, sessionId: job?.sessionId ?? "", status: "running", attributes: { harness_name: e.value.harnessName } })],
        });
        return;
      }
      case "text":
        await this.#append(jobId, [{ time, event: { case: "text", value: e.value } } as Partial<JobEvent>], patch);
        return;
      case "toolCall":
        await this.#append(jobId, [{ time, event: { case: "toolCall", value: e.value } } as Partial<JobEvent>], patch, {
          lifecycle: [this.#lifecycle("tool.called", { jobId, toolCallId: e.value.callId, attributes: { tool_name: e.value.tool, input: e.value.input } })],
        });
        return;
      case "toolResult":
        await this.#append(jobId, [{ time, event: { case: "toolResult", value: e.value } } as Partial<JobEvent>], patch);
        await this.#auditToolResult(jobId, active, e.value);
        return;
      case "usage":
        await this.#append(jobId, [{ time, event: { case: "usage", value: e.value } } as Partial<JobEvent>], patch);
        return;
      case "result":
        active.result = e.value;
        await this.#append(jobId, [{ time, event: { case: "result", value: e.value } } as Partial<JobEvent>], {
          ...patch,
          resultText: e.value.text,
          stopReason: e.value.stopReason,
        });
        return;
      case "permissionRequest":
        await this.#decidePermission(jobId, active, event, patch);
        return;
      case "runtimeToolCall": {
        const job = (await this.#o.store.getJob(jobId))!;
        const served = this.#served(job);
        if (served?.tools.some((t) => t.name === e.value.name)) {
          await this.#answerServed({ jobId, active, served, call: e.value, patch });
          return;
        }
        // A harness operation runs beside the session (calls of one turn concurrently); its
        // answer goes down the stream when done. Recorded before the seq advances, so a crash
        // in between replays the call rather than losing it.
        const { recorded, done } = this.#operations.accept({ parent: this.#operationParent(job, active), callId: e.value.id, name: e.value.name, input: e.value.input });
        this.#track(done);
        await recorded;
        await this.#o.store.updateJob(jobId, patch);
        return;
      }
      default:
        await this.#o.store.updateJob(jobId, patch);
    }
  }

  #served(job: JobRecord): ServedRuntimeTools | undefined {
    return job.servedTools ? this.#o.servedTools?.[job.servedTools] : undefined;
  }

  /**
   * Answers a call of a served runtime tool. Recorded before the answer is
   * written and before the session's position moves past the call: a crash
   * in between sees the call again and sends the recorded answer, so the
   * answer is decided once, whichever replica runs the job then.
   */
  async #answerServed(o: { jobId: string; active: ActiveJob; served: ServedRuntimeTools; call: RuntimeToolCall; patch: JobPatch }): Promise<void> {
    const earlier = await servedToolCalls(this.#o.store, o.jobId);
    let record = earlier.find((r) => r.callId === o.call.id);
    if (!record) {
      const answer = o.served.answer({ name: o.call.name, input: o.call.input ?? {} }, earlier);
      record = create(ServedToolCallSchema, {
        callId: o.call.id,
        tool: o.call.name,
        input: o.call.input ?? {},
        ...("output" in answer ? { output: fromJson(ValueSchema, answer.output) } : { error: answer.error }),
      });
      await this.#append(o.jobId, [{ event: { case: "servedToolCall", value: record } } as Partial<JobEvent>]);
    }
    await this.#sendServedAnswer(o.active, record);
    await this.#o.store.updateJob(o.jobId, o.patch);
  }

  async #sendServedAnswer(active: ActiveJob, record: ServedToolCall): Promise<void> {
    await active.channel?.answerRuntimeTool(
      create(RuntimeToolResultSchema, record.error ? { id: record.callId, isError: true, error: record.error } : { id: record.callId, ...(record.output ? { output: record.output } : {}) }),
    );
  }

  async #decidePermission(jobId: string, active: ActiveJob, event: SessionEvent, patch: JobPatch): Promise<void> {
    if (event.event.case !== "permissionRequest") return;
    const request = event.event.value;
    const job = (await this.#o.store.getJob(jobId))!;
    const input = request.input as JsonObject | undefined;
    const cancelled = job.cancelRequestedAt !== undefined;
    const decision = cancelled
      ? ({ kind: "deny", decider: "runtime", reason: "the job was cancelled" } as const)
      : this.#served(job)?.tools.some((t) => t.name === request.tool)
        ? ({ kind: "allow", decider: "runtime", reason: "a tool the runtime offered this session" } satisfies PolicyDecision as PolicyDecision)
        : await this.#o.policy.decide({
          jobId,
          sessionId: job.sessionId,
          agent: active.agent,
          id: request.id,
          tool: request.tool,
          ...(input ? { input } : {}),
          title: request.title,
          callId: request.callId,
        });
    const record: PermissionRecord = {
      jobId,
      id: request.id,
      callId: request.callId,
      sessionId: job.sessionId,
      tool: request.tool,
      ...(input ? { input } : {}),
      title: request.title,
      needsPerson: decision.kind === "ask",
      status: decision.kind === "ask" ? "pending" : decision.kind === "allow" ? "approved" : cancelled ? "cancelled" : "denied",
      reason: decision.reason,
      ...(decision.kind !== "ask" ? { decider: decision.decider, answeredAt: new Date() } : {}),
      answeredBy: "",
      // A hook's changed input: the call runs with it (or, when it waits, it is what the person approves).
      ...(decision.kind !== "deny" && decision.input ? { answerInput: decision.input } : {}),
      requestedAt: new Date(),
      delivered: false,
    };
    if (decision.kind === "ask") patch.state = "waiting";
    await this.#append(
      jobId,
      [
        { time: event.time, event: { case: "permissionRequested", value: request } } as Partial<JobEvent>,
        ...(decision.kind === "ask" ? [{ event: { case: "stateChanged", value: { state: JobState.WAITING, reason: decision.reason } } } as Partial<JobEvent>] : []),
        this.#decisionEvent(record),
      ],
      patch,
      {
        permissions: [record],
        lifecycle: [this.#lifecycle(decision.kind === "ask" ? "approval.requested" : "permission.decided", {
          jobId,
          sessionId: job.sessionId,
          toolCallId: request.callId,
          status: record.status,
          attributes: { tool_name: request.tool, decider: record.decider ?? "person", decision: record.status },
        })],
      },
    );
    if (decision.kind !== "ask") await this.#deliver(jobId, record);
    else this.#armDeadline(active.agent, record);
  }

  #armDeadline(agent: AgentVersionRecord, p: PermissionRecord): void {
    const at = approvalDeadline(agent, p);
    if (at) this.#deadlines.schedule({ jobId: p.jobId, permissionId: p.id, at });
  }

  /** A harness that declares permissions must have asked, and been allowed, before any result. */
  async #auditToolResult(jobId: string, active: ActiveJob, result: { callId: string; isError: boolean }): Promise<void> {
    if (!active.agent.harness.manifest.permissions || active.violation) return;
    const permission = (await this.#o.store.listPermissions({ jobId })).find((p) => p.callId === result.callId || p.id === result.callId);
    const violation = toolResultViolation({ result, permission, harness: active.agent.harness.manifest.name });
    if (!violation) return;
    active.violation = violation;
    this.#o.logger.warn({ jobId, callId: result.callId }, violation);
    const job = await this.#o.store.getJob(jobId);
    // Stop the session now; the job fails with the violation when its stream ends (#finish).
    if (job && active.sandbox) this.#track(active.sandbox.cancel({ sessionId: job.sessionId, reason: violation }));
  }

  /** The deadline of a waiting call passed: it ends timed_out, which denies it (fail closed). */
  async #timeOut(jobId: string, permissionId: string): Promise<void> {
    await this.#withLock(jobId, async () => {
      const job = await this.#o.store.getJob(jobId);
      const p = await this.#o.store.getPermission(jobId, permissionId);
      if (!job || !p || p.status !== "pending" || isTerminal(job.state)) return;
      const agent = await this.#o.store.getAgentVersion(job.agentName, job.agentVersion);
      const timeout = agent?.definition.approvals?.timeout ?? "its deadline";
      await this.#resolve(job, {
        ...p,
        status: "timed_out",
        decider: "runtime",
        answeredBy: "",
        reason: `nobody answered within ${timeout} (approvals.timeout), so the call is denied`,
        answeredAt: new Date(),
        delivered: false,
      });
    });
  }

  /** Store a waiting call's answer, resume the job when nothing else waits, and write the answer to the session. */
  async #resolve(job: JobRecord, updated: PermissionRecord): Promise<void> {
    this.#deadlines.clear(job.id, updated.id);
    const stillWaiting = (await this.#o.store.listPermissions({ jobId: job.id, pendingOnly: true })).filter((x) => x.id !== updated.id).length;
    const events: Partial<JobEvent>[] = [this.#decisionEvent(updated)];
    const patch: JobPatch = {};
    if (!stillWaiting && job.state === "waiting") {
      patch.state = "running";
      events.push({ event: { case: "stateChanged", value: { state: JobState.RUNNING, reason: "" } } } as Partial<JobEvent>);
    }
    await this.#append(job.id, events, patch, {
      permissions: [updated],
      lifecycle: [this.#lifecycle("approval.answered", {
        jobId: job.id,
        toolCallId: updated.callId,
        status: updated.status,
        attributes: {
          approval_id: updated.id,
          tool_name: updated.tool,
          decision: updated.status,
          waited_ms: Date.now() - updated.requestedAt.getTime(),
          // Who answered (a principal id, "" when the runtime did) and whether they changed the input; never the input itself.
          answered_by: updated.answeredBy,
          input_changed: updated.answerInput !== undefined,
        },
      })],
    });
    await this.#deliver(job.id, updated);
  }

  #decisionEvent(p: PermissionRecord): Partial<JobEvent> {
    const outcome =
      p.status === "cancelled" ? PermissionAnswer_Outcome.CANCELLED : p.status === "timed_out" ? PermissionAnswer_Outcome.TIMED_OUT : p.status === "pending" ? 0 : PermissionAnswer_Outcome.ANSWERED;
    return {
      event: {
        case: "permissionDecision",
        value: {
          id: p.id,
          tool: p.tool,
          callId: p.callId,
          pending: p.status === "pending",
          allow: p.status === "approved",
          reason: p.reason,
          decider: p.decider ? DECIDER_TO_PROTO[p.decider] : Decider.UNSPECIFIED,
          answeredBy: p.answeredBy,
          ...(p.answerInput ? { input: p.answerInput as ProtoJsonObject } : {}),
          outcome,
        },
      },
    } as Partial<JobEvent>;
  }

  /** Write a decided answer to the session, if it is attached, and record that it was written. */
  async #deliver(jobId: string, p: PermissionRecord): Promise<void> {
    const channel = this.#active.get(jobId)?.channel;
    if (!channel || p.status === "pending") return;
    const outcome =
      p.status === "cancelled" ? PermissionAnswer_Outcome.CANCELLED : p.status === "timed_out" ? PermissionAnswer_Outcome.TIMED_OUT : PermissionAnswer_Outcome.ANSWERED;
    try {
      await channel.answerPermission(
        create(PermissionAnswerSchema, {
          id: p.id,
          allow: p.status === "approved",
          reason: p.reason,
          outcome,
          ...(p.answerInput ? { input: p.answerInput as ProtoJsonObject } : {}),
        }),
      );
      // Written again at a re-attach (#catchUp): recorded once.
      if (!p.delivered) await this.#o.store.markPermissionDelivered(jobId, p.id);
    } catch (error) {
      // Left undelivered: the next re-attach writes it.
      this.#o.logger.warn({ jobId, permission: p.id, err: String(error) }, "could not deliver a permission answer yet");
    }
  }

  /** A person's answer to a call that waits for approval. Idempotent for the same answer. */
  async answerPermission(options: AnswerOptions): Promise<PermissionRecord> {
    try {
      return await this.#asOwnerOrBystander(options.jobId, () => this.#answerPermission(options));
    } catch (error) {
      // The lease went to another replica just now, before this one noticed. The answer's one write was
      // refused, and nothing else was written: it is made again as the bystander this replica now is, and
      // the new owner delivers it.
      if (!(error instanceof LeaseLostError)) throw error;
      return asBystander(() => this.#answerPermission(options));
    }
  }

  /** Runs a write taken here for any job: fenced when this replica runs the job, a bystander's when another does. */
  #asOwnerOrBystander<T>(jobId: string, work: () => Promise<T>): Promise<T> {
    return this.#ownership.owns(jobId) ? work() : asBystander(work);
  }

  async #answerPermission(options: AnswerOptions): Promise<PermissionRecord> {
    return this.#withLock(options.jobId, async () => {
      const job = await this.#o.store.getJob(options.jobId);
      if (!job) throw notFound(`job ${options.jobId} not found; list jobs with \`oz0 jobs list\``);
      const p = await this.#o.store.getPermission(options.jobId, options.callId);
      if (!p) throw notFound(`job ${options.jobId} has no permission request ${options.callId}; see \`oz0 approvals list\``);
      if (!p.needsPerson) throw failedPrecondition(`call ${p.id} was decided by the ${p.decider ?? "policy"} (${p.status}); it does not wait for a person`);
      if (p.status !== "pending") {
        if ((p.status === "approved" && options.allow) || (p.status === "denied" && !options.allow)) return p;
        if (p.status === "cancelled" || p.status === "timed_out") {
          throw failedPrecondition(`call ${p.id} is ${p.status === "cancelled" ? "cancelled" : "timed out"}: the answer came too late and was not used`);
        }
        throw failedPrecondition(`call ${p.id} was already ${p.status} by ${p.answeredBy || "someone"}; a different answer is refused`);
      }
      if (!options.allow && !options.reason) throw invalidArgument("a denial needs a reason (it is shown to the model): pass --reason TEXT");
      const agent = this.#active.get(job.id)?.agent ?? (await this.#o.store.getAgentVersion(job.agentName, job.agentVersion));
      const refusal = answerRefusal({ agent, job, callId: p.id, answerer: options.answeredBy });
      if (refusal) throw permissionDenied(refusal);
      const updated: PermissionRecord = {
        ...p,
        status: options.allow ? "approved" : "denied",
        decider: "person",
        answeredBy: options.answeredBy.id,
        reason: options.reason ?? (options.allow ? "approved" : ""),
        ...(options.input ? { answerInput: options.input } : {}),
        answeredAt: new Date(),
        delivered: false,
      };
      await this.#resolve(job, updated);
      return updated;
    });
  }

  async cancel(options: { jobId: string; reason?: string }): Promise<JobRecord> {
    return this.#asOwnerOrBystander(options.jobId, () => this.#cancel(options));
  }

  async #cancel(options: { jobId: string; reason?: string }): Promise<JobRecord> {
    const job = await this.#o.store.getJob(options.jobId);
    if (!job) throw notFound(`job ${options.jobId} not found; list jobs with \`oz0 jobs list\``);
    if (isTerminal(job.state)) return job;
    const reason = options.reason || "cancelled by request";
    const active = this.#active.get(job.id);
    await this.#withLock(job.id, async () => {
      const pending = await this.#o.store.listPermissions({ jobId: job.id, pendingOnly: true });
      const cancelled = pending.map((p): PermissionRecord => ({ ...p, status: "cancelled", decider: "runtime", reason: "the job was cancelled", answeredAt: new Date(), delivered: false }));
      await this.#append(job.id, cancelled.map((p) => this.#decisionEvent(p)), { cancelRequestedAt: new Date(), error: reason }, { permissions: cancelled });
      for (const p of cancelled) {
        this.#deadlines.clear(job.id, p.id);
        await this.#deliver(job.id, p);
      }
    });
    this.#operations.cancelJob(job.id);
    if (!this.#ownership.owns(job.id)) {
      // Another replica runs it: stop its session; that replica sees the stream end and finishes the job.
      await this.#sandboxFor(job.sandboxUrl)
        .cancel({ sessionId: job.sessionId, reason })
        .catch((error: unknown) => {
          // Not started yet: its owner sees cancelRequestedAt before starting it.
          if (!(error instanceof SessionNotFoundError)) throw error;
        });
      return (await this.#o.store.getJob(job.id))!;
    }
    let sessionGone = !active?.channel;
    if (!sessionGone) {
      try {
        await active!.sandbox!.cancel({ sessionId: job.sessionId, reason });
      } catch (error) {
        sessionGone = error instanceof SessionNotFoundError;
        if (!sessionGone) throw error;
      }
    }
    if (sessionGone && !active?.channel) await this.#finish(job.id, {});
    return (await this.#o.store.getJob(job.id))!;
  }

  /** End the job: state from the result (or the failure), waiting calls closed, token revoked. */
  async #finish(jobId: string, options: { failure?: string }): Promise<void> {
    const job = await this.#endJob(jobId, options);
    // Ended (now or before): its node's slot is free, and nobody is to take it over.
    if (job) await this.#o.placement.release(job.sessionId).catch((error: unknown) => this.#o.logger.warn({ jobId, err: String(error) }, "could not free the session's slot on its node"));
    await this.#ownership.release(jobId);
  }

  /**
   * Deals with the jobs this replica works on whose sandbox node stopped
   * sending heartbeats (handleLostSession): most fail, saying so. Slots of
   * sessions whose jobs already ended are freed. One job's failure to be
   * dealt with is logged and tried again at the next call.
   */
  async handleLostSessions(): Promise<void> {
    for (const lost of await this.#o.placement.lostSessions()) {
      try {
        const job = await this.#o.store.getJob(lost.jobId);
        if (!job || isTerminal(job.state) || job.sessionId !== lost.sessionId) {
          await this.#o.placement.release(lost.sessionId, { fromNode: lost.nodeId });
        } else if (this.#ownership.owns(lost.jobId)) {
          await this.#handleLostSession(lost.jobId, lost);
        }
      } catch (error) {
        this.#o.logger.warn({ jobId: lost.jobId, sessionId: lost.sessionId, err: String(error) }, "could not deal with a session lost with its node yet; trying again");
      }
    }
  }

  /**
   * The job's session is on a node that stopped sending heartbeats. One
   * never heard from whose token proves it never reached a model
   * (#revokeProvesUnused) starts on a live node instead. Any other died with
   * its node (resuming a session elsewhere is not supported), and the job
   * fails with the loss's reason. Whoever notices first (the node watch, the
   * session's stream) deals with it; the other does nothing. A job not
   * followed here yet is being resumed (a takeover): its re-attach meets the
   * silent node and comes back here.
   */
  async #handleLostSession(jobId: string, lost: LostSession): Promise<void> {
    const active = this.#active.get(jobId);
    if (!active || active.lostHandled) return;
    active.lostHandled = true;
    try {
      const job = await this.#o.store.getJob(jobId);
      if (!job || isTerminal(job.state)) return;
      if (job.state === "pending" && job.sandboxSeq === 0 && active.sandboxSeq === 0) {
        // Still this replica's job (a paused replica must not revoke or move a session its successor started).
        await this.#confirmOwner(jobId);
        if (await this.#revokeProvesUnused(job)) {
          if (this.#closing || active.abandoned || this.#active.get(jobId) !== active) return;
          await this.#startElsewhere(job, active, lost);
          return;
        }
      }
      await this.#finish(jobId, { failure: lost.reason });
    } catch (error) {
      // Another replica runs it now: nothing is left to do here.
      if (error instanceof LeaseLostError) return;
      active.lostHandled = false;
      throw error;
    }
  }

  /** Stops following the session on its silent node (its stream's loop ends without finishing the job) and starts it on a live one. */
  async #startElsewhere(job: JobRecord, active: ActiveJob, lost: LostSession): Promise<void> {
    active.abandoned = true;
    active.channel?.close();
    this.#active.delete(job.id);
    try {
      const renewed = await this.#renewSession(job, lost);
      this.#o.logger.info(
        { jobId: job.id, sessionId: renewed.sessionId, was: job.sessionId, node: lost.nodeId },
        "the session's node went silent before the session reached a model: starting it afresh on another node",
      );
      await this.#resume(renewed);
    } catch (error) {
      // Another replica runs it now.
      if (error instanceof LeaseLostError) return;
      // Neither followed nor failed here: its lease is given up, so the next sweep (here or at another replica) resumes it.
      this.#o.logger.warn({ jobId: job.id, err: String(error) }, "could not start the session on another node; leaving the job to the next sweep");
      await this.#ownership.release(job.id).catch(() => undefined);
    }
  }

  /**
   * The job's session, proven never to have reached a model, gives way to a
   * new one: a new session id, no node and no token yet, written under the
   * job's lease (a replica that lost the job is refused here). Nothing done
   * later to the old session (its token revoked again, its slot freed, by a
   * replica still acting on it) can touch the new one. Its slot on the
   * silent node is freed.
   */
  async #renewSession(job: JobRecord, lost: LostSession): Promise<JobRecord> {
    const renewed = await this.#o.store.updateJob(job.id, { sessionId: newSessionId(), sandboxUrl: "", tokenId: "" });
    await this.#o.placement.release(job.sessionId, { fromNode: lost.nodeId });
    return renewed;
  }

  /** Checks for lost nodes every `intervalMs` until close. */
  watchNodes(options: { intervalMs: number }): void {
    if (this.#nodeWatch) return;
    let checking = false;
    this.#nodeWatch = setInterval(() => {
      if (checking) return;
      checking = true;
      this.handleLostSessions()
        .catch((error: unknown) => this.#o.logger.warn({ err: String(error) }, "could not check for lost sandbox nodes"))
        .finally(() => (checking = false));
    }, options.intervalMs);
    this.#nodeWatch.unref();
  }

  /** The job as it was before it ended (undefined when unknown). */
  async #endJob(jobId: string, options: { failure?: string }): Promise<JobRecord | undefined> {
    return this.#withLock(jobId, async () => {
      const job = await this.#o.store.getJob(jobId);
      if (!job || isTerminal(job.state)) return job;
      const active = this.#active.get(jobId);
      // The result as this process saw it, else as stored: a session that ended before a
      // restart or a takeover delivered its result to the replica that followed it then.
      let result = active?.result ?? (job.stopReason ? create(SessionResultSchema, { stopReason: job.stopReason, text: job.resultText }) : undefined);
      // A running job's error is only ever written by a cancel (with cancelRequestedAt) or by a failed session (#handle).
      const sessionFailure = active?.sessionFailure ?? (job.error && !job.cancelRequestedAt ? job.error : undefined);
      let state: JobStateName;
      let error = "";
      // The job fails because of how its session ended: the failure says what the harness last wrote to stderr.
      let failedBySession = false;
      if (job.cancelRequestedAt) {
        state = "cancelled";
        error = job.error || "cancelled by request";
      } else if (options.failure || active?.violation) {
        state = "failed";
        error = options.failure || active!.violation!;
      } else if (sessionFailure) {
        state = "failed";
        error = sessionFailure;
        failedBySession = true;
        // Whatever the harness wrote as its result came from a session that broke the rules: not the job's result.
        result = create(SessionResultSchema, { stopReason: StopReason.UNSPECIFIED, text: "" });
      } else if (result && result.stopReason === StopReason.COMPLETED) {
        state = "succeeded";
      } else {
        state = "failed";
        error = result
          ? `the session ended ${StopReason[result.stopReason]?.toLowerCase() ?? "badly"}${result.error ? `: ${result.error}` : ""}`
          : `the session ended without a result${active?.exitError ? `: ${active.exitError}` : ""}`;
        failedBySession = true;
      }
      if (failedBySession) error = withStderr(error, { stderr: await storedStderrTail(this.#o.store, { jobId, sessionId: job.sessionId }), jobId });
      const events: Partial<JobEvent>[] = [];
      // Calls still waiting can never be answered now.
      const pending = await this.#o.store.listPermissions({ jobId, pendingOnly: true });
      const closed = pending.map((p): PermissionRecord => ({ ...p, status: "cancelled", decider: "runtime", reason: "the job ended", answeredAt: new Date(), delivered: true }));
      for (const p of closed) this.#deadlines.clear(jobId, p.id);
      events.push(...closed.map((p) => this.#decisionEvent(p)));
      events.push({ event: { case: "stateChanged", value: { state: JOB_STATE_TO_PROTO[state], reason: error } } } as Partial<JobEvent>);
      await this.#append(jobId, events, { state, error, finishedAt: new Date(), ...(result ? { resultText: result.text, stopReason: result.stopReason } : {}) }, {
        permissions: closed,
        lifecycle: [this.#lifecycle(state === "succeeded" ? "job.completed" : `job.${state}`, {
          jobId,
          sessionId: job.sessionId,
          agentName: job.agentName,
          agentVersion: String(job.agentVersion),
          status: state,
        })],
      });
      this.#operations.cancelJob(jobId);
      this.#active.get(jobId)?.channel?.close();
      this.#active.delete(jobId);
      if (job.tokenId) {
        await this.#o.tokens.revoke({ tokenId: job.tokenId }).catch((err: unknown) => this.#o.logger.warn({ jobId, err: String(err) }, "could not revoke the session token"));
      }
      return job;
    });
  }

  #storeArtifacts(jobId: string, artifacts: SessionArtifact[]): { name: string; path: string; sizeBytes: bigint; mediaType: string }[] {
    if (artifacts.length === 0) return [];
    const dir = path.join(this.#o.home, "jobs", jobId, "artifacts");
    mkdirSync(dir, { recursive: true });
    return artifacts.map((a) => {
      const name = path.basename(a.name) || "artifact";
      const file = path.join(dir, name);
      writeFileSync(file, a.content);
      return { name, path: file, sizeBytes: BigInt(a.content.byteLength), mediaType: a.mediaType };
    });
  }

  /** Jobs whose session this process follows right now. */
  get activeCount(): number {
    return this.#active.size;
  }

  /** Stop following sessions (they keep running on their sandboxes; the next start re-attaches). */
  async close(): Promise<void> {
    this.#closing = true;
    clearInterval(this.#nodeWatch);
    this.#deadlines.close();
    for (const active of this.#active.values()) active.channel?.close();
    await Promise.allSettled([...this.#running]);
  }
}

/** The served runtime tool calls of a job and their answers, oldest first (from its events). */
export async function servedToolCalls(store: JobStore, jobId: string): Promise<ServedToolCall[]> {
  const calls: ServedToolCall[] = [];
  for (let after = 0; ; ) {
    const page = await store.listJobEvents(jobId, after, 500);
    for (const e of page) if (e.event.case === "servedToolCall") calls.push(e.event.value);
    if (page.length < 500) return calls;
    after = Number(page[page.length - 1]!.seq);
  }
}
