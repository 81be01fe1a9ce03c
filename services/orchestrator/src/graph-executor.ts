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
import { createHash } from "node:crypto";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { ProtocolVersion, SessionRequestSchema, StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { GraphError, type AgentRequest, type CustomStepRequest, type CustomStepResult, type GraphExecutor } from "@oz0/graph";
import type Database from "better-sqlite3";
import type { JobFeed } from "./job-feed.js";
import { isTerminal, type JobRunner } from "./job-runner.js";
import type { JobRecord, JobStore } from "./job-store.js";
import { OrchestratorError } from "./orchestrator-error.js";
import { SessionNotFoundError, type SandboxMessage, type SessionChannel, type SessionRunner } from "./session-runner.js";
import type { StepCall } from "./graph-step-runner.js";
import { orchestratorTracing } from "./tracing.js";

const stepRunnerScript = path.join(path.dirname(fileURLToPath(import.meta.url)), "graph-step-runner.js");

export interface SessionGraphExecutorOptions {
  db: Database.Database;
  store: JobStore;
  feed: JobFeed;
  jobs: JobRunner;
  sandboxes: SessionRunner[];
  /** The graph job: its id is the run id. */
  graphJobId: string;
  /** Agent name → version, pinned when the run started. */
  pinnedAgents: Record<string, number>;
  /** The graph version's plugin folder: custom step modules resolve against it. */
  pluginPath: string;
  /** Called when a step starts its job or session, for the graph job's events. */
  onStepWork?: (info: { path: string; stepId: string; jobId?: string; sessionId?: string; reattached: boolean }) => void;
}

/** A step's job that did not succeed: the step fails with the job's reason. */
function stepJobError(job: JobRecord): GraphError {
  return new GraphError("STEP_FAILED", `agent ${job.agentName} (job ${job.id}) ended ${job.state}${job.error ? `: ${job.error}` : ""}; see \`oz0 jobs show ${job.id}\``);
}

export class SessionGraphExecutor implements GraphExecutor {
  readonly #o: SessionGraphExecutorOptions;
  /** Step jobs whose failure this executor reported: a retry of their step starts a new job. */
  readonly #failed = new Set<string>();

  constructor(options: SessionGraphExecutorOptions) {
    this.#o = options;
  }

  async runAgent(request: AgentRequest): Promise<{ text: string }> {
    const o = this.#o;
    const existing = o.db.prepare("SELECT step_job_id FROM orch_graph_step_jobs WHERE idempotency_key = ?").get(request.idempotencyKey) as
      | { step_job_id: string }
      | undefined;
    let jobId = existing?.step_job_id;
    // A job this executor already reported as failed is an attempt the manager asked to retry: that needs a new job.
    // (A job that failed while the orchestrator was down is still re-attached, so its failure is reported once.)
    if (jobId && (this.#failed.has(jobId) || !(await o.store.getJob(jobId)))) jobId = undefined;
    if (jobId) {
      o.onStepWork?.({ path: request.path, stepId: request.stepId, jobId, reattached: true });
    } else {
      const version = o.pinnedAgents[request.agent];
      // Inside the step's span, so the step's job joins the graph's trace.
      let job: JobRecord;
      try {
        job = await orchestratorTracing.inGraphStep({ runId: request.runId, path: request.path }, () =>
          o.jobs.runAgent({ agent: request.agent, input: request.prompt, ...(version ? { version } : {}) }),
        );
      } catch (error) {
        // The orchestrator is shutting down: a failed step would be recorded and fail the run for good.
        // The step stays pending instead (this promise never settles); the next start resumes the run here.
        if (error instanceof OrchestratorError && error.code === "unavailable") return new Promise<never>(() => undefined);
        throw error;
      }
      jobId = job.id;
      o.db
        .prepare("INSERT OR REPLACE INTO orch_graph_step_jobs (idempotency_key, run_id, step_job_id, created_at) VALUES (?, ?, ?, ?)")
        .run(request.idempotencyKey, request.runId, jobId, Date.now());
      o.onStepWork?.({ path: request.path, stepId: request.stepId, jobId, reattached: false });
    }
    const done = await this.#waitForJob(jobId, request.signal);
    if (done.state !== "succeeded") {
      this.#failed.add(done.id);
      throw stepJobError(done);
    }
    return { text: done.resultText };
  }

  /** Resolves with the job once it is terminal; cancels it when the step's signal aborts. */
  async #waitForJob(jobId: string, signal: AbortSignal): Promise<JobRecord> {
    const o = this.#o;
    return new Promise<JobRecord>((resolve, reject) => {
      let settled = false;
      const check = async (): Promise<void> => {
        const job = await o.store.getJob(jobId);
        if (settled || !job) return;
        if (isTerminal(job.state)) {
          settled = true;
          cleanup();
          resolve(job);
        }
      };
      const unsubscribe = o.feed.subscribe(jobId, (event) => {
        if (event.event.case === "stateChanged") void check().catch(reject);
      });
      const onAbort = (): void => {
        // The run was cancelled or a sibling branch failed: stop this step's session too.
        void o.jobs.cancel({ jobId, reason: "the graph run stopped this step" }).catch(() => undefined);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      const cleanup = (): void => {
        unsubscribe();
        signal.removeEventListener("abort", onAbort);
      };
      // The job may have ended before we subscribed.
      void check().catch(reject);
    });
  }

  async runCustomStep(request: CustomStepRequest): Promise<CustomStepResult> {
    const o = this.#o;
    if (!request.module) throw new GraphError("UNKNOWN_STEP", `custom step ${request.name} names no module; set module in the graph definition`);
    // Deterministic: a re-run after a crash finds the session it started before.
    const sessionId = `ses_step_${createHash("sha256").update(request.idempotencyKey).digest("hex").slice(0, 24)}`;
    const sandbox = o.sandboxes[Number.parseInt(sessionId.slice(-4), 16) % o.sandboxes.length]!;
    const call: StepCall = {
      name: request.name,
      module: request.module,
      ...(request.export ? { export: request.export } : {}),
      bag: request.ctx.toJSON(),
      runId: request.runId,
      idempotencyKey: request.idempotencyKey,
      iteration: request.iteration,
    };
    const start = (): SessionChannel =>
      sandbox.start({
        request: create(SessionRequestSchema, {
          protocolVersion: ProtocolVersion.PROTOCOL_VERSION_1,
          sessionId,
          jobId: o.graphJobId,
          agent: { name: `step:${request.name}`, version: 0 },
          instructions: "",
          input: JSON.stringify(call),
          permissions: false,
        }),
        command: [process.execPath, stepRunnerScript],
        pluginDir: o.pluginPath,
        env: {},
        attachments: [],
      });
    let messages: SandboxMessage[];
    let reattached = true;
    try {
      messages = await this.#drain(sandbox.reattach({ sessionId, afterSeq: 0 }), request.signal, sandbox, sessionId);
    } catch (error) {
      if (!(error instanceof SessionNotFoundError)) throw error;
      reattached = false;
      o.onStepWork?.({ path: request.path, stepId: request.stepId, sessionId, reattached });
      messages = await this.#drain(start(), request.signal, sandbox, sessionId);
    }
    if (reattached) o.onStepWork?.({ path: request.path, stepId: request.stepId, sessionId, reattached });
    const exited = messages.find((m): m is Extract<SandboxMessage, { kind: "exited" }> => m.kind === "exited");
    let result = exited?.result;
    for (const m of messages) if (m.kind === "event" && m.event.event.case === "result") result = m.event.event.value;
    if (!result || result.stopReason !== StopReason.COMPLETED) {
      const why = result?.error || exited?.error || "the step runner ended without a result";
      throw new GraphError("STEP_FAILED", `custom step ${request.name} failed in the sandbox: ${why}`);
    }
    try {
      const parsed = JSON.parse(result.text) as { set?: Record<string, unknown> };
      return { set: parsed.set ?? {} };
    } catch {
      throw new GraphError("STEP_FAILED", `custom step ${request.name}: the step runner's result is not JSON; is the orchestrator's step runner current?`);
    }
  }

  async #drain(channel: SessionChannel, signal: AbortSignal, sandbox: SessionRunner, sessionId: string): Promise<SandboxMessage[]> {
    const onAbort = (): void => {
      void sandbox.cancel({ sessionId, reason: "the graph run stopped this step" }).catch(() => undefined);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    const out: SandboxMessage[] = [];
    try {
      for await (const message of channel) out.push(message);
    } finally {
      signal.removeEventListener("abort", onAbort);
      channel.close();
    }
    return out;
  }
}
