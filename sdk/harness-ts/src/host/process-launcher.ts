// How a harness process is started and signalled. The default runs it as the
// leader of its own process group and signals the whole group; a sandbox
// substitutes its own (for example bubblewrap, where SIGTERM goes to the pid
// inside the namespace and SIGKILL to bwrap).
import { spawn } from "node:child_process";
import type { ChildProcessByStdio } from "node:child_process";
import type { Readable, Writable } from "node:stream";

/** What a launcher is asked to start. */
export interface LaunchSpec {
  /** The command and its arguments; `command[0]` is looked up on `env.PATH`. */
  command: string[];
  cwd: string;
  /** The complete environment of the process; nothing is inherited. */
  env: Record<string, string>;
}

/** A child process with its three standard streams piped. */
export type PipedChildProcess = ChildProcessByStdio<Writable, Readable, Readable>;

/** A started harness and how to stop it. */
export interface LaunchedHarness {
  /** The process whose stdio carries the protocol and whose exit ends the session. */
  child: PipedChildProcess;
  /** Ask the harness to stop (SIGTERM to what should receive it). */
  terminate(): void | Promise<void>;
  /** Stop the harness and everything it started, now (SIGKILL). Called after the grace, and after every exit. */
  kill(): void | Promise<void>;
  /** Whether any process the harness started is still alive; used to report processes left behind after exit. */
  hasLiveProcesses?(): boolean;
}

/** Starts harness processes. */
export interface HarnessLauncher {
  /** Starts the command; throwing or emitting `error` on the child both mean it could not start. */
  launch(spec: LaunchSpec): LaunchedHarness;
}

/** Process groups started by the default launcher that may still have members. */
const liveGroups = new Set<number>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // 'exit' runs on process.exit() and on a natural end; a host that handles
  // SIGTERM by exiting gets it too. Only synchronous work is possible here.
  process.on("exit", killAllHarnessGroups);
}

/**
 * SIGKILLs every process group the default launcher started that has not been
 * reaped yet. Runs automatically when the host process exits; call it from a
 * fatal-signal handler that does not end in `process.exit()`.
 */
export function killAllHarnessGroups(): void {
  for (const pgid of liveGroups) signalGroup(pgid, "SIGKILL");
  liveGroups.clear();
}

/** Sends `signal` to the process group `pgid`; a group already gone is not an error. */
export function signalGroup(pgid: number, signal: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ESRCH") return false;
    throw error;
  }
}

/**
 * The default launcher: `detached: true` makes the child call setsid, so it
 * leads its own session and process group, and every signal goes to the
 * whole group (grandchildren included). The group is killed when the host
 * process exits, so a harness never outlives its host.
 */
export function processGroupLauncher(): HarnessLauncher {
  return {
    launch(spec: LaunchSpec): LaunchedHarness {
      const [file, ...args] = spec.command;
      if (file === undefined) throw new Error("the harness command is empty");
      const child = spawn(file, args, {
        cwd: spec.cwd,
        env: spec.env,
        detached: true,
        stdio: ["pipe", "pipe", "pipe"],
      });
      const pgid = child.pid;
      if (pgid !== undefined) {
        installExitHook();
        liveGroups.add(pgid);
      }
      return {
        child,
        terminate() {
          if (pgid !== undefined) signalGroup(pgid, "SIGTERM");
        },
        kill() {
          if (pgid === undefined) return;
          signalGroup(pgid, "SIGKILL");
          liveGroups.delete(pgid);
        },
        hasLiveProcesses() {
          return pgid !== undefined && signalGroup(pgid, 0);
        },
      };
    },
  };
}
