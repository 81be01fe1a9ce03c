// @oz0/harness/host: the runtime side of the harness protocol.
export { startHostSession, DEFAULT_GRACE_MS, DEFAULT_MAX_LINE_BYTES } from "./host-session.js";
export type {
  HostSession,
  HostSessionOptions,
  PermissionAnswerInit,
  RuntimeToolResultInit,
  SessionCounts,
  SessionOutcome,
  SessionStatus,
} from "./host-session.js";
export { HostSessionError, UNTRUSTED_EVENT_CODES } from "./host-errors.js";
export type { HostSessionErrorCode, SessionError, SessionErrorCode } from "./host-errors.js";
export { killAllHarnessGroups, processGroupLauncher, signalGroup } from "./process-launcher.js";
export type { HarnessLauncher, LaunchedHarness, LaunchSpec, PipedChildProcess } from "./process-launcher.js";
export { commandIsExecutable, findCommand } from "./command-lookup.js";
export {
  chooseContainment,
  CONTAINMENT_MECHANISMS,
  containmentUnavailable,
  ContainmentUnavailableError,
} from "./session-containment.js";
export type {
  ContainerOptions,
  Containment,
  ContainmentMechanism,
  ContainmentSetting,
  SessionContainer,
} from "./session-containment.js";
export { describeProcess } from "./process-table.js";
export { LINUX_SYSCALLS } from "./linux-syscalls.js";
export { SYSTEM_PROGRAM_FOLDERS } from "./system-program-folders.js";
export {
  escapeRefusedCharacters,
  MAX_REQUEST_ID_CHARS,
  REQUEST_ID_RULES,
  requestIdProblem,
} from "../protocol/request-id-rules.js";
export type { SessionProcess } from "./process-table.js";
export { LineSplitter } from "../protocol/line-framing.js";
export type { LineSplitterOptions } from "../protocol/line-framing.js";
export { decodeLine, encodeLine } from "../protocol/message-codec.js";
export { decodeEventLine } from "../protocol/event-decoding.js";
export type { LineDecodeFailure, LineDecodeResult } from "../protocol/message-codec.js";
export {
  buildSessionEnvironment,
  defaultSessionPath,
  QUIET_HARNESS_ENV,
  stateSubdirectories,
} from "./session-environment.js";
export type { SessionEnvironmentOptions } from "./session-environment.js";
