// The GraphExecutor a graph job runs with. An agent step is a job of its own
// for the agent version pinned when the run started, started through the job
// runner, so the session goes through the sandbox with the tool policy,
// hooks, approvals, the LLM proxy's token and metering like any job. A custom
// step is a session of the generic step runner (graph-step-runner.ts) on a
// sandbox: its code never runs in the orchestrator's process.
//
// After a restart the engine runs again the step that was in flight. Each
// step's session is keyed by the step's idempotency key, so the re-run finds
// it: an agent step whose job is still running (the job runner re-attached
// it) or already finished is waited for, not started again; a custom step's
// session is re-attached by its deterministic session id when the sandbox
// still knows it. Only a step whose job or session never got recorded runs
// again: at-least-once execution, exactly-once recording.
//
// With several replicas, a step's job may run at another replica (the one
// that created it died and a third took it over): waiting follows the job
// feed (cluster-wide when the replicas share notifications) and also reads
// the job from the store every second while it waits, so it never depends on
// a notice arriving. A run this replica stops working on (`halt`: its lease
// was lost, or the orchestrator closes) stops where it is: its steps neither
// finish nor fail, so the engine records nothing more for it.
import { createHash } from "node:crypto";
import path from "node:path";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import {
  GraphError,
  type AgentRequest,
  type CustomStepRequest,
  type CustomStepResult,
  type GraphExecutor,
} from "@oz0/graph";
import type { GraphStore } from "../store/graph-store.js";
import type { JobFeed } from "../jobs/job-feed.js";
import type { JobRunner } from "../jobs/job-runner.js";
import { isTerminal, type JobRecord, type JobStore } from "../store/job-store.js";
import { newJobId } from "../store/ids.js";
import { MAX_JOB_INPUT_BYTES } from "../jobs/job-input.js";
import { OrchestratorError } from "../orchestrator-error.js";
import {
  SessionNotFoundError,
  type SandboxMessage,
  type SessionChannel,
  type SessionRunner,
} from "../sessions/session-runner.js";
import { SessionDriver } from "../sessions/session-driver.js";
import { programSessionStart } from "../sessions/session-request.js";
import type { SandboxPlacement } from "../sessions/sandbox-placement.js";
import type { StepCall } from "./graph-step-runner.js";
import { withStderr } from "../sessions/harness-stderr.js";
import { orchestratorTracing } from "../tracing.js";
import { STEP_RUNNER_SCRIPT } from "./step-runner-script.js";

export interface SessionGraphExecutorOptions {
  graphStore: GraphStore;
  store: JobStore;
  feed: JobFeed;
  jobs: JobRunner;
  /** Where custom steps' sessions run (the job runner's placement). */
  placement: SandboxPlacement;
  /** The graph job: its id is the run id. */
  graphJobId: string;
  /** Agent name → version, pinned when the run started. */
  pinnedAgents: Record<string, number>;
  /** The graph version's plugin folder: custom step modules resolve against it. */
  pluginPath: string;
  /** Called when a step starts its job or session, for the graph job's events. */
  onStepWork?: (info: {
    path: string;
    stepId: string;
    jobId?: string;
    sessionId?: string;
    reattached: boolean;
  }) => void;
  /** Aborted when this replica stops working on the run: steps in flight are left pending, nothing new starts. */
  halt?: AbortSignal;
  /** How often a step's job is read from the store while the step waits for it. Default 1 s. */
  pollMs?: number;
  /** The most a node may send about one custom step's session (OZ0_MAX_SESSION_BYTES). Default 1 GiB. */
  maxSessionBytes?: number;
}

/** A promise that never settles: what a halted run's steps return, so the engine records nothing for them. */
/**
 * The job recorded under `key` (a step's, or a manager's for a control
 * event), created if it is not there yet. The id is recorded before the job
 * is created: a crash in between leaves an id the resumed run creates, where
 * recording after would leave a job running unrecorded and its work done
 * twice. Undefined when the caller must stop: the orchestrator is shutting
 * down, or the run was halted (its new owner follows the recorded job).
 */
export async function recordedJob(o: {
  graphStore: GraphStore;
  store: JobStore;
  halt?: AbortSignal;
  /** Undefined: nothing to record under (the job is not replayed). */
  key: string | undefined;
  runId: string;
  /** The id recorded under `key`, if the caller still wants that job. */
  recorded: string | undefined;
  create: (id: string) => Promise<unknown>;
}): Promise<{ jobId: string; reattached: boolean } | undefined> {
  if (o.recorded && (await o.store.getJob(o.recorded))) return { jobId: o.recorded, reattached: true };
  if (o.halt?.aborted) return undefined;
  const id = o.recorded ?? newJobId();
  if (!o.recorded && o.key) await o.graphStore.putStepJob({ idempotencyKey: o.key, runId: o.runId, stepJobId: id });
  try {
    await o.create(id);
  } catch (error) {
    if ((error instanceof OrchestratorError && error.code === "unavailable") || o.halt?.aborted) return undefined;
    // The run's previous owner created the recorded job first (its create raced this one): follow it.
    if (!(await o.store.getJob(id))) throw error;
  }
  return o.halt?.aborted ? undefined : { jobId: id, reattached: false };
}

export function never<T>(): Promise<T> {
  return new Promise<T>(() => undefined);
}

export interface JobWait {
  store: JobStore;
  feed: JobFeed;
  jobId: string;
  /** How often to read the job from the store while waiting. Default 1 s. */
  pollMs?: number;
  /** Stop waiting: the promise then never settles. */
  halt?: AbortSignal;
}

/**
 * Resolves with the job once it is terminal. Follows the feed, and reads the
 * store at start and every `pollMs` while waiting, so a job run by another
 * replica is seen to end even when no notice reaches this one. A failed read
 * is tried again at the next poll, not reported: a passing database hiccup
 * must not fail a step for good.
 */
export function waitForTerminalJob(options: JobWait): Promise<JobRecord> {
  const { store, feed, jobId, halt } = options;
  return new Promise<JobRecord>((resolve) => {
    if (halt?.aborted) return;
    let done = false;
    let reading = false;
    const cleanup = (): void => {
      done = true;
      unsubscribe();
      clearInterval(timer);
      halt?.removeEventListener("abort", cleanup);
    };
    const check = async (): Promise<void> => {
      if (done || reading) return;
      reading = true;
      try {
        const job = await store.getJob(jobId);
        if (done || !job || !isTerminal(job.state)) return;
        cleanup();
        resolve(job);
      } catch {
        // Read again at the next poll.
      } finally {
        reading = false;
      }
    };
    const unsubscribe = feed.subscribe(jobId, (event) => {
      if (event.event.case === "stateChanged") void check();
    });
    const timer = setInterval(() => void check(), options.pollMs ?? 1_000);
    // Only a wait: it must not keep a process alive that has nothing else to do.
    timer.unref();
    halt?.addEventListener("abort", cleanup, { once: true });
    // The job may have ended before we subscribed.
    void check();
  });
}

/**
 * {@link waitForTerminalJob}, cancelling the job with `reason` once `signal` aborts (now or while it waits): a step
 * or a decision the run no longer waits for must not run on, spending model calls or waiting for a person.
 */
export async function waitForJobOrCancel(
  deps: Omit<JobWait, "jobId"> & { jobs: Pick<JobRunner, "cancel"> },
  wait: { jobId: string; signal: AbortSignal | undefined; reason: string },
): Promise<JobRecord> {
  const { jobId, signal, reason } = wait;
  const onAbort = (): void => {
    void deps.jobs.cancel({ jobId, reason }).catch(() => undefined);
  };
  signal?.addEventListener("abort", onAbort, { once: true });
  if (signal?.aborted) onAbort();
  try {
    return await waitForTerminalJob({
      store: deps.store,
      feed: deps.feed,
      jobId,
      ...(deps.halt ? { halt: deps.halt } : {}),
      ...(deps.pollMs ? { pollMs: deps.pollMs } : {}),
    });
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
}

/** A step's job that did not succeed: the step fails with the job's reason. */
function stepJobError(job: JobRecord): GraphError {
  return new GraphError(
    "STEP_FAILED",
    `agent ${job.agentName} (job ${job.id}) ended ${job.state}${job.error ? `: ${job.error}` : ""}; see \`oz0 jobs show ${job.id}\``,
  );
}

/**
 * An agent step's prompt is the run's prompt with the bag's `output` and `feedback` after it, and it becomes its
 * job's input, which the job runner takes up to MAX_JOB_INPUT_BYTES. Past that the step failed with the job
 * runner's words for a person at the command line ("pass it with --attach"), which a graph cannot do.
 */
function checkStepPrompt(request: AgentRequest): void {
  const bytes = Buffer.byteLength(request.prompt);
  if (bytes <= MAX_JOB_INPUT_BYTES) return;
  throw new GraphError(
    "STEP_FAILED",
    `agent step ${request.stepId} at ${request.path}: its prompt (the run's prompt, then the bag's output and feedback) is ${bytes} bytes, and an agent's job takes at most ${MAX_JOB_INPUT_BYTES} (2 MiB); have the step before it write less to output (a summary, or a file in an artifact), or start the run with a shorter prompt`,
  );
}

function isTimeout(reason: unknown): reason is GraphError {
  return reason instanceof GraphError && reason.code === "STEP_TIMED_OUT";
}

/** Why a step's session is cancelled: its timeout (the engine's words, naming it), or the run stopped it. */
function stopReason(signal: AbortSignal): string {
  return isTimeout(signal.reason) ? signal.reason.message : "the graph run stopped this step";
}

/** Where an agent step's job for one attempt is recorded: the step's idempotency key, then `#attempt<n>` for retries. */
function agentStepJobKey(request: { idempotencyKey: string; attempt: number }): string {
  return request.attempt > 1 ? `${request.idempotencyKey}#attempt${request.attempt}` : request.idempotencyKey;
}

export class SessionGraphExecutor implements GraphExecutor {
  readonly #o: SessionGraphExecutorOptions;
  /** Per custom step (its idempotency key): how many of its sessions this executor saw fail. */
  readonly #customStepFailures = new Map<string, number>();
  readonly #sessions: SessionDriver;

  constructor(options: SessionGraphExecutorOptions) {
    this.#o = options;
    this.#sessions = new SessionDriver({
      placement: options.placement,
      ...(options.maxSessionBytes !== undefined ? { maxSessionBytes: options.maxSessionBytes } : {}),
    });
  }

  async runAgent(request: AgentRequest): Promise<{ text: string }> {
    return this.#unlessHalted(() => this.#runAgent(request));
  }

  async runCustomStep(request: CustomStepRequest): Promise<CustomStepResult> {
    return this.#unlessHalted(() => this.#runCustomStep(request));
  }

  /** A halted run's step settles never, whatever its work did: no result or failure of it may be recorded. */
  async #unlessHalted<T>(work: () => Promise<T>): Promise<T> {
    const halt = this.#o.halt;
    if (halt?.aborted) return never();
    try {
      const result = await work();
      return halt?.aborted ? never() : result;
    } catch (error) {
      if (halt?.aborted) return never();
      throw error;
    }
  }

  async #runAgent(request: AgentRequest): Promise<{ text: string }> {
    const o = this.#o;
    // Each attempt's job is recorded under a key of its own: a re-run of the same attempt (a restart, a takeover)
    // follows its job, and an attempt the manager granted runs the agent again. One key for all attempts, with the
    // jobs this executor saw fail set apart, re-read the first job whenever it had succeeded (a choice evaluator
    // whose reply was no label read the same reply at every retry), and after a restart re-read the failure the
    // granted retry was for. (A job that failed while the orchestrator was down is still re-attached, so its
    // failure is reported once.)
    const key = agentStepJobKey(request);
    checkStepPrompt(request);
    const version = o.pinnedAgents[request.agent];
    const step = await recordedJob({
      ...o,
      key,
      runId: request.runId,
      recorded: await o.graphStore.getStepJob(key),
      // Inside the step's span, so the step's job joins the graph's trace.
      // A step's job is started by whoever started the graph: prevent_self_approval holds for steps too.
      create: async (id) => {
        const startedBy = (await o.store.getJob(o.graphJobId))?.startedBy ?? "";
        return orchestratorTracing.inGraphStep({ runId: request.runId, path: request.path }, () =>
          o.jobs.runAgent({
            agent: request.agent,
            input: request.prompt,
            ...(version ? { version } : {}),
            id,
            startedBy,
          }),
        );
      },
    });
    // Shutting down: a failed step would be recorded and fail the run for good. The step stays pending
    // instead (this promise never settles); the next start resumes the run here. Halted: the new owner follows it.
    if (!step) return never();
    o.onStepWork?.({ path: request.path, stepId: request.stepId, jobId: step.jobId, reattached: step.reattached });
    const done = await this.#waitForJob(step.jobId, request.signal);
    if (done.state !== "succeeded") throw stepJobError(done);
    return { text: done.resultText };
  }

  /** Resolves with the job once it is terminal; cancels it when the step's signal aborts. */
  async #waitForJob(jobId: string, signal: AbortSignal): Promise<JobRecord> {
    // The run was cancelled or a sibling branch failed: stop this step's session too.
    return waitForJobOrCancel(this.#o, { jobId, signal, reason: "the graph run stopped this step" });
  }

  async #runCustomStep(request: CustomStepRequest): Promise<CustomStepResult> {
    if (!request.module)
      throw new GraphError(
        "UNKNOWN_STEP",
        `custom step ${request.name} names no module; set module in the graph definition`,
      );
    // Deterministic: a re-run after a crash (here or at another replica) is placed on the node
    // of the session it started before, and finds it there. A step this executor saw fail is an
    // attempt the manager asked to retry: it needs a session of its own, as an agent step's retry
    // needs a job of its own, or it re-attached to the failed session and read its failure again
    // for as long as the node kept it. Counted here: after a restart the attempts
    // re-attach one by one, each failure reported once. Only a session that ended counts: one whose
    // stream broke may still run, and its retry follows it again rather than start a second copy.
    // A step this executor has not seen yet (a resumed run) starts from the engine's attempt: the attempts
    // before it failed and the manager decided them, so their sessions are not read again. Re-attaching
    // the first one reported its failure anew, asked the manager again and spent a retry, failing a run
    // whose step had succeeded once retries ran out. (A session whose stream broke before the restart
    // is not followed then: its step may run twice, as at-least-once allows.)
    if (!this.#customStepFailures.has(request.idempotencyKey))
      this.#customStepFailures.set(request.idempotencyKey, Math.max(0, request.attempt - 1));
    const failures = this.#customStepFailures.get(request.idempotencyKey) ?? 0;
    const key = failures === 0 ? request.idempotencyKey : `${request.idempotencyKey}#retry${failures}`;
    const sessionId = `ses_step_${createHash("sha256").update(key).digest("hex").slice(0, 24)}`;
    const session = { ended: false };
    // Past its timeout the session is cancelled, and the engine fails the attempt without waiting for it to end:
    // a retry the manager grants at once must still get a session of its own, not re-attach to the cancelled one.
    const onTimeout = (): void => {
      if (isTimeout(request.signal.reason)) this.#customStepFailures.set(request.idempotencyKey, failures + 1);
    };
    request.signal.addEventListener("abort", onTimeout, { once: true });
    try {
      return await this.#customStepSession(request, sessionId, request.module, session);
    } catch (error) {
      if (session.ended) this.#customStepFailures.set(request.idempotencyKey, failures + 1);
      throw error;
    } finally {
      request.signal.removeEventListener("abort", onTimeout);
    }
  }

  /** `session.ended` is set once the session's stream ended with it (whatever its outcome). */
  async #customStepSession(
    request: CustomStepRequest,
    sessionId: string,
    module: string,
    session: { ended: boolean },
  ): Promise<CustomStepResult> {
    const o = this.#o;
    const sandbox = await this.#place(sessionId, request.signal);
    const call: StepCall = {
      name: request.name,
      module,
      ...(request.export ? { export: request.export } : {}),
      bag: request.ctx.toJSON(),
      runId: request.runId,
      idempotencyKey: request.idempotencyKey,
      iteration: request.iteration,
    };
    const start = programSessionStart({
      sessionId,
      jobId: o.graphJobId,
      name: `step:${request.name}`,
      input: JSON.stringify(call),
      command: [process.execPath, STEP_RUNNER_SCRIPT],
      pluginDir: o.pluginPath,
    });
    let messages: SandboxMessage[];
    let reattached = true;
    try {
      messages = await this.#drain(sandbox.reattach({ sessionId, afterSeq: 0 }), request.signal, sandbox, sessionId);
    } catch (error) {
      if (!(error instanceof SessionNotFoundError)) throw error;
      reattached = false;
      o.onStepWork?.({ path: request.path, stepId: request.stepId, sessionId, reattached });
      // Inside the step's span, so the session (and the step runner's own spans) nest below the step.
      const channel = orchestratorTracing.inGraphStep({ runId: request.runId, path: request.path }, () =>
        sandbox.start(start),
      );
      messages = await this.#drain(channel, request.signal, sandbox, sessionId);
    }
    if (reattached) o.onStepWork?.({ path: request.path, stepId: request.stepId, sessionId, reattached });
    session.ended = messages.some((m) => m.kind === "exited");
    // Ended (not halted: then the run's new owner re-attaches to it): its slot is free.
    if (!o.halt?.aborted) await o.placement.release(sessionId);
    const exited = messages.find((m): m is Extract<SandboxMessage, { kind: "exited" }> => m.kind === "exited");
    // The step runner is ours, but the step's module runs inside it and can break the protocol (a write to stdout
    // after the result, a failing exit): then the bag it returned cannot be trusted.
    if (exited?.failure)
      throw new GraphError(
        "STEP_FAILED",
        withStderr(`custom step ${request.name} failed in the sandbox: ${exited.failure}`, {
          stderr: exited.stderrTail ?? "",
        }),
      );
    let result = exited?.result;
    for (const m of messages) if (m.kind === "event" && m.event.event.case === "result") result = m.event.event.value;
    if (!result || result.stopReason !== StopReason.COMPLETED) {
      const why = result?.error || exited?.error || "the step runner ended without a result";
      throw new GraphError(
        "STEP_FAILED",
        withStderr(`custom step ${request.name} failed in the sandbox: ${why}`, { stderr: exited?.stderrTail ?? "" }),
      );
    }
    try {
      const parsed = JSON.parse(result.text) as { set?: Record<string, unknown> };
      return { set: parsed.set ?? {} };
    } catch {
      throw new GraphError(
        "STEP_FAILED",
        `custom step ${request.name}: the step runner's result is not JSON; is the orchestrator's step runner current?`,
      );
    }
  }

  /**
   * A node for a custom step's session, waiting while every node is full.
   * A step placed before on a node that went silent is given up there: the
   * step runs again on a live node (custom steps run at least once).
   */
  async #place(sessionId: string, signal: AbortSignal): Promise<SessionRunner> {
    if (await this.#o.placement.lostSession(sessionId)) await this.#o.placement.release(sessionId);
    let waited = false;
    const sandbox = await this.#sessions.place({
      jobId: this.#o.graphJobId,
      sessionId,
      // Asked at least once, whatever the signals say.
      stop: () => waited && (signal.aborted || this.#o.halt?.aborted === true),
      waiting: () => Promise.resolve(void (waited = true)),
    });
    if (!sandbox)
      throw new GraphError(
        "STEP_FAILED",
        "the graph run stopped before the custom step found a sandbox node with room",
      );
    return sandbox;
  }

  /** Every message of the session to its end; throws SessionNotFoundError when the sandbox does not know the session. */
  async #drain(
    channel: SessionChannel,
    signal: AbortSignal,
    sandbox: SessionRunner,
    sessionId: string,
  ): Promise<SandboxMessage[]> {
    const onAbort = (): void => {
      void sandbox.cancel({ sessionId, reason: stopReason(signal) }).catch(() => undefined);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    // Halted: stop following the session without cancelling it; the run's new owner re-attaches to it by its id.
    const halt = this.#o.halt;
    const stopFollowing = (): void => channel.close();
    halt?.addEventListener("abort", stopFollowing, { once: true });
    const out: SandboxMessage[] = [];
    try {
      const end = await this.#sessions.follow({
        jobId: this.#o.graphJobId,
        sessionId,
        state: { sandbox, channel, sandboxSeq: 0 },
        handle: (message) => Promise.resolve(void out.push(message)),
        stopped: () => false,
        // A custom step runs at least once: a broken stream fails the step, and the engine's retry places it again.
        reattach: false,
      });
      if (end.kind === "unknown" || end.kind === "refused" || end.kind === "broken") throw end.error;
    } finally {
      signal.removeEventListener("abort", onAbort);
      halt?.removeEventListener("abort", stopFollowing);
      channel.close();
    }
    return out;
  }
}
