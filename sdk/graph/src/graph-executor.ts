/**
 * How the engine runs the work of a step. The engine decides order and
 * durability; an executor runs one agent or custom step. The orchestrator
 * supplies one that runs agents as harness sessions in the sandbox and custom
 * steps there by name; {@link InProcessExecutor} runs both in this process,
 * for tests and local development.
 */
import { GraphError } from "./errors.js";
import { Step, type StepRunInfo } from "./graph-builder.js";
import type { HarnessContext } from "./harness-context.js";

/** Where a step runs: the same for agent and custom steps. */
export interface StepRequestBase {
  runId: string;
  /** Node id, e.g. `agent:writer` (the same in every loop iteration). */
  stepId: string;
  /** Unique step path within the run (position, iteration, branch). */
  path: string;
  /** Innermost loop iteration, 0 outside loops. */
  iteration: number;
  /** `<runId><path>`: stable across re-execution after a crash. */
  idempotencyKey: string;
  /**
   * 1, then one more per retry the manager granted this step. Counted from the
   * recorded retries, so a resumed run goes on where it was: attempts before
   * this one ended in failures the manager already decided.
   */
  attempt: number;
  /**
   * Aborted on cancel or when a sibling branch failed, and for a custom step at its timeout (the reason is then a
   * `STEP_TIMED_OUT` GraphError).
   */
  signal: AbortSignal;
}

/** What {@link GraphExecutor.runAgent} receives. */
export interface AgentRequest extends StepRequestBase {
  /** Agent name from the definition; the orchestrator resolves it to the pinned version. */
  agent: string;
  /** Built from the bag's `prompt`, plus `output` and `feedback` when present. */
  prompt: string;
}

/** What {@link GraphExecutor.runCustomStep} receives. */
export interface CustomStepRequest extends StepRequestBase {
  /** Step name, as passed to `super(name)`. */
  name: string;
  /** Module that exports the step class, when the definition names one. */
  module?: string;
  /** Export name in `module`. */
  export?: string;
  /**
   * The step's view of the bag. An in-process executor hands it to
   * `Step.run`; a remote one sends `ctx.toJSON()` and returns the writes.
   */
  ctx: HarnessContext;
}

/** The writes a remote step made, when it could not write `ctx` directly. */
export interface CustomStepResult {
  set?: Record<string, unknown>;
}

/** Runs agents and custom steps for the engine. */
export interface GraphExecutor {
  runAgent(request: AgentRequest): Promise<{ text: string }>;
  runCustomStep(request: CustomStepRequest): Promise<CustomStepResult | void>;
}

/** A deterministic stand-in for an agent, used by {@link InProcessExecutor}. */
export type AgentFunction = (request: AgentRequest) => string | Promise<string>;

/** Options for {@link InProcessExecutor}. */
export interface InProcessExecutorOptions {
  /** Agent name → function producing its final text. */
  agents?: Record<string, AgentFunction>;
  /** Custom step instances, found by `name`. */
  steps?: Step[];
  /**
   * Load steps not in `steps` by importing `module` and constructing `export`
   * (default true). Relative specifiers resolve against `baseUrl`.
   */
  loadModules?: boolean;
  /** Base for relative module specifiers (a `file:` URL). */
  baseUrl?: string;
}

/** Runs agent functions and `Step` instances in this process. Not a sandbox: trusted code only. */
export class InProcessExecutor implements GraphExecutor {
  readonly #agents: Record<string, AgentFunction>;
  readonly #steps = new Map<string, Step>();
  readonly #options: InProcessExecutorOptions;

  public constructor(options: InProcessExecutorOptions = {}) {
    this.#agents = options.agents ?? {};
    for (const s of options.steps ?? []) this.#steps.set(s.name, s);
    this.#options = options;
  }

  public async runAgent(request: AgentRequest): Promise<{ text: string }> {
    const fn = this.#agents[request.agent];
    if (!fn) {
      throw new GraphError(
        "UNKNOWN_STEP",
        `agent "${request.agent}" is not registered with this InProcessExecutor; pass it in options.agents`,
      );
    }
    return { text: await fn(request) };
  }

  public async runCustomStep(request: CustomStepRequest): Promise<void> {
    const step = await this.#resolve(request);
    const info: StepRunInfo = {
      runId: request.runId,
      idempotencyKey: request.idempotencyKey,
      iteration: request.iteration,
      signal: request.signal,
    };
    await step.run(request.ctx, info);
  }

  async #resolve(request: CustomStepRequest): Promise<Step> {
    const known = this.#steps.get(request.name);
    if (known) return known;
    if (request.module !== undefined && this.#options.loadModules !== false) {
      const specifier =
        request.module.startsWith(".") && this.#options.baseUrl
          ? new URL(request.module, this.#options.baseUrl).href
          : request.module;
      const mod = (await import(specifier)) as Record<string, unknown>;
      const ctor = mod[request.export ?? "default"];
      if (typeof ctor === "function") {
        const step = new (ctor as new () => unknown)();
        if (step instanceof Step || (typeof step === "object" && step !== null && "run" in step)) {
          this.#steps.set(request.name, step as Step);
          return step as Step;
        }
      }
      throw new GraphError(
        "UNKNOWN_STEP",
        `module "${request.module}" has no step class exported as "${request.export ?? "default"}"; check the export name`,
      );
    }
    throw new GraphError(
      "UNKNOWN_STEP",
      `custom step "${request.name}" is not registered; pass an instance in options.steps or declare its module`,
    );
  }
}
