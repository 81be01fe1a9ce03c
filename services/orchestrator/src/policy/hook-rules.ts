// Hooks as declared in oz0-plugin.yaml and agent YAML (`hooks:`), and the
// declarative part of them: a rule matches a pre_tool_call by its name
// (`<harness>.<tool>`, exact or a glob) and by its input (JSON pointers with
// `equals` or `regex`), and decides. Command hooks (command-hooks.ts) share
// the matching, so a program only runs for the calls it is declared for.
//
// A rule's regex runs on the orchestrator's event loop over a tool input the
// model chose (up to a harness line, 1 MiB). A backtracking engine takes
// quadratic or exponential time on some of them: `git push .*--force` over
// "git push " repeated took 19 s at 432 KB, and held every job, approval and
// RPC meanwhile (an attacker review). So rules run on V8's linear-time
// engine (the `l` flag), and a pattern it cannot run (backreferences,
// lookarounds) is refused when the plugin or agent is installed.
import { setFlagsFromString } from "node:v8";
import { isDeepStrictEqual } from "node:util";
import type { JsonObject } from "../store/job-store.js";

export type HookDecisionName = "allow" | "deny" | "ask";

/** One condition on the call's input; every condition of a hook must hold. */
export interface HookInputCondition {
  /** RFC 6901 JSON pointer into the input, for example `/command`. */
  pointer: string;
  /** The value there equals this (deep equality). */
  equals?: unknown;
  /** The value there (a string, else its JSON) matches this regular expression. */
  regex?: string;
}

interface HookBase {
  /** For the record: which hook decided. Defaults to `<source>#<index>`. */
  name?: string;
  /** Only `pre_tool_call` (the default) exists for now. */
  event?: "pre_tool_call";
  /** `<harness>.<tool>` names: exact, or globs with `*` and `?`. Default: every call. */
  match?: string | string[];
  when?: HookInputCondition[];
}

export interface RuleHookSpec extends HookBase {
  decision: HookDecisionName;
  reason?: string;
  /** Fields merged into the call's input (with `allow` or `ask`). */
  set_input?: JsonObject;
}

export interface CommandHookSpec extends HookBase {
  /** The program and its arguments; relative paths are inside the declaring plugin. */
  command: string[];
  /** Like 10s or 1m; default 10s. A hook that does not answer in time denies. */
  timeout?: string;
}

export type HookSpec = RuleHookSpec | CommandHookSpec;

/** What a hook sees: the tool call as a pre_tool_call. */
export interface PreToolCall {
  event: "pre_tool_call";
  /** `<harness>.<tool>`, for example `claude-agent-sdk.Bash`. */
  name: string;
  harness: string;
  tool: string;
  arguments: JsonObject;
  job_id: string;
  session_id: string;
  call_id: string;
  agent: { name: string; version: number };
}

/** One hook's answer. `continue` is "no opinion": the next hook decides. */
export interface HookVerdict {
  decision: HookDecisionName | "continue";
  reason: string;
  /** The input the call runs with instead (allow, ask). */
  input?: JsonObject;
  /** A command hook stopped by its caller's signal before it answered (a deny): no hook decided the call. */
  stopped?: true;
}

export function isCommandHook(spec: HookSpec): spec is CommandHookSpec {
  return Array.isArray((spec as CommandHookSpec).command);
}

function globToRegExp(glob: string): RegExp {
  const body = glob
    .replace(/[.+^${}()|[\]\\]/g, "\\$&")
    .replaceAll("*", ".*")
    .replaceAll("?", ".");
  return new RegExp(`^${body}$`);
}

/** True when `name` is one of `patterns` (exact names, or globs with `*` and `?`). */
export function nameMatches(patterns: string | string[] | undefined, name: string): boolean {
  if (patterns === undefined) return true;
  const list = Array.isArray(patterns) ? patterns : [patterns];
  return list.some((p) => (/[*?]/.test(p) ? globToRegExp(p).test(name) : p === name));
}

/** RFC 6901: `""` is the whole document, `/a/0/b~1c` walks objects and arrays. */
export function resolvePointer(document: unknown, pointer: string): { found: boolean; value?: unknown } {
  if (pointer === "") return { found: true, value: document };
  if (!pointer.startsWith("/")) return { found: false };
  let current: unknown = document;
  for (const raw of pointer.slice(1).split("/")) {
    const key = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    if (Array.isArray(current)) {
      if (!/^(0|[1-9]\d*)$/.test(key) || Number(key) >= current.length) return { found: false };
      current = current[Number(key)];
    } else if (current !== null && typeof current === "object" && Object.hasOwn(current, key)) {
      current = (current as Record<string, unknown>)[key];
    } else {
      return { found: false };
    }
  }
  return { found: true, value: current };
}

// The `l` flag needs this; set before any pattern is compiled with it.
setFlagsFromString("--enable-experimental-regexp-engine");

/** Patterns compiled for the linear-time engine, by their source (the installed plugins' and agents' rules). */
const compiled = new Map<string, RegExp>();

/** `pattern` on V8's linear-time engine; throws SyntaxError when it does not compile or needs backtracking. */
export function linearRegExp(pattern: string): RegExp {
  let regex = compiled.get(pattern);
  if (regex === undefined) {
    // eslint-disable-next-line no-invalid-regexp -- `l` is V8's linear-time engine, enabled above; ESLint knows only the standard flags
    regex = new RegExp(pattern, "l");
    compiled.set(pattern, regex);
  }
  return regex;
}

function conditionHolds(condition: HookInputCondition, input: JsonObject): boolean {
  const { found, value } = resolvePointer(input, condition.pointer);
  if (!found) return false;
  if ("equals" in condition && !isDeepStrictEqual(value, condition.equals)) return false;
  if (condition.regex !== undefined) {
    const text = typeof value === "string" ? value : JSON.stringify(value);
    if (!linearRegExp(condition.regex).test(text)) return false;
  }
  return true;
}

/** Does the hook apply to this call (event, name and every input condition)? */
export function hookMatches(spec: HookSpec, call: PreToolCall): boolean {
  if ((spec.event ?? "pre_tool_call") !== call.event) return false;
  if (!nameMatches(spec.match, call.name)) return false;
  return (spec.when ?? []).every((c) => conditionHolds(c, call.arguments));
}

/** A rule's verdict for a call it matches. */
export function ruleVerdict(spec: RuleHookSpec, call: PreToolCall): HookVerdict {
  const reason =
    spec.reason ??
    (spec.decision === "deny"
      ? `${call.name} is denied by a hook rule`
      : `${call.name}: ${spec.decision} by a hook rule`);
  return {
    decision: spec.decision,
    reason,
    ...(spec.set_input && spec.decision !== "deny" ? { input: { ...call.arguments, ...spec.set_input } } : {}),
  };
}

/** Problems a schema cannot see (a regex that does not compile, or needs backtracking); names the field. */
export function checkHookSpecs(specs: HookSpec[], where: string): void {
  specs.forEach((spec, i) => {
    (spec.when ?? []).forEach((c, j) => {
      if (c.regex === undefined) return;
      try {
        linearRegExp(c.regex);
      } catch (error) {
        throw new Error(
          `${where}: field /hooks/${i}/when/${j}/regex: expected a valid regular expression that runs in linear time, without backreferences or lookarounds (${(error as Error).message})`,
        );
      }
    });
  });
}
