// The part of @oz0/harness's HarnessSession a Claude session uses, named so
// the SDK mapping can be exercised with a stand-in in unit tests.
import type { HarnessSession } from "@oz0/harness";

/** Events a Claude session writes (never the result: the caller writes that). */
export type EventSink = Pick<HarnessSession, "text" | "toolCall" | "toolResult" | "usage">;

/** Everything runClaudeSession needs from the protocol session. */
export type ClaudeSessionHost = EventSink &
  Pick<HarnessSession, "request" | "signal" | "requestPermission" | "callRuntimeTool" | "log" | "tracer">;
