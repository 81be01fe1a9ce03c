// What can go wrong in a session, as codes a caller can switch on.

/**
 * A harness misbehaviour (or a session end the runtime forced) the host
 * detected. Each code has one meaning; the message says what happened.
 */
export type SessionErrorCode =
  /** The command could not be started (not found, not executable, bad cwd). */
  | "spawn_failed"
  /** A stdout line is not JSON. */
  | "invalid_json"
  /** A stdout line is JSON but not a valid SessionEvent (wrong field types, not an object). */
  | "invalid_event"
  /** A stdout line is longer than `maxLineBytes`. */
  | "line_too_long"
  /** A SessionEvent with no event set, or only an event kind this version does not know. */
  | "unknown_event_kind"
  /** The first event is not `started`. */
  | "first_event_not_started"
  /** `started` carries a protocol version the host does not speak. */
  | "unsupported_protocol_version"
  /** A second `result`. */
  | "duplicate_result"
  /** An event other than `result` after the result. */
  | "event_after_result"
  /** A permission request or runtime tool call reuses an id still pending or already used, a permission request a value an earlier one used as its id or call id, or (with permissions on) a second tool result the call id of an earlier one. */
  | "duplicate_request_id"
  /** The harness exited without writing a result. */
  | "no_result"
  /** The harness was still running after SIGTERM and the grace period, and was killed. */
  | "ignored_sigterm"
  /** The harness wrote its result but did not exit within the grace period, and was stopped. */
  | "did_not_exit"
  /** The session's deadline passed. */
  | "deadline_exceeded"
  /** The caller's `onEvent` threw; the session was stopped. */
  | "event_callback_failed"
  /** The harness's stdout could not be read (its file not opened, as when the node is out of descriptors); the harness was stopped. */
  | "output_unreadable";

/**
 * The codes of a harness whose events could not be read, or were read and could not be trusted (a second tool result
 * under one call id, a request id used twice), as against how it ended (`no_result`, `did_not_exit`). With
 * permissions on, every tool call of such a session can no longer be matched to the answer that allowed it, so what
 * it changed cannot be vouched for: a runtime withholds it (the sandbox collects no artifacts).
 */
export const UNTRUSTED_EVENT_CODES: ReadonlySet<SessionErrorCode> = new Set<SessionErrorCode>([
  "invalid_json",
  "invalid_event",
  "line_too_long",
  "unknown_event_kind",
  "first_event_not_started",
  "unsupported_protocol_version",
  "duplicate_result",
  "event_after_result",
  "duplicate_request_id",
]);

/** The first problem a session met, as recorded in its outcome. */
export interface SessionError {
  code: SessionErrorCode;
  /** What happened, for people; never contains the request's secrets. */
  message: string;
}

/** Codes of {@link HostSessionError}: misuse of a {@link HostSession} by its caller. */
export type HostSessionErrorCode =
  /** `answerPermission` for an id the harness never asked about. */
  | "unknown_permission_id"
  /** `answerPermission` for an id already answered. */
  | "permission_already_answered"
  /** `sendRuntimeToolResult` for an id the harness never called. */
  | "unknown_runtime_tool_call_id"
  /** `sendRuntimeToolResult` for an id already answered. */
  | "runtime_tool_call_already_answered"
  /** The session's result is out or the session ended: nothing more can be sent. */
  | "session_ended";

/**
 * Thrown synchronously by {@link HostSession} methods the caller used wrongly.
 * The session itself is unaffected.
 */
export class HostSessionError extends Error {
  /** Which misuse this is. */
  readonly code: HostSessionErrorCode;

  /** Creates an error with a code and a message that says what to do. */
  constructor(code: HostSessionErrorCode, message: string) {
    super(message);
    this.name = "HostSessionError";
    this.code = code;
  }
}
