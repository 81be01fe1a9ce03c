/**
 * @oz0/graph: declare graph harnesses (deterministic workflows of agents and
 * steps), validate and serialise them, and run them durably.
 */
export {
  DEFAULT_CUSTOM_STEP_TIMEOUT,
  GRAPH_DEFINITION_FORMAT,
  MAX_CUSTOM_STEP_TIMEOUT,
  durationMs,
  slugify,
  type AgentNode,
  type ChoiceArm,
  type ChoiceNode,
  type CustomStepNode,
  type Flow,
  type GraphDefinition,
  type GraphNode,
  type GraphRefNode,
  type LoopNode,
  type ParallelNode,
  type TriggerDefinition,
} from "./definition.js";
export {
  MAX_DEFINITION_DEPTH,
  definitionToYaml,
  graphDefinitionSchema,
  parseDefinition,
  parseDefinitionYaml,
} from "./definition-schema.js";
export { canonicalJson, definitionHash } from "./definition-hash.js";
export { GraphError, GraphValidationError, type DefinitionProblem, type GraphErrorCode } from "./errors.js";
export {
  AgentStep,
  ApiTrigger,
  Chain,
  ChoiceBuilder,
  Flowable,
  Graph,
  Harness,
  LoopBuilder,
  Step,
  agent,
  type AgentStepOptions,
  type GraphOptions,
  type HarnessProps,
  type IStep,
  type ParallelOptions,
  type StepLike,
  type StepOptions,
  type StepRunInfo,
  type Trigger,
} from "./graph-builder.js";
export {
  InProcessExecutor,
  type AgentFunction,
  type AgentRequest,
  type CustomStepRequest,
  type CustomStepResult,
  type GraphExecutor,
  type InProcessExecutorOptions,
  type StepRequestBase,
} from "./graph-executor.js";
export {
  decisionFromToolCall,
  managerTools,
  type ControlEvent,
  type DecideOptions,
  type GraphManager,
  type ManagerDecision,
} from "./graph-manager.js";
export {
  HarnessContext,
  maskKeys,
  redactNothing,
  SECRET_MASK,
  type BagDelta,
  type HarnessContextOptions,
  type RedactFn,
} from "./harness-context.js";
export {
  InMemoryCheckpointStore,
  type CheckpointStore,
  type MergeConflict,
  type RunEnd,
  type RunRecord,
  type RunStatus,
  type StepOutcome,
  type StepRecord,
  type StoredRun,
} from "./checkpoint-store.js";
export {
  GraphRunner,
  MAX_LABEL_LENGTH,
  buildAgentPrompt,
  labelFromText,
  resumeStoredRuns,
  stepPathBounds,
  type GraphEvent,
  type GraphRunnerOptions,
  type GraphSpan,
  type GraphTracer,
  type InvokeOutcome,
  type RunHandle,
  type RunResult,
  type StartOptions,
  type StepPathBound,
} from "./graph-runner.js";
export {
  MAX_GRAPH_NODES,
  MAX_SUBGRAPH_NESTING,
  assertValidDefinition,
  validateDefinition,
  type ValidateOptions,
  type ValidationResult,
} from "./validate-definition.js";
export { SqliteCheckpointStore, type SqliteCheckpointStoreOptions } from "./sqlite-checkpoint-store.js";
export { renderGraph, toMermaid } from "./render-graph.js";
