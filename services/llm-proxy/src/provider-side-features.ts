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
// - an image or a document given by URL is fetched by the provider, from
//   wherever the agent points it, with whatever the agent put in the URL
//   (`input_urls`); data URLs and inline bytes are the request's own;
// - `previous_response_id`, `conversation`, `prompt`, a `file_id` or an
//   `item_reference` send input the provider holds, of a size the proxy
//   cannot see, so a budget cannot bound the call (`stored_context`; a $0.10
//   budget once spent $24 this way).
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

/** Features that only change what the provider bills: allowed, they are metered at the price table's rates. */
const PRICED_ABOVE_TABLE = new Set(["priority_tier", "long_context", "fast_mode", "inference_geo", "cache_1h"]);

/** OpenAI's tiers a call may ask for at the prices the table has: any other (`priority`, `scale`) costs more. */
const TABLE_PRICED_TIERS = new Set(["auto", "default", "flex"]);

/**
 * OpenAI's `service_tier` when it asks for a tier dearer than the table prices (`priority` bills about twice the
 * standard price): the feature `priority_tier`. Metered at the table's price, a budget would not bound it.
 */
export function providerSideServiceTier(body: RequestBody): ProviderSideUse[] {
  const dearer = body
    .values("service_tier")
    .some((tier) => tier !== undefined && tier !== null && !(typeof tier === "string" && TABLE_PRICED_TIERS.has(tier)));
  return dearer ? [{ feature: "priority_tier", where: "service_tier" }] : [];
}

/** The values of a header, comma-separated ones split (`anthropic-beta: a,b`), trimmed. */
function headerList(value: string | string[] | undefined): string[] {
  return (Array.isArray(value) ? value : value === undefined ? [] : [value])
    .flatMap((v) => v.split(","))
    .map((v) => v.trim())
    .filter(Boolean);
}

/**
 * What an Anthropic request asks for that Anthropic bills above the price table's rates, which the proxy meters at
 * (second review: a call so metered at $1.88 cost $4.05 at list prices):
 * - `long_context`: the 1M-token context beta (`anthropic-beta: context-1m-…`), past 200k input tokens twice the input price;
 * - `fast_mode`: `speed` other than `standard`, or the fast-mode beta, several times the price;
 * - `inference_geo`: a region of inference other than `global` (`us`: 1.1 times);
 * - `cache_1h`: a `cache_control` whose `ttl` is not `5m` (an hour's cache write costs twice the input price, not 1.25).
 */
export function anthropicPricedAbove(
  body: RequestBody,
  headers: Readonly<Record<string, string | string[] | undefined>>,
): ProviderSideUse[] {
  const uses: ProviderSideUse[] = [];
  for (const beta of headerList(headers["anthropic-beta"])) {
    if (beta.startsWith("context-1m-")) uses.push({ feature: "long_context", where: `anthropic-beta: ${beta}` });
    if (beta.startsWith("fast-mode-")) uses.push({ feature: "fast_mode", where: `anthropic-beta: ${beta}` });
  }
  if (body.values("speed").some((v) => v !== undefined && v !== null && v !== "standard"))
    uses.push({ feature: "fast_mode", where: "speed" });
  if (body.values("inference_geo").some((v) => v !== undefined && v !== null && v !== "global"))
    uses.push({ feature: "inference_geo", where: "inference_geo" });
  const longCache = (control: unknown): boolean =>
    typeof control === "object" && control !== null && "ttl" in control && (control as { ttl: unknown }).ttl !== "5m";
  if (body.values("cache_control").some(longCache)) uses.push({ feature: "cache_1h", where: "cache_control" });
  uses.push(
    ...providerSideInputs(body, {
      fields: ["system", "messages", "tools"],
      needles: ['ttl"'],
      classify: (node) => (node.type === "tool_use" ? "skip" : longCache(node.cache_control) ? "cache_1h" : undefined),
    }),
  );
  return uses;
}

/** A use for each of `fields` the request sets to anything but null or false. */
export function providerSideFields(body: RequestBody, fields: Readonly<Record<string, string>>): ProviderSideUse[] {
  return Object.entries(fields)
    .filter(([name]) => body.values(name).some((value) => value !== undefined && value !== null && value !== false))
    .map(([name, feature]) => ({ feature, where: name }));
}

/** How a wire format finds, in what a request sends, the inputs the provider would fetch or holds. */
export interface InputRules {
  /** The fields that carry the conversation (`messages`, `input`). */
  fields: readonly string[];
  /**
   * Texts a field's bytes must hold for it to be read at all: a conversation
   * of hundreds of kilobytes is searched, not parsed, unless it may ask for
   * something. A field that escapes an ASCII letter is read anyway, since the
   * search could miss a name written that way.
   */
  needles: readonly string[];
  /** The feature one object of the conversation uses; `skip`: nothing inside it is an input (a tool call's arguments). */
  classify(node: Readonly<Record<string, unknown>>): string | "skip" | undefined;
}

/** The inputs in a request's conversation that the provider would fetch or holds, each by where it is. */
export function providerSideInputs(body: RequestBody, rules: InputRules): ProviderSideUse[] {
  const uses: ProviderSideUse[] = [];
  const visit = (node: unknown, where: string): void => {
    if (Array.isArray(node)) {
      node.forEach((item, i) => visit(item, `${where}[${i}]`));
      return;
    }
    if (typeof node !== "object" || node === null) return;
    const record = node as Record<string, unknown>;
    const feature = rules.classify(record);
    if (feature === "skip") return;
    if (feature !== undefined) {
      uses.push({ feature, where });
      return;
    }
    for (const [key, value] of Object.entries(record)) visit(value, `${where}.${key}`);
  };
  for (const field of rules.fields) {
    if (!rules.needles.some((needle) => body.mentions(field, needle)) && !body.escapesAscii(field)) continue;
    for (const value of body.values(field)) visit(value, field);
  }
  return uses;
}

/** A URL the provider would fetch: anything but a data URL. */
export function fetchedUrl(value: unknown): boolean {
  return typeof value === "string" && !/^data:/i.test(value);
}

/** How many uses a refusal names before it counts the rest. */
const NAMED_USES = 5;

/** Why a request is refused, or undefined when every feature it uses is allowed. */
export function providerSideRefusal(
  uses: readonly ProviderSideUse[],
  allowed: ReadonlySet<string>,
): string | undefined {
  const refused = uses.filter((use) => !allowed.has(use.feature));
  if (refused.length === 0) return undefined;
  const what =
    refused
      .slice(0, NAMED_USES)
      .map((use) => `${use.where}: ${use.feature}`)
      .join("; ") + (refused.length > NAMED_USES ? `; and ${refused.length - NAMED_USES} more` : "");
  const allowable = [...new Set(refused.map((use) => use.feature).filter((f) => f !== UNREADABLE_TOOL))];
  const pricedAbove = refused.every((use) => PRICED_ABOVE_TABLE.has(use.feature));
  return (
    (pricedAbove
      ? `this LLM proxy does not pass what the provider bills above the prices it meters at, which no budget would bound (${what}). Leave it out of the request`
      : `this LLM proxy does not pass what a provider would do on its own side, outside the sandbox and outside metering (${what}). Give the agent tools it runs itself instead`) +
    (allowable.length > 0
      ? `, or have the operator allow ${allowable.join(", ")} with OZ0_PROVIDER_SIDE_FEATURES=${allowable.join(",")} on the LLM proxy`
      : "")
  );
}
