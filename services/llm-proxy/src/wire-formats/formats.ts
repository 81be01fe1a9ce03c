// The wire formats the proxy serves: the one list. A format added here is
// routed, authenticated, budgeted, retried, metered and scrubbed like the rest.
import { anthropicCountTokens } from "./anthropic-count-tokens.js";
import { anthropicMessages } from "./anthropic-messages.js";
import { openAiChatCompletions } from "./openai-chat-completions.js";
import { openAiResponses } from "./openai-responses.js";
import type { WireFormat } from "./wire-format.js";

export const WIRE_FORMATS: readonly WireFormat[] = [
  anthropicMessages,
  anthropicCountTokens,
  openAiChatCompletions,
  openAiResponses,
];

const byRoute = new Map(WIRE_FORMATS.map((format) => [format.route, format]));

/** `/{provider}`, the optional `/v1`, the route, an optional trailing slash. */
const PATH = /^\/([a-z][a-z0-9-]*)(?:\/v1)?\/(.+?)\/?$/;

/** The provider and format a model call's path names, or undefined for a path no format serves. */
export function routeOf(pathname: string): { provider: string; format: WireFormat } | undefined {
  const match = PATH.exec(pathname);
  const format = match ? byRoute.get(match[2]!) : undefined;
  return format ? { provider: match![1]!, format } : undefined;
}

/** The format whose error shape answers a request no route matched: the one its path names, else the first. */
export function errorFormatOf(pathname: string): WireFormat {
  let found: WireFormat | undefined;
  for (const format of WIRE_FORMATS)
    if (pathname.includes(format.route) && format.route.length > (found?.route.length ?? 0)) found = format;
  return found ?? WIRE_FORMATS[0]!;
}

/** The model routes, for messages that say what to call instead. */
export const MODEL_ROUTES_TEXT = (() => {
  const routes = WIRE_FORMATS.map((format) => `/{provider}/v1/${format.route}`);
  return `${routes.slice(0, -1).join(", ")} or ${routes.at(-1)}`;
})();
