/**
 * The engine. It walks a definition deterministically over one bag per run;
 * each step's writes are checkpointed as a delta under the step's path before
 * they reach the bag. On resume the same walk replays recorded deltas instead
 * of running their steps, so control decisions (choice labels, loop verdicts)
 * come out the same and execution continues at the step that was in flight.
 */
import { randomUUID } from "node:crypto";
import {
  InMemoryCheckpointStore,
  type CheckpointStore,
  type MergeConflict,
  type RunStatus,
  type StepOutcome,
  type StepRecord,
  type StoredRun,
} from "./checkpoint-store.js";
import {
  DEFAULT_CUSTOM_STEP_TIMEOUT,
  durationMs,
  MAX_CUSTOM_STEP_TIMEOUT,
  subgraphsOf,
  type AgentNode,
  type ChoiceNode,
  type CustomStepNode,
  type Flow,
  type GraphDefinition,
  type GraphNode,
  type LoopNode,
  type ParallelNode,
} from "./definition.js";
import { definitionHash } from "./definition-hash.js";
import { GraphError } from "./errors.js";
import type { GraphExecutor } from "./graph-executor.js";
import type { ControlEvent, GraphManager, ManagerDecision } from "./graph-manager.js";
import { HarnessContext, maskKeys, type BagDelta, type RedactFn } from "./harness-context.js";
import { assertValidDefinition, type ValidateOptions } from "./validate-definition.js";
import { JSON_DATA_HINT, notJsonBag } from "./json-data.js";

/** The longest final text still read as a choice label. */
export const MAX_LABEL_LENGTH = 64;

/** Something the engine did; the orchestrator turns these into lifecycle events and spans. */
export interface GraphEvent {
  type:
    | "run_started"
    | "run_resumed"
    | "step_started"
    | "step_finished"
    | "step_replayed"
    | "step_failed"
    | "control"
    | "conflict"
    | "run_finished";
  runId: string;
  graph: string;
  /** ISO time. */
  time: string;
  nodeId?: string;
  /** Step path: unique per run, includes loop iteration and branch. */
  path?: string;
  /** Innermost loop iteration (0 outside loops): loops reuse node ids, this tells rounds apart. */
  iteration?: number;
  attempt?: number;
  /** Keys the step wrote. */
  writes?: string[];
  /** For `control`: what happened and what was decided. */
  control?: { kind: string; decision?: ManagerDecision; detail?: string };
  conflict?: MergeConflict;
  status?: RunStatus;
  error?: { code: string; message: string };
}

/** OpenTelemetry's `SpanStatusCode.ERROR`, without depending on the API package. */
const SPAN_STATUS_ERROR = 2;

/** The part of a span the engine uses; an OpenTelemetry `Span` satisfies it. */
export interface GraphSpan {
  setStatus(status: { code: number; message?: string }): unknown;
  end(): unknown;
}

/** The part of a tracer the engine uses; an OpenTelemetry `Tracer` satisfies it. */
export interface GraphTracer {
  startSpan(name: string, options?: { attributes?: Record<string, string | number | boolean> }): GraphSpan;
}

/** Options for {@link GraphRunner}. */
export interface GraphRunnerOptions {
  /** The definition to run; validated (structure and meaning) on construction. */
  definition: GraphDefinition;
  /** Runs agents and custom steps. */
  executor: GraphExecutor;
  /** Durable run state; defaults to an {@link InMemoryCheckpointStore}. */
  store?: CheckpointStore;
  /** Decides control events; without one, step errors and in-flight invokes fail. */
  manager?: GraphManager;
  /**
   * Applied to every bag snapshot that leaves the engine, after the
   * definition's `secretKeys` are masked; default redacts nothing more.
   */
  redact?: RedactFn;
  /** Receives every engine event, synchronously; what it throws is ignored. */
  onEvent?: (event: GraphEvent) => void;
  /**
   * Gets one span per step attempt (an OpenTelemetry `Tracer` fits this shape),
   * with the run id, node id, step path and iteration as attributes.
   */
  tracer?: GraphTracer;
  /**
   * Retries a manager may ask for per step before the step fails anyway, and
   * per loop that reaches maxIterations before the loop fails (default 3).
   */
  maxRetries?: number;
  /** Known agent and step names for validation; omitted names are not checked. */
  validate?: ValidateOptions;
  /**
   * How long a custom step whose node sets no `timeout` may run before it fails with `STEP_TIMED_OUT`, in
   * milliseconds (default {@link DEFAULT_CUSTOM_STEP_TIMEOUT}, 10 minutes).
   */
  customStepTimeoutMs?: number;
}

/** Input of a new run. */
export interface StartOptions {
  prompt: string;
  /** Extra initial bag keys. */
  input?: Record<string, unknown>;
  /** Defaults to a random UUID. */
  runId?: string;
  /**
   * Cancels the run, also before it is in flight: `start` and `resume` write and read the store before the run
   * is there for {@link GraphRunner.cancel} to find. Aborted by then, the run ends cancelled before any step
   * starts; aborted later, it cancels the run as `cancel` does. Its reason (a string, or an Error's message)
   * goes into the run's error.
   */
  signal?: AbortSignal;
}

/** How a run ended. */
export interface RunResult {
  runId: string;
  status: Exclude<RunStatus, "running">;
  /** The final bag (unredacted). */
  bag: Record<string, unknown>;
  /** The bag's `output`, or null. */
  output: unknown;
  conflicts: MergeConflict[];
  error?: { code: string; message: string };
}

/** A run in progress; `result` never rejects. */
export interface RunHandle {
  runId: string;
  result: Promise<RunResult>;
}

/** What {@link GraphRunner.invoke} did. */
export type InvokeOutcome =
  | { kind: "started"; run: RunHandle }
  | { kind: "answered"; runId: string; text: string }
  | { kind: "ignored"; runId: string }
  | { kind: "aborted"; runId: string };

interface Scope {
  iteration: number;
  signal: AbortSignal;
}

class RunAborted extends GraphError {
  public constructor(reason: string) {
    super("RUN_ABORTED", `the run was aborted by the manager: ${reason}`);
  }
}

/**
 * Runs one definition. Pure with respect to the outside world: agents, custom
 * steps, the manager and storage all come in through options, which is how the
 * orchestrator plugs in sandbox sessions and its own database.
 */
/** Where the manager's grant of a failed step's retry after `attempt` is recorded. */
function retryPath(stepPath: string, attempt: number): string {
  return `${stepPath}/retry${attempt}`;
}

export class GraphRunner {
  /** The validated definition. */
  public readonly definition: GraphDefinition;
  /** What runs started here are pinned to. */
  public readonly definitionHash: string;
  readonly #options: GraphRunnerOptions;
  readonly #store: CheckpointStore;
  readonly #inFlight = new Map<string, RunExecution>();

  public constructor(options: GraphRunnerOptions) {
    // A private copy: the hash runs are pinned to must not drift if the caller edits its object.
    this.definition = assertValidDefinition(structuredClone(options.definition), options.validate);
    this.definitionHash = definitionHash(this.definition);
    this.#options = options;
    this.#store = options.store ?? new InMemoryCheckpointStore();
  }

  /** Ids of runs this runner is executing now. */
  public inFlight(): string[] {
    return [...this.#inFlight.keys()];
  }

  /** Starts a new run and returns at once; await `result` for the end. */
  public async start(options: StartOptions): Promise<RunHandle> {
    const runId = options.runId ?? randomUUID();
    const input = { ...options.input, prompt: options.prompt };
    const notJson = notJsonBag(input);
    if (notJson)
      throw new GraphError(
        "BAG_NOT_JSON",
        `the run's input holds a value JSON cannot keep: ${notJson}; ${JSON_DATA_HINT}`,
      );
    await this.#store.createRun({
      runId,
      graph: this.definition.name,
      definitionHash: this.definitionHash,
      ...(this.definition.version !== undefined ? { definitionVersion: this.definition.version } : {}),
      definition: this.definition,
      input,
      status: "running",
      startedAt: new Date().toISOString(),
    });
    return this.#launch(runId, input, [], "run_started", options.signal);
  }

  /** Starts a run and waits for it to end. */
  public async run(options: StartOptions): Promise<RunResult> {
    return (await this.start(options)).result;
  }

  /**
   * The harness's entry point for triggers: an idle invoke starts a new run;
   * an invoke while a run is in flight is a control event for the manager.
   * Without a manager it fails the in-flight run and throws.
   * @throws GraphError `RUN_IN_FLIGHT` when busy and no manager is configured.
   */
  public async invoke(options: StartOptions): Promise<InvokeOutcome> {
    const busy = [...this.#inFlight.values()][0];
    if (!busy) return { kind: "started", run: await this.start(options) };
    const manager = this.#options.manager;
    if (!manager) {
      // The seed's rule: with nobody to field it, an in-flight invoke fails the run.
      const error = new GraphError(
        "RUN_IN_FLIGHT",
        `harness "${this.definition.name}" was invoked while run ${busy.runId} was in flight and no managerAgent is configured, so that run failed; wait for runs to finish before invoking, or configure a managerAgent to answer such invokes`,
      );
      busy.abort(error);
      await busy.result;
      throw error;
    }
    const event: ControlEvent = {
      kind: "invoke_in_flight",
      runId: busy.runId,
      graph: this.definition.name,
      prompt: options.prompt,
      snapshot: busy.root.snapshot(),
    };
    const decision = await manager.decide(event);
    busy.emit({ type: "control", control: { kind: event.kind, decision } });
    switch (decision.action) {
      case "answer":
        return { kind: "answered", runId: busy.runId, text: decision.text };
      case "abort":
        busy.abort(new RunAborted(decision.reason ?? "a new invoke arrived"));
        return { kind: "aborted", runId: busy.runId };
      case "skip":
        return { kind: "ignored", runId: busy.runId };
      case "retry":
        throw new GraphError(
          "MANAGER_FAILED",
          "the manager answered an in-flight invoke with retry, which has no meaning there; it must answer, skip or abort",
        );
    }
  }

  /**
   * Continues a run that did not finish (its process died) or that failed:
   * recorded steps are replayed from their deltas, never run again, and
   * execution continues at the first unrecorded step. `signal` cancels it
   * as {@link StartOptions.signal} does.
   * @throws GraphError `DEFINITION_MISMATCH` when the run is pinned to another definition.
   */
  public async resume(options: { runId: string; signal?: AbortSignal }): Promise<RunHandle> {
    const { runId } = options;
    const live = this.#inFlight.get(runId);
    if (live) return { runId, result: live.result };
    const run = await this.#store.getRun(runId);
    if (!run) throw new GraphError("RUN_NOT_FOUND", `run ${runId} is not in the checkpoint store; check the id`);
    this.#checkPinned(run);
    if (run.status === "succeeded") {
      throw new GraphError("RUN_FINISHED", `run ${runId} already succeeded; start a new run instead`);
    }
    if (run.status !== "running") await this.#store.reopenRun(runId);
    const records = await this.#store.loadSteps(runId);
    // A concurrent resume may have launched it while this one was reading.
    const raced = this.#inFlight.get(runId);
    if (raced) return { runId, result: raced.result };
    return this.#launch(runId, run.input, records, "run_resumed", options.signal);
  }

  /**
   * Resumes every run left `running` in the store that is pinned to this
   * definition and not executing here: what an orchestrator calls at start-up.
   */
  public async resumeAll(): Promise<RunHandle[]> {
    const runs = await this.#store.listRuns({ status: "running" });
    const handles: RunHandle[] = [];
    for (const run of runs) {
      if (run.definitionHash !== this.definitionHash || this.#inFlight.has(run.runId)) continue;
      handles.push(await this.resume({ runId: run.runId }));
    }
    return handles;
  }

  /** Cancels a run executing here: in-flight steps get an aborted signal; the run ends `cancelled`. */
  public cancel(runId: string, reason = "cancelled by request"): boolean {
    const live = this.#inFlight.get(runId);
    if (!live) return false;
    live.abort(cancelled(runId, reason));
    return true;
  }

  #checkPinned(run: StoredRun): void {
    if (run.definitionHash !== this.definitionHash) {
      throw new GraphError(
        "DEFINITION_MISMATCH",
        `run ${run.runId} is pinned to definition ${run.definitionHash}${run.definitionVersion ? ` (version ${run.definitionVersion})` : ""}, not ${this.definitionHash}; resume it with a GraphRunner built from the run's stored definition`,
      );
    }
  }

  #launch(
    runId: string,
    input: Record<string, unknown>,
    records: StepRecord[],
    first: "run_started" | "run_resumed",
    signal: AbortSignal | undefined,
  ): RunHandle {
    const execution = new RunExecution({
      runId,
      definition: this.definition,
      options: this.#options,
      store: this.#store,
      input,
      records,
    });
    this.#inFlight.set(runId, execution);
    const onCancel = (): void => execution.abort(cancelled(runId, reasonOf(signal?.reason)));
    // Before execute: a run cancelled while it was being read starts no step.
    if (signal?.aborted) onCancel();
    else signal?.addEventListener("abort", onCancel, { once: true });
    execution.emit({ type: first });
    execution.result = execution.execute().finally(() => {
      this.#inFlight.delete(runId);
      signal?.removeEventListener("abort", onCancel);
    });
    return { runId, result: execution.result };
  }
}

/**
 * What an orchestrator calls at start-up: resumes every run left `running` in
 * `store`, each with a runner built from the definition it is pinned to.
 */
export async function resumeStoredRuns(
  options: Omit<GraphRunnerOptions, "definition"> & { store: CheckpointStore },
): Promise<RunHandle[]> {
  const handles: RunHandle[] = [];
  const runners = new Map<string, GraphRunner>();
  for (const run of await options.store.listRuns({ status: "running" })) {
    let runner = runners.get(run.definitionHash);
    if (!runner) {
      runner = new GraphRunner({ ...options, definition: run.definition });
      runners.set(run.definitionHash, runner);
    }
    handles.push(await runner.resume({ runId: run.runId }));
  }
  return handles;
}

function cancelled(runId: string, reason: string): GraphError {
  return new GraphError("RUN_CANCELLED", `run ${runId} was cancelled: ${reason}`);
}

function reasonOf(reason: unknown): string {
  return typeof reason === "string" ? reason : reason instanceof Error ? reason.message : "cancelled by request";
}

/** The longest path a step node's events can carry, and where the node is written. */
export interface StepPathBound {
  nodeId: string;
  /** The node in the definition, e.g. `/root/0/branches/1/0` (the first place, for a node reached several ways). */
  where: string;
  /** The longest step path its events can carry, e.g. `/0/20/body/0`. */
  longestPath: string;
}

/**
 * Every node that runs as a step (agents, custom steps, choice evaluators and key checks) with the longest path
 * its `step_*` events can carry in a run of `definition` with `maxRetries` (the runner's, default 3): a loop
 * counts up to `maxIterations` once plus once per retry a manager may grant at its limit. An orchestrator whose
 * events keep step ids of bounded length checks them before it accepts the definition. Call on a valid
 * definition (no subgraph cycles).
 */
export function stepPathBounds(definition: GraphDefinition, options: { maxRetries?: number } = {}): StepPathBound[] {
  const rounds = 1 + (options.maxRetries ?? 3);
  const graphs = subgraphsOf(definition);
  const bounds = new Map<string, StepPathBound>();
  const step = (nodeId: string, where: string, path: string): void => {
    const known = bounds.get(nodeId);
    if (!known) bounds.set(nodeId, { nodeId, where, longestPath: path });
    else if (path.length > known.longestPath.length) known.longestPath = path;
  };
  // The runner's paths (#flow, #node, #parallel, #choice, #loop above): `where` is the definition's pointer.
  const flow = (nodes: Flow, where: string, base: string): void =>
    nodes.forEach((n, i) => node(n, `${where}/${i}`, `${base}/${i}`));
  const node = (n: GraphNode, where: string, path: string): void => {
    switch (n.kind) {
      case "agent":
      case "step":
        step(n.id, where, path);
        return;
      case "graph": {
        const target = graphs[n.graph] ?? (n.graph === definition.name ? definition.root : undefined);
        if (target) flow(target, n.graph in graphs ? `/graphs/${n.graph}` : "/root", path);
        return;
      }
      case "parallel":
        n.branches.forEach((b, j) => flow(b, `${where}/branches/${j}`, `${path}/b${j}`));
        return;
      case "choice":
        if (n.evaluator) step(n.evaluator.id, `${where}/evaluator`, `${path}/eval`);
        else step(n.id, where, `${path}/key`);
        n.arms.forEach((a, k) => flow(a.flow, `${where}/arms/${k}/flow`, `${path}/arm${k}`));
        if (n.otherwise) flow(n.otherwise, `${where}/otherwise`, `${path}/else`);
        return;
      case "loop": {
        const last = (n.maxIterations ?? 1) * rounds;
        flow(n.body, `${where}/body`, `${path}/${last}/body`);
        if (n.until) flow(n.until, `${where}/until`, `${path}/${last}/until`);
        return;
      }
    }
  };
  flow(definition.root, "/root", "");
  return [...bounds.values()];
}

/** Builds an agent step's prompt from the bag: `prompt`, then `output` and `feedback` when present. */
export function buildAgentPrompt(ctx: HarnessContext): string {
  const parts = [ctx.getString("prompt") ?? ""];
  const output = ctx.getString("output");
  if (output !== null) parts.push(`Previous output:\n${output}`);
  const feedback = ctx.getString("feedback");
  if (feedback !== null) parts.push(`Feedback:\n${feedback}`);
  return parts.join("\n\n");
}

/** A final text usable as a choice label: one line of at most {@link MAX_LABEL_LENGTH} characters after trimming. */
export function labelFromText(text: unknown): string | null {
  if (typeof text !== "string") return null;
  const t = text.trim();
  return t.length > 0 && t.length <= MAX_LABEL_LENGTH && !/[\r\n]/.test(t) ? t : null;
}

function errorInfo(e: unknown): { code: string; message: string } {
  if (e instanceof GraphError) return { code: e.code, message: e.message };
  if (e instanceof Error) return { code: "STEP_FAILED", message: e.message };
  return { code: "STEP_FAILED", message: String(e) };
}

function isCancellation(e: unknown): boolean {
  return e instanceof GraphError && (e.code === "BRANCH_CANCELLED" || e.code === "RUN_CANCELLED");
}

/** Settles with `work`, or rejects with the signal's reason as soon as it aborts (executors may ignore signals). */
async function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) throw signal.reason;
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
  });
  // The loser of the race must not surface as an unhandled rejection.
  work.catch(() => undefined);
  aborted.catch(() => undefined);
  try {
    return await Promise.race([work, aborted]);
  } finally {
    if (onAbort) signal.removeEventListener("abort", onAbort);
  }
}

type StepNode = AgentNode | CustomStepNode;

interface GuardedStep {
  nodeId: string;
  path: string;
  ctx: HarnessContext;
  scope: Scope;
  /** Writes to the overlay; throws to fail the step. */
  work: (overlay: HarnessContext, attempt: number) => Promise<void>;
  /** Checks or completes the delta before it is recorded; throwing fails the step. */
  finish?: (delta: BagDelta) => void;
  /** Keys an `answer` decision writes the text to. */
  answerKeys: string[];
}

class RunExecution {
  public readonly runId: string;
  public readonly root: HarnessContext;
  public result!: Promise<RunResult>;
  readonly #def: GraphDefinition;
  readonly #options: GraphRunnerOptions;
  readonly #store: CheckpointStore;
  readonly #recorded: Map<string, StepRecord>;
  readonly #conflicts = new Map<string, MergeConflict>();
  readonly #controller = new AbortController();

  public constructor(args: {
    runId: string;
    definition: GraphDefinition;
    options: GraphRunnerOptions;
    store: CheckpointStore;
    input: Record<string, unknown>;
    records: StepRecord[];
  }) {
    this.runId = args.runId;
    this.#def = args.definition;
    this.#options = args.options;
    this.#store = args.store;
    this.#recorded = new Map(args.records.map((r) => [r.path, r]));
    this.root = new HarnessContext({
      initial: args.input,
      redact: maskKeys(args.definition.secretKeys ?? [], args.options.redact),
    });
  }

  public emit(event: Omit<GraphEvent, "runId" | "graph" | "time">): void {
    try {
      this.#options.onEvent?.({ ...event, runId: this.runId, graph: this.#def.name, time: new Date().toISOString() });
    } catch {
      // A faulty listener must not change how a run ends; events are observability only.
    }
  }

  public abort(reason: GraphError): void {
    this.#controller.abort(reason);
  }

  public async execute(): Promise<RunResult> {
    let status: RunResult["status"] = "succeeded";
    let error: { code: string; message: string } | undefined;
    try {
      if (this.#controller.signal.aborted) throw this.#controller.signal.reason;
      await this.#flow(this.#def.root, this.root, { iteration: 0, signal: this.#controller.signal }, "");
    } catch (e) {
      error = errorInfo(e);
      status =
        e instanceof RunAborted
          ? "aborted"
          : e instanceof GraphError && e.code === "RUN_CANCELLED"
            ? "cancelled"
            : "failed";
    }
    const bag = this.root.toJSON();
    const conflicts = [...this.#conflicts.values()];
    const result: RunResult = { runId: this.runId, status, bag, output: bag.output ?? null, conflicts };
    if (error) result.error = error;
    try {
      await this.#store.finishRun(this.runId, { status, conflicts, result: bag, ...(error ? { error } : {}) });
    } catch (e) {
      result.status = "failed";
      result.error = {
        code: "STORE_FAILED",
        message: `the run ended but its end could not be stored: ${errorInfo(e).message}`,
      };
    }
    this.emit({ type: "run_finished", status: result.status, ...(result.error ? { error: result.error } : {}) });
    return result;
  }

  async #flow(flow: Flow, ctx: HarnessContext, scope: Scope, base: string): Promise<void> {
    for (let i = 0; i < flow.length; i++) {
      await this.#node(flow[i] as GraphNode, ctx, scope, `${base}/${i}`);
    }
  }

  async #node(node: GraphNode, ctx: HarnessContext, scope: Scope, path: string): Promise<void> {
    switch (node.kind) {
      case "agent":
      case "step":
        await this.#step(node, ctx, scope, path);
        return;
      case "graph": {
        const flow = subgraphsOf(this.#def)[node.graph] ?? (node.graph === this.#def.name ? this.#def.root : undefined);
        if (!flow)
          throw new GraphError(
            "INVALID_DEFINITION",
            `subgraph "${node.graph}" is not defined; publish a definition that includes it`,
          );
        await this.#flow(flow, ctx, scope, path);
        return;
      }
      case "parallel":
        await this.#parallel(node, ctx, scope, path);
        return;
      case "choice":
        await this.#choice(node, ctx, scope, path);
        return;
      case "loop":
        await this.#loop(node, ctx, scope, path);
        return;
    }
  }

  #step(
    node: StepNode,
    ctx: HarnessContext,
    scope: Scope,
    path: string,
    finish?: (delta: BagDelta) => void,
  ): Promise<StepRecord> {
    return this.#guarded({
      nodeId: node.id,
      path,
      ctx,
      scope,
      ...(finish ? { finish } : {}),
      answerKeys: node.kind === "agent" ? ["output", node.agent] : ["output"],
      work: async (overlay, attempt) => {
        const common = {
          runId: this.runId,
          stepId: node.id,
          path,
          iteration: scope.iteration,
          idempotencyKey: `${this.runId}${path}`,
          attempt,
          signal: scope.signal,
        };
        if (node.kind === "agent") {
          const { text } = await untilAborted(
            this.#options.executor.runAgent({ ...common, agent: node.agent, prompt: buildAgentPrompt(overlay) }),
            scope.signal,
          );
          overlay.set("output", text);
          overlay.set(node.agent, text);
        } else {
          // A step that never returns must not hold the run: at its deadline its signal aborts (so the executor
          // stops its work) and the attempt fails like any other, for the manager to retry or skip.
          const deadline = this.#stepDeadline(node, scope.signal);
          try {
            const res = await untilAborted(
              this.#options.executor.runCustomStep({
                ...common,
                signal: deadline.signal,
                name: node.step,
                ...(node.module !== undefined ? { module: node.module } : {}),
                ...(node.export !== undefined ? { export: node.export } : {}),
                ctx: overlay,
              }),
              deadline.signal,
            );
            for (const [k, v] of Object.entries(res?.set ?? {})) overlay.set(k, v);
          } finally {
            deadline.clear();
          }
        }
      },
    });
  }

  /** A custom step attempt's signal: the scope's, also aborted with `STEP_TIMED_OUT` at the step's timeout. */
  #stepDeadline(node: CustomStepNode, scope: AbortSignal): { signal: AbortSignal; clear: () => void } {
    const fallback = this.#options.customStepTimeoutMs;
    const [ms, label] =
      node.timeout !== undefined
        ? [durationMs(node.timeout) as number, node.timeout]
        : fallback !== undefined
          ? [fallback, `${fallback} ms`]
          : [durationMs(DEFAULT_CUSTOM_STEP_TIMEOUT) as number, DEFAULT_CUSTOM_STEP_TIMEOUT];
    const own = new AbortController();
    const timer = setTimeout(() => {
      own.abort(
        new GraphError(
          "STEP_TIMED_OUT",
          `custom step ${node.step} (${node.id}) ran past its timeout of ${label} and was told to stop; make it finish sooner, or give its node a longer timeout in the graph definition (for example timeout: 30m, at most ${MAX_CUSTOM_STEP_TIMEOUT})`,
        ),
      );
    }, ms);
    // Only a deadline: the step's work keeps the process alive, not this (a halted run's step never settles).
    timer.unref();
    return { signal: AbortSignal.any([scope, own.signal]), clear: () => clearTimeout(timer) };
  }

  /** Runs one unit of work exactly-once-recorded, consulting the manager on failure. */
  async #guarded(g: GuardedStep): Promise<StepRecord> {
    const recorded = this.#recorded.get(g.path);
    if (recorded) {
      g.ctx.apply(recorded.delta);
      this.emit({ type: "step_replayed", nodeId: g.nodeId, path: g.path, iteration: g.scope.iteration });
      return recorded;
    }
    const retries = this.#options.maxRetries ?? 3;
    // Each retry the manager granted is recorded (#recordRetry), so a restart goes on counting from them: a run
    // restarted after every failure would otherwise get maxRetries more each time.
    let attempt = 1;
    while (this.#recorded.has(retryPath(g.path, attempt))) attempt++;
    for (; ; attempt++) {
      if (g.scope.signal.aborted) throw g.scope.signal.reason;
      this.emit({ type: "step_started", nodeId: g.nodeId, path: g.path, iteration: g.scope.iteration, attempt });
      const span = this.#options.tracer?.startSpan(`graph.step ${g.nodeId}`, {
        attributes: {
          "oz0.run_id": this.runId,
          "oz0.graph": this.#def.name,
          "oz0.node_id": g.nodeId,
          "oz0.step_path": g.path,
          "oz0.iteration": g.scope.iteration,
          "oz0.attempt": attempt,
        },
      });
      const overlay = g.ctx.overlay();
      let failure: unknown;
      try {
        await g.work(overlay, attempt);
        const delta = overlay.writes();
        g.finish?.(delta);
        // Checked before it is recorded: the record is JSON, and a resumed run must read back what this run saw.
        const notJson = notJsonBag(delta);
        if (notJson)
          throw new GraphError("BAG_NOT_JSON", `it set a value JSON cannot keep: ${notJson}; ${JSON_DATA_HINT}`);
        const stored = await this.#record(g, "ok", delta);
        span?.end();
        return stored;
      } catch (e) {
        span?.setStatus({ code: SPAN_STATUS_ERROR, message: errorInfo(e).message });
        span?.end();
        if (g.scope.signal.aborted) throw g.scope.signal.reason;
        failure = e;
      }
      const error = errorInfo(failure);
      this.emit({ type: "step_failed", nodeId: g.nodeId, path: g.path, iteration: g.scope.iteration, attempt, error });
      const manager = this.#options.manager;
      if (!manager) {
        throw new GraphError(
          "STEP_FAILED",
          `step ${g.nodeId} at ${g.path} failed: ${error.message}. Fix the cause and resume the run, or configure a managerAgent to retry or skip failed steps`,
          { cause: failure },
        );
      }
      const decision = await this.#decide(
        {
          kind: "step_error",
          runId: this.runId,
          graph: this.#def.name,
          nodeId: g.nodeId,
          path: g.path,
          iteration: g.scope.iteration,
          attempt,
          error,
          snapshot: g.ctx.snapshot(),
        },
        g.scope.signal,
      );
      switch (decision.action) {
        case "retry":
          if (attempt > retries) {
            throw new GraphError(
              "STEP_FAILED",
              `step ${g.nodeId} at ${g.path} failed ${attempt} times: ${error.message}. The manager may retry at most ${retries} times; fix the cause and resume the run`,
              { cause: failure },
            );
          }
          await this.#recordRetry(g, attempt, decision);
          continue;
        case "skip":
          return this.#record(g, "skipped", {});
        case "answer": {
          const delta: BagDelta = Object.fromEntries(g.answerKeys.map((k) => [k, decision.text]));
          try {
            g.finish?.(delta);
          } catch (e) {
            throw new GraphError(
              "STEP_FAILED",
              `the manager's answer for step ${g.nodeId} at ${g.path} is not usable: ${errorInfo(e).message}`,
              { cause: e },
            );
          }
          return this.#record(g, "answered", delta);
        }
        case "abort":
          throw new RunAborted(decision.reason ?? `step ${g.nodeId} at ${g.path} failed: ${error.message}`);
      }
    }
  }

  /** A granted retry of a failed step, recorded beside the step (`<path>/retry<attempt>`) so a resumed run counts it. */
  async #recordRetry(g: GuardedStep, attempt: number, decision: ManagerDecision): Promise<void> {
    const path = retryPath(g.path, attempt);
    const stored = await this.#store.recordStep(this.runId, {
      path,
      nodeId: g.nodeId,
      iteration: g.scope.iteration,
      outcome: "control",
      delta: {},
      decision,
    });
    this.#recorded.set(path, stored);
  }

  async #record(g: GuardedStep, outcome: StepOutcome, delta: BagDelta): Promise<StepRecord> {
    const stored = await this.#store.recordStep(this.runId, {
      path: g.path,
      nodeId: g.nodeId,
      iteration: g.scope.iteration,
      outcome,
      delta,
    });
    this.#recorded.set(g.path, stored);
    g.ctx.apply(stored.delta);
    this.emit({
      type: "step_finished",
      nodeId: g.nodeId,
      path: g.path,
      iteration: g.scope.iteration,
      writes: Object.keys(stored.delta),
    });
    return stored;
  }

  /**
   * Asks the manager, for as long as `signal` (the step's or loop's scope) is not aborted: a cancel while the
   * manager decides ends the run at once, and the manager is told through the same signal to stop deciding.
   */
  async #decide(event: ControlEvent, signal: AbortSignal): Promise<ManagerDecision> {
    let decision: ManagerDecision;
    try {
      decision = await untilAborted((this.#options.manager as GraphManager).decide(event, { signal }), signal);
    } catch (e) {
      if (signal.aborted) throw signal.reason;
      throw new GraphError(
        "MANAGER_FAILED",
        `the manager failed to decide a ${event.kind} event: ${errorInfo(e).message}`,
        { cause: e },
      );
    }
    this.emit({
      type: "control",
      ...("nodeId" in event ? { nodeId: event.nodeId, path: event.path, iteration: event.iteration } : {}),
      control: { kind: event.kind, decision },
    });
    return decision;
  }

  async #parallel(node: ParallelNode, ctx: HarnessContext, scope: Scope, path: string): Promise<void> {
    const failFast = node.failFast !== false;
    const controllers = node.branches.map(() => new AbortController());
    const overlays = node.branches.map(() => ctx.overlay());
    const onParentAbort = (): void => controllers.forEach((c) => c.abort(scope.signal.reason));
    scope.signal.addEventListener("abort", onParentAbort, { once: true });
    let firstError: { error: unknown } | undefined;
    const settled = await Promise.allSettled(
      node.branches.map(async (flow, j) => {
        try {
          await this.#flow(
            flow,
            overlays[j] as HarnessContext,
            { ...scope, signal: (controllers[j] as AbortController).signal },
            `${path}/b${j}`,
          );
        } catch (e) {
          if (!firstError && !isCancellation(e)) {
            firstError = { error: e };
            this.emit({
              type: "control",
              nodeId: node.id,
              path: `${path}/b${j}`,
              iteration: scope.iteration,
              control: {
                kind: "branch_failed",
                detail: `branch ${j} failed: ${errorInfo(e).message}${failFast ? "; cancelling its siblings" : ""}`,
              },
            });
            if (failFast) {
              controllers.forEach((c, k) => {
                if (k !== j)
                  c.abort(
                    new GraphError(
                      "BRANCH_CANCELLED",
                      `branch ${k} of ${node.id} was cancelled because branch ${j} failed`,
                    ),
                  );
              });
            }
          }
          throw e;
        }
      }),
    );
    scope.signal.removeEventListener("abort", onParentAbort);
    if (scope.signal.aborted) throw scope.signal.reason;
    if (firstError) throw (firstError as { error: unknown }).error;
    const rejected = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (rejected) throw rejected.reason;

    // Merge in declaration order: a later-declared branch's value wins, and
    // every key written by more than one branch is reported on the run.
    const writers = new Map<string, number[]>();
    overlays.forEach((o, j) => {
      const writes = o.writes();
      for (const k of Object.keys(writes)) writers.set(k, [...(writers.get(k) ?? []), j]);
      ctx.apply(writes);
    });
    for (const [key, branches] of writers) {
      if (branches.length < 2) continue;
      const conflict: MergeConflict = {
        path,
        nodeId: node.id,
        key,
        branches,
        winner: branches[branches.length - 1] as number,
      };
      const id = `${path}\u0000${key}`;
      if (!this.#conflicts.has(id)) {
        this.#conflicts.set(id, conflict);
        this.emit({ type: "conflict", nodeId: node.id, path, iteration: scope.iteration, conflict });
      }
    }
  }

  async #choice(node: ChoiceNode, ctx: HarnessContext, scope: Scope, path: string): Promise<void> {
    const armFor = (label: string): number | "otherwise" | null => {
      const i = node.arms.findIndex((a) => a.label === label);
      return i >= 0 ? i : node.otherwise ? "otherwise" : null;
    };
    const noArm = (label: string): GraphError =>
      new GraphError(
        "CHOICE_NO_ARM",
        `choice ${node.id} got label "${label}", which matches no arm (${node.arms.map((a) => a.label).join(", ")}) and there is no otherwise; add .when("${label}", step) or .otherwise(step)`,
      );
    let record: StepRecord;
    if (node.evaluator) {
      record = await this.#step(node.evaluator, ctx, scope, `${path}/eval`, (delta) => {
        let label = typeof delta.choice === "string" ? delta.choice : null;
        if (label === null) {
          label = labelFromText(delta.output);
          if (label === null) {
            throw new GraphError(
              "CHOICE_NO_LABEL",
              `evaluator ${node.evaluator?.id} neither set "choice" nor replied with a short label (one line, at most ${MAX_LABEL_LENGTH} characters); make it reply with just the label`,
            );
          }
          delta.choice = label;
        }
        if (armFor(label) === null) throw noArm(label);
      });
    } else {
      record = await this.#guarded({
        nodeId: node.id,
        path: `${path}/key`,
        ctx,
        scope,
        answerKeys: ["output"],
        work: async (overlay) => {
          const label = overlay.getString(node.key) ?? "";
          if (armFor(label) === null) throw noArm(label);
        },
      });
    }
    if (record.outcome === "skipped" || record.outcome === "answered") return;
    const label = ctx.getString(node.key) ?? "";
    const arm = armFor(label);
    if (arm === "otherwise") await this.#flow(node.otherwise as Flow, ctx, scope, `${path}/else`);
    else if (arm !== null) await this.#flow((node.arms[arm] as { flow: Flow }).flow, ctx, scope, `${path}/arm${arm}`);
  }

  async #loop(node: LoopNode, ctx: HarnessContext, scope: Scope, path: string): Promise<void> {
    const step = node.maxIterations as number;
    const until = node.until as Flow;
    const retries = this.#options.maxRetries ?? 3;
    let limit = step;
    // Retries the manager granted at maxIterations. Each is a recorded decision
    // that a resumed run replays through this loop, so a restart keeps the count.
    let extensions = 0;
    const badVerdict = (v: unknown): GraphError =>
      new GraphError(
        "LOOP_BAD_CHOICE",
        `the terminal of loop ${node.id} set choice to ${JSON.stringify(v)}; it must set "again" or "break"`,
      );
    for (let iteration = 1; ; iteration++) {
      if (iteration > limit) {
        const decision = await this.#maxIterations(node, ctx, scope, path, limit);
        if (decision.action === "retry") {
          if (++extensions > retries) {
            throw new GraphError(
              "STEP_FAILED",
              `loop ${node.id} at ${path} hit maxIterations (${step}) and the manager's retries ran out: it asked for more iterations after iteration ${limit}, and may grant ${step} more at most ${retries} times (maxRetries). Raise the loop's maxIterations for new runs, or, running the graph with @oz0/graph yourself, GraphRunnerOptions.maxRetries and resume the run (the orchestrator runs graphs with 3)`,
            );
          }
          limit += step;
        } else if (decision.action === "abort")
          throw new RunAborted(decision.reason ?? `loop ${node.id} reached maxIterations`);
        else return;
      }
      const inner: Scope = { ...scope, iteration };
      await this.#flow(node.body, ctx, inner, `${path}/${iteration}/body`);
      const only = until.length === 1 ? until[0] : undefined;
      if (only && (only.kind === "agent" || only.kind === "step")) {
        const record = await this.#step(only, ctx, inner, `${path}/${iteration}/until/0`, (delta) => {
          if (only.kind === "agent" && delta.choice === undefined) {
            // An agent cannot set keys, so its reply carries the verdict on the
            // first line and anything after it is feedback for the next round.
            const text = typeof delta.output === "string" ? delta.output.trim() : "";
            const [first = "", ...rest] = text.split(/\r?\n/);
            const verdict = first.trim().toLowerCase();
            if (verdict === "again" || verdict === "break") {
              delta.choice = verdict;
              const feedback = rest.join("\n").trim();
              if (feedback !== "") delta.feedback = feedback;
            }
          }
          if (delta.choice !== "again" && delta.choice !== "break") throw badVerdict(delta.choice ?? null);
        });
        if (record.outcome === "skipped") return;
      } else {
        await this.#flow(until, ctx, inner, `${path}/${iteration}/until`);
        const verdict = ctx.get("choice");
        if (verdict !== "again" && verdict !== "break") throw badVerdict(verdict);
      }
      if (ctx.get("choice") === "break") return;
    }
  }

  /** maxIterations reached: a control event whose decision is recorded, so a resumed run takes the same path. */
  async #maxIterations(
    node: LoopNode,
    ctx: HarnessContext,
    scope: Scope,
    path: string,
    limit: number,
  ): Promise<ManagerDecision> {
    const at = `${path}/max${limit}`;
    const recorded = this.#recorded.get(at);
    if (recorded) {
      ctx.apply(recorded.delta);
      return recorded.decision as ManagerDecision;
    }
    let decision: ManagerDecision;
    if (this.#options.manager) {
      decision = await this.#decide(
        {
          kind: "max_iterations",
          runId: this.runId,
          graph: this.#def.name,
          nodeId: node.id,
          path,
          iteration: limit,
          maxIterations: limit,
          snapshot: ctx.snapshot(),
        },
        scope.signal,
      );
    } else {
      // Without a manager the loop just ends: the bag keeps the last round's work.
      decision = { action: "skip" };
      this.emit({
        type: "control",
        nodeId: node.id,
        path,
        iteration: limit,
        control: { kind: "max_iterations", decision },
      });
    }
    const delta: BagDelta = decision.action === "answer" ? { output: decision.text } : {};
    const stored = await this.#store.recordStep(this.runId, {
      path: at,
      nodeId: node.id,
      iteration: limit,
      outcome: "control",
      delta,
      decision,
    });
    this.#recorded.set(at, stored);
    ctx.apply(stored.delta);
    return stored.decision as ManagerDecision;
  }
}
