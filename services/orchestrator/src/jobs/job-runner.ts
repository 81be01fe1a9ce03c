// Runs jobs: pins the agent version, stores the job, has its session run
// (job-sessions.ts), stores every session message as the job's events with
// the sandbox's sequence number (for re-attach), hands permission requests to
// the approval service, and finishes the job with its result and artifacts.
// On start-up it re-attaches to every job that was running.
import { create } from "@bufbuild/protobuf";
import { RuntimeToolResultSchema, StopReason, type SessionEvent } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import type { JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { REQUEST_ID_RULES, requestIdProblem } from "@oz0/harness/host";
import type { Logger } from "@oz0/serving";
import { AgentVersions } from "../agents/agent-versions.js";
import {
  againIfAnsweredMeanwhile,
  ApprovalService,
  passesAuditUnread,
  type AnswerOptions,
} from "../approvals/approval-service.js";
import { schemaFields } from "../approvals/runtime-call-permits.js";
import { asBystander, soleOwnership, type JobOwnership } from "../cluster/job-ownership.js";
import { OperationRunner } from "../operations/operation-runner.js";
import { OrchestratorError, notFound } from "../orchestrator-error.js";
import { capabilitiesViolation } from "../policy/harness-capabilities.js";
import { clippedHarnessText, quotedHarnessText } from "../policy/harness-text.js";
import type { PermissionPolicy } from "../policy/permission-policy.js";
import { DEFAULT_MAX_STDERR_BYTES, stderrAppend } from "../sessions/harness-stderr.js";
import type { SandboxPlacement } from "../sessions/sandbox-placement.js";
import {
  SessionNotFoundError,
  type LifecycleSink,
  type SandboxMessage,
  type TokenIssuer,
} from "../sessions/session-runner.js";
import { newJobId, newSessionId } from "../store/ids.js";
import { refusedForItsData } from "../store/sql-database.js";
import {
  isTerminal,
  type AgentVersionRecord,
  newJobRecord,
  type JobPatch,
  type JobRecord,
  type JobStore,
  type PermissionRecord,
} from "../store/job-store.js";
import { ActiveJobs, type ActiveJob } from "./active-jobs.js";
import { ARTIFACTS_WITHHELD, MAX_ARTIFACT_FILES, storeArtifacts } from "./job-artifacts.js";
import { cancelReason, CANCELLED_BY_REQUEST, jobEnding, storedFailure } from "./job-ending.js";
import {
  appendJobStep,
  createJobStep,
  harnessText,
  stateChanged,
  type JobEventInit,
  type JobStepWrites,
} from "./job-events.js";
import type { JobFeed } from "./job-feed.js";
import { checkAttachments, checkJobInput } from "./job-input.js";
import { JobSessions } from "./job-sessions.js";
import { answerServedCall, type ServedRuntimeTools } from "./served-tools.js";
import { SessionStops } from "./session-stops.js";

export interface JobRunnerOptions {
  store: JobStore;
  feed: JobFeed;
  /** Which sandbox node each session runs on (sandbox-placement.ts). */
  placement: SandboxPlacement;
  tokens: TokenIssuer;
  policy: PermissionPolicy;
  lifecycle?: LifecycleSink;
  /** The data directory; artifacts go under jobs/<id>/artifacts. Never attached to a job. */
  home: string;
  /** Folders anyone who may run a job may attach files from (OZ0_ATTACHMENT_ROOTS); an admin may attach from anywhere but `home`. */
  attachmentRoots?: readonly string[];
  logger: Logger;
  /** How often a lost sandbox stream is re-attached before the node is suspected. Default 5. */
  reattachAttempts?: number;
  /**
   * Without node heartbeats (one sandbox, no registry): how long a lost
   * sandbox stream is re-attached before the job fails, so a sandbox that
   * restarts and takes its sessions over finds them still followed. Default 30 s.
   */
  reattachWindowMs?: number;
  /** Repair sessions a harness operation gets when its result does not validate. Default 2. */
  operationRepairs?: number;
  /** Which jobs this replica works on (job-ownership.ts). Default: every job (one orchestrator). */
  ownership?: JobOwnership;
  /** Runtime tools the orchestrator serves jobs itself, by the name runAgent's `servedTools` gives (served-tools.ts). */
  servedTools?: Record<string, ServedRuntimeTools>;
  /** How much of each session's stderr is stored, its last bytes (OZ0_MAX_SESSION_STDERR_BYTES). Default 1 MiB. */
  maxStderrBytes?: number;
  /** Harness operations of one job that run at once (OZ0_MAX_OPERATIONS_PER_JOB); later calls wait. Default 4. */
  maxOperationsPerJob?: number;
  /** How many calls of one session may wait for a person at once (OZ0_MAX_WAITING_APPROVALS). Default 32. */
  maxWaitingApprovals?: number;
  /**
   * How long after its deadline (`limits.timeout`) a session may still run before the orchestrator asks its node
   * to stop it (session-stops.ts). Default 60 s.
   */
  overdueAfterMs?: number;
  /** How long after its node was asked to stop a session its job waits for the session to end, then ends without it (a harness operation, then no longer waits for its scratch session). Default 30 s. */
  stopWaitMs?: number;
  /** What a session may spend when its agent sets no harness.max_budget_usd (OZ0_DEFAULT_MAX_BUDGET_USD). Default: nothing bounds it. */
  defaultBudgetUsd?: number;
  /**
   * The most a node may send about one session, its job's or a harness operation's scratch session
   * (OZ0_MAX_SESSION_BYTES); past it the session is cancelled and its job fails. Default 1 GiB.
   */
  maxSessionBytes?: number;
}

/**
 * What a job stores when its session broke `rule`: the rule as its error (a cancel's reason or a rule stored first
 * stays the job's) and as the rule it broke (the first one stays), written with the seq that passes the message
 * that broke it, so a replica that follows the job again knows (job-sessions.ts).
 */
function ruleBrokenPatch(job: Pick<JobRecord, "error" | "ruleBroken"> | undefined, rule: string): JobPatch {
  return { error: job?.error || rule, ruleBroken: job?.ruleBroken || rule };
}

export class JobRunner {
  readonly #o: JobRunnerOptions;
  readonly #agents: AgentVersions;
  readonly #active: ActiveJobs;
  readonly #operations: OperationRunner;
  readonly #approvals: ApprovalService;
  readonly #sessions: JobSessions;
  readonly #ownership: JobOwnership;
  readonly #stops: SessionStops;

  constructor(options: JobRunnerOptions) {
    this.#o = options;
    this.#ownership = options.ownership ?? soleOwnership;
    this.#agents = new AgentVersions({ store: options.store });
    this.#active = new ActiveJobs({ logger: options.logger });
    this.#operations = new OperationRunner({
      store: options.store,
      tokens: options.tokens,
      policy: options.policy,
      logger: options.logger,
      ...(options.lifecycle ? { lifecycle: options.lifecycle } : {}),
      ...(options.operationRepairs !== undefined ? { maxRepairs: options.operationRepairs } : {}),
      ...(options.maxStderrBytes !== undefined ? { maxStderrBytes: options.maxStderrBytes } : {}),
      ...(options.maxOperationsPerJob !== undefined ? { maxPerJob: options.maxOperationsPerJob } : {}),
      ...(options.stopWaitMs !== undefined ? { stopWaitMs: options.stopWaitMs } : {}),
      ...(options.defaultBudgetUsd !== undefined ? { defaultBudgetUsd: options.defaultBudgetUsd } : {}),
      ...(options.maxSessionBytes !== undefined ? { maxSessionBytes: options.maxSessionBytes } : {}),
    });
    this.#approvals = new ApprovalService({ ...options, ownership: this.#ownership, active: this.#active });
    this.#stops = new SessionStops({
      ...(options.overdueAfterMs !== undefined ? { overdueAfterMs: options.overdueAfterMs } : {}),
      ...(options.stopWaitMs !== undefined ? { stopWaitMs: options.stopWaitMs } : {}),
      stopOverdue: (jobId, reason) => this.#stopOverdue(jobId, reason),
      endWithoutNode: (jobId, failure) => this.#finish(jobId, { failure }),
      track: (work) => this.#active.track(work),
    });
    this.#sessions = new JobSessions({
      ...options,
      ownership: this.#ownership,
      active: this.#active,
      approvals: this.#approvals,
      operations: this.#operations,
      stops: this.#stops,
      stopStored: (job, active) => this.#stopStored(job, active),
      breakRule: async (jobId, active, rule) => {
        const job = await this.#o.store.getJob(jobId);
        if (job) await this.#stopSession(job, active, rule, {});
      },
      served: (job) => this.#served(job),
      handleBurst: (jobId, active, messages) => this.#handleBurst(jobId, active, messages),
      finish: (jobId, o) => this.#finish(jobId, o),
    });
  }

  #append(jobId: string, events: JobEventInit[], writes: JobStepWrites = {}): Promise<JobEvent[]> {
    return appendJobStep(this.#o, { jobId, events, ...writes });
  }

  /**
   * `version`: run that version instead of the latest (a graph run pins its agents' versions when it starts).
   * `servedTools`: a set of `JobRunnerOptions.servedTools` the session is offered.
   * `id`: the job's id, when the caller recorded it before asking (`newJobId`), so a crash in between
   * leaves an id to create, never a second job.
   */
  async runAgent(options: {
    agent: string;
    input: string;
    attachments?: string[];
    version?: number;
    servedTools?: string;
    id?: string;
    startedBy?: string;
    /** The caller may attach any path of the host but the data directory (an admin); otherwise only paths under `attachmentRoots`. */
    attachFromAnywhere?: boolean;
  }): Promise<JobRecord> {
    if (this.#active.closing)
      throw new OrchestratorError("unavailable", "the orchestrator is shutting down; try again when it is back");
    if (options.servedTools && !this.#o.servedTools?.[options.servedTools])
      throw new Error(`no runtime tools named ${options.servedTools} are served here`);
    checkJobInput(options.input);
    const agent = await this.#agents.resolve(options.agent, options.version);
    const attachments = checkAttachments(options.attachments ?? [], {
      home: this.#o.home,
      roots: this.#o.attachmentRoots ?? [],
      anywhere: options.attachFromAnywhere ?? false,
    });
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
    // Leased before it exists, so no other replica takes it for an orphan; worked on under that lease from here
    // to its session's end (job-ownership.ts: `working`).
    await this.#ownership.claim(job.id);
    return this.#ownership.working(job.id, () => this.#create(job, agent, attachments));
  }

  /** runAgent's job, leased: stored with its first event, and its session started. */
  async #create(job: JobRecord, agent: AgentVersionRecord, attachments: string[]): Promise<JobRecord> {
    const created = this.#o.lifecycle?.event("job.created", {
      jobId: job.id,
      agentName: agent.name,
      agentVersion: String(agent.version),
      status: "pending",
      attributes: { harness: agent.harness.manifest.name, plugin: agent.plugin, attachment_count: attachments.length },
    });
    // The job's trace begins with that event (tracing.ts): its id is kept for `oz0 jobs show`, its root
    // span for whichever replica resumes the job and for links from calls about it.
    const traceId = this.#o.lifecycle?.traceIdOf?.(job.id);
    const traceparent = this.#o.lifecycle?.traceparentOf?.(job.id);
    const record: JobRecord = {
      ...job,
      ...(traceId ? { traceId } : {}),
      ...(traceparent ? { traceparent } : {}),
    };
    // The job, its first event and `job.created` in one transaction (issue 24: it was two): a job is
    // stored with them or not at all.
    let pending: JobEvent | undefined;
    try {
      [pending] = await createJobStep(this.#o, record, { events: [stateChanged("pending")], lifecycle: [created] });
    } catch (error) {
      // Not created: its span ends here, and a lease kept (and renewed) would be for nothing.
      this.#o.lifecycle?.withdrawn?.(job.id);
      await this.#ownership.release(job.id).catch(() => undefined);
      throw error;
    }
    // Created just now, it has asked nothing: its first permission request needs no read of the ids used
    // (issue 24); a job resumed or taken over reads them from the store.
    const active: ActiveJob = { agent, sandboxSeq: 0, exitError: "", requestIds: new Map() };
    // Its lease lost meanwhile: whoever takes the job over (this replica too, under a new lease) starts it.
    if (this.#ownership.owns(job.id)) {
      this.#active.set(job.id, active);
      this.#active.track(this.#sessions.start(job, active));
    }
    // What the store holds now (issue 24: it was read back): the session's start writes nothing until its
    // token is minted, a call to the LLM proxy away.
    return { ...record, lastSeq: Number(pending!.seq) };
  }

  /** Re-attach to every job that was running when the orchestrator stopped. */
  resumeAll(): Promise<number> {
    return this.#sessions.resumeAll();
  }

  /**
   * Work on a job this replica just took over (its owner died, or this replica lost its lease and won it again).
   * Whatever of it still runs here began under a lease lost since: it stops, and the job is resumed afresh.
   */
  resumeJob(jobId: string): Promise<void> {
    this.abandon(jobId);
    return this.#sessions.resumeJob(jobId);
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
    this.#approvals.clearJob(jobId);
    this.#stops.forget(jobId);
    // Its unfinished harness operations run again at the new owner; they write nothing more here.
    this.#operations.abandonJob(jobId);
  }

  /** A waiting call of a job this replica works on was answered at another replica: write the answer to the session. */
  deliverAnswer(answer: { jobId: string; permissionId: string }): Promise<void> {
    return this.#approvals.deliverAnswer(answer);
  }

  /**
   * A cancel stored at another replica (the one a person asked): when this replica follows the job, its session
   * is asked to stop and the wait for its end starts here, as if cancelled here (session-stops.ts). The replica
   * that took the cancel told the node too, but only the owner can end the job if the node lets the session run on.
   */
  async heedCancel(jobId: string): Promise<void> {
    const active = this.#active.get(jobId);
    if (!active || !this.#ownership.owns(jobId) || this.#stops.asked(jobId)) return;
    const job = await this.#o.store.getJob(jobId);
    if (!job?.cancelRequestedAt || isTerminal(job.state)) return;
    this.#approvals.stopDeciding(jobId);
    this.#stopStored(job, active);
  }

  /** heedCancel for every job this replica follows (notices may have been missed). */
  async heedStoredCancels(): Promise<void> {
    for (const jobId of this.#active.ids()) await this.heedCancel(jobId);
  }

  /** Deliver every decided, undelivered answer of the jobs this replica works on (notices may have been missed). */
  deliverUndelivered(): Promise<void> {
    return this.#approvals.deliverUndelivered();
  }

  /** A person's answer to a call that waits for approval. Idempotent for the same answer. */
  answerPermission(options: AnswerOptions): Promise<PermissionRecord> {
    return this.#approvals.answer(options);
  }

  /** Deals with the jobs this replica works on whose sandbox node stopped sending heartbeats. */
  handleLostSessions(): Promise<void> {
    return this.#sessions.handleLostSessions();
  }

  /** Checks for lost nodes every `intervalMs` until close. */
  watchNodes(options: { intervalMs: number }): void {
    this.#sessions.watchNodes(options);
  }

  /**
   * Messages of the job's session that arrived together (under the job's
   * lock), in order. Runs of those that only append to the job (text, usage,
   * tool calls and results, the result, artifacts, stderr) are stored in one
   * transaction: their events in order, the job's columns as the last of
   * them leaves them, the sandbox's seq of the last one (issue 24: a
   * transaction per message was most of a job's). Any other message first
   * has the run before it stored, then is handled alone, as it reads the job.
   * A run that cannot be stored leaves the in-memory seq at the last one
   * stored, so the stream re-attached after it delivers the run again.
   */
  async #handleBurst(jobId: string, active: ActiveJob, messages: SandboxMessage[]): Promise<void> {
    let run: AppendStep | undefined;
    let storedSeq = active.sandboxSeq;
    /** Puts the seq in memory back to the last one stored, unless the job fails with the refusal (then it passes it). */
    const failed = async (error: unknown): Promise<void> => {
      const lastSeq = active.sandboxSeq;
      active.sandboxSeq = storedSeq;
      if (!(await this.#refusedForGood(jobId, active, { after: storedSeq, last: lastSeq }, error))) throw error;
      storedSeq = active.sandboxSeq;
    };
    /** The seq in memory is stored: refusals before it are forgotten. */
    const stored = (): void => {
      storedSeq = active.sandboxSeq;
      if (active.refusals && storedSeq >= active.refusals.last) active.refusals = undefined;
    };
    const store = async (): Promise<void> => {
      if (!run) return;
      const step = run;
      run = undefined;
      try {
        if (step.events.length > 0 || step.job || step.stderr || step.lifecycle.length > 0)
          await this.#append(jobId, step.events, {
            lifecycle: step.lifecycle,
            ...(step.job ? { job: step.job } : {}),
            ...(step.stderr ? { stderr: step.stderr } : {}),
          });
      } catch (error) {
        await failed(error);
        return;
      }
      stored();
    };
    for (const message of messages) {
      let step: AppendStep | undefined;
      try {
        step = this.#appendStep(jobId, active, message);
      } catch (error) {
        // Its artifacts could not be written (a full disk): the run before it is not stored either, so the seq
        // goes back before both, and the re-attach delivers them again.
        run = undefined;
        active.sandboxSeq = message.seq;
        await failed(error);
        continue;
      }
      // A step holds one piece of stderr at most.
      if (!step || (run?.stderr && step.stderr)) await store();
      if (!step) {
        try {
          await this.#handleAlone(jobId, active, message);
        } catch (error) {
          // Its seq is stored in the step that handles it, or not at all: a message that failed before that
          // step (its read, its audit, its decision) is delivered again by the re-attach, and handled then.
          // Left past it, a permission request would never be decided and its session would wait for ever.
          await failed(error);
          continue;
        }
        stored();
        continue;
      }
      active.sandboxSeq = message.seq;
      active.startIfUnknown = false;
      run = run ? mergeSteps(run, step) : step;
    }
    await store();
  }

  /**
   * Whether the session's messages after `seqs.after` (to `seqs.last`) are refused for good: the database
   * refused them for their data (sql-database.ts: refusedForItsData) the last REFUSALS_BEFORE_FAILING times
   * they came. A re-attach delivers a message that failed again, which suits a database that was busy or
   * away; refused for its data, it would be delivered and refused for ever, and the job would neither go on
   * nor end. Its job fails instead, saying why, with the seq that passes them stored.
   */
  async #refusedForGood(
    jobId: string,
    active: ActiveJob,
    seqs: { after: number; last: number },
    error: unknown,
  ): Promise<boolean> {
    if (!refusedForItsData(error)) {
      active.refusals = undefined;
      return false;
    }
    // The refused message lies in every range refused since: a re-attach may group the messages otherwise, and
    // store a good few before it alone, so the count goes on while the ranges overlap.
    const before = active.refusals;
    const overlaps = before !== undefined && seqs.after < before.last && before.after < seqs.last;
    const times = overlaps ? before.times + 1 : 1;
    active.refusals = overlaps
      ? { after: Math.max(before.after, seqs.after), last: Math.min(before.last, seqs.last), times }
      : { after: seqs.after, last: seqs.last, times };
    if (times < REFUSALS_BEFORE_FAILING) return false;
    const job = await this.#o.store.getJob(jobId);
    if (!job) return false;
    const refused = active.refusals;
    const which =
      refused.last > refused.after + 1 ? `messages ${refused.after + 1}-${refused.last}` : `message ${refused.last}`;
    const reason = `the session's ${which} could not be stored (${(error as Error).message}), ${times} times: its data cannot be stored, so the job fails rather than retry for ever`;
    try {
      await this.#stopSession(job, active, reason, { sandboxSeq: seqs.last });
    } catch (stopError) {
      // The seq itself may be what is refused (a node's, beyond bigint): the error is stored without it, and the
      // job still fails.
      if (!refusedForItsData(stopError)) throw stopError;
      await this.#stopSession(job, active, reason, {});
    }
    active.sandboxSeq = seqs.last;
    active.refusals = undefined;
    return true;
  }

  /**
   * What a message that only appends to the job writes (undefined for any
   * other). Its in-memory effects (the result, the exit) happen here, when
   * it is handled.
   */
  #appendStep(jobId: string, active: ActiveJob, message: SandboxMessage): AppendStep | undefined {
    const seqPatch: JobPatch = { sandboxSeq: message.seq };
    switch (message.kind) {
      case "started":
        if (message.isolation) active.isolation = message.isolation;
        // Not written on its own: the session's next message (its first event, or its exit) stores a later seq,
        // and a re-attach before that replays this message, which changes nothing (issue 24: one transaction
        // less per job). Until then the stored seq is 0, "nothing heard from the session", which is true of the
        // harness: whether it may start again elsewhere is its unused token's to prove (job-sessions.ts).
        return emptyStep();
      case "exited":
        if (message.failure) return undefined;
        heardExit(active, message);
        // Nothing is stored (issue 24: one transaction less per job): the job ends when the stream does, right
        // after, and a restart before that re-attaches before `exited` (the sandbox keeps an ended session for its
        // retention period), which reads the same exit again.
        return emptyStep();
      case "artifacts": {
        // Stored as they arrive, with the seq that says they were handled: a restart or a
        // replica taking the job over re-attaches after them and must not lose them. None (the
        // session changed nothing) stores nothing, as `exited` does (issue 24: one transaction less
        // per such job): the job ends right after, and a re-attach before that reads the same none.
        // A session that broke a rule (a tool run unasked, or after its refusal) made changes nobody allowed: they
        // are not handed out as the job's work, where a person could apply them unaware. What it did is in the
        // job's events. (A replica that follows the job again after a restart knows it from the job's ruleBroken.)
        if (active.violation)
          return {
            ...emptyStep(),
            events: [{ event: { case: "artifacts", value: { artifacts: [], error: ARTIFACTS_WITHHELD } } }],
            job: seqPatch,
          };
        const artifacts = storeArtifacts(this.#o.home, jobId, message.artifacts.slice(0, MAX_ARTIFACT_FILES));
        const dropped = message.artifacts.length - MAX_ARTIFACT_FILES;
        // The node's reason when it could not collect them is the job's to show (else "no artifacts", and no why),
        // and so is what this replica did not keep.
        const error = [
          ...(message.error ? [clippedHarnessText(message.error)] : []),
          ...(dropped > 0
            ? [`the node sent ${message.artifacts.length} files; the first ${MAX_ARTIFACT_FILES} are kept`]
            : []),
        ].join("; ");
        if (artifacts.length === 0 && !error) return emptyStep();
        return {
          ...emptyStep(),
          events: [{ event: { case: "artifacts", value: { artifacts, error } } }],
          job: seqPatch,
        };
      }
      case "stderr":
        // Stored with the seq that passes it, like artifacts: a re-attach starts after it.
        return {
          ...emptyStep(),
          job: seqPatch,
          stderr: stderrAppend(message, this.#o.maxStderrBytes ?? DEFAULT_MAX_STDERR_BYTES),
        };
      case "event":
        return this.#eventStep(jobId, active, message.event, seqPatch);
    }
  }

  #eventStep(jobId: string, active: ActiveJob, event: SessionEvent, patch: JobPatch): AppendStep | undefined {
    const e = event.event;
    const time = event.time;
    switch (e.case) {
      case "text":
        return { ...emptyStep(), events: [{ time, event: { case: "text", value: harnessText(e.value) } }], job: patch };
      case "usage":
        return { ...emptyStep(), events: [{ time, event: e }], job: patch };
      case "toolCall":
        return {
          ...emptyStep(),
          events: [{ time, event: e }],
          job: patch,
          lifecycle: [
            this.#o.lifecycle?.event("tool.called", {
              jobId,
              toolCallId: e.value.callId,
              attributes: { tool_name: e.value.tool, input: e.value.input },
            }),
          ],
        };
      case "toolResult":
        // Audited before its seq is stored unless it passes unread: stored first and audited after, a crash or a
        // failed read in between re-attached past it and the harness's bypass went unseen.
        if (!passesAuditUnread(active, e.value)) return undefined;
        return { ...emptyStep(), events: [{ time, event: e }], job: patch };
      case "result":
        active.result = e.value;
        return {
          ...emptyStep(),
          events: [{ time, event: e }],
          job: { ...patch, resultText: e.value.text, stopReason: e.value.stopReason },
        };
      case "started":
      case "permissionRequest":
      case "runtimeToolCall":
        return undefined;
      default:
        return { ...emptyStep(), job: patch };
    }
  }

  /**
   * A message that reads the job before it writes: handled on its own, after what came before it is stored, and
   * stored with its seq in the step that handles it. On a throw #handleBurst puts the seq in memory back.
   */
  async #handleAlone(jobId: string, active: ActiveJob, message: SandboxMessage): Promise<void> {
    active.sandboxSeq = message.seq;
    active.startIfUnknown = false;
    const patch: JobPatch = { sandboxSeq: message.seq };
    if (message.kind === "exited") {
      heardExit(active, message);
      // Stored with the seq that passes it: a restart or a takeover after this point re-attaches
      // past `exited` and must fail the job alike (jobEnding reads it back). A cancel keeps its reason.
      const job = await this.#o.store.getJob(jobId);
      // An error stored first (a cancel's reason, a rule the harness broke) stays the job's.
      if (job && !job.cancelRequestedAt && !job.error) patch.error = message.failure!;
      await this.#o.store.updateJob(jobId, patch);
      return;
    }
    if (message.kind !== "event") throw new Error(`a ${message.kind} message of a session only appends to its job`);
    const event = message.event;
    const e = event.event;
    switch (e.case) {
      case "started": {
        const job = await this.#o.store.getJob(jobId);
        const events: JobEventInit[] = [{ time: event.time, event: { case: "sessionStarted", value: e.value } }];
        if (job && job.state === "pending") {
          events.push(stateChanged("running"));
          patch.state = "running";
        }
        // The first session's start is the job's (a session started afresh elsewhere keeps it), on
        // the orchestrator's clock like the job's creation and end, so durations compare one clock.
        if (job && !job.startedAt) patch.startedAt = new Date();
        // Stored with the seq that passes the start, as the audit's rules are: a re-attach past it fails alike.
        const violation = capabilitiesViolation(active.agent.harness.manifest, e.value);
        if (violation && job) Object.assign(patch, ruleBrokenPatch(job, violation));
        await this.#append(jobId, events, {
          job: patch,
          lifecycle: [
            this.#o.lifecycle?.event("session.started", {
              jobId,
              sessionId: job?.sessionId ?? "",
              status: "running",
              attributes: {
                harness_name: e.value.harnessName,
                ...(active.isolation ? { isolation: active.isolation } : {}),
              },
            }),
          ],
        });
        if (violation && job) {
          active.violation ??= job.error || violation;
          this.#o.logger.warn({ jobId, sessionId: job.sessionId }, violation);
          this.#cancelSession(job, active, active.violation);
        }
        return;
      }
      case "toolResult": {
        // A failed audit or write stores nothing: the re-attach delivers the result again, and it is audited then.
        const violation = await this.#approvals.audit(jobId, active, e.value);
        const job = violation ? await this.#o.store.getJob(jobId) : undefined;
        // The rule it broke is stored with the seq that passes it, in one transaction: a restart or a takeover
        // re-attaches past the result and must still fail the job. An error stored first (a cancel's reason,
        // a rule broken before) stays the job's.
        await this.#append(jobId, [{ time: event.time, event: e }], {
          job: violation ? { ...patch, ...ruleBrokenPatch(job, violation) } : patch,
        });
        if (violation && job) {
          // A rule broken before, stored (by this process before a restart), stays the job's.
          active.violation ??= job.error || violation;
          this.#o.logger.warn({ jobId, sessionId: job.sessionId, callId: e.value.callId }, violation);
          this.#cancelSession(job, active, violation);
        }
        return;
      }
      case "permissionRequest": {
        const job = (await this.#o.store.getJob(jobId))!;
        // The job fails already, its session asked to stop when that was found (or when this process took the
        // job up after a restart: #watchResumed): nothing more of it is decided.
        if (active.violation || storedFailure(job)) {
          await this.#passEnding(job, active, patch);
          return;
        }
        const offered = this.#served(job)?.tools.some((t) => t.name === e.value.tool) ?? false;
        const violation = await this.#approvals.decide({ job, active, event, patch, offered });
        // With the seq that passes the request, which is not read again.
        if (violation) await this.#stopSession(job, active, violation, patch);
        return;
      }
      case "runtimeToolCall": {
        const job = (await this.#o.store.getJob(jobId))!;
        // Checked here too: a node could be the attacker's, and forward an id its host would refuse.
        const idProblem = e.value.id ? requestIdProblem(e.value.id) : "no characters";
        if (idProblem) {
          const violation = `the harness broke the protocol: invalid_event: runtime tool call ${quotedHarnessText(e.value.id)}: its id has ${idProblem}; ids are ${REQUEST_ID_RULES}`;
          await this.#stopSession(job, active, violation, patch);
          return;
        }
        // The job ends already (a rule broken, a message refused, a cancel: stored, so before a restart too) and its
        // session is being stopped: the call is answered as an error, with nothing run or recorded. An operation
        // would run a scratch session for nothing, and a graph manager's decision would still steer its graph.
        if (active.violation || job.error) {
          // Answered before the seq passes the call: an answer lost with a broken stream is given at the re-attach.
          await active.channel?.answerRuntimeTool(
            create(RuntimeToolResultSchema, {
              id: e.value.id,
              isError: true,
              error: `job_ending: ${e.value.name} was not run: the job is ending (cancelled, or failed), and its session is being stopped`,
            }),
          );
          await this.#passEnding(job, active, patch);
          return;
        }
        // Asked about and allowed first, as every tool call is: else nothing runs, and the job fails with the rule.
        const offered = this.#sessions.runtimeTools(job, active.agent).find((t) => t.name === e.value.name);
        const named = schemaFields(offered?.inputSchema);
        const bypass = await this.#approvals.permitRuntimeCall({ jobId, active, call: e.value, named });
        if (bypass) {
          await active.channel?.answerRuntimeTool(
            create(RuntimeToolResultSchema, {
              id: e.value.id,
              isError: true,
              error: `not_permitted: ${e.value.name} was not run: no allowed permission request covers this call`,
            }),
          );
          await this.#stopSession(job, active, bypass, patch);
          return;
        }
        const served = this.#served(job);
        if (served?.tools.some((t) => t.name === e.value.name)) {
          await answerServedCall({
            store: this.#o.store,
            jobId,
            served,
            call: e.value,
            channel: active.channel,
            record: (event) => this.#append(jobId, [event]),
          });
          await this.#o.store.updateJob(jobId, patch);
          return;
        }
        // A harness operation runs beside the session (calls of one turn concurrently); its
        // answer goes down the stream when done. Recorded before the seq advances, so a crash
        // in between replays the call rather than losing it.
        const parent = this.#sessions.operationParent(job, active);
        const { recorded, done } = this.#operations.accept({
          parent,
          callId: e.value.id,
          name: e.value.name,
          input: e.value.input,
        });
        this.#active.track(done);
        await recorded;
        await this.#o.store.updateJob(jobId, patch);
        return;
      }
      default:
        throw new Error(`a session's ${e.case ?? "empty"} event only appends to its job`);
    }
  }

  /**
   * A message of a job that ends already, passed with its seq. A rule broken whose write failed (the message that
   * broke it comes again, or a later one does) is written now, and the session asked to stop.
   */
  async #passEnding(job: JobRecord, active: ActiveJob, patch: JobPatch): Promise<void> {
    // Keyed on the rule, not the error: a cancel's reason stored first must not keep the rule from being stored.
    if (active.violation && !job.ruleBroken) await this.#stopSession(job, active, active.violation, patch);
    else await this.#o.store.updateJob(job.id, patch);
  }

  /** The harness broke a rule: its session is stopped now, and the job fails with the rule when its stream ends (#finish). */
  async #stopSession(job: JobRecord, active: ActiveJob, violation: string, patch: JobPatch): Promise<void> {
    if (!active.violation) {
      // A rule broken before, stored (by this process before a restart, or another replica), stays the job's.
      active.violation = job.error || violation;
      this.#o.logger.warn({ jobId: job.id, sessionId: job.sessionId }, violation);
    }
    // Stored as a failed session's error is: a restart or a takeover re-attaches past what broke the rule
    // and would not see it again, so the job fails alike whatever the session does next (a node may let it
    // run on).
    // The error is the first reason this process holds (it may be a cancel's); the rule is the one broken.
    await this.#o.store.updateJob(job.id, {
      ...patch,
      ...ruleBrokenPatch(job, violation),
      error: job.error || active.violation,
    });
    this.#cancelSession(job, active, active.violation);
  }

  /**
   * Stops the session of a job that must end (why is stored already), and its running operations: the node is
   * told, not waited for, and the job ends without it if the session runs on (session-stops.ts).
   */
  #cancelSession(job: JobRecord, active: ActiveJob, reason: string): void {
    // Its harness operations too: their answers would go to a session that is ending.
    this.#operations.cancelJob(job.id);
    // A harness that broke a rule makes no more model calls while it is being stopped.
    this.#active.track(this.#endModelCalls(job));
    if (active.sandbox)
      this.#active.track(
        active.sandbox.cancel({ sessionId: job.sessionId, reason }).catch((error: unknown) => {
          // It ended meanwhile: its stream says how.
          if (!(error instanceof SessionNotFoundError)) throw error;
        }),
      );
    this.#stops.askedToStop(job.id, reason);
  }

  /** A job whose cancel (or a rule its harness broke) is stored: its session is asked to stop, with that reason. */
  #stopStored(job: JobRecord, active: ActiveJob): void {
    this.#cancelSession(job, active, cancelReason(job));
  }

  /** The job's session ran well past its deadline and its node did not end it: the orchestrator stops it. */
  async #stopOverdue(jobId: string, reason: string): Promise<void> {
    // A hook deciding a call holds the job's lock until it answers or times out (hours, if its plugin says so).
    this.#approvals.stopDeciding(jobId, "the job's session ran past its deadline");
    await this.#active.withLock(jobId, async () => {
      const active = this.#active.get(jobId);
      const job = await this.#o.store.getJob(jobId);
      if (!active || !job || isTerminal(job.state)) return;
      this.#o.logger.warn({ jobId, sessionId: job.sessionId, sandbox: active.sandbox?.url }, reason);
      // A cancel or a broken rule asked first keeps its reason: the job ends with it.
      if (!job.error) await this.#o.store.updateJob(jobId, { error: reason });
      this.#cancelSession(job, active, job.error || reason);
    });
  }

  #served(job: JobRecord): ServedRuntimeTools | undefined {
    return job.servedTools ? this.#o.servedTools?.[job.servedTools] : undefined;
  }

  /** Cancels a job, at any replica: fenced when this replica runs it, a bystander's write when another does (that one finishes it). */
  async cancel(options: { jobId: string; reason?: string }): Promise<JobRecord> {
    return this.#ownership.owns(options.jobId) ? this.#cancel(options) : asBystander(() => this.#cancel(options));
  }

  async #cancel(options: { jobId: string; reason?: string }): Promise<JobRecord> {
    const job = await this.#o.store.getJob(options.jobId);
    if (!job) throw notFound(`job ${options.jobId} not found; list jobs with \`oz0 jobs list\``);
    if (isTerminal(job.state)) return job;
    const reason = options.reason || CANCELLED_BY_REQUEST;
    const active = this.#active.get(job.id);
    // Its model calls end first: answering its waiting calls wakes the harness, which made one more (billed)
    // model call before SIGTERM reached it (operator review). A call already under way runs to its end.
    await this.#endModelCalls(job);
    // A hook deciding a call holds the job's lock until it answers or times out (hours, if its plugin says so).
    this.#approvals.stopDeciding(job.id);
    try {
      await this.#active.withLock(job.id, () =>
        this.#approvals.cancelWaiting(job.id, { cancelRequestedAt: new Date(), error: reason }),
      );
    } catch (error) {
      this.#approvals.resumeDeciding(job.id);
      throw error;
    }
    if (!this.#ownership.owns(job.id)) {
      // Another replica runs it: stop its session; that replica sees the stream end and finishes the job.
      await (
        await this.#o.placement.runnerForSession(job)
      )
        .cancel({ sessionId: job.sessionId, reason })
        .catch((error: unknown) => {
          // Not started yet: its owner sees cancelRequestedAt before starting it.
          if (!(error instanceof SessionNotFoundError)) throw error;
        });
      return (await this.#o.store.getJob(job.id))!;
    }
    // Its operations here; another replica's are cancelled by that replica when its session ends.
    this.#operations.cancelJob(job.id);
    let sessionGone = !active?.channel;
    if (!sessionGone) {
      // Before the call: a node that never answers it does not keep the job running either.
      this.#stops.askedToStop(job.id, reason);
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
    // Not when the end threw: a lease lost meanwhile leaves the job to its new owner, this replica perhaps.
    this.#operations.forgetJob(jobId);
    // Ended (now or before): its node's slot is free, and nobody is to take it over.
    if (job)
      await this.#o.placement
        .release(job.sessionId)
        .catch((error: unknown) =>
          this.#o.logger.warn({ jobId, err: String(error) }, "could not free the session's slot on its node"),
        );
    await this.#ownership.release(jobId);
  }

  /** session.ended for a job whose session's exit was heard (undefined otherwise). */
  #sessionEnded(job: JobRecord, active: ActiveJob | undefined): RawEvent | undefined {
    const exit = active?.exit;
    if (!exit || !this.#o.lifecycle) return undefined;
    const stopReason = exit.result ? StopReason[exit.result.stopReason] : undefined;
    return this.#o.lifecycle.event("session.ended", {
      jobId: job.id,
      sessionId: job.sessionId,
      agentName: job.agentName,
      agentVersion: String(job.agentVersion),
      status: exit.status ?? "unknown",
      attributes: {
        ...(exit.signal ? { signal: exit.signal } : { exit_code: exit.exitCode }),
        error_code: exit.errorCode ?? "",
        // A name (`max_turns`), as every other event's stop reason, not the proto's number.
        ...(stopReason ? { stop_reason: stopReason.toLowerCase() } : {}),
        turns: exit.result?.turns ?? 0,
        ...(job.startedAt ? { duration_ms: Date.now() - job.startedAt.getTime() } : {}),
      },
    });
  }

  /** The job as it was before it ended (undefined when unknown). */
  async #endJob(jobId: string, options: { failure?: string }): Promise<JobRecord | undefined> {
    return this.#active.withLock(jobId, async () => {
      const job = await this.#o.store.getJob(jobId);
      if (!job || isTerminal(job.state)) return job;
      const { state, error, result } = await jobEnding({
        store: this.#o.store,
        job,
        active: this.#active.get(jobId),
        ...options,
      });
      // Its waiting calls are read again should one be answered at another replica meanwhile: that refusal left
      // the job running, with nobody to end it, until the orchestrator restarted.
      await againIfAnsweredMeanwhile(async () => {
        const closed = await this.#approvals.closeWaiting(jobId);
        await this.#append(jobId, [...closed.events, stateChanged(state, error)], {
          job: {
            state,
            error,
            finishedAt: new Date(),
            ...(result ? { resultText: result.text, stopReason: result.stopReason } : {}),
          },
          permissions: closed.permissions,
          lifecycle: [
            // What its node reported of the session's end: published here, in the job's last write, rather than by
            // the node, whose credential (held beside agent code on every node) could then say it of any job.
            this.#sessionEnded(job, this.#active.get(jobId)),
            this.#o.lifecycle?.event(
              state === "succeeded" ? "job.completed" : `job.${state as "failed" | "cancelled"}`,
              {
                jobId,
                sessionId: job.sessionId,
                agentName: job.agentName,
                agentVersion: String(job.agentVersion),
                status: state,
              },
            ),
          ],
        });
      });
      this.#operations.cancelJob(jobId);
      const active = this.#active.get(jobId);
      if (active) {
        active.ended = true;
        active.channel?.close();
      }
      this.#active.delete(jobId);
      this.#stops.forget(jobId);
      if (job.tokenId) {
        await this.#o.tokens
          .revoke({ tokenId: job.tokenId })
          .catch((err: unknown) =>
            this.#o.logger.warn({ jobId, err: String(err) }, "could not revoke the session token"),
          );
      }
      return job;
    });
  }

  /**
   * Revokes the session's LLM token now, not at the job's end: a session being stopped runs on until SIGTERM
   * reaches its harness (or the grace ends), and must spend nothing meanwhile. The job's end revokes it again,
   * which changes nothing; a revoke that fails is the end's (and the sweep's) to retry.
   */
  async #endModelCalls(job: JobRecord): Promise<void> {
    if (!job.tokenId) return;
    await this.#o.tokens
      .revoke({ tokenId: job.tokenId })
      .catch((err: unknown) =>
        this.#o.logger.warn({ jobId: job.id, err: String(err) }, "could not revoke the session token at its stop"),
      );
  }

  /** Jobs whose session this process follows right now. */
  get activeCount(): number {
    return this.#active.size;
  }

  /** Stop following sessions (they keep running on their sandboxes; the next start re-attaches). */
  async close(): Promise<void> {
    this.#sessions.close();
    this.#approvals.close();
    this.#stops.close();
    await this.#active.close();
  }
}

/** What one message that only appends to its job writes. */
interface AppendStep extends JobStepWrites {
  events: JobEventInit[];
  lifecycle: NonNullable<JobStepWrites["lifecycle"]>;
}

/** How many times in a row the database may refuse a session's message for its data before its job fails. */
const REFUSALS_BEFORE_FAILING = 3;

function emptyStep(): AppendStep {
  return { events: [], lifecycle: [] };
}

/** Two steps in one: events and lifecycle events in order; the job's columns as the later leaves them. */
function mergeSteps(a: AppendStep, b: AppendStep): AppendStep {
  return {
    events: [...a.events, ...b.events],
    lifecycle: [...a.lifecycle, ...b.lifecycle],
    ...(a.job || b.job ? { job: { ...a.job, ...b.job } } : {}),
    ...(a.stderr || b.stderr ? { stderr: (a.stderr ?? b.stderr)! } : {}),
  };
}

/**
 * What the session's exit says for the job's end (job-ending.ts): its result, how it exited, failed or took a stop;
 * and, kept whole, what the job's session.ended reports.
 */
function heardExit(active: ActiveJob, message: Extract<SandboxMessage, { kind: "exited" }>): void {
  active.exit = message;
  if (!active.result && message.result) active.result = message.result;
  active.exitError = exitError(message);
  active.sessionFailure = message.failure;
  active.killedAfterStop = message.killedAfterStop;
}

/** Why the harness's exit fails its job, or "" when it does not. */
function exitError(message: Extract<SandboxMessage, { kind: "exited" }>): string {
  return (
    message.error ||
    (message.exitCode !== 0 || message.signal
      ? `the harness exited (code ${message.exitCode}${message.signal ? `, signal ${message.signal}` : ""})`
      : "")
  );
}
