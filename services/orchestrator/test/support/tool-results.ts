// What a scripted model read in the tool results of its conversation, so
// tests can check what reached the model (a denial's reason, a changed input's output).
import type { ScriptedRequest } from "@oz0/harness/testing";

export function toolResults(request: ScriptedRequest): string {
  const messages = (request.body?.messages ?? []) as { content: unknown }[];
  return messages
    .flatMap((m) => (Array.isArray(m.content) ? (m.content as { type: string; content?: unknown }[]) : []))
    .filter((b) => b.type === "tool_result")
    .map((b) => String(b.content))
    .join(" | ");
}
