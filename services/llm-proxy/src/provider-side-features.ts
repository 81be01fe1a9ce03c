// What a request asks the provider to do on its own side. The proxy passes a
// body upstream as the client wrote it, and some fields make the provider act
// for the agent beyond answering:
// - server tools (Anthropic's web_search, web_fetch and code_execution,
//   OpenAI's web_search, file_search, code_interpreter, mcp, …) and
//   Anthropic's MCP connector (`mcp_servers`) have the provider reach any URL
//   the agent names: a way out of a sandbox whose only route is this proxy,
//   and fees the proxy does not meter;
// - a Responses call with `background: true` generates after its answer, so
//   the call's metering sees an estimate and the generation goes unmetered;
// - `previous_response_id`, `conversation` and `prompt` send input the
//   provider holds, of a size the proxy cannot see, so a budget cannot bound
//   the call (a $0.10 budget once spent $24 this way).
// Each wire format names the features a request uses (`WireRequest.
// providerSide`); a request using one the operator has not allowed
// (OZ0_PROVIDER_SIDE_FEATURES) is refused before it goes upstream. A tool the
// client runs itself (a function, Anthropic's bash or text editor) is no
// feature: the harness runs it, in the sandbox, under its hooks and approvals.
import type { RequestBody } from "./wire-formats/wire-format.js";

/** One provider-side feature a request uses, and where in the request. */
export interface ProviderSideUse {
  /** The feature's name as OZ0_PROVIDER_SIDE_FEATURES allows it: `web_search`, `mcp`, `background`, … */
  feature: string;
  /** Where the request uses it, for the refusal: `tools[2] (web_search_20250305)`, `mcp_servers`. */
  where: string;
}

/** A name that no operator can allow: a tool whose `type` cannot be read, so what it asks for is unknown. */
export const UNREADABLE_TOOL = "unreadable tool";

/**
 * The tools in a request's `tools` that the provider runs itself. `runByClient`
 * says which types the client runs; `feature` names the feature a provider's
 * type belongs to. Every copy of a repeated `type` counts (a provider's parser
 * may read any copy), and a tool that cannot be read is a use no one may allow.
 */
export function providerSideTools(
  body: RequestBody,
  kinds: { runByClient(type: string | undefined): boolean; feature(type: string): string },
): ProviderSideUse[] {
  const uses: ProviderSideUse[] = [];
  body.objectsIn("tools").forEach((tool, i) => {
    const types = tool?.values("type");
    if (!types || types.some((type) => type !== undefined && typeof type !== "string")) {
      uses.push({ feature: UNREADABLE_TOOL, where: `tools[${i}]` });
      return;
    }
    for (const type of types.length === 0 ? [undefined] : (types as (string | undefined)[])) {
      if (!kinds.runByClient(type)) uses.push({ feature: kinds.feature(type!), where: `tools[${i}] (${type})` });
    }
  });
  return uses;
}

/** A use for each of `fields` the request sets to anything but null or false. */
export function providerSideFields(body: RequestBody, fields: Readonly<Record<string, string>>): ProviderSideUse[] {
  return Object.entries(fields)
    .filter(([name]) => body.values(name).some((value) => value !== undefined && value !== null && value !== false))
    .map(([name, feature]) => ({ feature, where: name }));
}

/** Why a request is refused, or undefined when every feature it uses is allowed. */
export function providerSideRefusal(
  uses: readonly ProviderSideUse[],
  allowed: ReadonlySet<string>,
): string | undefined {
  const refused = uses.filter((use) => !allowed.has(use.feature));
  if (refused.length === 0) return undefined;
  const what = refused.map((use) => `${use.where}: ${use.feature}`).join("; ");
  const allowable = [...new Set(refused.map((use) => use.feature).filter((f) => f !== UNREADABLE_TOOL))];
  return (
    `this LLM proxy does not pass what a provider would do on its own side, outside the sandbox and outside metering (${what}). ` +
    "Give the agent tools it runs itself instead" +
    (allowable.length > 0
      ? `, or have the operator allow ${allowable.join(", ")} with OZ0_PROVIDER_SIDE_FEATURES=${allowable.join(",")} on the LLM proxy`
      : "")
  );
}
