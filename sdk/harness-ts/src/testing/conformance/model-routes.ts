// The two routes a session's model calls take through the LLM proxy. The
// request names the route by the provider of its model (`model.primary`):
// `anthropic/…` calls the Anthropic Messages API at llm.anthropic_base_url,
// `openai/…` OpenAI Chat Completions or Responses at llm.openai_base_url.
// Which one a session gets is the agent's configuration, so a harness may
// speak one route or both; the kit runs each case on the routes asked for, or
// on those the harness turns out to speak.
import { proxyRouteOf, type ProxyOperation } from "../scripted-model.js";

/** A route of the LLM proxy, named by its provider. */
export type ModelRoute = "anthropic" | "openai";

/** `--route`: one route, both, or `auto` (every route the harness calls when its session's model is of that provider). */
export type RouteSelection = ModelRoute | "both" | "auto";

export const MODEL_ROUTES: readonly ModelRoute[] = ["anthropic", "openai"];
export const ROUTE_SELECTIONS: readonly RouteSelection[] = ["auto", "anthropic", "openai", "both"];

/** The model a scenario's request names on each route. */
export const ROUTE_MODELS: Readonly<Record<ModelRoute, string>> = {
  anthropic: "anthropic/claude-conformance",
  openai: "openai/gpt-conformance",
};

const ROUTE_CALLS: Readonly<Record<ModelRoute, string>> = {
  anthropic: "POST {llm.anthropic_base_url}/v1/messages (and /v1/messages/count_tokens)",
  openai: "POST {llm.openai_base_url}/chat/completions (or /responses)",
};

/** The route each of the proxy's operations belongs to. */
const OPERATION_ROUTES: Readonly<Record<ProxyOperation, ModelRoute>> = {
  messages: "anthropic",
  "messages/count_tokens": "anthropic",
  "chat/completions": "openai",
  responses: "openai",
};

const ROUTE_NAMES: Readonly<Record<ModelRoute, string>> = { anthropic: "Anthropic", openai: "OpenAI" };

/** `anthropic` → `the Anthropic route`. */
export function routeName(route: ModelRoute): string {
  return `the ${ROUTE_NAMES[route]} route`;
}

/** True when a POST to `path` on the proxy is a model call of `route`. */
export function isOnRoute(path: string, route: ModelRoute): boolean {
  const found = proxyRouteOf(path);
  if (found === undefined || found.provider !== route) return false;
  return OPERATION_ROUTES[found.operation] === route;
}

/** True when a call went to the route's provider at all (`/openai/…`), even on a path the proxy does not serve. */
export function calledProvider(path: string, route: ModelRoute): boolean {
  return path.startsWith(`/${route}/`);
}

/** Why a call that is not on the session's route is wrong, naming the route the request asked for. */
export function offRouteMessage(route: ModelRoute, call: { method: string; path: string }, served: boolean): string {
  const what = served
    ? `${call.method} ${call.path}`
    : `${call.method} ${call.path}, a path the LLM proxy does not serve (404)`;
  return `the session's model is ${ROUTE_MODELS[route]}, so its calls go to ${routeName(route)}, ${ROUTE_CALLS[route]}; the harness called ${what}`;
}

/** Parses `--route`. */
export function parseRouteSelection(text: string): RouteSelection {
  const found = ROUTE_SELECTIONS.find((r) => r === text);
  if (found === undefined)
    throw new Error(`--route needs one of ${ROUTE_SELECTIONS.join(", ")}, got ${JSON.stringify(text)}`);
  return found;
}
