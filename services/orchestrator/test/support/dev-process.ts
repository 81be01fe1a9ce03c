// `oz0 dev` as a test runs it: a child process, resolved once it says it is
// ready, and the pids of the services it runs (from its record).
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { cliMain } from "./test-stack.js";

export interface DevProcess {
  child: ChildProcess;
  stderr: () => string;
}

/** `oz0 dev --port 0 --model-script FILE` with `env`, added to `children` (for the test's clean-up). */
export async function startDevProcess(options: {
  env: NodeJS.ProcessEnv;
  modelScript: string;
  children: Set<ChildProcess>;
}): Promise<DevProcess> {
  const child = spawn(process.execPath, [cliMain, "dev", "--port", "0", "--model-script", options.modelScript], {
    env: options.env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  options.children.add(child);
  let stdout = "";
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on("data", (d: Buffer) => {
      stdout += d.toString();
      if (stdout.includes("ready:")) resolve();
    });
    child.once("exit", (code) => reject(new Error(`oz0 dev exited (${code}) before it was ready: ${stderr}`)));
  });
  return { child, stderr: () => stderr };
}

/** Each service's pid, as the dev stack of `home` recorded it. */
export function devServicePids(home: string): Record<string, number> {
  const record = JSON.parse(readFileSync(path.join(home, "credentials", "dev-stack.json"), "utf8")) as {
    services: Record<string, { pid: number }>;
  };
  return Object.fromEntries(Object.entries(record.services).map(([name, s]) => [name, s.pid]));
}
