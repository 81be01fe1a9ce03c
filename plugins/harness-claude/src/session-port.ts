// What a Claude session needs from the harness protocol, kept as one small
// interface so the SDK mapping can be driven in tests and wired to
// @oz0/harness in main.ts.
import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import type {
  PermissionAnswer,
  RuntimeToolResult,
  SessionEventSchema,
  SessionRequest,
  SessionResultSchema,
} from "@oz0/proto/oz0/harness/v1/harness_pb";

/** One non-result event, as the `event` oneof of a SessionEvent. */
export type SessionEventInit = Exclude<NonNullable<MessageInitShape<typeof SessionEventSchema>["event"]>, { case: "result" | "started" | undefined }>;

/** The session's one result. */
export type SessionResultInit = MessageInitShape<typeof SessionResultSchema>;

export interface PermissionAsk {
  tool: string;
  input: JsonObject;
  title: string;
  callId: string;
}

export interface RuntimeToolCallInit {
  name: string;
  input: JsonObject;
}

export interface SessionPort {
  readonly request: SessionRequest;
  /** Write one event; the port keeps them in order. */
  emit(event: SessionEventInit): void;
  /** Ask the runtime before a tool call; resolves with its answer. */
  requestPermission(ask: PermissionAsk): Promise<PermissionAnswer>;
  /** Call a tool the runtime serves; resolves with its result. */
  callRuntimeTool(call: RuntimeToolCallInit): Promise<RuntimeToolResult>;
  /** Aborted when the session is cancelled (SIGTERM). */
  readonly signal: AbortSignal;
  /** Free-form log line (stderr). */
  log(message: string): void;
}
