// The LLM proxy's refusals that end a session (services/llm-proxy, "Model calls" and "Budgets"): the session
// made its agent's limits.max_steps model calls, or spent its budget. The proxy answers 402 with its error type
// `model_calls_exhausted` or `budget_exhausted`, and the session should end as those limits do (max_turns,
// budget_exhausted), not as a failed model call. Read here as Claude Code reports a call it does not retry:
// "API Error: 402 " and the proxy's error body as it came (or, in some versions, its message alone), which
// harness-claude gets as the SDK's result and claude-agent-acp sends as the JSON-RPC error of session/prompt.
// Other agents word a failed model call their own way; a harness that reads the proxy's answer itself passes
// `API Error: 402 <body>` too.
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { ResultInit } from "./harness-session.js";

const MARK = "API Error: 402 ";

/** The proxy's refusal in an agent's error text, as the stop reason of the limit it enforces; undefined for any other error. */
export function proxyRefusal(text: string): Pick<ResultInit, "stopReason" | "error"> | undefined {
  const at = text.indexOf(MARK);
  if (at < 0) return undefined;
  const said = text.slice(at + MARK.length);
  const { type, message } = refusalBody(said) ?? { type: undefined, message: said };
  const error = `the LLM proxy refused the next model call: ${message}`;
  // Without the body (a message alone), the proxy's own wording tells the two apart, as harness-claude reads it.
  if (
    type === "model_calls_exhausted" ||
    (type === undefined && /, its agent's limits\.max_steps\); the session must end\b/.test(message))
  )
    return { stopReason: StopReason.MAX_TURNS, error };
  if (
    type === "budget_exhausted" ||
    (type === undefined &&
      /^the session's budget of \$[\d.]+ is exhausted\b|of the session's \$[\d.]+ budget is left\b/.test(message))
  )
    return { stopReason: StopReason.BUDGET_EXHAUSTED, error };
  return undefined;
}

/** The error type and message of the proxy's error body (Anthropic's or OpenAI's shape), when `text` is one. */
function refusalBody(text: string): { type: string | undefined; message: string } | undefined {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  const error = typeof body === "object" && body !== null ? (body as { error?: unknown }).error : undefined;
  if (typeof error !== "object" || error === null) return undefined;
  const { type, message } = error as { type?: unknown; message?: unknown };
  if (typeof message !== "string") return undefined;
  return { type: typeof type === "string" ? type : "", message };
}
