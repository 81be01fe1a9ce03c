// The ACP agent as a child process in a process group of its own, with its
// stdout checked line by line before the ACP SDK reads it: the SDK answers a
// malformed line and carries on, which would leave the session waiting for
// an answer that never comes, so this harness ends the session instead.
import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { accessSync, constants, existsSync } from "node:fs";
import path from "node:path";
import { Writable } from "node:stream";
import { ndJsonStream } from "@agentclientprotocol/sdk";
import type { Stream } from "@agentclientprotocol/sdk";
import { AcpSessionError } from "./acp-errors.js";

/** Longest stdout line accepted from an agent (a whole file in one update fits). */
const MAX_LINE_BYTES = 32 * 1024 * 1024;

export interface AgentProcessOptions {
  command: string[];
  cwd: string;
  env: Record<string, string>;
  /** Called once with the first problem: a bad line, stdout closed, or the process gone. */
  onFailure: (error: AcpSessionError) => void;
  /** The agent's stderr, as it comes. */
  onStderr: (chunk: Buffer) => void;
  /**
   * Every `session/update` notification's params, in stdout order. They are
   * taken here, before the SDK: its client drops an update that fails its
   * schema with a log line, and the session must end on one instead.
   */
  onSessionUpdate: (params: unknown) => void;
}

/** A started agent. */
export interface AgentProcess {
  /** The ACP stream over its stdin and (checked) stdout. */
  stream: Stream;
  child: ChildProcess;
  /** Resolves when the process has exited. */
  exited: Promise<void>;
  /** True once stdout ended or the process exited. */
  readonly gone: boolean;
  /** SIGTERM to the agent's process group, SIGKILL after `graceMs`; resolves when the leader is gone. */
  stop(graceMs: number): Promise<void>;
}

/** Why a line is not a JSON-RPC 2.0 message, or undefined when it is one. */
export function jsonRpcProblem(line: string): string | undefined {
  const parsed = parseJsonRpc(line);
  return typeof parsed === "string" ? parsed : undefined;
}

/** The message of a JSON-RPC 2.0 line, or why it is not one. */
function parseJsonRpc(line: string): Record<string, unknown> | string {
  let message: unknown;
  try {
    message = JSON.parse(line);
  } catch {
    return "it is not JSON";
  }
  if (typeof message !== "object" || message === null || Array.isArray(message)) return "it is not a JSON object";
  const m = message as Record<string, unknown>;
  if (m["jsonrpc"] !== "2.0") return 'it has no "jsonrpc": "2.0"';
  if (typeof m["method"] === "string") return m;
  if ("id" in m && ("result" in m || "error" in m)) return m;
  return "it is neither a request, a notification nor a response";
}

function preview(line: string): string {
  return JSON.stringify(line.length > 120 ? `${line.slice(0, 120)}…` : line);
}

/** Whether `program` is an executable as execvp would find it with `PATH` (checked first, so a missing agent is a clear error). */
export function findProgram(program: string, cwd: string, pathVariable: string): boolean {
  const candidates = program.includes("/")
    ? [path.resolve(cwd, program)]
    : pathVariable
        .split(":")
        .filter((dir) => dir !== "")
        .map((dir) => path.join(dir, program));
  return candidates.some((candidate) => {
    try {
      accessSync(candidate, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/**
 * `setpriv --pdeathsig KILL` (util-linux) makes the kernel kill the agent if
 * this harness dies without cleaning up (the runtime's SIGKILL reaches only
 * the harness's own process group, and the agent has a group of its own).
 */
const SETPRIV = ["/usr/bin/setpriv", "/bin/setpriv"].find((candidate) => existsSync(candidate));

export function startAgentProcess(options: AgentProcessOptions): AgentProcess {
  const [program, ...args] = options.command;
  if (program === undefined) throw new AcpSessionError("agent_start_failed", "the agent command is empty");
  if (!findProgram(program, options.cwd, options.env["PATH"] ?? "")) {
    throw new AcpSessionError(
      "agent_start_failed",
      `could not start the ACP agent: ${JSON.stringify(program)} is not an executable on the agent's PATH`,
    );
  }
  const argv = SETPRIV === undefined ? [program, ...args] : [SETPRIV, "--pdeathsig", "KILL", "--", program, ...args];
  // detached: its own process group, so ending the agent ends everything it started.
  const child = spawn(argv[0] ?? program, argv.slice(1), {
    cwd: options.cwd,
    env: options.env,
    detached: true,
    stdio: ["pipe", "pipe", "pipe"],
  });
  // A harness that exits any other way (an uncaught error) still takes the agent's group with it.
  const killOnExit = (): void => {
    if (child.pid !== undefined && !gone) {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
  };
  process.on("exit", killOnExit);
  let gone = false;
  let exitDescription = "";
  let failed = false;
  const fail = (error: AcpSessionError): void => {
    if (failed) return;
    failed = true;
    options.onFailure(error);
  };
  const exited = new Promise<void>((resolve) => {
    child.on("exit", (code, signal) => {
      gone = true;
      process.off("exit", killOnExit);
      exitDescription = signal !== null ? `was killed by ${signal}` : `exited with code ${code ?? "?"}`;
      resolve();
    });
    child.on("error", (error) => {
      gone = true;
      fail(
        new AcpSessionError(
          "agent_start_failed",
          `could not start the ACP agent ${JSON.stringify(program)}: ${error.message}`,
        ),
      );
      resolve();
    });
  });
  child.stderr.on("data", (chunk: Buffer) => options.onStderr(chunk));
  child.stdin.on("error", () => {});

  let pending: Buffer = Buffer.alloc(0);
  const checked = new ReadableStream<Uint8Array>({
    start(controller) {
      const onLine = (bytes: Buffer): void => {
        const line = bytes.toString("utf8").trim();
        if (line === "") return;
        const message = parseJsonRpc(line);
        if (typeof message === "string") {
          fail(
            new AcpSessionError(
              "malformed_message",
              `the ACP agent wrote a stdout line that is not a JSON-RPC 2.0 message (${message}): ${preview(line)}`,
            ),
          );
          return;
        }
        if (message["method"] === "session/update" && !("id" in message)) {
          options.onSessionUpdate(message["params"]);
          return;
        }
        try {
          controller.enqueue(new Uint8Array(Buffer.concat([bytes, Buffer.from("\n")])));
        } catch {
          // The session is over (it failed and closed the connection); later lines go nowhere.
        }
      };
      child.stdout.on("data", (chunk: Buffer) => {
        pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
        let newline: number;
        while ((newline = pending.indexOf(0x0a)) !== -1) {
          onLine(pending.subarray(0, newline));
          pending = pending.subarray(newline + 1);
        }
        if (pending.length > MAX_LINE_BYTES) {
          fail(
            new AcpSessionError(
              "malformed_message",
              `the ACP agent wrote a stdout line longer than ${MAX_LINE_BYTES} bytes`,
            ),
          );
          pending = Buffer.alloc(0);
        }
      });
      child.stdout.on("end", () => {
        if (pending.length > 0) onLine(pending);
        gone = true;
        // Report how it ended once the exit status is known (it follows stdout's end
        // closely), a moment later than the lines before it: an agent that answers
        // and exits must not have its answer overtaken by the news of its exit.
        void exited.then(() =>
          setTimeout(
            () =>
              fail(
                new AcpSessionError(
                  "agent_exited",
                  `the ACP agent ${exitDescription || "closed its stdout"} before the prompt turn ended`,
                ),
              ),
            100,
          ),
        );
        try {
          controller.close();
        } catch {
          // The connection was closed first (the session is over) and cancelled the stream.
        }
      });
    },
  });
  const stream = ndJsonStream(Writable.toWeb(child.stdin) as WritableStream<Uint8Array>, checked);

  const stop = async (graceMs: number): Promise<void> => {
    const group = child.pid;
    if (group === undefined) return;
    const signalGroup = (signal: NodeJS.Signals): void => {
      try {
        process.kill(-group, signal);
      } catch {
        // Already gone.
      }
    };
    child.stdin.end();
    signalGroup("SIGTERM");
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([exited, new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)))]);
    clearTimeout(timer);
    // Whatever the agent started and left behind goes with it.
    signalGroup("SIGKILL");
    await exited;
  };

  return {
    stream,
    child,
    exited,
    get gone() {
      return gone;
    },
    stop,
  };
}
