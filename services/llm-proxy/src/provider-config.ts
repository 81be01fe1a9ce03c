// Upstream providers: where each is, which secret holds its key, and what
// its models cost. Read from OZ0_PROVIDERS_FILE (JSON) or given in code.
import { readFileSync } from "node:fs";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import { ProxyError } from "./proxy-error.js";
import type { TokenUsage } from "./proxy-store.js";

/** US dollars per million tokens. Cache prices default to the input price. */
export interface ModelPrice {
  input: number;
  output: number;
  cacheRead?: number;
  cacheWrite?: number;
  /**
   * The most output tokens (reasoning included) the model writes in one answer: what a call that names no
   * output limit holds of its budget. Absent, such a call holds the proxy's default bound (32,000), which a
   * model able to write more may pass.
   */
  maxOutput?: number;
}

export interface ProviderConfig {
  /** The first path segment of its routes: `/{name}/v1/messages`. Lower-case letters, digits and `-`. */
  name: string;
  /**
   * Root URL of the provider's API, without `/v1` (for example
   * `https://api.anthropic.com`). Omit for `kind: "scripted"`.
   */
  baseUrl?: string;
  /** `http` (default) forwards to `baseUrl`; `scripted` serves an in-process scripted model. */
  kind?: "http" | "scripted";
  /** Name of the secret holding the API key. Omit for a provider that needs none. */
  keySecret?: string;
  /** How the key is sent: `x-api-key` (default for Anthropic routes) or `bearer` (OpenAI routes). */
  auth?: "x-api-key" | "bearer";
  /**
   * Prices by model. A model matches its exact name, else the longest key
   * that prefixes it (`claude-sonnet-4-5` prices `claude-sonnet-4-5-20250929`),
   * else `*`.
   */
  prices?: Record<string, ModelPrice>;
  /**
   * For `kind: "scripted"`: turns to serve, in order (by default every call
   * gets a short reply), or, in code, a function of the request and the
   * calling session.
   */
  script?: ScriptedTurn[] | ((request: ScriptedRequest, session: string) => ScriptedTurn | Promise<ScriptedTurn>);
  /**
   * For `kind: "scripted"` with a list: each session replays the list from
   * its first turn, so several scripted jobs can run side by side. Default
   * false: one list for the whole process.
   */
  scriptPerSession?: boolean;
}

export interface ProvidersFile {
  providers: ProviderConfig[];
}

/** Anthropic and OpenAI at their public URLs, plus an offline scripted provider. */
export function defaultProviders(): ProviderConfig[] {
  return [
    {
      name: "anthropic",
      baseUrl: "https://api.anthropic.com",
      keySecret: "ANTHROPIC_API_KEY",
      // maxOutput matters only on the OpenAI-compatible routes (Messages requires max_tokens). An entry prices
      // every later version of its family, so it holds the most any Claude model writes, not one version's.
      prices: {
        "claude-opus-4": { input: 15, output: 75, cacheRead: 1.5, cacheWrite: 18.75, maxOutput: 128_000 },
        "claude-sonnet-4": { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75, maxOutput: 128_000 },
        "claude-sonnet-5": { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75, maxOutput: 128_000 },
        "claude-haiku-4": { input: 1, output: 5, cacheRead: 0.1, cacheWrite: 1.25, maxOutput: 128_000 },
        "claude-3-5-haiku": { input: 0.8, output: 4, cacheRead: 0.08, cacheWrite: 1, maxOutput: 8_192 },
      },
    },
    {
      name: "openai",
      baseUrl: "https://api.openai.com",
      keySecret: "OPENAI_API_KEY",
      auth: "bearer",
      prices: {
        "gpt-4o": { input: 2.5, output: 10, cacheRead: 1.25, maxOutput: 16_384 },
        "gpt-4o-mini": { input: 0.15, output: 0.6, cacheRead: 0.075, maxOutput: 16_384 },
        "gpt-4.1": { input: 2, output: 8, cacheRead: 0.5, maxOutput: 32_768 },
        "gpt-4.1-mini": { input: 0.4, output: 1.6, cacheRead: 0.1, maxOutput: 32_768 },
        "gpt-4.1-nano": { input: 0.1, output: 0.4, cacheRead: 0.025, maxOutput: 32_768 },
        "gpt-5": { input: 1.25, output: 10, cacheRead: 0.125, maxOutput: 128_000 },
        "gpt-5-mini": { input: 0.25, output: 2, cacheRead: 0.025, maxOutput: 128_000 },
        "gpt-5-nano": { input: 0.05, output: 0.4, cacheRead: 0.005, maxOutput: 128_000 },
        "gpt-5-pro": { input: 15, output: 120, maxOutput: 272_000 },
      },
    },
    { name: "scripted", kind: "scripted", prices: { "*": { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 } } },
  ];
}

export function loadProvidersFile(file: string): ProviderConfig[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, "utf8"));
  } catch (error) {
    throw new ProxyError(
      "invalid_argument",
      `OZ0_PROVIDERS_FILE (${file}) is not readable JSON: ${(error as Error).message}`,
    );
  }
  const providers = (parsed as ProvidersFile | undefined)?.providers;
  if (!Array.isArray(providers))
    throw new ProxyError("invalid_argument", `OZ0_PROVIDERS_FILE (${file}) must be {"providers": [...]}`);
  return validateProviders(providers);
}

export function validateProviders(providers: ProviderConfig[]): ProviderConfig[] {
  const seen = new Set<string>();
  for (const p of providers) {
    if (!/^[a-z][a-z0-9-]{0,62}$/.test(p.name ?? ""))
      throw new ProxyError("invalid_argument", `provider name "${p.name}" must be lower-case letters, digits and -`);
    if (seen.has(p.name)) throw new ProxyError("invalid_argument", `provider ${p.name} is configured twice`);
    seen.add(p.name);
    if ((p.kind ?? "http") === "http") {
      try {
        new URL(p.baseUrl ?? "");
      } catch {
        throw new ProxyError(
          "invalid_argument",
          `provider ${p.name} needs a baseUrl such as https://api.anthropic.com`,
        );
      }
    }
    for (const [model, price] of Object.entries(p.prices ?? {})) {
      if (!(dollars(price.input) && dollars(price.output)))
        throw new ProxyError(
          "invalid_argument",
          `price of ${p.name}/${model} needs input and output dollars per million tokens`,
        );
      for (const field of ["cacheRead", "cacheWrite"] as const)
        if (price[field] !== undefined && !dollars(price[field]))
          throw new ProxyError(
            "invalid_argument",
            `price of ${p.name}/${model}: ${field} must be dollars per million tokens (a number, 0 or more), or left out to be the input price`,
          );
      if (price.maxOutput !== undefined && !(Number.isSafeInteger(price.maxOutput) && price.maxOutput > 0))
        throw new ProxyError(
          "invalid_argument",
          `price of ${p.name}/${model}: maxOutput must be the most output tokens the model writes in one answer (a whole number above 0), or left out for the proxy's default bound`,
        );
    }
  }
  return providers;
}

/** A price: a finite number of dollars, 0 or more. */
function dollars(value: unknown): boolean {
  return typeof value === "number" && Number.isFinite(value) && value >= 0;
}

/**
 * What may follow a model's key in its name and keep its price: a version or a date (`-5`, `-20250929`,
 * `-2025-08-07`), or `-latest`. Not a word: `gpt-5-pro` costs twelve times `gpt-5`, and the model is the session's
 * choice, so a plain prefix let a session spend twelve times its budget (attacker review).
 */
const VERSION_SUFFIX = /^(?:-\d+)+(?:-latest)?$|^-latest$/;

/** Whether a table's key prices `model`: the key exactly, the key and a version (VERSION_SUFFIX), or `family-*`'s prefix. */
function keyPrices(key: string, model: string): boolean {
  if (key.endsWith("*")) return model.startsWith(key.slice(0, -1));
  return model.startsWith(key) && VERSION_SUFFIX.test(model.slice(key.length));
}

/**
 * The price of a model, or undefined when the table has none: its exact entry, else the longest key that prices it
 * (keyPrices), else `*`. Only the table's own entries: the model is the caller's word, and `constructor` or
 * `__proto__` looked up as a plain property would find Object.prototype's, a "price" whose every cost is NaN (a
 * budget no comparison could exhaust, a record no store would take).
 */
export function priceOf(provider: ProviderConfig, model: string): ModelPrice | undefined {
  const prices = provider.prices ?? {};
  if (Object.hasOwn(prices, model)) return prices[model];
  let best: string | undefined;
  for (const key of Object.keys(prices)) {
    if (key !== "*" && keyPrices(key, model) && (best === undefined || key.length > best.length)) best = key;
  }
  if (best !== undefined) return prices[best];
  return Object.hasOwn(prices, "*") ? prices["*"] : undefined;
}

/** Dollars for some usage; cache tokens at their own prices. */
export function costOf(price: ModelPrice | undefined, usage: TokenUsage): number {
  if (!price) return 0;
  return (
    (usage.input * price.input +
      usage.output * price.output +
      usage.cacheRead * (price.cacheRead ?? price.input) +
      usage.cacheWrite * (price.cacheWrite ?? price.input)) /
    1_000_000
  );
}
