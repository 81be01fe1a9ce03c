// Embedded defaults for a stack `oz0` starts itself: the LLM proxy keeps its
// key-encryption key in the data directory (so `oz0 secret set` survives),
// and without a provider key in the environment the Anthropic and OpenAI
// routes answer from the scripted model, so jobs run offline. A model script
// (`--model-script FILE` or OZ0_MODEL_SCRIPT) makes that model answer what a
// person wrote, so tool calls and approvals run for real without a key.
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { ScriptedTurn } from "@oz0/harness/testing";
import { OrchestratorError } from "../orchestrator-error.js";
import { readYamlDocument } from "../plugins/yaml-validation.js";
import { CliError } from "./cli-error.js";
import { EXIT } from "./exit-codes.js";

export interface EmbeddedDefaults {
  env: { "llm-proxy": Record<string, string> };
  notes: string[];
  /** True when model calls go to the scripted model. */
  scripted: boolean;
}

export interface EmbeddedDefaultsOptions {
  home: string;
  /**
   * A model script file (JSON or YAML, `schemas/model-script.schema.json`):
   * both provider routes answer each session from its turns, from the first,
   * even when a provider key is set. Default: a short canned reply to every
   * call, and only without a provider key.
   */
  modelScript?: string | undefined;
}

/** Where a command's model script comes from when it has no `--model-script`. */
export const MODEL_SCRIPT_VARIABLE = "OZ0_MODEL_SCRIPT";

/** The model script a command uses: its `--model-script`, else `OZ0_MODEL_SCRIPT`, else none. */
export function chosenModelScript(flag: string | undefined): string | undefined {
  return flag || process.env[MODEL_SCRIPT_VARIABLE]?.trim() || undefined;
}

/** Reads and validates a model script; a usage error names the file, the field and what was expected. */
export function readModelScript(file: string): ScriptedTurn[] {
  try {
    return readYamlDocument<ScriptedTurn[]>({ schema: "model-script", file: path.resolve(file), displayName: file });
  } catch (error) {
    if (!(error instanceof OrchestratorError)) throw error;
    throw new CliError(
      `model script ${error.message}; the format is in sdk/harness-ts/README.md ("Model scripts")`,
      EXIT.usage,
    );
  }
}

export function hasProviderKey(): boolean {
  return Boolean(process.env.ANTHROPIC_API_KEY || process.env.OPENAI_API_KEY);
}

export function embeddedStackEnv(options: EmbeddedDefaultsOptions): EmbeddedDefaults {
  // Read first: a bad script stops the command before anything is written.
  const script = options.modelScript === undefined ? undefined : readModelScript(options.modelScript);
  const dir = path.join(options.home, "llm-proxy");
  // The proxy's keys are its own: a session running as another user lists nothing here.
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const kekFile = path.join(dir, "kek");
  if (!existsSync(kekFile)) writeFileSync(kekFile, `${randomBytes(32).toString("base64")}\n`, { mode: 0o600 });
  const env: Record<string, string> = { OZ0_KEK_FILE: kekFile };
  if (hasProviderKey() && !script) return { env: { "llm-proxy": env }, notes: [], scripted: false };
  const providersFile = path.join(dir, "providers.json");
  // Priced like a mid-size model, so budgets (harness.max_budget_usd) are enforced offline too.
  const prices = { "*": { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 } };
  // Each session replays the script from its first turn, so scripted jobs can run side by side.
  const scripted = (name: string): Record<string, unknown> => ({
    name,
    kind: "scripted",
    prices,
    ...(script ? { script, scriptPerSession: true } : {}),
  });
  writeFileSync(
    providersFile,
    `${JSON.stringify({ providers: [scripted("anthropic"), scripted("openai")] }, null, 2)}\n`,
  );
  env.OZ0_PROVIDERS_FILE = providersFile;
  return { env: { "llm-proxy": env }, scripted: true, notes: [scriptNote(options.modelScript, script)] };
}

function scriptNote(file: string | undefined, script: ScriptedTurn[] | undefined): string {
  if (!file || !script)
    return "no provider key is configured (ANTHROPIC_API_KEY, OPENAI_API_KEY): model calls get the scripted model's canned reply";
  const answers = `the scripted model answers every model call from ${file} (${script.length} turn${script.length === 1 ? "" : "s"}, replayed from the first for each session)`;
  const keys = ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"].filter((name) => process.env[name]);
  if (keys.length === 0) return answers;
  return `${keys.join(" and ")} ${keys.length === 1 ? "is" : "are"} set, but the model script wins: ${answers}; no call reaches a provider (drop --model-script and unset ${MODEL_SCRIPT_VARIABLE} to use the key)`;
}

/** Hand provider keys found in the environment to the stack's LLM proxy (through the orchestrator, write-only). */
export async function applyEnvironmentKeys(
  setSecret: (s: { name: string; value: string }) => Promise<unknown>,
): Promise<string[]> {
  const set: string[] = [];
  for (const name of ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]) {
    const value = process.env[name];
    if (!value) continue;
    await setSecret({ name, value });
    set.push(name);
  }
  return set;
}
