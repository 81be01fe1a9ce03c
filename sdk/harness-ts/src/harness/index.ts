// @oz0/harness: the side a harness author uses.
export { openSession, HarnessSession } from "./harness-session.js";
export type {
  HarnessCapabilities,
  OpenSessionOptions,
  PermissionDecision,
  PermissionRequestInit,
  ResultInit,
  RuntimeToolOutcome,
  TextOptions,
  ToolCallInit,
  ToolResultInit,
  UsageInit,
} from "./harness-session.js";
export { runHarness } from "./run-harness.js";
export { exitProcess, installExitByExecve } from "./exit-process.js";
export type { HarnessWorkResult, RunHarnessOptions } from "./run-harness.js";
export { HarnessSessionError } from "./harness-errors.js";
export type { HarnessSessionErrorCode } from "./harness-errors.js";
export { modelEndpointFrom } from "./model-endpoint.js";
export type { ModelEndpoint } from "./model-endpoint.js";
export { traceContextFrom } from "./trace-context.js";
export type { TraceContext } from "./trace-context.js";
export { sessionContext, sessionTracer } from "./session-tracer.js";
export { realTarget } from "./working-dir-paths.js";
export { proxyRefusal } from "./proxy-refusals.js";
export { PermissionAnswer_Outcome, StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
