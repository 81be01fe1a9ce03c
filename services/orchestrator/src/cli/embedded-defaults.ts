// Embedded defaults for a stack `oz0` starts itself: the LLM proxy keeps its
// key-encryption key in the data directory (so `oz0 secret set` survives),
// and without a provider key in the environment the Anthropic and OpenAI
// routes answer from the scripted model, so jobs run offline.
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";

export interface EmbeddedDefaults {
  env: { "llm-proxy": Record<string, string> };
  notes: string[];
  /** True when model calls go to the scripted model. */
  scripted: boolean;
}

export interface EmbeddedDefaultsOptions {
  home: string;
  /** Turns the scripted model answers each session, in order, from the first (default: a short reply to every call). */
  script?: unknown[];
}

export function hasProviderKey(): boolean {
  return Boolean(process.env.ANTHROPIC_API_KEY || process.env.OPENAI_API_KEY);
}

export function embeddedStackEnv(options: EmbeddedDefaultsOptions): EmbeddedDefaults {
  const dir = path.join(options.home, "llm-proxy");
  // The proxy's keys are its own: a session running as another user lists nothing here.
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const kekFile = path.join(dir, "kek");
  if (!existsSync(kekFile)) writeFileSync(kekFile, `${randomBytes(32).toString("base64")}\n`, { mode: 0o600 });
  const env: Record<string, string> = { OZ0_KEK_FILE: kekFile };
  if (hasProviderKey() && !options.script) return { env: { "llm-proxy": env }, notes: [], scripted: false };
  const providersFile = path.join(dir, "providers.json");
  // Priced like a mid-size model, so budgets (harness.max_budget_usd) are enforced offline too.
  const prices = { "*": { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 } };
  // Each session replays the script from its first turn, so scripted jobs can run side by side.
  const scripted = (name: string): Record<string, unknown> => ({ name, kind: "scripted", prices, ...(options.script ? { script: options.script, scriptPerSession: true } : {}) });
  writeFileSync(providersFile, `${JSON.stringify({ providers: [scripted("anthropic"), scripted("openai")] }, null, 2)}\n`);
  env.OZ0_PROVIDERS_FILE = providersFile;
  return {
    env: { "llm-proxy": env },
    scripted: true,
    notes: [
      options.script
        ? "no provider key is configured: the model is the scripted model, answering from a script"
        : "no provider key is configured (ANTHROPIC_API_KEY, OPENAI_API_KEY): model calls get the scripted model's canned reply",
    ],
  };
}

/** Hand provider keys found in the environment to the stack's LLM proxy (through the orchestrator, write-only). */
export async function applyEnvironmentKeys(setSecret: (s: { name: string; value: string }) => Promise<unknown>): Promise<string[]> {
  const set: string[] = [];
  for (const name of ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]) {
    const value = process.env[name];
    if (!value) continue;
    await setSecret({ name, value });
    set.push(name);
  }
  return set;
}
