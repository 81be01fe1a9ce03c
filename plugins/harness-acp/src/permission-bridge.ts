// ACP `session/request_permission` as one harness permission request. The
// runtime's answer selects the agent's allow_once or reject_once option,
// never an "always" one: every call asks again.
import path from "node:path";
import { isDeepStrictEqual } from "node:util";
import { PermissionAnswer_Outcome, realTarget } from "@oz0/harness";
import type { HarnessSession, PermissionDecision } from "@oz0/harness";
import type { JsonObject } from "@bufbuild/protobuf";
import type { SessionUpdateMapper } from "./session-update-mapper.js";
import { toolName } from "./session-update-mapper.js";

/** The ACP answer: the outcome and, for agents that read it, why (`_meta.oz0.reason`). */
export interface AcpPermissionResponse {
  outcome: { outcome: "cancelled" } | { outcome: "selected"; optionId: string };
  _meta?: { oz0: { reason: string; allowed: boolean } };
}

interface PermissionOption {
  optionId: string;
  kind: string;
}

export interface PermissionBridgeOptions {
  session: Pick<HarnessSession, "requestPermission" | "log">;
  mapper: SessionUpdateMapper;
  /** Aborted when the session is cancelled: pending requests are answered `cancelled`. */
  cancelSignal: AbortSignal;
  /**
   * The runtime answered a request `cancelled`: it is cancelling the session
   * (its SIGTERM follows). Called before the agent hears the answer, so the
   * agent gets `session/cancel` as the protocol asks, whichever comes first.
   */
  onSessionCancelled?: (reason: string) => void;
  /** The session's working directory: calls on paths outside it are asked about, then refused whatever the answer. */
  workingDir: string;
  /** The agent's HOME, where agents expand `~` (agent-environment.ts). */
  homeDir: string;
}

/**
 * The first of `paths` outside `workingDir`, if any: read as Claude Code
 * reads a tool's path (leading and trailing whitespace dropped, so
 * `" /etc/passwd"` is `/etc/passwd`), `~` and `~/...` are the agent's HOME
 * (as agents expand them), relative paths are resolved against the working
 * directory, and symlinks are followed, so a link inside the working
 * directory to a place outside it is outside.
 */
export function pathOutside(paths: readonly string[], workingDir: string, homeDir: string): string | undefined {
  const root = realTarget(path.resolve(workingDir));
  return paths.find((written) => {
    const p = written.trim();
    const expanded = p === "~" ? homeDir : p.startsWith("~/") ? path.join(homeDir, p.slice(2)) : p;
    const relative = path.relative(root, realTarget(path.resolve(root, expanded)));
    return relative !== "" && (relative === ".." || relative.startsWith(`..${path.sep}`) || path.isAbsolute(relative));
  });
}

function options(params: Record<string, unknown>): PermissionOption[] {
  const raw = Array.isArray(params["options"]) ? params["options"] : [];
  return raw.flatMap((o: unknown) => {
    if (typeof o !== "object" || o === null) return [];
    const { optionId, kind } = o as Record<string, unknown>;
    return typeof optionId === "string" && typeof kind === "string" ? [{ optionId, kind }] : [];
  });
}

/** Answers one `session/request_permission`; throws AcpSessionError for a tool call never announced (session-update-mapper.ts). */
export async function answerPermissionRequest(
  params: unknown,
  bridge: PermissionBridgeOptions,
): Promise<AcpPermissionResponse> {
  const record = (typeof params === "object" && params !== null ? params : {}) as Record<string, unknown>;
  const tracked = await bridge.mapper.toolCallForPermission(record["toolCall"], bridge.cancelSignal);
  if (tracked === undefined) return { outcome: { outcome: "cancelled" } };
  const offered = options(record);
  const allowOnce = offered.find((o) => o.kind === "allow_once");
  // Without reject_once, reject_always still refuses (and refuses later calls too, which fails closed).
  const reject = offered.find((o) => o.kind === "reject_once") ?? offered.find((o) => o.kind === "reject_always");
  if (bridge.cancelSignal.aborted) return { outcome: { outcome: "cancelled" } };

  // Nothing but the runtime's allow lets this call run (session-update-mapper.ts fails a call that runs otherwise).
  tracked.permission = "refused";
  const outside = pathOutside(tracked.paths, bridge.workingDir, bridge.homeDir);
  const requested: JsonObject = tracked.input;
  let decision: PermissionDecision;
  try {
    decision = await raceCancel(
      bridge.session.requestPermission({
        tool: toolName(tracked),
        input: requested,
        title: tracked.title,
        callId: tracked.id,
      }),
      bridge.cancelSignal,
    );
  } catch (error) {
    bridge.session.log("info", "a permission request ended without an answer", {
      toolCallId: tracked.id,
      error: (error as Error).message,
    });
    return { outcome: { outcome: "cancelled" } };
  }
  if (decision.outcome === PermissionAnswer_Outcome.CANCELLED)
    bridge.onSessionCancelled?.(decision.reason || "the session was cancelled");
  if (
    decision.outcome === PermissionAnswer_Outcome.CANCELLED ||
    decision.outcome === PermissionAnswer_Outcome.TIMED_OUT
  ) {
    return { outcome: { outcome: "cancelled" }, _meta: { oz0: { reason: decision.reason, allowed: false } } };
  }
  const refuse = (reason: string): AcpPermissionResponse => refuseWith(reject, reason);
  if (outside !== undefined) {
    // The session works only in its working directory, whatever the runtime or the agent's own rules
    // allow. The runtime is asked all the same: the orchestrator stops a job at a tool result that no
    // permission request covers, an error result included (a refusal looks like a failed run).
    bridge.session.log("warn", "refused a tool call outside the working directory", {
      toolCallId: tracked.id,
      path: outside,
    });
    return refuse(`${outside} is outside the session's working directory; work only inside ${bridge.workingDir}`);
  }
  if (!decision.allow) return refuse(decision.reason);
  if (!isDeepStrictEqual(decision.input, requested)) {
    // ACP has no way to run a call with another input than the agent asked for.
    const reason =
      "the call was approved only with a changed input, which this ACP agent cannot run; make the call again with the approved input";
    bridge.session.log("warn", "refused a call approved with a changed input", { toolCallId: tracked.id });
    return refuse(decision.reason !== "" ? `${reason} (${decision.reason})` : reason);
  }
  if (allowOnce === undefined) {
    bridge.session.log("warn", "the agent offered no allow_once option; refusing rather than allowing always", {
      toolCallId: tracked.id,
    });
    return refuse("this harness allows one call at a time and the agent offered no allow_once option");
  }
  tracked.permission = "allowed";
  return {
    outcome: { outcome: "selected", optionId: allowOnce.optionId },
    _meta: { oz0: { reason: decision.reason, allowed: true } },
  };
}

function refuseWith(reject: PermissionOption | undefined, reason: string): AcpPermissionResponse {
  return reject === undefined
    ? { outcome: { outcome: "cancelled" }, _meta: { oz0: { reason, allowed: false } } }
    : { outcome: { outcome: "selected", optionId: reject.optionId }, _meta: { oz0: { reason, allowed: false } } };
}

function raceCancel<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(new Error("the session was cancelled"));
    if (signal.aborted) onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error instanceof Error ? error : new Error(String(error)));
      },
    );
  });
}
