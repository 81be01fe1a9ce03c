// A SessionPort for driving runClaudeSession in the test process: records
// every event and answers permissions and runtime tools from callbacks.
import { create, type JsonObject } from "@bufbuild/protobuf";
import {
  PermissionAnswerSchema,
  RuntimeToolResultSchema,
  SessionRequestSchema,
  type PermissionAnswer,
  type RuntimeToolResult,
  type SessionRequest,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { PermissionAsk, RuntimeToolCallInit, SessionEventInit, SessionPort } from "../src/session-port.js";

export interface InProcessPort extends SessionPort {
  readonly events: SessionEventInit[];
  readonly asks: PermissionAsk[];
  readonly logs: string[];
  cancel(): void;
}

export function inProcessPort(options: {
  request: MessageInitShape<typeof SessionRequestSchema>;
  answer?: (ask: PermissionAsk) => MessageInitShape<typeof PermissionAnswerSchema> | Promise<MessageInitShape<typeof PermissionAnswerSchema>>;
  runtimeTool?: (call: RuntimeToolCallInit) => MessageInitShape<typeof RuntimeToolResultSchema>;
}): InProcessPort {
  const request: SessionRequest = create(SessionRequestSchema, options.request);
  const controller = new AbortController();
  const events: SessionEventInit[] = [];
  const asks: PermissionAsk[] = [];
  const logs: string[] = [];
  return {
    request,
    events,
    asks,
    logs,
    signal: controller.signal,
    cancel: () => controller.abort(),
    emit: (event) => void events.push(event),
    log: (message) => void logs.push(message),
    async requestPermission(ask): Promise<PermissionAnswer> {
      asks.push(ask);
      events.push({ case: "permissionRequest", value: { id: `p${asks.length}`, ...ask } });
      const answer = options.answer ? await options.answer(ask) : { allow: true, outcome: 1 };
      return create(PermissionAnswerSchema, { id: `p${asks.length}`, ...answer });
    },
    async callRuntimeTool(call): Promise<RuntimeToolResult> {
      events.push({ case: "runtimeToolCall", value: { id: `r${events.length}`, ...call } });
      const result = options.runtimeTool?.(call) ?? { isError: true, error: "no runtime tools in this test" };
      return create(RuntimeToolResultSchema, result);
    },
  };
}

export type { JsonObject };
