// Starting and stopping the broker processes we own, by pid, and never
// leaving one behind when the test runner exits.
import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { openSync, closeSync } from "node:fs";

const owned = new Set<ChildProcess>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Last resort: a runner that exits without stopping what it started must not
  // leave a JVM or a postgres behind on a shared 2-core machine.
  process.on("exit", () => {
    for (const child of owned) child.kill("SIGKILL");
  });
}

export interface OwnedProcess {
  readonly pid: number;
  readonly exited: Promise<number | null>;
  /** Send `signal`, then SIGKILL after `graceMs`; resolves once it exited. */
  stop(options?: { signal?: NodeJS.Signals; graceMs?: number }): Promise<void>;
}

/** Spawn `command` with stdout and stderr appended to `logFile`. */
export function spawnOwned(options: {
  command: string;
  args: string[];
  logFile: string;
  env?: NodeJS.ProcessEnv;
  uid?: number;
  gid?: number;
  cwd?: string;
}): OwnedProcess {
  installExitHook();
  const fd = openSync(options.logFile, "a");
  const spawnOptions: SpawnOptions = {
    stdio: ["ignore", fd, fd],
    env: options.env ?? process.env,
    cwd: options.cwd,
  };
  if (options.uid !== undefined) spawnOptions.uid = options.uid;
  if (options.gid !== undefined) spawnOptions.gid = options.gid;
  const child = spawn(options.command, options.args, spawnOptions);
  closeSync(fd);
  owned.add(child);
  const exited = new Promise<number | null>((resolve) => {
    child.once("exit", (code) => {
      owned.delete(child);
      resolve(code);
    });
    child.once("error", () => {
      owned.delete(child);
      resolve(null);
    });
  });
  return {
    pid: child.pid ?? -1,
    exited,
    async stop({ signal = "SIGTERM", graceMs = 10_000 } = {}) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill(signal);
      const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Run a command to completion; rejects with its output when it fails. */
export function runToCompletion(options: {
  command: string;
  args: string[];
  env?: NodeJS.ProcessEnv;
  uid?: number;
  gid?: number;
  cwd?: string;
}): Promise<string> {
  return new Promise((resolve, reject) => {
    const spawnOptions: SpawnOptions = {
      stdio: ["ignore", "pipe", "pipe"],
      env: options.env ?? process.env,
      cwd: options.cwd,
    };
    if (options.uid !== undefined) spawnOptions.uid = options.uid;
    if (options.gid !== undefined) spawnOptions.gid = options.gid;
    const child = spawn(options.command, options.args, spawnOptions);
    let output = "";
    child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.once("error", reject);
    child.once("exit", (code) => {
      if (code === 0) resolve(output);
      else
        reject(new Error(`${options.command} ${options.args.join(" ")} exited with ${code}:\n${output.slice(-4000)}`));
    });
  });
}
