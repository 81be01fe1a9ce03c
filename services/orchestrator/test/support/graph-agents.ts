// Which agent a scripted-model call is for, in the graph tests: every test
// agent's instructions start "You are NAME.", and the harness sends them as
// the system prompt.
import type { ScriptedRequest } from "@oz0/harness/testing";

export function agentOf(request: ScriptedRequest): string {
  return /You are ([a-z-]+)\./.exec(JSON.stringify(request.body?.system ?? ""))?.[1] ?? "";
}
