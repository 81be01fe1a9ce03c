// The hooks stage of the tool policy: every permission request becomes a
// pre_tool_call named `<harness>.<tool>` with the tool's input as arguments,
// shown to the hooks of the harness's plugin, then of the agent's plugin,
// then of the agent itself, in declaration order. The first hook that
// decides (allow, deny, ask) ends the stage; a hook may change the input.
// Plugin hooks come from the installed, content-addressed copy the agent
// version points at, so a job always runs the hooks it was published with.
import { readFileSync } from "node:fs";
import path from "node:path";
import { parse } from "yaml";
import { parseDuration } from "../agents/agent-versions.js";
import { runCommandHook } from "./command-hooks.js";
import { isolatedHook, type HookIsolation } from "./hook-isolation.js";
import { resolveHarnessCommand } from "../agents/harness-command.js";
import {
  hookMatches,
  isCommandHook,
  ruleVerdict,
  type HookSpec,
  type HookVerdict,
  type PreToolCall,
} from "./hook-rules.js";
import type { AgentVersionRecord } from "../store/job-store.js";
import type { PermissionQuestion, PermissionStage, PolicyDecision } from "./permission-policy.js";
import { nonFiniteNumberAt } from "../operations/harness-operations.js";
import { MANIFEST_FILE } from "../plugins/plugin-registry.js";
import type { PluginManifest } from "../plugins/plugin-types.js";
import { orchestratorTracing } from "../tracing.js";

/** A hook with where it was declared (its relative commands run from that plugin's folder). */
export interface SourcedHook {
  spec: HookSpec;
  /** For the record: `plugin tools` or `agent fixer`. */
  source: string;
  label: string;
  pluginDir: string;
}

function manifestHooks(pluginDir: string, cache: Map<string, HookSpec[]>): HookSpec[] {
  let hooks = cache.get(pluginDir);
  if (!hooks) {
    // Validated at install; the copy is immutable, so reading it once is enough.
    const manifest = parse(readFileSync(path.join(pluginDir, MANIFEST_FILE), "utf8")) as PluginManifest;
    hooks = (manifest.hooks ?? []) as unknown as HookSpec[];
    cache.set(pluginDir, hooks);
  }
  return hooks;
}

/** Every hook that sees this agent's calls, in the order they are asked. */
export function hooksFor(agent: AgentVersionRecord, cache: Map<string, HookSpec[]> = new Map()): SourcedHook[] {
  const out: SourcedHook[] = [];
  const add = (specs: HookSpec[], source: string, pluginDir: string): void => {
    specs.forEach((spec, i) =>
      out.push({ spec, source, pluginDir, label: `hook ${spec.name ?? `#${i}`} (${source})` }),
    );
  };
  add(manifestHooks(agent.harness.pluginPath, cache), `plugin ${agent.harness.plugin}`, agent.harness.pluginPath);
  if (agent.pluginPath !== agent.harness.pluginPath)
    add(manifestHooks(agent.pluginPath, cache), `plugin ${agent.plugin}`, agent.pluginPath);
  add((agent.definition.hooks ?? []) as unknown as HookSpec[], `agent ${agent.name}`, agent.pluginPath);
  return out;
}

export function preToolCall(q: PermissionQuestion): PreToolCall {
  const harness = q.agent.harness.manifest.name;
  return {
    event: "pre_tool_call",
    name: `${harness}.${q.tool}`,
    harness,
    tool: q.tool,
    arguments: q.input ?? {},
    job_id: q.jobId,
    session_id: q.sessionId,
    call_id: q.callId,
    agent: { name: q.agent.name, version: q.agent.version },
  };
}

async function verdictOf(
  hook: SourcedHook,
  call: PreToolCall,
  isolation: HookIsolation | undefined,
  signal: AbortSignal | undefined,
): Promise<HookVerdict> {
  const spec = hook.spec;
  if (!isCommandHook(spec)) return ruleVerdict(spec, call);
  const resolved = resolveHarnessCommand({
    plugin: hook.source,
    pluginPath: hook.pluginDir,
    manifest: { name: "hook", command: spec.command },
  });
  const isolated = isolation ? isolatedHook(isolation, { command: resolved, pluginDir: hook.pluginDir }) : undefined;
  try {
    return await runCommandHook({
      command: isolated?.command ?? resolved,
      env: isolated?.env ?? {},
      ...(isolated?.readFile !== undefined ? { readFile: isolated.readFile } : {}),
      call,
      label: hook.label,
      cwd: hook.pluginDir,
      ...(spec.timeout ? { timeoutMs: parseDuration(spec.timeout) } : {}),
      ...(signal ? { signal } : {}),
    });
  } finally {
    isolated?.dispose();
  }
}

export class HookStage implements PermissionStage {
  readonly name = "hooks";
  readonly #cache = new Map<string, HookSpec[]>();
  readonly #isolation: HookIsolation | undefined;

  /** `isolation`: how command hooks are walled in (hook-isolation.ts); without it, they run as the orchestrator's user. */
  constructor(options: { isolation?: HookIsolation | undefined } = {}) {
    this.#isolation = options.isolation;
  }

  async decide(q: PermissionQuestion): Promise<PolicyDecision | undefined> {
    const call = preToolCall(q);
    for (const hook of hooksFor(q.agent, this.#cache)) {
      if (!hookMatches(hook.spec, call)) continue;
      let verdict: HookVerdict;
      try {
        verdict = await orchestratorTracing.traceHook(
          { sessionId: q.sessionId, permissionId: q.id, hook: hook.spec.name ?? "hook", source: hook.source },
          () => verdictOf(hook, call, this.#isolation, q.signal),
        );
      } catch (error) {
        // A hook that cannot even be evaluated (a bad regex, a bad timeout) fails closed like a crashing one.
        verdict = {
          decision: "deny",
          reason: `${hook.label} is broken (${(error as Error).message}); the call is denied`,
        };
      }
      if (verdict.decision === "continue") continue;
      // JSON has no Infinity or NaN (a hook's 1e400, a manifest's .inf): the job's records could not hold the
      // input, and the job failed three decisions later as if its session had sent something unstorable.
      const notFinite = verdict.input ? nonFiniteNumberAt(verdict.input) : undefined;
      if (notFinite !== undefined)
        verdict = {
          decision: "deny",
          reason: `${hook.label} answered with an input whose number at ${notFinite} is not finite (JSON has no Infinity or NaN); the call is denied`,
        };
      // The hook's name goes into the reason, so the job's record says which hook decided.
      const reason = verdict.reason.startsWith(hook.label) ? verdict.reason : `${hook.label}: ${verdict.reason}`;
      const changed = verdict.input ? { input: verdict.input, inputChangedBy: hook.label } : {};
      switch (verdict.decision) {
        case "deny":
          return { kind: "deny", decider: "hook", reason, ...(verdict.stopped ? { stopped: true as const } : {}) };
        case "ask":
          return { kind: "ask", reason, ...changed };
        case "allow":
          return { kind: "allow", decider: "hook", reason, ...changed };
      }
    }
    return undefined;
  }
}
