// The environment a harness gets on the real stack, from the one definition
// the sandbox uses (host/session-environment.ts), with the sandbox's defaults,
// so a harness that reads its environment behaves in the kit as it will in
// production.
import { buildSessionEnvironment, defaultSessionPath } from "../../host/session-environment.js";
import type { SessionRequest } from "@oz0/proto/oz0/harness/v1/harness_pb";

/** What {@link sessionEnvironment} needs. */
export interface SessionEnvironmentInput {
  request: SessionRequest;
  /** The plugin's folder on the stack; the kit uses the directory it was started from. */
  pluginDir: string;
  /** Default {@link defaultSessionPath}. */
  path?: string;
  /** Default `C.UTF-8`, the sandbox's default. */
  locale?: string;
}

/**
 * The harness's whole environment, as the sandbox gives it: nothing
 * inherited; `HOME`, `TMPDIR` and the XDG folders inside the state
 * directory; `OZ0_*` naming the session; the LLM base URLs; and the session
 * token as `ANTHROPIC_API_KEY` / `OPENAI_API_KEY` (it is not a provider key).
 */
export function sessionEnvironment(input: SessionEnvironmentInput): Record<string, string> {
  const { request } = input;
  return buildSessionEnvironment({
    request,
    workingDir: request.workingDir,
    stateDir: request.stateDir,
    pluginDir: input.pluginDir,
    path: input.path ?? defaultSessionPath(),
    locale: input.locale ?? "C.UTF-8",
    anthropicBaseUrl: request.llm?.anthropicBaseUrl ?? "",
    openaiBaseUrl: request.llm?.openaiBaseUrl ?? "",
  });
}
