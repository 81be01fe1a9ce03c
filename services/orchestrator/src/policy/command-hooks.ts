// Command hooks: a program gets the pre_tool_call as JSON on stdin and answers
// with one JSON object on stdout, `{ "decision": "allow"|"deny"|"ask",
// "reason", "input" }`. Every way a hook can fail (cannot start, exits
// non-zero, prints something else, does not answer in time) DENIES the call:
// a broken guard must never open the door.
import type { ChildProcessByStdio } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import { spawnReading } from "@oz0/sandbox";
import type { JsonObject } from "../store/job-store.js";
import { clippedHarnessText } from "./harness-text.js";
import type { HookVerdict, PreToolCall } from "./hook-rules.js";

const DEFAULT_TIMEOUT_MS = 10_000;
/** The most of a hook's reason that is kept: it is stored with the job, in every decision event, for viewers. */
const MAX_REASON_CHARS = 2_000;
/** Enough for any sensible answer; more is a broken hook, not a bigger answer. */
const MAX_OUTPUT_BYTES = 1 << 20;

export interface RunCommandHookOptions {
  /** Absolute program path and arguments. */
  command: string[];
  call: PreToolCall;
  /** What the deny reasons name, for example `hook check-commands (plugin tools)`. */
  label: string;
  timeoutMs?: number;
  cwd: string;
  /** Added to the little a hook gets of the orchestrator's environment (PATH and HOME): its isolation's (TMPDIR). */
  env?: Record<string, string>;
  /** A file the hook's command reads at fd 3, after its stdio (its isolation's seccomp program). */
  readFile?: string;
  /** Aborted (with a reason) when the call no longer needs the hook's answer: the hook is killed, and the call denied. */
  signal?: AbortSignal;
}

function deny(reason: string): HookVerdict {
  return { decision: "deny", reason };
}

/** Parse a hook's stdout; anything but a well-formed answer denies, saying why. */
export function parseHookAnswer(stdout: string, label: string): HookVerdict {
  let parsed: unknown;
  try {
    parsed = JSON.parse(stdout.trim());
  } catch {
    return deny(
      `${label} printed something that is not JSON (${JSON.stringify(stdout.trim().slice(0, 80))}); the call is denied`,
    );
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed))
    return deny(`${label} answered with JSON that is not an object; the call is denied`);
  const answer = parsed as { decision?: unknown; reason?: unknown; input?: unknown };
  if (!["allow", "deny", "ask", "continue"].includes(answer.decision as string)) {
    return deny(
      `${label} answered without a decision of allow, deny, ask or continue (got ${JSON.stringify(answer.decision)}); the call is denied`,
    );
  }
  if (answer.reason !== undefined && typeof answer.reason !== "string")
    return deny(`${label} answered with a reason that is not a string; the call is denied`);
  if (
    answer.input !== undefined &&
    (answer.input === null || typeof answer.input !== "object" || Array.isArray(answer.input))
  ) {
    return deny(`${label} answered with an input that is not a JSON object; the call is denied`);
  }
  const decision = answer.decision as HookVerdict["decision"];
  return {
    decision,
    // Its first MAX_REASON_CHARS characters, saying how long it was, with no character a terminal acts on.
    reason: answer.reason ? clippedHarnessText(answer.reason as string, MAX_REASON_CHARS) : `${label} said ${decision}`,
    ...(answer.input !== undefined && decision !== "deny" ? { input: answer.input as JsonObject } : {}),
  };
}

/** Run one command hook to its verdict. Never throws: failures are denials. */
export function runCommandHook(options: RunCommandHookOptions): Promise<HookVerdict> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const { label, signal } = options;
  const stopped = (): HookVerdict => ({
    ...deny(`${label} was stopped (${String(signal?.reason ?? "aborted")}); the call is denied`),
    stopped: true,
  });
  if (signal?.aborted) return Promise.resolve(stopped());
  return new Promise((resolve) => {
    let settled = false;
    const finish = (verdict: HookVerdict): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      resolve(verdict);
    };
    // A cancel must not wait for the hook's timeout, which may be hours: it holds the job's lock meanwhile.
    const onAbort = (): void => {
      killGroup();
      finish(stopped());
    };
    const [program, ...args] = options.command;
    let child: ChildProcessByStdio<Writable, Readable, Readable>;
    try {
      // Its own process group, so a timeout also ends whatever the hook started.
      child = spawnReading(
        program!,
        args,
        {
          cwd: options.cwd,
          stdio: ["pipe", "pipe", "pipe"],
          detached: true,
          env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/", ...options.env },
        },
        options.readFile,
      ) as ChildProcessByStdio<Writable, Readable, Readable>;
    } catch (error) {
      // The file could not be opened; before the timer is set, so resolved here rather than through finish().
      resolve(deny(`${label} could not start (${(error as Error).message}); the call is denied`));
      return;
    }
    const killGroup = (): void => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    };
    const timer = setTimeout(() => {
      killGroup();
      finish(deny(`${label} did not answer within ${timeoutMs} ms; the call is denied`));
    }, timeoutMs);
    signal?.addEventListener("abort", onAbort, { once: true });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
      if (stdout.length > MAX_OUTPUT_BYTES) {
        killGroup();
        finish(deny(`${label} printed more than ${MAX_OUTPUT_BYTES} bytes; the call is denied`));
      }
    });
    child.stderr.on("data", (d: Buffer) => {
      if (stderr.length < 4096) stderr += d.toString();
    });
    child.on("error", (error) => finish(deny(`${label} could not start (${error.message}); the call is denied`)));
    child.on("close", (code, signal) => {
      if (code !== 0) {
        const tail = stderr.trim().split("\n").pop()?.slice(0, 200) ?? "";
        finish(
          deny(
            `${label} failed (${signal ? `signal ${signal}` : `exit code ${String(code)}`})${tail ? `: ${tail}` : ""}; the call is denied`,
          ),
        );
        return;
      }
      finish(parseHookAnswer(stdout, label));
    });
    // A hook that exits without reading stdin makes this write fail; its exit status decides.
    child.stdin.on("error", () => undefined);
    child.stdin.end(`${JSON.stringify(options.call)}\n`);
  });
}
