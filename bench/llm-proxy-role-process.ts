// The LLM proxy benches' helper processes (scripted upstream, proxy, bare
// forwarder): each prints one JSON line with its URL, answers "cpu" on stdin
// with its CPU time so far, and exits when its stdin closes (when the bench
// ends). And the one way the benches call them.
import { spawn, type ChildProcess } from "node:child_process";
import http from "node:http";

/** Call in a helper process. */
export function serveRoleControl(): void {
  process.stdin.resume();
  process.stdin.on("end", () => process.exit(0));
  // CPU per call is what a loaded machine distorts far less than wall time.
  process.stdin.on("data", (chunk: Buffer) => {
    if (chunk.toString().includes("cpu")) {
      const { user, system } = process.cpuUsage();
      process.stdout.write(`${JSON.stringify({ cpuMicros: user + system })}\n`);
    }
  });
}

export interface Role {
  child: ChildProcess;
  info: { url: string; token?: string };
  lines: string[];
}

/** Start a helper (`node --import tsx <args>`) and wait for its first line. */
export function startRoleProcess(nodeArgs: string[]): Promise<Role> {
  const child = spawn(process.execPath, nodeArgs, { stdio: ["pipe", "pipe", "inherit"], env: { ...process.env, OZ0_LOG_LEVEL: "warn" } });
  return new Promise((resolve, reject) => {
    let out = "";
    const lines: string[] = [];
    child.stdout!.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const parts = out.split("\n");
      out = parts.pop() ?? "";
      for (const line of parts) {
        if (lines.length === 0) resolve({ child, info: JSON.parse(line), lines });
        lines.push(line);
      }
    });
    child.once("exit", (code) => reject(new Error(`${nodeArgs.join(" ")} exited with ${code}`)));
  });
}

/** CPU microseconds the helper has used so far. */
export async function cpuOf(role: Role): Promise<number> {
  const before = role.lines.length;
  role.child.stdin!.write("cpu\n");
  while (role.lines.length === before) await new Promise((r) => setTimeout(r, 5));
  return (JSON.parse(role.lines.at(-1)!) as { cpuMicros: number }).cpuMicros;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 512 });

/** One JSON POST over pooled keep-alive connections; rejects on anything but 200 (`label` names the target). */
export function postJson(options: { url: URL; headers: Record<string, string>; body: Buffer; label: string }): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.request(options.url, { method: "POST", agent, headers: { ...options.headers, "content-type": "application/json", "content-length": String(options.body.length) } }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`${options.label}: HTTP ${res.statusCode}`));
      res.on("data", () => {});
      res.on("end", resolve);
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(options.body);
  });
}

/** Closes the pooled connections postJson keeps, so the bench can exit. */
export function closePostConnections(): void {
  agent.destroy();
}
