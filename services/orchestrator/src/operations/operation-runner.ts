// Runs harness operations: a parent session's runtime tool call becomes a
// scratch session on the parent's sandbox, in the parent's live working
// directory, with the parent version's harness, model, rendered instructions
// (plus the operation's), tools and skills, and output_schema = result_schema.
// Its structured result is validated here; an invalid one is fed back to a
// follow-up scratch session with the validator's errors (bounded repairs,
// within the timeout). A validated result is checkpointed before it is
// delivered. Calls are handled independently, so calls of one model turn run
// concurrently; nothing here schedules them.
import { create, fromJson, type JsonObject as ProtoJsonObject } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import {
  PermissionAnswer_Outcome,
  PermissionAnswerSchema,
  RuntimeToolResultSchema,
  StopReason,
  type RuntimeTool,
  type RuntimeToolResult,
  type SessionResult,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { Logger } from "@oz0/serving";
import type { ValidateFunction } from "ajv";
import {
  compileResultSchema,
  describeValidationErrors,
  nonFiniteNumberAt,
  OPERATION_INPUT_SCHEMA,
  readOperationTask,
  type HarnessOperationDefinition,
} from "./harness-operations.js";
import type { AgentVersionRecord, JobStore, JsonObject } from "../store/job-store.js";
import { DEFAULT_MAX_STDERR_BYTES, stderrAppend, withStderr } from "../sessions/harness-stderr.js";
import { OperationCheckpoints, type OperationCheckpoint } from "./operation-checkpoints.js";
import type { PermissionPolicy } from "../policy/permission-policy.js";
import { toolResultViolation, type PermissionSeen } from "../policy/tool-call-audit.js";
import {
  SessionTooLargeError,
  type LifecycleSink,
  type SandboxMessage,
  type SessionChannel,
  type SessionRunner,
  type TokenIssuer,
} from "../sessions/session-runner.js";
import { SessionDriver } from "../sessions/session-driver.js";
import { agentSessionStart } from "../sessions/session-request.js";
import { stopFollowedSession } from "../jobs/session-stops.js";
import { newId } from "../store/ids.js";
import { sessionBudget } from "../policy/session-budget.js";

/** Repair sessions after the first attempt when its result does not validate. */
export const DEFAULT_MAX_REPAIRS = 2;

export type OperationErrorCode =
  | "operation_unknown"
  | "operation_input_invalid"
  | "operation_nested"
  | "operation_result_invalid"
  | "operation_session_failed"
  | "operation_timed_out"
  | "operation_cancelled"
  | "operation_deadline_passed"
  | "operation_policy_bypass";

/** The operations an agent version declares (publication validated them). */
export function operationsOf(agent: AgentVersionRecord): HarnessOperationDefinition[] {
  return (agent.definition.harness_operations ?? []) as unknown as HarnessOperationDefinition[];
}

/** Each operation as a runtime tool offered to the parent's model. */
export function operationRuntimeTools(agent: AgentVersionRecord): RuntimeTool[] {
  return operationsOf(agent).map(
    (op) =>
      ({
        $typeName: "oz0.harness.v1.RuntimeTool",
        name: op.key,
        description: op.description,
        inputSchema: structuredClone(OPERATION_INPUT_SCHEMA) as unknown as ProtoJsonObject,
      }) as RuntimeTool,
  );
}

/** The parent's part of an invocation: who calls, where, until when, and how to answer. */
export interface OperationParent {
  jobId: string;
  sessionId: string;
  agent: AgentVersionRecord;
  sandbox: SessionRunner;
  /** The parent run's deadline, when it has one. */
  deadline?: Date;
  /** Writes a RuntimeToolResult to the parent's session (throws when its stream is gone; the next re-attach delivers). */
  answer(result: RuntimeToolResult): Promise<void>;
  /**
   * A scratch session broke "every tool call asks first", or its node sent more about it than a session may: the
   * parent job fails with the rule, its session stopped, as when its own session breaks it.
   */
  brokeRule(rule: string): Promise<void>;
}

export interface OperationRunnerOptions {
  /** Where invocation records and checkpoints go. */
  store: JobStore;
  tokens: TokenIssuer;
  policy: PermissionPolicy;
  logger: Logger;
  lifecycle?: LifecycleSink;
  maxRepairs?: number;
  /** How much of each scratch session's stderr is stored with the parent job (OZ0_MAX_SESSION_STDERR_BYTES). Default 1 MiB. */
  maxStderrBytes?: number;
  /** How long after its node was asked to stop a scratch session the operation still waits for it to end (default 30 s). */
  stopWaitMs?: number;
  /** The budget of a parent whose agent sets none (OZ0_DEFAULT_MAX_BUDGET_USD); none by default. */
  defaultBudgetUsd?: number;
  /** The most a node may send about one scratch session (OZ0_MAX_SESSION_BYTES). Default 1 GiB. */
  maxSessionBytes?: number;
  /** Operations of one job that run at once in this process (OZ0_MAX_OPERATIONS_PER_JOB); later calls wait. Default 4. */
  maxPerJob?: number;
}

/** Operations of one job that run at once, by default: each is a session on the parent's node that placement does not count. */
export const DEFAULT_MAX_OPERATIONS_PER_JOB = 4;

type Outcome =
  | { kind: "validated"; result: JsonObject }
  | { kind: "failed"; code: OperationErrorCode; message: string; validation: "invalid" | "unknown" };

interface Usage {
  inputTokens: number;
  outputTokens: number;
}

/** The envelope every event of one invocation carries. */
interface EventBase {
  jobId: string;
  sessionId: string;
  toolCallId: string;
  operationInvocationId: string;
  agentName: string;
  agentVersion: string;
}

/** How many ended jobs' ids the runner keeps to refuse their late operations (a few hundred kilobytes). */
const ENDED_JOBS_KEPT = 10_000;

/** The abort reason of operations whose job this replica no longer runs (`abandonJob`). */
const ABANDONED = Symbol("abandoned by this replica");

export class OperationRunner {
  readonly #o: OperationRunnerOptions;
  readonly #checkpoints: OperationCheckpoints;
  readonly #validators = new Map<string, ValidateFunction>();
  /** Per parent job: aborting it cancels the job's running operations. */
  readonly #jobs = new Map<string, AbortController>();
  /** Jobs that ended here, oldest first (forgetJob). */
  readonly #ended = new Set<string>();
  /** Scratch session ids this process started, to refuse calls they make. */
  readonly #scratch = new Set<string>();
  /**
   * Calls being handled, so a replayed call event is not run twice: each flight's own token, so that a run
   * abandoned and started again (the lease lost, then won back) is not let go of by the first run's end.
   */
  readonly #inFlight = new Map<string, symbol>();
  /** Scratch sessions run on their parent's node, never placed: the driver only follows them. */
  readonly #sessions: SessionDriver;
  /**
   * Per job, its operations running now and the calls waiting for one of them to end. Scratch sessions
   * are never placed, so nothing else bounds them: a model that called an operation 40 times in a turn
   * started 40 sessions on its node at once, filling it for every other job (attacker review).
   */
  readonly #slots = new Map<string, { running: number; waiting: (() => void)[] }>();

  constructor(options: OperationRunnerOptions) {
    this.#o = options;
    this.#sessions = new SessionDriver({
      logger: options.logger,
      ...(options.maxSessionBytes !== undefined ? { maxSessionBytes: options.maxSessionBytes } : {}),
    });
    this.#checkpoints = new OperationCheckpoints({ store: options.store });
  }

  get checkpoints(): OperationCheckpoints {
    return this.#checkpoints;
  }

  #signal(jobId: string): AbortSignal {
    // Ended: a call resumed or delivered after the end (its re-attach was under way) runs nothing.
    if (this.#ended.has(jobId)) return AbortSignal.abort();
    let controller = this.#jobs.get(jobId);
    if (!controller) {
      controller = new AbortController();
      this.#jobs.set(jobId, controller);
    }
    return controller.signal;
  }

  /**
   * Cancel every operation of the job (the parent was cancelled, broke a rule, or ended): those running, and
   * any that would start later (a call resumed at a re-attach stops the scratch sessions an earlier process
   * left, then is answered cancelled). Kept aborted until `forgetJob`.
   */
  cancelJob(jobId: string): void {
    if (this.#ended.has(jobId)) return;
    let controller = this.#jobs.get(jobId);
    if (!controller) {
      controller = new AbortController();
      this.#jobs.set(jobId, controller);
    }
    controller.abort();
  }

  /**
   * The job ended: its operations are cancelled, and any that would start later runs nothing. Its id is kept
   * among the last ENDED_JOBS_KEPT ended, long past the few seconds a re-attach under way at its end can take.
   */
  forgetJob(jobId: string): void {
    this.#jobs.get(jobId)?.abort();
    this.#jobs.delete(jobId);
    this.#ended.add(jobId);
    if (this.#ended.size > ENDED_JOBS_KEPT) this.#ended.delete(this.#ended.values().next().value!);
  }

  /**
   * Stop the job's running operations without recording anything: another
   * replica took the job over and runs them again from their checkpoints. A
   * "cancelled" outcome written now would land on that replica's job (the
   * lease is no longer this replica's to fence with).
   */
  abandonJob(jobId: string): void {
    this.#jobs.get(jobId)?.abort(ABANDONED);
    this.#jobs.delete(jobId);
    // Its calls are no longer handled here: should this replica take the job back, it runs them again
    // (an abandoned run records nothing, so the two never both answer).
    for (const flight of this.#inFlight.keys()) if (flight.startsWith(`${jobId}/`)) this.#inFlight.delete(flight);
  }

  /** Marks the call as handled here; undefined when it is already. */
  #takeOff(flight: string): symbol | undefined {
    if (this.#inFlight.has(flight)) return undefined;
    const token = Symbol(flight);
    this.#inFlight.set(flight, token);
    return token;
  }

  /** The call is handled no more, unless a later flight of it took over meanwhile (after abandonJob). */
  #land(flight: string, token: symbol): void {
    if (this.#inFlight.get(flight) === token) this.#inFlight.delete(flight);
  }

  /**
   * Accept one runtime tool call of a parent session and run it in the
   * background. `recorded` resolves once the call is durably recorded (so the
   * caller may then advance the session's sequence number: a crash in
   * between replays the call instead of losing it), and rejects when its
   * record could not be read or written: nothing is answered then, and the
   * caller leaves the sequence number before the call, so the re-attach that
   * follows delivers it again. (Answered "try again" instead, the call ran
   * twice when the sequence number's write failed too: once replayed, once
   * called again by the harness.) `done` settles when the answer was
   * delivered, or nothing was to be; it never rejects.
   */
  accept(options: { parent: OperationParent; callId: string; name: string; input: unknown }): {
    recorded: Promise<void>;
    done: Promise<void>;
  } {
    const { parent, callId } = options;
    const flight = `${parent.jobId}/${callId}`;
    const token = this.#takeOff(flight);
    if (!token) return { recorded: Promise.resolve(), done: Promise.resolve() };
    let markRecorded!: () => void;
    let recordFailed!: (error: unknown) => void;
    const recorded = new Promise<void>((resolve, reject) => {
      markRecorded = resolve;
      recordFailed = reject;
    });
    const done = this.#accept(options, { markRecorded, recordFailed })
      .catch((error: unknown) => {
        // Before it was recorded, the call is delivered again (rejecting once recorded changes nothing).
        recordFailed(error);
        this.#o.logger.error(
          { jobId: parent.jobId, callId, err: String(error) },
          "harness operation failed unexpectedly",
        );
      })
      .finally(() => {
        markRecorded();
        this.#land(flight, token);
      });
    return { recorded, done };
  }

  async #accept(
    options: { parent: OperationParent; callId: string; name: string; input: unknown },
    { markRecorded, recordFailed }: { markRecorded: () => void; recordFailed: (error: unknown) => void },
  ): Promise<void> {
    const { parent, callId, name } = options;
    // Refusals need no record: a replayed call is refused the same way again.
    const refuse = (code: OperationErrorCode, message: string): Promise<void> => {
      markRecorded();
      return this.#deliver(parent, callId, { kind: "failed", code, message, validation: "unknown" }, undefined);
    };
    if (this.#scratch.has(parent.sessionId)) {
      return refuse(
        "operation_nested",
        `harness operations cannot be nested: ${name} was called from inside a harness operation's scratch session; finish this operation and let the parent call ${name}`,
      );
    }
    const op = operationsOf(parent.agent).find((o) => o.key === name);
    if (!op)
      return refuse(
        "operation_unknown",
        `no runtime tool ${name} on agent ${parent.agent.name} v${parent.agent.version}`,
      );
    const read = readOperationTask(options.input);
    if ("error" in read) return refuse("operation_input_invalid", `${name}: ${read.error}`);
    let existing: OperationCheckpoint | undefined;
    try {
      existing = await this.#checkpoints.get(parent.jobId, callId);
    } catch (error) {
      return recordFailed(error);
    }
    if (existing && (existing.operationKey !== op.key || existing.task !== read.task)) {
      // A call id is the harness's: one reused for another call (a session restarted elsewhere, a node
      // that is not ours) must not be answered with the first call's result. A replay sends the same call.
      return refuse(
        "operation_input_invalid",
        `${name}: call id ${callId.slice(0, 120)} of this job was used for ${existing.operationKey === op.key ? "a call of this operation with another task" : `operation ${existing.operationKey}`} already; each call needs an id of its own`,
      );
    }
    if (existing) {
      markRecorded();
      return this.#resume(parent, op, existing);
    }
    const record: OperationCheckpoint = {
      jobId: parent.jobId,
      callId,
      invocationId: newId("opi_"),
      operationKey: op.key,
      task: read.task,
      startedAt: new Date().toISOString(),
      status: "running",
      delivered: false,
      scratchSessionIds: [],
    };
    try {
      await this.#checkpoints.put(record);
    } catch (error) {
      return recordFailed(error);
    }
    markRecorded();
    await this.#inSlot(parent.jobId, () => this.#run(parent, op, record));
  }

  /**
   * After any re-attach (a restart, a takeover, a broken stream): send again
   * every recorded result (one handed to a stream that broke may never have
   * been sent), and run again, concurrently, what has none. Never rejects.
   */
  async resumeJob(parent: OperationParent): Promise<void> {
    let records: OperationCheckpoint[];
    try {
      records = await this.#checkpoints.all(parent.jobId);
    } catch (error) {
      this.#o.logger.error(
        { jobId: parent.jobId, err: String(error) },
        "could not read the job's harness operations to resume them",
      );
      return;
    }
    const work = records.map((record) => {
      const recorded = recordedOutcome(record);
      if (record.delivered && recorded) {
        // Handed to a stream that may have broken before it sent it: sent again (the sandbox refuses it if the harness has it).
        return parent.answer(answerFor(record.callId, recorded)).catch(() => undefined);
      }
      if (record.delivered) return Promise.resolve();
      const flight = `${parent.jobId}/${record.callId}`;
      const token = this.#takeOff(flight);
      if (!token) return Promise.resolve();
      const op = operationsOf(parent.agent).find((o) => o.key === record.operationKey);
      const work = op
        ? this.#resume(parent, op, record)
        : this.#deliver(
            parent,
            record.callId,
            {
              kind: "failed",
              code: "operation_unknown",
              message: `operation ${record.operationKey} is not on this agent version`,
              validation: "unknown",
            },
            record,
          );
      return work
        .catch((error: unknown) =>
          this.#o.logger.error(
            { jobId: parent.jobId, callId: record.callId, err: String(error) },
            "could not resume a harness operation",
          ),
        )
        .finally(() => this.#land(flight, token));
    });
    await Promise.all(work);
  }

  async #resume(parent: OperationParent, op: HarnessOperationDefinition, record: OperationCheckpoint): Promise<void> {
    // Scratch sessions of a previous process are not followed by anyone now: stop them, and end their
    // tokens (tokenId is the session id), which only the process that minted them would have revoked.
    for (const id of record.scratchSessionIds) {
      await parent.sandbox
        .cancel({ sessionId: id, reason: "the orchestrator restarted; this operation attempt is abandoned" })
        .catch(() => undefined);
      await this.#o.tokens
        .revoke({ tokenId: id })
        .catch((error: unknown) =>
          this.#o.logger.warn(
            { jobId: parent.jobId, sessionId: id, err: String(error) },
            "could not revoke an abandoned scratch session's token; it stays valid at the LLM proxy",
          ),
        );
    }
    const recorded = recordedOutcome(record);
    if (recorded) {
      // The checkpoint committed: reuse it, do not ask the model again.
      this.#o.logger.info(
        { jobId: parent.jobId, callId: record.callId },
        "harness operation result reused from its checkpoint",
      );
      return this.#deliver(parent, record.callId, recorded, record);
    }
    // Started but never checkpointed: it runs again (at-least-once execution).
    await this.#inSlot(parent.jobId, () => this.#run(parent, op, record, { resumed: true }));
  }

  /**
   * Runs `run` once fewer than maxPerJob of the job's operations run (in call order); a job
   * cancelled meanwhile runs it at once, and its operation ends cancelled without a session.
   * A run that ends hands its slot to the first waiting call, still counted, so no call can
   * start in between (and the job's count is not dropped while a woken call is on its way).
   */
  async #inSlot(jobId: string, run: () => Promise<void>): Promise<void> {
    let slots = this.#slots.get(jobId);
    if (!slots) {
      slots = { running: 0, waiting: [] };
      this.#slots.set(jobId, slots);
    }
    if (slots.running < (this.#o.maxPerJob ?? DEFAULT_MAX_OPERATIONS_PER_JOB)) slots.running++;
    else {
      // Woken with the slot of a run that ended (handed over, still counted), or by the job's cancel.
      const signal = this.#signal(jobId);
      const { promise, resolve } = Promise.withResolvers<"handed" | "cancelled">();
      const handed = (): void => resolve("handed");
      const cancelled = (): void => resolve("cancelled");
      slots.waiting.push(handed);
      signal.addEventListener("abort", cancelled, { once: true });
      if (signal.aborted) cancelled();
      const how = await promise;
      signal.removeEventListener("abort", cancelled);
      const at = how === "cancelled" ? slots.waiting.indexOf(handed) : -1;
      if (at >= 0) {
        slots.waiting.splice(at, 1);
        slots.running++;
      }
      // Otherwise a run that ended handed this call its slot (counted already), before or after the cancel.
    }
    try {
      await run();
    } finally {
      const next = slots.waiting.shift();
      if (next) next();
      else if (--slots.running === 0) this.#slots.delete(jobId);
    }
  }

  /** `resumed`: an earlier process started it (and published its start). */
  async #run(
    parent: OperationParent,
    op: HarnessOperationDefinition,
    record: OperationCheckpoint,
    { resumed = false }: { resumed?: boolean } = {},
  ): Promise<void> {
    const signal = this.#signal(parent.jobId);
    const started = Date.now();
    const remaining = parent.deadline ? parent.deadline.getTime() - started : Number.POSITIVE_INFINITY;
    const timeoutMs = Math.max(0, Math.min(op.timeout_ms, remaining));
    const until = started + timeoutMs;
    const base: EventBase = {
      jobId: parent.jobId,
      sessionId: parent.sessionId,
      toolCallId: record.callId,
      operationInvocationId: record.invocationId,
      agentName: parent.agent.name,
      agentVersion: String(parent.agent.version),
    };
    // Resumed for a job that ends already, it runs nothing: its start stands as the earlier process published
    // it, and only its cancel follows (a second start would say it ran again).
    if (!(resumed && signal.aborted))
      this.#o.lifecycle?.publish("harness.operation_started", {
        ...base,
        status: "running",
        attributes: { operation_key: op.key, task_chars: [...record.task].length, timeout_ms: timeoutMs },
      });
    const usage: Usage = { inputTokens: 0, outputTokens: 0 };
    let outcome: Outcome;
    if (timeoutMs <= 0) {
      outcome = {
        kind: "failed",
        code: "operation_deadline_passed",
        message: `${op.key} did not start: the parent run's deadline has passed`,
        validation: "unknown",
      };
    } else {
      outcome = await this.#attempts({ parent, op, record, signal, until, usage, base });
    }
    if (signal.reason === ABANDONED) return;
    const end =
      outcome.kind === "validated"
        ? "completed"
        : outcome.code === "operation_timed_out" || outcome.code === "operation_deadline_passed"
          ? "timed_out"
          : outcome.code === "operation_cancelled"
            ? "cancelled"
            : "failed";
    this.#o.lifecycle?.publish(`harness.operation_${end}`, {
      ...base,
      status: end,
      tokens: usage,
      attributes: {
        operation_key: op.key,
        duration_ms: Date.now() - started,
        timeout_ms: timeoutMs,
        result_validation: outcome.kind === "validated" ? "valid" : outcome.validation,
        ...(outcome.kind === "failed" ? { error_code: outcome.code } : {}),
      },
    });
    if (outcome.kind === "validated") {
      // The step.do checkpoint: from here on a restart reuses the result.
      record.status = "validated";
      record.result = outcome.result;
    } else {
      record.status = "failed";
      record.error = outcome.message;
      record.errorCode = outcome.code;
    }
    // Without the checkpoint the answer still goes out; a crash before delivery then runs the operation again.
    await this.#checkpoints
      .put(record)
      .catch((error: unknown) =>
        this.#o.logger.warn(
          { jobId: parent.jobId, callId: record.callId, err: String(error) },
          "could not checkpoint a harness operation's outcome",
        ),
      );
    await this.#deliver(parent, record.callId, outcome, record);
  }

  async #attempts(options: {
    parent: OperationParent;
    op: HarnessOperationDefinition;
    record: OperationCheckpoint;
    signal: AbortSignal;
    until: number;
    usage: Usage;
    base: EventBase;
  }): Promise<Outcome> {
    const { op, signal, until } = options;
    let validate: ValidateFunction;
    try {
      validate = this.#validator(options.parent.agent, op);
    } catch (error) {
      // A version published before patterns were matched with RE2 may hold one RE2 cannot match (a lookaround):
      // the call is answered with why, where an exception here left it unanswered.
      return {
        kind: "failed",
        code: "operation_result_invalid",
        message: `${(error as Error).message}; publish a new version of ${options.parent.agent.name}`,
        validation: "unknown",
      };
    }
    const maxRepairs = this.#o.maxRepairs ?? DEFAULT_MAX_REPAIRS;
    let feedback: string[] = [];
    const step = { index: 0 };
    for (let attempt = 0; attempt <= maxRepairs; attempt++) {
      if (signal.aborted)
        return {
          kind: "failed",
          code: "operation_cancelled",
          message: `${op.key} was cancelled with its parent run`,
          validation: "unknown",
        };
      if (Date.now() >= until) break;
      const ran = await this.#scratchSession({ ...options, feedback, step });
      if (ran.kind === "failed") return ran;
      if (ran.output === undefined) {
        feedback = [
          "the session ended without a structured result; finish with only a JSON object valid against the result schema",
        ];
        continue;
      }
      const notFinite = nonFiniteNumberAt(ran.output);
      if (notFinite === undefined && validate(ran.output)) return { kind: "validated", result: ran.output };
      feedback =
        notFinite === undefined
          ? describeValidationErrors(validate.errors)
          : [`${notFinite} is not a finite number; JSON has no Infinity or NaN`];
      this.#o.logger.info(
        { jobId: options.parent.jobId, callId: options.record.callId, attempt },
        "harness operation result did not validate; repairing",
      );
    }
    if (Date.now() >= until)
      return {
        kind: "failed",
        code: "operation_timed_out",
        message: `${op.key} timed out before it returned a valid result`,
        validation: feedback.length ? "invalid" : "unknown",
      };
    return {
      kind: "failed",
      code: "operation_result_invalid",
      message: `${op.key} returned no result valid against its result_schema after ${maxRepairs} repair attempt(s): ${feedback.join("; ")}`,
      validation: "invalid",
    };
  }

  #validator(agent: AgentVersionRecord, op: HarnessOperationDefinition): ValidateFunction {
    const key = `${agent.name}@${agent.version}/${op.key}`;
    let fn = this.#validators.get(key);
    if (!fn) {
      fn = compileResultSchema(op.result_schema, op.key);
      this.#validators.set(key, fn);
    }
    return fn;
  }

  /** One scratch session to its end: its structured output, or why there is none. */
  async #scratchSession(options: {
    parent: OperationParent;
    op: HarnessOperationDefinition;
    record: OperationCheckpoint;
    signal: AbortSignal;
    until: number;
    usage: Usage;
    feedback: string[];
    step: { index: number };
    base: EventBase;
  }): Promise<{ kind: "ran"; output?: JsonObject } | Extract<Outcome, { kind: "failed" }>> {
    const { parent, op, record, signal, until, usage, base } = options;
    const agent = parent.agent;
    const sessionId = newId("ses_op_");
    record.scratchSessionIds.push(sessionId);
    this.#scratch.add(sessionId);
    let tokenId = "";
    let channel: SessionChannel | undefined;
    let timer: NodeJS.Timeout | undefined;
    let stop: "timed_out" | "cancelled" | undefined;
    let stopWaiting: (() => void) | undefined;
    /** Once: the node is asked to stop the session, and after a while it is no longer waited for. */
    const stopSession = (why: "timed_out" | "cancelled", reason: string): void => {
      if (stop || !channel) return;
      stop = why;
      stopWaiting = stopFollowedSession({
        sandbox: parent.sandbox,
        channel,
        sessionId,
        reason,
        waitMs: this.#o.stopWaitMs,
        onGiveUp: (message) => this.#o.logger.warn({ jobId: parent.jobId, sessionId, operation: op.key }, message),
      });
    };
    const onAbort = (): void => stopSession("cancelled", "the parent run was cancelled");
    // "Every tool call asks first", checked in scratch sessions too: what each request was answered, by its
    // call id (and its own id), for the results that follow. The rule a result broke, once one did.
    const answered = new Map<string, PermissionSeen>();
    let bypass: string | undefined;
    try {
      // Recorded before it starts, so a restart can stop it.
      await this.#checkpoints.put(record);
      // The parent's budget bounds its operations too: their calls spend from the parent session's account.
      const parentBudget = sessionBudget(parent.agent.definition, this.#o.defaultBudgetUsd).usd;
      const token = await this.#o.tokens.mint({
        jobId: parent.jobId,
        agent: agent.name,
        agentVersion: agent.version,
        sessionId,
        ...(parentBudget !== undefined ? { budgetUsd: parentBudget, budgetSession: parent.sessionId } : {}),
        // Its own count, as its harness is told (limits.max_turns): a scratch session is a harness run of its own,
        // whose turns the harness and the sandbox count apart from the parent's. The parent's turns bound how many run.
        ...(agent.definition.limits?.max_steps ? { maxModelCalls: agent.definition.limits.max_steps } : {}),
      });
      tokenId = token.tokenId;
      const input = options.feedback.length
        ? `${record.task}\n\nA previous attempt's result did not validate against the result schema:\n${options.feedback.map((f) => `- ${f}`).join("\n")}\nReturn a corrected result.`
        : record.task;
      const start = agentSessionStart({
        sessionId,
        jobId: parent.jobId,
        agent,
        token,
        instructions: `${agent.instructions}\n\n## Harness operation: ${op.key}\n\n${op.instructions}`,
        input,
        deadline: new Date(until),
        // No runtime tools: an operation cannot call another operation. The version's whole skill catalogue: it cannot scope it.
        runtimeTools: [],
        outputSchema: op.result_schema as ProtoJsonObject,
        shareWorkingDirOf: parent.sessionId,
      });
      if (signal.aborted)
        return {
          kind: "failed",
          code: "operation_cancelled",
          message: `${op.key} was cancelled with its parent run`,
          validation: "unknown",
        };
      channel = parent.sandbox.start(start);
      const scratch = channel;
      signal.addEventListener("abort", onAbort, { once: true });
      timer = setTimeout(
        () => stopSession("timed_out", "the harness operation timed out"),
        Math.max(0, until - Date.now()),
      );
      let result: SessionResult | undefined;
      let exitError = "";
      let failure: string | undefined;
      let stderrTail = "";
      let pendingModelStep: { at: number; tokens: Usage } | undefined;
      /** Aborted once the scratch session's exit is heard: a hook deciding its call has nothing left to decide for. */
      const exited = new AbortController();
      const emitStep = (attributes: Record<string, unknown>, tokens?: Usage): void => {
        options.step.index++;
        this.#o.lifecycle?.publish("harness.operation_step", {
          ...base,
          status: "ok",
          ...(tokens ? { tokens } : {}),
          attributes: { step_index: options.step.index, ...attributes },
        });
      };
      const flushModel = (extra: Record<string, unknown>): void => {
        if (!pendingModelStep) return;
        emitStep(
          { step_kind: "model", duration_ms: Date.now() - pendingModelStep.at, ...extra },
          pendingModelStep.tokens,
        );
        pendingModelStep = undefined;
      };
      const handle = async (message: SandboxMessage): Promise<void> => {
        if (message.kind === "stderr") {
          // Kept with the parent job: `oz0 jobs logs` shows every session of it.
          await this.#o.store.append({
            jobId: parent.jobId,
            events: [],
            stderr: stderrAppend(message, this.#o.maxStderrBytes ?? DEFAULT_MAX_STDERR_BYTES),
          });
          return;
        }
        if (message.kind === "exited") {
          exitError = message.error;
          failure = message.failure;
          stderrTail = message.stderrTail ?? "";
          if (!result && message.result) result = message.result;
          return;
        }
        if (message.kind !== "event") return;
        const e = message.event.event;
        switch (e.case) {
          case "usage":
            {
              const tokens = { inputTokens: Number(e.value.inputTokens), outputTokens: Number(e.value.outputTokens) };
              usage.inputTokens += tokens.inputTokens;
              usage.outputTokens += tokens.outputTokens;
              // Named once we know what the turn asked for (a tool, or the finish).
              pendingModelStep = { at: Date.now(), tokens };
            }
            break;
          case "toolCall": {
            flushModel({ requested_tool: e.value.tool });
            const input = (e.value.input ?? {}) as Record<string, unknown>;
            emitStep({
              step_kind: "tool",
              tool_name: e.value.tool,
              ...(typeof input.path === "string" ? { path: input.path } : {}),
            });
            break;
          }
          case "permissionRequest": {
            const decision = await this.#o.policy.decide({
              jobId: parent.jobId,
              sessionId,
              agent,
              id: e.value.id,
              tool: e.value.tool,
              ...(e.value.input ? { input: e.value.input as JsonObject } : {}),
              title: e.value.title,
              callId: e.value.callId,
              // A cancel of the job, or the scratch session's exit, kills a command hook still deciding, rather
              // than waiting out its timeout.
              signal: AbortSignal.any([signal, exited.signal]),
            });
            // A scratch loop has no person to wait for: what needs approval is refused, and the model is told why.
            const allow = decision.kind === "allow";
            const seen: PermissionSeen = {
              tool: e.value.tool,
              status: allow ? "approved" : "denied",
              decider: decision.kind === "ask" ? "policy" : decision.decider,
              reason: decision.reason,
            };
            answered.set(e.value.id, seen);
            if (e.value.callId) answered.set(e.value.callId, seen);
            await scratch.answerPermission(
              create(PermissionAnswerSchema, {
                id: e.value.id,
                allow,
                reason:
                  decision.kind === "ask"
                    ? `${decision.reason}; a harness operation cannot wait for a person, so the call was refused`
                    : decision.reason,
                outcome: PermissionAnswer_Outcome.ANSWERED,
                ...(allow && decision.input ? { input: decision.input as ProtoJsonObject } : {}),
              }),
            );
            break;
          }
          case "runtimeToolCall":
            // Scratch sessions are offered no runtime tools; one that calls anyway is refused.
            await scratch.answerRuntimeTool(
              create(RuntimeToolResultSchema, {
                id: e.value.id,
                isError: true,
                error: `harness operations cannot be nested: ${e.value.name} was called from inside the scratch session of ${op.key}; return your result and let the parent call it`,
              }),
            );
            break;
          case "toolResult": {
            if (!agent.harness.manifest.permissions || bypass !== undefined) break;
            const violation = toolResultViolation({
              result: e.value,
              permission: answered.get(e.value.callId),
              harness: agent.harness.manifest.name,
            });
            if (violation === undefined) break;
            bypass = violation;
            this.#o.logger.warn(
              { jobId: parent.jobId, sessionId, operation: op.key, callId: e.value.callId },
              violation,
            );
            stopSession("cancelled", violation);
            await parent.brokeRule(violation);
            break;
          }
          case "result":
            result = e.value;
            flushModel({ finish: true });
            break;
          default:
            break;
        }
      };
      // Not re-attached: an answer written to a broken stream is not recorded anywhere to write again.
      const end = await this.#sessions.follow({
        jobId: parent.jobId,
        sessionId,
        state: { sandbox: parent.sandbox, channel, sandboxSeq: 0 },
        handle,
        stopped: () => false,
        reattach: false,
        exitHeard: (why) => exited.abort(why),
      });
      // Its node sent more about the scratch session than a session may: the parent's node (a scratch session runs
      // there), so the parent job ends with it. Failing the operation alone let the job call it again, each time a
      // budget afresh (attacker review).
      if (end.kind === "refused" && end.error instanceof SessionTooLargeError)
        await parent.brokeRule(end.error.message);
      if (end.kind === "unknown" || end.kind === "refused" || end.kind === "broken") throw end.error;
      if (bypass !== undefined)
        return {
          kind: "failed",
          code: "operation_policy_bypass",
          message: `${op.key}'s scratch session ${bypass.replace(/^policy bypass: /, "broke a rule: ")}`,
          validation: "unknown",
        };
      if (stop === "cancelled" || signal.aborted)
        return {
          kind: "failed",
          code: "operation_cancelled",
          message: `${op.key} was cancelled with its parent run`,
          validation: "unknown",
        };
      if (stop === "timed_out" || result?.stopReason === StopReason.TIMEOUT) {
        return {
          kind: "failed",
          code: "operation_timed_out",
          message: `${op.key} timed out before it returned a valid result (timeout ${op.timeout_ms} ms, bounded by the parent run's deadline)`,
          validation: "unknown",
        };
      }
      // A session the sandbox failed is not repaired: its structured output, valid or not, cannot be trusted.
      if (failure) {
        return {
          kind: "failed",
          code: "operation_session_failed",
          message: withStderr(`${op.key}'s scratch session failed: ${failure}`, { stderr: stderrTail }),
          validation: "unknown",
        };
      }
      if (result?.structuredOutput) return { kind: "ran", output: result.structuredOutput as JsonObject };
      if (result && result.stopReason === StopReason.COMPLETED) return { kind: "ran" };
      // A finished loop whose answer was not JSON is a repairable result, not a crash.
      if (result && result.stopReason === StopReason.ERROR && /output schema|JSON/i.test(result.error))
        return { kind: "ran" };
      return {
        kind: "failed",
        code: "operation_session_failed",
        message: `${op.key}'s scratch session ended without a result${result ? ` (${StopReason[result.stopReason]?.toLowerCase() ?? "error"})` : exitError ? ` (${exitError.slice(0, 200)})` : ""}`,
        validation: "unknown",
      };
    } catch (error) {
      if (signal.aborted)
        return {
          kind: "failed",
          code: "operation_cancelled",
          message: `${op.key} was cancelled with its parent run`,
          validation: "unknown",
        };
      return {
        kind: "failed",
        code: "operation_session_failed",
        message: `${op.key}'s scratch session could not run: ${(error as Error).message}`,
        validation: "unknown",
      };
    } finally {
      if (timer) clearTimeout(timer);
      stopWaiting?.();
      signal.removeEventListener("abort", onAbort);
      channel?.close();
      this.#scratch.delete(sessionId);
      if (tokenId) await this.#o.tokens.revoke({ tokenId }).catch(() => undefined);
    }
  }

  async #deliver(
    parent: OperationParent,
    callId: string,
    outcome: Outcome,
    record: OperationCheckpoint | undefined,
  ): Promise<void> {
    try {
      await parent.answer(answerFor(callId, outcome));
      if (record) {
        record.delivered = true;
        await this.#checkpoints.put(record);
      }
    } catch (error) {
      // Left undelivered: the next re-attach delivers it from the checkpoint.
      this.#o.logger.warn(
        { jobId: parent.jobId, callId, err: String(error) },
        "could not deliver a harness operation's result yet",
      );
    }
  }
}

/** The outcome a record checkpointed, if it got that far. */
function recordedOutcome(record: OperationCheckpoint): Outcome | undefined {
  if (record.status === "validated" && record.result) return { kind: "validated", result: record.result };
  if (record.status === "failed") {
    return {
      kind: "failed",
      code: (record.errorCode as OperationErrorCode) ?? "operation_session_failed",
      message: record.error ?? "the operation failed",
      validation: "unknown",
    };
  }
  return undefined;
}

function answerFor(callId: string, outcome: Outcome): RuntimeToolResult {
  return outcome.kind === "validated"
    ? create(RuntimeToolResultSchema, { id: callId, output: fromJson(ValueSchema, outcome.result as ProtoJsonObject) })
    : create(RuntimeToolResultSchema, { id: callId, isError: true, error: `${outcome.code}: ${outcome.message}` });
}
