// A graph run as a job. `RunAgent` with a graph's name (agents and graphs
// share one name space) stores a job for the graph's latest version, pins
// the latest version of every agent it uses, and runs a GraphRunner whose
// executor runs each step as a session through the sandbox (graph-executor.ts).
// The job's id is the run's id; its live events show each step (text lines
// naming the step, its path and the job or session doing it) and end with
// the run's result. The graph job's pins, its steps' jobs and the run's
// checkpoints go to the graph store (graph-store.ts); on start-up every graph
// job still running is resumed from its checkpoints, after the job runner
// re-attached the steps' jobs.
//
// With several replicas (job-ownership.ts) a graph job is leased like any
// job: claimed before it is stored, released when it ends. The replica that
// takes a dead replica's graph job over resumes it from the shared
// checkpoints (`resumeJob`); a replica that lost a graph job's lease stops
// working on it at once without finishing it (`abandon`): its run is halted,
// so nothing more is recorded or written for it here. A cancel taken at a
// replica that does not run the job is recorded on the job; the replica that
// runs it hears of it through the job's events (or reads it when it resumes).
import type { LifecycleType } from "@oz0/events-client";
import type { RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import type { JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { GraphRunner, type CheckpointStore, type GraphEvent, type RunResult } from "@oz0/graph";
import type { Logger } from "@oz0/serving";
import { never, SessionGraphExecutor } from "./graph-executor.js";
import { AgentGraphManager } from "./graph-manager-agent.js";
import { graphAgents, type GraphRegistry, type GraphVersionRecord } from "./graph-registry.js";
import type { GraphStore, StepJobRecord } from "../store/graph-store.js";
import { stepIdOf, stepNote, stepWhere } from "./graph-step-notes.js";
import type { JobFeed } from "../jobs/job-feed.js";
import { asBystander, soleOwnership, type JobOwnership } from "../cluster/job-ownership.js";
import type { JobRunner } from "../jobs/job-runner.js";
import {
  appendJobStep,
  createJobStep,
  JOB_STATE_TO_PROTO,
  stateChanged,
  textNote,
  type JobEventInit,
} from "../jobs/job-events.js";
import { checkJobInput } from "../jobs/job-input.js";
import { cancelReason, CANCELLED_BY_REQUEST } from "../jobs/job-ending.js";
import {
  ACTIVE_JOB_STATES,
  isTerminal,
  newJobRecord,
  type JobPatch,
  type JobRecord,
  type JobStateName,
  type JobStore,
} from "../store/job-store.js";
import { newId } from "../store/ids.js";
import { invalidArgument, notFound, OrchestratorError } from "../orchestrator-error.js";
import type { LifecycleInit, LifecycleSink } from "../sessions/session-runner.js";
import type { SandboxPlacement } from "../sessions/sandbox-placement.js";
import { orchestratorTracing } from "../tracing.js";

/** Graph jobs' ids start with this, so the job runner leaves them to GraphJobs. */
export const GRAPH_JOB_PREFIX = "graph_";

export function isGraphJob(job: { id: string }): boolean {
  return job.id.startsWith(GRAPH_JOB_PREFIX);
}

export interface GraphJobsOptions {
  /** Graph jobs, step jobs and checkpoints (openGraphStore). */
  graphStore: GraphStore;
  store: JobStore;
  feed: JobFeed;
  jobs: JobRunner;
  registry: GraphRegistry;
  /** Where custom steps' sessions run (the job runner's placement). */
  placement: SandboxPlacement;
  lifecycle?: LifecycleSink;
  logger: Logger;
  /** Which jobs this replica works on. Default: every job (one orchestrator). */
  ownership?: JobOwnership;
  /** How often a step's job is read from the store while the step waits for it. Default 1 s. */
  stepPollMs?: number;
  /** The most a node may send about one custom step's session (OZ0_MAX_SESSION_BYTES). Default 1 GiB. */
  maxSessionBytes?: number;
}

/** A graph run this replica works on. */
interface ActiveRun {
  runner: GraphRunner;
  /** Aborted when this replica stops working on the run (abandon, close): it records and writes nothing more. */
  halt: AbortController;
  /** Feed subscriptions the run holds. */
  unsubscribes: Set<() => void>;
}

/** The item id of the event that asks the replica running a graph job to cancel it. */
const CANCEL_REQUEST_ITEM = "graph-cancel-request";

/** The checkpoint store as a halted run sees it: its writes neither happen nor settle, so its engine stops. */
function haltable(store: CheckpointStore, halt: AbortSignal): CheckpointStore {
  const gate = <T>(write: () => Promise<T>): Promise<T> => (halt.aborted ? never<T>() : write());
  return {
    createRun: (run) => gate(() => store.createRun(run)),
    getRun: (runId) => store.getRun(runId),
    listRuns: (filter) => store.listRuns(filter),
    recordStep: (runId, record) => gate(() => store.recordStep(runId, record)),
    loadSteps: (runId) => store.loadSteps(runId),
    finishRun: (runId, end) => gate(() => store.finishRun(runId, end)),
    reopenRun: (runId) => gate(() => store.reopenRun(runId)),
  };
}

/** The bag's `output` as the job's result text. */
function outputText(output: unknown): string {
  return output === null || output === undefined ? "" : typeof output === "string" ? output : JSON.stringify(output);
}

const PROTO_TO_STATE = new Map<JobState, JobStateName>(
  Object.entries(JOB_STATE_TO_PROTO).map(([k, v]) => [v, k as JobStateName]),
);

const STATUS_TO_STATE: Record<RunResult["status"], JobStateName> = {
  succeeded: "succeeded",
  failed: "failed",
  cancelled: "cancelled",
  aborted: "failed",
};

export class GraphJobs {
  readonly #o: GraphJobsOptions;
  readonly #graphs: GraphStore;
  readonly #ownership: JobOwnership;
  readonly #runs = new Map<string, ActiveRun>();
  /**
   * Per run being set up here (created or resumed) until it is stopped: aborted by a cancel. The engine's
   * runner finds a run to cancel only once it is launched, and setting it up reads the store first; a cancel in
   * that window reaches the run through this, so it ends before any step starts.
   */
  readonly #cancels = new Map<string, AbortController>();
  /** Resumes in progress, so a job asked for twice at once is resumed once. */
  readonly #resuming = new Map<string, Promise<boolean>>();
  readonly #started = new Map<string, number>();
  /** Graph job → `<step job>/<call>` of calls waiting for a person. */
  readonly #waiting = new Map<string, Set<string>>();
  readonly #updates = new Map<string, Promise<void>>();
  #closing = false;

  constructor(options: GraphJobsOptions) {
    this.#o = options;
    this.#graphs = options.graphStore;
    this.#ownership = options.ownership ?? soleOwnership;
  }

  /** True when `name` is a graph (RunAgent then runs it instead of an agent). */
  async hasGraph(name: string): Promise<boolean> {
    return (await this.#o.registry.findVersion(name)) !== undefined;
  }

  /** The jobs a graph run ran (agent steps, its manager's decisions), in the order recorded; none for any other job. */
  stepJobs(runId: string): Promise<StepJobRecord[]> {
    return isGraphJob({ id: runId }) ? this.#graphs.listStepJobs(runId) : Promise.resolve([]);
  }

  async run(options: { graph: string; input: string; startedBy?: string }): Promise<JobRecord> {
    checkJobInput(options.input);
    if (this.#closing)
      throw new OrchestratorError("unavailable", "the orchestrator is shutting down; try again when it is back");
    const graph = await this.#o.registry.runnableVersion(options.graph);
    // Pin every agent's latest version now: a run never changes agents half way.
    const pinned: Record<string, number> = {};
    for (const name of graphAgents(graph.definition)) {
      const agent = await this.#o.store.getAgentVersion(name);
      if (!agent)
        throw notFound(
          `graph ${graph.name} uses agent "${name}", which is not installed; install the plugin that defines it`,
        );
      pinned[name] = agent.version;
    }
    const now = new Date();
    const job = newJobRecord(
      {
        id: newId(GRAPH_JOB_PREFIX),
        agentName: graph.name,
        agentVersion: graph.version,
        input: options.input,
        state: "running",
        sessionId: "",
        attachments: [],
        servedTools: "",
        startedBy: options.startedBy ?? "",
        // A graph run has no session of its own: it runs from the start.
        startedAt: now,
      },
      now,
    );
    // Leased before it exists, so no other replica takes it for an orphan; run under that lease from here to
    // the run's end (job-ownership.ts: `working`).
    await this.#ownership.claim(job.id);
    return this.#ownership.working(job.id, () => this.#create(job, graph, pinned));
  }

  /** A graph run's job, leased: stored with the run's record and first event, and its run started. */
  async #create(job: JobRecord, graph: GraphVersionRecord, pinned: Record<string, number>): Promise<JobRecord> {
    const started = this.#lifecycleEvent("graph.run_started", job.id, {
      graph_name: graph.name,
      graph_version: String(graph.version),
    });
    // The run's trace begins with that event (tracing.ts): its id is kept for `oz0 jobs show`, its root
    // span for whichever replica resumes the run and for links from calls about it.
    const traceId = this.#o.lifecycle?.traceIdOf?.(job.id);
    const traceparent = this.#o.lifecycle?.traceparentOf?.(job.id);
    // Before the job exists: a cancel may land as soon as it is stored, before its run is launched.
    const cancel = this.#cancelFor(job.id);
    try {
      await this.#graphs.putGraphJob({
        jobId: job.id,
        graph: graph.name,
        version: graph.version,
        pinnedAgents: pinned,
        createdAt: job.createdAt,
      });
      // The run's job, its first event and `graph.run_started` in one transaction (issue 24).
      await createJobStep(
        this.#o,
        { ...job, ...(traceId ? { traceId } : {}), ...(traceparent ? { traceparent } : {}) },
        { events: [stateChanged("running")], lifecycle: [started] },
      );
    } catch (error) {
      // Not created: its span ends here, and a lease kept (and renewed) would be for nothing.
      this.#o.lifecycle?.withdrawn?.(job.id);
      this.#forgetCancel(job.id, cancel);
      await this.#ownership.release(job.id).catch(() => undefined);
      throw error;
    }
    // Its lease lost meanwhile: whoever takes the run over (this replica too, under a new lease) resumes it.
    if (!this.#ownership.owns(job.id)) {
      this.#forgetCancel(job.id, cancel);
      return (await this.#o.store.getJob(job.id))!;
    }
    const active = this.#activate(job.id, graph, pinned);
    this.#started.set(job.id, Date.now());
    const handle = await active.runner.start({ prompt: job.input, runId: job.id, signal: cancel });
    this.#track(job.id, active, handle.result);
    return (await this.#o.store.getJob(job.id))!;
  }

  /**
   * Resume every graph job this replica owns that was running when the
   * orchestrator stopped (with one orchestrator: every one). Call after the
   * job runner's resumeAll.
   */
  async resumeAll(): Promise<number> {
    let count = 0;
    for (const state of ACTIVE_JOB_STATES) {
      for (const job of await this.#o.store.listJobs({ state, limit: 100_000 })) {
        // Another replica's graph jobs are its own to run.
        if (!isGraphJob(job) || !this.#ownership.owns(job.id)) continue;
        if (await this.#resumeOnce(job, "resumed after an orchestrator restart")) count++;
      }
    }
    return count;
  }

  /**
   * Work on a graph job this replica just took over (the replica running it
   * stopped, or this one lost its lease and won it again): resume its run
   * from the shared checkpoints. A run of it still here began under a lease
   * lost since: it is halted first. Nothing happens when the job ended
   * meanwhile (its lease is released).
   */
  async resumeJob(jobId: string): Promise<void> {
    if (this.#closing) return;
    this.#stop(jobId);
    const job = await this.#o.store.getJob(jobId);
    if (job && !isGraphJob(job)) throw invalidArgument(`job ${jobId} is not a graph job; the job runner resumes it`);
    if (!job || isTerminal(job.state)) {
      // Nothing to run: it ended, or its replica died before storing it.
      await this.#ownership.release(jobId);
      return;
    }
    await this.#resumeOnce(job, "resumed from its checkpoints after the orchestrator running it stopped");
  }

  /**
   * Stop working on a graph job without finishing it: another replica took
   * its lease. Its run is halted where it is (steps in flight neither finish
   * nor fail, nothing more is recorded or written); its steps' jobs run on,
   * and the new owner waits for them.
   */
  abandon(jobId: string): void {
    this.#stop(jobId);
  }

  async cancel(options: { jobId: string; reason?: string }): Promise<JobRecord> {
    const job = await this.#o.store.getJob(options.jobId);
    if (!job) throw notFound(`job ${options.jobId} not found; list jobs with \`oz0 jobs list\``);
    if (isTerminal(job.state)) return job;
    const reason = options.reason || CANCELLED_BY_REQUEST;
    // In-flight steps see an aborted signal and cancel their own jobs and sessions; the run ends cancelled.
    if (this.#runs.get(job.id)?.runner.cancel(job.id, reason)) return (await this.#o.store.getJob(job.id))!;
    // Being set up here: the run, once launched, ends cancelled before any step starts (and the job is ended below).
    this.#cancels.get(job.id)?.abort(reason);
    if (!this.#ownership.owns(job.id)) {
      // Another replica runs it: it hears of this event (or reads the request when it resumes the job) and cancels the run.
      await asBystander(() =>
        this.#append(job.id, [textNote(CANCEL_REQUEST_ITEM, `cancel requested: ${reason}\n`)], {
          cancelRequestedAt: new Date(),
          error: reason,
        }),
      );
    } else {
      await this.#finish(job.id, { state: "cancelled", error: reason });
    }
    return (await this.#o.store.getJob(job.id))!;
  }

  /** One resume per job at a time: a takeover and a start-up pass may ask at once. */
  async #resumeOnce(job: JobRecord, note: string): Promise<boolean> {
    if (this.#runs.has(job.id)) return false;
    const pending = this.#resuming.get(job.id);
    if (pending) {
      await pending;
      return false;
    }
    const resuming = this.#resume(job, note).finally(() => {
      if (this.#resuming.get(job.id) === resuming) this.#resuming.delete(job.id);
    });
    this.#resuming.set(job.id, resuming);
    return resuming;
  }

  async #resume(job: JobRecord, note: string): Promise<boolean> {
    // From here on a cancel reaches the run, whatever point of the resume it lands at.
    const cancel = this.#cancelFor(job.id);
    // Its steps continue the run's stored trace (tracing.ts).
    this.#o.lifecycle?.resumed?.(job);
    const row = await this.#graphs.getGraphJob(job.id);
    const graph = row ? await this.#o.registry.findVersion(row.graph, row.version) : undefined;
    if (!row || !graph) {
      await this.#finish(job.id, {
        state: "failed",
        error: `graph job ${job.id} has no pinned graph version in the graph store; run it again`,
      });
      return false;
    }
    const stored = await this.#graphs.checkpoints.getRun(job.id);
    if (stored && stored.status !== "running") {
      // The run ended but its orchestrator stopped before the job did: finish the job from the stored end.
      await this.#finish(job.id, {
        state: STATUS_TO_STATE[stored.status],
        error: stored.error ? `${stored.error.code}: ${stored.error.message}` : "",
        resultText: outputText(stored.result?.output),
      });
      return false;
    }
    // The lease was lost while reading (or the orchestrator is closing): leave the run to whoever has it.
    if (this.#closing || !this.#ownership.owns(job.id)) {
      this.#forgetCancel(job.id, cancel);
      return false;
    }
    try {
      const active = this.#activate(job.id, graph, row.pinnedAgents);
      this.#started.set(job.id, Date.now());
      await this.#append(job.id, [textNote("graph", `${note}\n`)]);
      // A run the checkpoint store never saw (stopped between the job and the run) starts now, under the same id.
      const handle = stored
        ? await active.runner.resume({ runId: job.id, signal: cancel })
        : await active.runner.start({ prompt: job.input, runId: job.id, signal: cancel });
      this.#track(job.id, active, handle.result);
      // Cancelled at another replica while nobody ran it.
      if (job.cancelRequestedAt) active.runner.cancel(job.id, cancelReason(job));
      return true;
    } catch (error) {
      // One run that cannot resume must not keep the orchestrator (and every other run) from starting.
      await this.#finish(job.id, {
        state: "failed",
        error: `could not resume the graph run: ${(error as Error).message}`,
      });
      return false;
    }
  }

  /** The signal a cancel of `jobId` aborts while its run is set up or runs here (until #stop). */
  #cancelFor(jobId: string): AbortSignal {
    const controller = new AbortController();
    this.#cancels.set(jobId, controller);
    return controller.signal;
  }

  /** Forget `cancel` for a run not set up after all; a later set-up of the same job keeps its own. */
  #forgetCancel(jobId: string, cancel: AbortSignal): void {
    if (this.#cancels.get(jobId)?.signal === cancel) this.#cancels.delete(jobId);
  }

  /** Forget a run here; a halted run records and writes nothing more. */
  #stop(jobId: string): void {
    this.#cancels.delete(jobId);
    const active = this.#runs.get(jobId);
    if (active) {
      this.#runs.delete(jobId);
      active.halt.abort();
      for (const unsubscribe of active.unsubscribes) unsubscribe();
    }
    this.#waiting.delete(jobId);
    this.#started.delete(jobId);
    this.#updates.delete(jobId);
    // A resume under the lease lost is not waited for by the next: it ends without running the run (owns()).
    this.#resuming.delete(jobId);
  }

  #activate(jobId: string, graph: GraphVersionRecord, pinned: Record<string, number>): ActiveRun {
    const halt = new AbortController();
    const live = (): boolean => !halt.signal.aborted;
    const poll = this.#o.stepPollMs ? { pollMs: this.#o.stepPollMs } : {};
    const executor = new SessionGraphExecutor({
      graphStore: this.#graphs,
      store: this.#o.store,
      feed: this.#o.feed,
      jobs: this.#o.jobs,
      placement: this.#o.placement,
      graphJobId: jobId,
      pinnedAgents: pinned,
      pluginPath: graph.pluginPath,
      halt: halt.signal,
      ...poll,
      ...(this.#o.maxSessionBytes !== undefined ? { maxSessionBytes: this.#o.maxSessionBytes } : {}),
      onStepWork: (w) => {
        if (!live()) return;
        const by = w.jobId ? `job ${w.jobId}` : `session ${w.sessionId ?? ""}`;
        this.#note(jobId, `  ${w.stepId} ${w.path}: ${w.reattached ? "re-attached to" : "runs as"} ${by}\n`);
        if (w.jobId) this.#followApprovals(jobId, active, w.stepId, w.jobId);
      },
    });
    const managerAgent = graph.definition.managerAgent;
    // Only a definition that names a manager gets one: without it, step errors fail the run.
    const manager = managerAgent
      ? new AgentGraphManager({
          store: this.#o.store,
          feed: this.#o.feed,
          jobs: this.#o.jobs,
          graphStore: this.#graphs,
          agent: managerAgent,
          ...(pinned[managerAgent] ? { version: pinned[managerAgent] } : {}),
          halt: halt.signal,
          ...poll,
          onJob: (m) => {
            if (live())
              this.#note(
                jobId,
                `  manager ${managerAgent} ${m.reattached ? "still decides" : "decides"} ${m.event} as job ${m.jobId}\n`,
              );
          },
        })
      : undefined;
    const runner = new GraphRunner({
      definition: graph.definition,
      executor,
      ...(manager ? { manager } : {}),
      store: haltable(this.#graphs.checkpoints, halt.signal),
      onEvent: (event) => {
        if (live()) this.#onEvent(jobId, event);
      },
      // One span per step attempt, below the graph run's span (tracing.ts).
      tracer: orchestratorTracing.graphTracer(jobId),
    });
    const active: ActiveRun = { runner, halt, unsubscribes: new Set() };
    // A cancel taken at another replica (cancel above) reaches the run here as an event on its job.
    active.unsubscribes.add(
      this.#o.feed.subscribe(jobId, (event) => {
        if (event.event.case !== "text" || event.event.value.itemId !== CANCEL_REQUEST_ITEM) return;
        void this.#o.store
          .getJob(jobId)
          .then((job) => {
            if (live() && job?.cancelRequestedAt) runner.cancel(jobId, cancelReason(job));
          })
          .catch((error: unknown) =>
            this.#o.logger.warn({ jobId, err: String(error) }, "could not read a graph job's cancel request"),
          );
      }),
    );
    this.#runs.set(jobId, active);
    return active;
  }

  /**
   * A step job's calls that wait for a person show on the graph job (a line
   * naming the command that answers it), and the graph job is `waiting`
   * while any of its steps' calls waits, `running` again once none does.
   */
  #followApprovals(graphJobId: string, active: ActiveRun, stepId: string, stepJobId: string): void {
    const waiting = this.#waiting.get(graphJobId) ?? new Set<string>();
    this.#waiting.set(graphJobId, waiting);
    const live = (): boolean => !active.halt.signal.aborted;
    const update = async (): Promise<void> => {
      if (!live()) return;
      const job = await this.#o.store.getJob(graphJobId);
      if (!job || isTerminal(job.state)) return;
      const state: JobStateName = waiting.size > 0 ? "waiting" : "running";
      if (job.state === state) return;
      await this.#append(graphJobId, [stateChanged(state, state === "waiting" ? "a step waits for approval" : "")], {
        state,
      });
    };
    const pending = (callId: string): void => {
      const key = `${stepJobId}/${callId}`;
      if (!live() || waiting.has(key)) return;
      waiting.add(key);
      this.#note(
        graphJobId,
        `  ${stepId} waits for approval: oz0 approve ${stepJobId} ${callId} (or oz0 deny … --reason TEXT)\n`,
      );
      this.#serialize(graphJobId, update);
    };
    const answered = (key: string): void => {
      if (waiting.delete(key)) this.#serialize(graphJobId, update);
    };
    const unsubscribe = this.#o.feed.subscribe(stepJobId, (event) => {
      const e = event.event;
      if (e.case === "permissionDecision") {
        if (e.value.pending) pending(e.value.id);
        else answered(`${stepJobId}/${e.value.id}`);
      } else if (e.case === "stateChanged" && isTerminal(PROTO_TO_STATE.get(e.value.state) ?? "running")) {
        unsubscribe();
        active.unsubscribes.delete(unsubscribe);
        for (const key of [...waiting]) if (key.startsWith(`${stepJobId}/`)) answered(key);
      }
    });
    active.unsubscribes.add(unsubscribe);
    // Calls that were already waiting (a step job re-attached after a restart).
    void this.#o.store
      .listPermissions({ jobId: stepJobId, pendingOnly: true, approvalsOnly: true })
      .then((list) => list.forEach((p) => pending(p.id)))
      .catch((error: unknown) =>
        this.#o.logger.warn({ jobId: graphJobId, err: String(error) }, "could not read a step's waiting calls"),
      );
  }

  /** Runs state updates of one graph job one after another. */
  #serialize(graphJobId: string, fn: () => Promise<void>): void {
    const next = (this.#updates.get(graphJobId) ?? Promise.resolve())
      .then(fn)
      .catch((error: unknown) =>
        this.#o.logger.warn({ jobId: graphJobId, err: String(error) }, "could not update the graph job's state"),
      );
    this.#updates.set(graphJobId, next);
  }

  /** Engine events become lines on the graph job and lifecycle events. */
  #onEvent(jobId: string, event: GraphEvent): void {
    const step = event.nodeId ?? "";
    const where = stepWhere(event);
    const kind = step.split(":")[0] ?? "";
    const attrs = { step_name: step, step_kind: kind, iteration: event.iteration ?? 0, attempt: event.attempt ?? 1 };
    switch (event.type) {
      case "step_started":
        this.#note(jobId, stepNote("started", where));
        this.#publish("graph.step_started", jobId, attrs, stepIdOf(event));
        return;
      case "step_finished":
        this.#note(jobId, stepNote("finished", where, event.writes?.length ? `, set ${event.writes.join(", ")}` : ""));
        this.#publish("graph.step_completed", jobId, attrs, stepIdOf(event));
        return;
      case "step_replayed":
        this.#note(jobId, stepNote("replayed", where));
        return;
      case "step_failed":
        this.#note(jobId, stepNote("failed", where, `: ${event.error?.message ?? "unknown error"}`));
        this.#publish("graph.step_failed", jobId, { ...attrs, error_code: event.error?.code ?? "" }, stepIdOf(event));
        return;
      case "control":
        this.#note(
          jobId,
          `! ${where} ${event.control?.kind ?? "control event"}${event.control?.detail ? `: ${event.control.detail}` : ""}\n`,
        );
        return;
      case "conflict":
        this.#note(
          jobId,
          `! branches wrote the same key ${event.conflict?.key ?? ""}; the later-declared branch wins\n`,
        );
        return;
      default:
        return;
    }
  }

  #note(jobId: string, text: string): void {
    // Events are ordered by the job runner's append; a note lost to a closing store is not worth failing the run.
    void this.#append(jobId, [textNote("graph", text)]).catch((error: unknown) =>
      this.#o.logger.warn({ jobId, err: String(error) }, "could not store a graph step event"),
    );
  }

  /** A step's event, stored on its own (the step's own records are the graph store's). */
  #publish(type: LifecycleType, jobId: string, attributes: Record<string, unknown>, stepId?: string): void {
    this.#o.lifecycle?.publish(type, this.#lifecycleInit(jobId, attributes, stepId));
  }

  /** A run's event, for #append to store with the change it reports (undefined when events are not published). */
  #lifecycleEvent(type: LifecycleType, jobId: string, attributes: Record<string, unknown>): RawEvent | undefined {
    return this.#o.lifecycle?.event(type, this.#lifecycleInit(jobId, attributes));
  }

  #lifecycleInit(jobId: string, attributes: Record<string, unknown>, stepId?: string): LifecycleInit {
    // The events service keeps identifiers of [A-Za-z0-9_.:@+-] only: the step id is `<node id>@<path with dots>`, e.g. agent:writer@0.b1.0.
    return { jobId, graphRunId: jobId, ...(stepId ? { graphStepId: stepId } : {}), attributes };
  }

  #track(jobId: string, active: ActiveRun, result: Promise<RunResult>): void {
    void result
      .then(async (r) => {
        if (this.#closing || active.halt.signal.aborted) return;
        const state = STATUS_TO_STATE[r.status];
        await this.#finish(jobId, {
          state,
          error: r.error ? `${r.error.code}: ${r.error.message}` : "",
          resultText: outputText(r.output),
        });
      })
      .catch((error: unknown) => this.#o.logger.error({ jobId, err: error }, "graph job failed to finish"));
  }

  async #finish(jobId: string, options: { state: JobStateName; error: string; resultText?: string }): Promise<void> {
    // In line with the waiting/running updates, so none of them lands after the end.
    const done = (this.#updates.get(jobId) ?? Promise.resolve()).then(() => this.#finishNow(jobId, options));
    this.#updates.set(
      jobId,
      done.catch(() => undefined),
    );
    await done;
    // Ended (now or before): nobody is to take it over.
    await this.#ownership.release(jobId);
  }

  async #finishNow(jobId: string, options: { state: JobStateName; error: string; resultText?: string }): Promise<void> {
    const job = await this.#o.store.getJob(jobId);
    if (!job || isTerminal(job.state)) {
      this.#stop(jobId);
      return;
    }
    const events: JobEventInit[] = [];
    if (options.resultText) events.push(textNote("graph-result", `${options.resultText}\n`));
    events.push(stateChanged(options.state, options.error));
    const started = this.#started.get(jobId);
    const type =
      options.state === "succeeded"
        ? "graph.run_completed"
        : options.state === "cancelled"
          ? "graph.run_cancelled"
          : "graph.run_failed";
    const ended = this.#lifecycleEvent(type, jobId, {
      graph_name: job.agentName,
      stop_reason: options.state,
      ...(options.error ? { error_code: options.error.split(":")[0] } : {}),
      ...(started ? { duration_ms: Date.now() - started } : {}),
    });
    await this.#append(
      jobId,
      events,
      { state: options.state, error: options.error, finishedAt: new Date(), resultText: options.resultText ?? "" },
      [ended],
    );
    this.#stop(jobId);
  }

  async #append(
    jobId: string,
    events: JobEventInit[],
    job?: JobPatch,
    lifecycle: (RawEvent | undefined)[] = [],
  ): Promise<void> {
    await appendJobStep(this.#o, { jobId, events, ...(job ? { job } : {}), lifecycle });
  }

  /** Stop working on runs; they resume from their checkpoints at the next start (or at another replica). */
  async close(): Promise<void> {
    // Runs in flight are halted where they are, not awaited (nor cancelled, which would be recorded).
    this.#closing = true;
    for (const jobId of [...this.#runs.keys()]) this.#stop(jobId);
    await Promise.resolve();
  }
}
