// "Every tool call asks first", for a call of a tool the runtime serves (a
// harness operation, a graph manager's decision), when the harness declares
// permissions: it must have asked about a call of that tool with that input,
// been allowed, and no other runtime call may have used that permission.
// Without this, a harness could run an operation (a scratch session, its
// model calls, the parent's working directory) without asking, or after its
// request was denied: no tool result comes of it for the audit to see.
import type { JsonObject } from "@bufbuild/protobuf";
import { clippedHarnessText } from "../policy/harness-text.js";
import { inputAllowed } from "../policy/tool-call-audit.js";
import type { JobStore } from "../store/job-store.js";

/** A runtime tool call as the harness made it. */
export interface RuntimeCall {
  id: string;
  name: string;
  input?: JsonObject | undefined;
}

/** The fields a runtime tool's input schema names (its top-level `properties`); undefined when it names none or is not offered. */
export function schemaFields(schema: JsonObject | undefined): ReadonlySet<string> | undefined {
  const properties = schema?.properties;
  return properties && typeof properties === "object" && !Array.isArray(properties)
    ? new Set(Object.keys(properties))
    : undefined;
}

/**
 * The permits one runtime call looks through: approved, of its tool, used by
 * no other call. A harness asks, then calls, so a few wait at a time; reading
 * every permission of the job on each call let a harness that asked N times,
 * then called N times, hold the event loop every job shares for O(N^2) work
 * (4,000 of each: 75 s; attacker review). Beyond these, a call is refused.
 */
export const MAX_WAITING_RUNTIME_PERMITS = 64;

/**
 * The rule the call broke, or undefined: a permission allowed it, and is now
 * its own. The store keeps which call used a permission and hands each to one
 * call, so a replay of the same call (a re-attach) finds its own again, while
 * a second call finds it taken, after a restart or on another replica too (it
 * was once kept in the process's memory).
 */
export async function permitRuntimeCall(options: {
  store: Pick<JobStore, "listPermissions" | "runtimeCallPermits" | "usePermissionForRuntimeCall">;
  jobId: string;
  /** The harness's name, for the rule. */
  harness: string;
  call: RuntimeCall;
  /** The fields the called tool's schema names (schemaFields); a permission's field it names must be in the call. */
  named: ReadonlySet<string> | undefined;
}): Promise<string | undefined> {
  const { store, jobId, call, named } = options;
  const input = call.input ?? {};
  const permits = await store.runtimeCallPermits({
    jobId,
    tool: call.name,
    callId: call.id,
    limit: MAX_WAITING_RUNTIME_PERMITS,
  });
  for (const p of permits) {
    if (!inputAllowed(input, p.answerInput ?? p.input ?? {}, named)) continue;
    if (await store.usePermissionForRuntimeCall(jobId, p.id, call.id)) return undefined;
  }
  // Refused, and the job stops: once a job, so every permission of it may be read to say why.
  const what = `runtime tool ${clippedHarnessText(call.name)} (call ${clippedHarnessText(call.id)})`;
  if (permits.length === MAX_WAITING_RUNTIME_PERMITS)
    return `policy bypass: harness ${options.harness} called ${what} while ${MAX_WAITING_RUNTIME_PERMITS} or more of its allowed calls of that tool were not made yet, more than a harness that asks before each call holds (rule: every tool call asks first, then runs); the job was stopped`;
  const asked = (await store.listPermissions({ jobId })).filter(
    (p) => p.tool === call.name && inputAllowed(input, p.answerInput ?? p.input ?? {}, named),
  );
  const refused = asked.find((p) => p.status !== "approved");
  if (refused)
    return `policy bypass: harness ${options.harness} called ${what} although its permission was ${refused.status.replace("_", " ")} (rule: a call runs only once it is allowed); the job was stopped`;
  return `policy bypass: harness ${options.harness} called ${what} without a permission request allowed for it with this input, or with one an earlier call used (rule: every tool call asks first); the job was stopped`;
}
