// The approval workflow of a job's tool calls: each permission request of a
// session is decided (the tool policy, or the runtime for a cancelled job or
// a tool it offered itself), recorded with the job's events in one
// transaction, and answered at once, unless it waits for a person: then the
// job waits, a deadline is armed (`approvals.timeout`), and the call ends
// when a person answers (`answer`), the deadline passes (timed out, which
// denies it), the job is cancelled or the job ends. A decided answer is
// delivered to the session and written again after every re-attach until a
// stream took it. The tool-call audit checks afterwards that a harness that
// declares permissions ran only what it was allowed.
import { isDeepStrictEqual } from "node:util";
import type { JsonObject as ProtoJsonObject } from "@bufbuild/protobuf";
import { create } from "@bufbuild/protobuf";
import {
  PermissionAnswer_Outcome,
  PermissionAnswerSchema,
  type SessionEvent,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import { Decider } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { Logger } from "@oz0/serving";
import { asBystander, type JobOwnership } from "../cluster/job-ownership.js";
import { LeaseLostError } from "../cluster/lease-manager.js";
import type { ActiveJob, ActiveJobs } from "../jobs/active-jobs.js";
import { appendJobStep, stateChanged, type JobEventInit, type JobStepWrites } from "../jobs/job-events.js";
import type { JobFeed } from "../jobs/job-feed.js";
import { nonFiniteNumberAt } from "../operations/harness-operations.js";
import { failedPrecondition, invalidArgument, notFound, permissionDenied } from "../orchestrator-error.js";
import type { PermissionPolicy, PolicyDecision } from "../policy/permission-policy.js";
import { toolResultViolation, type ToolResultSeen } from "../policy/tool-call-audit.js";
import type { LifecycleSink } from "../sessions/session-runner.js";
import {
  DecidedMeanwhileError,
  isTerminal,
  type AgentVersionRecord,
  type DeciderName,
  type JobPatch,
  type JobRecord,
  type JobStore,
  type JsonObject,
  type PermissionRecord,
} from "../store/job-store.js";
import { claim, requestIdViolation, requestIdsOf } from "./request-ids.js";
import { permitRuntimeCall, type RuntimeCall } from "./runtime-call-permits.js";
import { answerRefusal, approvalDeadline, ApprovalDeadlines, type Answerer } from "./approval-deadlines.js";

const DECIDER_TO_PROTO: Record<DeciderName, Decider> = {
  policy: Decider.POLICY,
  hook: Decider.HOOK,
  person: Decider.PERSON,
  runtime: Decider.RUNTIME,
};

/** A person's answer to a call that waits for them; `answeredBy` is the authenticated principal, never a name from the request. */
export interface AnswerOptions {
  jobId: string;
  callId: string;
  allow: boolean;
  input?: JsonObject;
  reason?: string;
  answeredBy: Answerer;
}

export interface ApprovalServiceOptions {
  store: JobStore;
  feed: JobFeed;
  lifecycle?: LifecycleSink;
  policy: PermissionPolicy;
  logger: Logger;
  ownership: JobOwnership;
  /** The jobs this process follows: their sessions take the answers, their locks order the writes. */
  active: ActiveJobs;
  /** How many calls of one session may wait for a person at once (OZ0_MAX_WAITING_APPROVALS). Default 32. */
  maxWaitingApprovals?: number;
}

/**
 * The default of OZ0_MAX_WAITING_APPROVALS. Parallel tool calls that all need
 * a person are a handful; a harness asking thousands at once buried every
 * other job's calls in the approvers' queue.
 */
export const DEFAULT_MAX_WAITING_APPROVALS = 32;

/** The decision on a call of a cancelled job: refused, nobody asked. */
const CANCELLED: PolicyDecision = { kind: "deny", decider: "runtime", reason: "the job was cancelled" };

/** How a decided call ended, as the session's answer and the job's event say it. */
function outcomeOf(p: PermissionRecord): PermissionAnswer_Outcome {
  if (p.status === "cancelled") return PermissionAnswer_Outcome.CANCELLED;
  if (p.status === "timed_out") return PermissionAnswer_Outcome.TIMED_OUT;
  return p.status === "pending" ? PermissionAnswer_Outcome.UNSPECIFIED : PermissionAnswer_Outcome.ANSWERED;
}

/** The job event that records a call's decision (or that it waits). */
export function decisionEvent(p: PermissionRecord): JobEventInit {
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
        inputChangedBy: p.inputChangedBy ?? "",
        outcome: outcomeOf(p),
      },
    },
  };
}

export class ApprovalService {
  readonly #o: ApprovalServiceOptions;
  readonly #deadlines: ApprovalDeadlines;

  constructor(options: ApprovalServiceOptions) {
    this.#o = options;
    this.#deadlines = new ApprovalDeadlines({
      onDeadline: (jobId, permissionId) => this.#timeOut(jobId, permissionId),
      onError: (error) => options.logger.error({ err: error }, "could not time out an approval"),
    });
  }

  #append(jobId: string, events: JobEventInit[], writes: JobStepWrites): Promise<unknown> {
    return appendJobStep(this.#o, { jobId, events, ...writes });
  }

  /**
   * A permission request of the job's session, under the job's lock: decided,
   * recorded with `patch` (the session's position) in one step, and
   * answered, or left waiting for a person with its deadline armed.
   * `offered`: a tool the runtime offered this session itself, allowed
   * without the policy. A request that reuses an id or a call id of the
   * session (request-ids.ts) is neither decided nor stored: the protocol
   * error is returned, for the caller to stop the session with.
   */
  async decide(o: {
    job: JobRecord;
    active: ActiveJob;
    event: SessionEvent;
    patch: JobPatch;
    offered: boolean;
  }): Promise<string | undefined> {
    const { job, event, patch } = o;
    if (event.event.case !== "permissionRequest") return undefined;
    // The session is being stopped for breaking a rule: nothing more of it is decided (no hook runs for it).
    if (o.active.violation) return o.active.violation;
    const request = event.event.value;
    o.active.requestIds ??= requestIdsOf(await this.#o.store.listPermissions({ jobId: job.id }));
    const repeated = requestIdViolation(o.active.requestIds, request);
    if (repeated) return repeated;
    const input = request.input as JsonObject | undefined;
    const deciding = new AbortController();
    o.active.deciding = deciding;
    // A cancel stopped the decisions before it could store itself (it waits for the job's lock this one holds).
    if (o.active.decisionsStopped !== undefined) deciding.abort(o.active.decisionsStopped);
    // Its session's exit, heard now or while a hook runs, stops command hooks (and only them: the rest of the
    // policy decides as ever, and the call waits or ends with the job).
    const exited = (o.active.sessionExited ??= new AbortController()).signal;
    let decided: PolicyDecision;
    try {
      decided =
        job.cancelRequestedAt !== undefined || deciding.signal.aborted
          ? CANCELLED
          : o.offered
            ? { kind: "allow", decider: "runtime", reason: "a tool the runtime offered this session" }
            : await this.#o.policy.decide({
                jobId: job.id,
                sessionId: job.sessionId,
                agent: o.active.agent,
                id: request.id,
                tool: request.tool,
                ...(input ? { input } : {}),
                title: request.title,
                callId: request.callId,
                signal: AbortSignal.any([deciding.signal, exited]),
              });
    } finally {
      if (o.active.deciding === deciding) o.active.deciding = undefined;
    }
    // Stopped while its hooks ran (stopDeciding): the call ends with the job's cancel or stop, not a hook's denial.
    // A hook stopped by the session's exit: the call ends cancelled too, saying the harness is gone.
    const hookStopped = decided.kind === "deny" && decided.stopped === true && exited.aborted;
    const cancelled = job.cancelRequestedAt !== undefined || deciding.signal.aborted || hookStopped;
    const policyDecision: PolicyDecision = deciding.signal.aborted
      ? { ...CANCELLED, reason: String(deciding.signal.reason) }
      : hookStopped
        ? { ...CANCELLED, reason: String(exited.reason) }
        : decided;
    const decision = policyDecision.kind === "ask" ? await this.#withinWaitingCap(job, policyDecision) : policyDecision;
    const record: PermissionRecord = {
      jobId: job.id,
      id: request.id,
      callId: request.callId,
      sessionId: job.sessionId,
      tool: request.tool,
      ...(input ? { input } : {}),
      title: request.title,
      needsPerson: decision.kind === "ask",
      status:
        decision.kind === "ask"
          ? "pending"
          : decision.kind === "allow"
            ? "approved"
            : cancelled
              ? "cancelled"
              : "denied",
      reason: decision.reason,
      ...(decision.kind !== "ask" ? { decider: decision.decider, answeredAt: new Date() } : {}),
      answeredBy: "",
      // A hook's changed input: the call runs with it (or, when it waits, it is what the person approves).
      ...(decision.kind !== "deny" && decision.input
        ? {
            answerInput: decision.input,
            ...(decision.inputChangedBy ? { inputChangedBy: decision.inputChangedBy } : {}),
          }
        : {}),
      requestedAt: new Date(),
      delivered: false,
    };
    if (decision.kind === "ask") patch.state = "waiting";
    await this.#append(
      job.id,
      [
        { time: event.time, event: { case: "permissionRequested", value: request } },
        ...(decision.kind === "ask" ? [stateChanged("waiting", decision.reason)] : []),
        decisionEvent(record),
      ],
      {
        job: patch,
        permissions: [record],
        lifecycle: [
          this.#o.lifecycle?.event(decision.kind === "ask" ? "approval.requested" : "permission.decided", {
            jobId: job.id,
            sessionId: job.sessionId,
            toolCallId: request.callId,
            status: record.status,
            attributes: { tool_name: request.tool, decider: record.decider ?? "person", decision: record.status },
          }),
        ],
      },
    );
    claim(o.active.requestIds, record);
    // Its ids are its own from now on (a repeat is refused above), so an approved call stays approved. An empty
    // call id names no call: it is never one a result can claim.
    if (record.status === "approved") {
      o.active.approvedCalls ??= new Set();
      o.active.approvedCalls.add(record.id);
      if (record.callId) o.active.approvedCalls.add(record.callId);
    }
    if (decision.kind !== "ask") await this.deliver(job.id, record);
    else this.#arm(o.active.agent, record);
    return undefined;
  }

  /**
   * A call that would wait for a person, refused when its session has as many
   * waiting as it may (OZ0_MAX_WAITING_APPROVALS). Refused, not a protocol
   * violation: the protocol sets no such limit, and the model reads why, and
   * may ask again once some are answered.
   */
  async #withinWaitingCap(job: JobRecord, decision: PolicyDecision): Promise<PolicyDecision> {
    const max = this.#o.maxWaitingApprovals ?? DEFAULT_MAX_WAITING_APPROVALS;
    const waiting = (await this.#o.store.listPermissions({ jobId: job.id, pendingOnly: true })).filter(
      (p) => p.sessionId === job.sessionId,
    ).length;
    if (waiting < max) return decision;
    return {
      kind: "deny",
      decider: "runtime",
      reason: `${waiting} calls of this session already wait for a person, the most one session may have waiting at once (OZ0_MAX_WAITING_APPROVALS); this call was refused without asking anyone: ask again once those are answered`,
    };
  }

  #arm(agent: AgentVersionRecord, p: PermissionRecord): void {
    const at = approvalDeadline(agent, p);
    if (at) this.#deadlines.schedule({ jobId: p.jobId, permissionId: p.id, at });
  }

  /**
   * The job is being cancelled or stopped: a call of its session decided
   * now stops its command hooks at once, rather than at their timeout, and
   * ends cancelled, saying `why`. Its decision holds the job's lock, which
   * the cancel and the stop wait for.
   */
  stopDeciding(jobId: string, why = "the job was cancelled"): void {
    const active = this.#o.active.get(jobId);
    if (!active) return;
    // Until the cancel is stored, so a call that came with this one does not start hooks of its own.
    active.decisionsStopped = why;
    active.deciding?.abort(why);
  }

  /**
   * The job's session exited (the node said so, ahead of the messages still to be handled): a command hook
   * deciding one of its calls is stopped at once, and none runs for a call still to be decided, rather than each
   * running to its timeout for a call nothing is left to run. The calls end cancelled, saying `why`.
   */
  stopHooks(jobId: string, why: string): void {
    const active = this.#o.active.get(jobId);
    if (!active) return;
    const exited = (active.sessionExited ??= new AbortController());
    if (!exited.signal.aborted) exited.abort(why);
  }

  /** The cancel that stopped the job's decisions could not be stored: its calls are decided as before. */
  resumeDeciding(jobId: string): void {
    const active = this.#o.active.get(jobId);
    if (active) active.decisionsStopped = undefined;
  }

  /** Arms the deadlines of a job's waiting calls again (a restart, a takeover). */
  async armWaiting(jobId: string, agent: AgentVersionRecord): Promise<void> {
    for (const p of await this.#o.store.listPermissions({ jobId, pendingOnly: true })) this.#arm(agent, p);
  }

  /** The deadline of a waiting call passed: it ends timed_out, which denies it (fail closed). */
  async #timeOut(jobId: string, permissionId: string): Promise<void> {
    await this.#o.active.withLock(jobId, async () => {
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
    const stillWaiting = (await this.#o.store.listPermissions({ jobId: job.id, pendingOnly: true })).filter(
      (x) => x.id !== updated.id,
    ).length;
    const events: JobEventInit[] = [decisionEvent(updated)];
    const patch: JobPatch = {};
    if (!stillWaiting && job.state === "waiting") {
      patch.state = "running";
      events.push(stateChanged("running"));
    }
    await this.#append(job.id, events, {
      job: patch,
      permissions: [updated],
      lifecycle: [this.#answeredEvent(updated)],
    });
    await this.deliver(job.id, updated);
  }

  /** Write a decided answer to the job's session, if it is attached here, and record that it was written. */
  async deliver(jobId: string, p: PermissionRecord): Promise<void> {
    const channel = this.#o.active.get(jobId)?.channel;
    if (!channel || p.status === "pending") return;
    try {
      await channel.answerPermission(
        create(PermissionAnswerSchema, {
          id: p.id,
          allow: p.status === "approved",
          reason: p.reason,
          outcome: outcomeOf(p),
          ...(p.answerInput ? { input: p.answerInput as ProtoJsonObject } : {}),
        }),
      );
      // Written again at a re-attach (redeliver): recorded once.
      if (!p.delivered) await this.#o.store.markPermissionDelivered(jobId, p.id);
    } catch (error) {
      // Left undelivered: the next re-attach writes it.
      this.#o.logger.warn({ jobId, permission: p.id, err: String(error) }, "could not deliver a permission answer yet");
    }
  }

  /**
   * After a re-attach: every decided answer is written again, not only those
   * never written. "Delivered" means handed to a stream, and one that broke
   * (or a process that died) right after may never have sent it; the sandbox
   * refuses an answer its harness already has, which changes nothing.
   */
  async redeliver(jobId: string): Promise<void> {
    for (const p of await this.#o.store.listPermissions({ jobId }))
      if (p.status !== "pending") await this.deliver(jobId, p);
  }

  /** A waiting call of a job this replica works on was answered at another replica: write the answer to the session. */
  async deliverAnswer(answer: { jobId: string; permissionId: string }): Promise<void> {
    if (!this.#o.ownership.owns(answer.jobId) || !this.#o.active.has(answer.jobId)) return;
    await this.#o.active.withLock(answer.jobId, async () => {
      const p = await this.#o.store.getPermission(answer.jobId, answer.permissionId);
      if (!p || p.status === "pending" || p.delivered) return;
      this.#deadlines.clear(answer.jobId, p.id);
      await this.deliver(answer.jobId, p);
    });
  }

  /** Deliver every decided, undelivered answer of the jobs this replica works on (notices may have been missed). */
  async deliverUndelivered(): Promise<void> {
    for (const jobId of this.#o.active.ids()) {
      for (const p of await this.#o.store.listPermissions({ jobId, undeliveredOnly: true }))
        await this.deliverAnswer({ jobId, permissionId: p.id });
    }
  }

  /** A person's answer to a call that waits for approval. Idempotent for the same answer. */
  async answer(options: AnswerOptions): Promise<PermissionRecord> {
    try {
      return await (this.#o.ownership.owns(options.jobId)
        ? this.#answer(options)
        : asBystander(() => this.#answer(options)));
    } catch (error) {
      // The lease went to another replica just now, before this one noticed. The answer's one write was
      // refused, and nothing else was written: it is made again as the bystander this replica now is, and
      // the new owner delivers it.
      if (!(error instanceof LeaseLostError)) throw error;
      return asBystander(() => this.#answer(options));
    }
  }

  async #answer(options: AnswerOptions): Promise<PermissionRecord> {
    return this.#o.active.withLock(options.jobId, async () => {
      const job = await this.#o.store.getJob(options.jobId);
      if (!job) throw notFound(`job ${options.jobId} not found; list jobs with \`oz0 jobs list\``);
      const p = await this.#o.store.getPermission(options.jobId, options.callId);
      if (!p)
        throw notFound(`job ${options.jobId} has no permission request ${options.callId}; see \`oz0 approvals list\``);
      if (!p.needsPerson)
        throw failedPrecondition(
          `call ${p.id} was decided by the ${p.decider ?? "policy"} (${p.status}); it does not wait for a person`,
        );
      // Who may answer, first: someone who may not was told "approved" when they repeated an earlier answer.
      const agent =
        this.#o.active.get(job.id)?.agent ?? (await this.#o.store.getAgentVersion(job.agentName, job.agentVersion));
      const refusal = answerRefusal({ agent, job, callId: p.id, answerer: options.answeredBy });
      if (refusal) throw permissionDenied(refusal);
      if (p.status !== "pending") return answeredBefore(p, options);
      if (!options.allow && !options.reason)
        throw invalidArgument("a denial needs a reason (it is shown to the model): pass --reason TEXT");
      // Nothing runs on a denial: kept, its input was recorded as the call's, "changed by" the person.
      if (!options.allow && options.input)
        throw invalidArgument(
          "a denial runs nothing, so it takes no input: deny without one, or approve the edited input",
        );
      const notFinite = options.input ? nonFiniteNumberAt(options.input) : undefined;
      if (notFinite !== undefined)
        throw invalidArgument(
          `the edited input's number at ${notFinite} is not finite (JSON has no Infinity or NaN; 1e400 reads as Infinity): give a finite number`,
        );
      const updated: PermissionRecord = {
        ...p,
        status: options.allow ? "approved" : "denied",
        decider: "person",
        answeredBy: options.answeredBy.id,
        reason: options.reason ?? (options.allow ? "approved" : ""),
        // An edit replaces the hook's input (the person was shown it, and edited from it).
        ...(options.input ? { answerInput: options.input, inputChangedBy: `person ${options.answeredBy.id}` } : {}),
        answeredAt: new Date(),
        delivered: false,
      };
      try {
        await this.#resolve(job, updated);
      } catch (error) {
        // Another replica stored an answer since this one read the call waiting: that one stands.
        if (!(error instanceof DecidedMeanwhileError)) throw error;
        return answeredBefore((await this.#o.store.getPermission(options.jobId, p.id)) ?? p, options);
      }
      return updated;
    });
  }

  /**
   * A cancel, under the job's lock: its waiting calls end cancelled, recorded with `patch` (the cancel itself), and
   * the session is told. A call answered at another replica meanwhile keeps its answer; the cancel goes on.
   */
  async cancelWaiting(jobId: string, patch: JobPatch): Promise<void> {
    const cancelled = await againIfAnsweredMeanwhile(async () => {
      const pending = await this.#o.store.listPermissions({ jobId, pendingOnly: true });
      const closing = pending.map((p): PermissionRecord => ({
        ...p,
        status: "cancelled",
        decider: "runtime",
        reason: "the job was cancelled",
        answeredAt: new Date(),
        delivered: false,
      }));
      await this.#append(jobId, closing.map(decisionEvent), {
        job: patch,
        permissions: closing,
        // Answered by the runtime, as a deadline's answer is: the lifecycle stream says so for each.
        lifecycle: closing.map((p) => this.#answeredEvent(p)),
      });
      return closing;
    });
    for (const p of cancelled) {
      this.#deadlines.clear(jobId, p.id);
      await this.deliver(jobId, p);
    }
  }

  /** The lifecycle event of a waiting call's answer (a person's, a deadline's, a cancel's). */
  #answeredEvent(p: PermissionRecord) {
    return this.#o.lifecycle?.event("approval.answered", {
      jobId: p.jobId,
      toolCallId: p.callId,
      status: p.status,
      attributes: {
        approval_id: p.id,
        tool_name: p.tool,
        decision: p.status,
        waited_ms: Date.now() - p.requestedAt.getTime(),
        // Who answered (a principal id, "" when the runtime did) and whether they changed the input; never the input itself.
        answered_by: p.answeredBy,
        input_changed: p.answerInput !== undefined,
      },
    });
  }

  /** The job ends: its calls still waiting can never be answered now. Their records and events, for the job's last step. */
  async closeWaiting(jobId: string): Promise<{ permissions: PermissionRecord[]; events: JobEventInit[] }> {
    const pending = await this.#o.store.listPermissions({ jobId, pendingOnly: true });
    const closed = pending.map((p): PermissionRecord => ({
      ...p,
      status: "cancelled",
      decider: "runtime",
      reason: "the job ended",
      answeredAt: new Date(),
      delivered: true,
    }));
    for (const p of closed) this.#deadlines.clear(jobId, p.id);
    return { permissions: closed, events: closed.map(decisionEvent) };
  }

  /**
   * "Every tool call asks first", checked: a harness that declares
   * permissions must have asked, and been allowed, before any result. The
   * rule the result broke (the job then fails with it); else undefined. It
   * changes nothing: the caller stores the rule, then acts on it.
   */
  async audit(jobId: string, active: ActiveJob, result: ToolResultSeen): Promise<string | undefined> {
    if (passesAuditUnread(active, result)) return undefined;
    // One row at most: a request's id and call id are used once in a session (request-ids.ts).
    const permission = (await this.#o.store.listPermissions({ jobId })).find(
      (p) => (p.callId !== "" && p.callId === result.callId) || p.id === result.callId,
    );
    return toolResultViolation({ result, permission, harness: active.agent.harness.manifest.name });
  }

  /** runtime-call-permits.ts, for a job whose harness declares permissions and has broken no rule yet. */
  async permitRuntimeCall(options: {
    jobId: string;
    active: ActiveJob;
    call: RuntimeCall;
    /** The called tool's schema fields (schemaFields). */
    named: ReadonlySet<string> | undefined;
  }): Promise<string | undefined> {
    const { jobId, active, call, named } = options;
    if (!active.agent.harness.manifest.permissions || active.violation !== undefined) return undefined;
    const harness = active.agent.harness.manifest.name;
    return permitRuntimeCall({ store: this.#o.store, jobId, harness, call, named });
  }

  /** Stop timing a job's calls: another replica works on it now. */
  clearJob(jobId: string): void {
    this.#deadlines.clearJob(jobId);
  }

  close(): void {
    this.#deadlines.close();
  }
}

/** How often againIfAnsweredMeanwhile writes: far more than people answer one job's calls at once. */
const ANSWERED_MEANWHILE_ATTEMPTS = 8;

/**
 * Runs `write`, which reads a job's waiting calls and closes them (a cancel,
 * the job's end), again when another replica answered one of them after the
 * read (the store refuses the whole write: DecidedMeanwhileError). Each
 * attempt finds fewer calls waiting, since a call is answered once.
 */
export async function againIfAnsweredMeanwhile<T>(write: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (error) {
      if (!(error instanceof DecidedMeanwhileError) || attempt >= ANSWERED_MEANWHILE_ATTEMPTS) throw error;
    }
  }
}

/**
 * A person's answer to a call decided before it: the same answer again is
 * accepted once (the decision is returned); any other is refused, saying why.
 * An edited input other than the one the call was answered with is another
 * answer: its sender must not read that their input ran. So is a plain
 * approve (which runs the input the call waited with) after another person
 * approved it with an input they edited; from the one who edited it, it is
 * the same answer again.
 */
function answeredBefore(p: PermissionRecord, options: AnswerOptions): PermissionRecord {
  const sameDecision = (p.status === "approved" && options.allow) || (p.status === "denied" && !options.allow);
  const editedByAnother = p.inputChangedBy === `person ${p.answeredBy}` && p.answeredBy !== options.answeredBy.id;
  const sameInput = options.input === undefined ? !editedByAnother : isDeepStrictEqual(options.input, p.answerInput);
  if (sameDecision && sameInput) return p;
  if (p.status === "cancelled" || p.status === "timed_out") {
    throw failedPrecondition(
      `call ${p.id} is ${p.status === "cancelled" ? "cancelled" : "timed out"}: the answer came too late and was not used`,
    );
  }
  throw failedPrecondition(
    `call ${p.id} was already ${p.status} by ${p.answeredBy || "someone"}${sameDecision ? " with another input" : ""}; a different answer is refused`,
  );
}

/**
 * Whether a tool result passes the audit with nothing read: its harness
 * declares no permissions, the job already broke a rule, or this process
 * stored its call as approved (issue 24: one read per tool call). Any other
 * result is audited against the store before its seq is stored.
 */
export function passesAuditUnread(active: ActiveJob, result: ToolResultSeen): boolean {
  return (
    !active.agent.harness.manifest.permissions ||
    active.violation !== undefined ||
    (active.approvedCalls?.has(result.callId) ?? false)
  );
}
