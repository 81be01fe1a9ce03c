// The LLM proxy benches' helper processes (scripted upstream, proxy, bare
// forwarder): each prints one JSON line with its URL, answers commands on
// stdin with one JSON line each, and exits when its stdin closes (when the
// bench ends). And the one way the benches call them.
//   cpu                   its CPU time so far: {"cpuMicros": n}
//   profile-start         starts V8's CPU profiler (what --cpu-prof runs, over a window of our choosing)
//   profile-stop <file>   stops it and writes the .cpuprofile: {"profile": file}
import { spawn, type ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import http from "node:http";
import { Session } from "node:inspector";

/** Call in a helper process. */
export function serveRoleControl(): void {
  let session: Session | undefined;
  const reply = (value: unknown): void => void process.stdout.write(`${JSON.stringify(value)}\n`);
  process.stdin.resume();
  process.stdin.on("end", () => process.exit(0));
  let pending = "";
  process.stdin.on("data", (chunk: Buffer) => {
    pending += chunk.toString();
    const lines = pending.split("\n");
    pending = lines.pop() ?? "";
    for (const line of lines) {
      const [command, argument] = line.trim().split(" ");
      // CPU per call is what a loaded machine distorts far less than wall time.
      if (command === "cpu") {
        const { user, system } = process.cpuUsage();
        reply({ cpuMicros: user + system });
      } else if (command === "profile-start") {
        session = new Session();
        session.connect();
        // Sampling every 100 µs: a call costs a few hundred, so each one is seen a few times.
        session.post("Profiler.enable", () =>
          session!.post("Profiler.setSamplingInterval", { interval: 100 }, () =>
            session!.post("Profiler.start", () => reply({ profiling: true })),
          ),
        );
      } else if (command === "profile-stop" && session && argument) {
        const current = session;
        session = undefined;
        current.post("Profiler.stop", (error, result) => {
          current.disconnect();
          if (error) return reply({ error: error.message });
          // A profile that cannot be written is an answer too: the bench waits for one.
          try {
            writeFileSync(argument, JSON.stringify(result.profile));
            reply({ profile: argument });
          } catch (writeError) {
            reply({ error: `cannot write the profile to ${argument}: ${(writeError as Error).message}` });
          }
        });
      }
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
  const child = spawn(process.execPath, nodeArgs, {
    stdio: ["pipe", "pipe", "inherit"],
    env: { ...process.env, OZ0_LOG_LEVEL: "warn" },
  });
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

/** Sends a control command to a helper and waits for its answer line. */
export async function askRole<T>(role: Role, command: string): Promise<T> {
  const before = role.lines.length;
  role.child.stdin!.write(`${command}\n`);
  while (role.lines.length === before) await new Promise((r) => setTimeout(r, 5));
  return JSON.parse(role.lines.at(-1)!) as T;
}

/** CPU microseconds the helper has used so far. */
export async function cpuOf(role: Role): Promise<number> {
  return (await askRole<{ cpuMicros: number }>(role, "cpu")).cpuMicros;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 512 });

/** One JSON POST over pooled keep-alive connections; rejects on anything but 200 (`label` names the target). */
/** Posts a JSON body; resolves with the answer's body as text when `keepBody` (else ""), rejects on a status other than 200. */
export function postJson(options: {
  url: URL;
  headers: Record<string, string>;
  body: Buffer;
  label: string;
  keepBody?: boolean;
}): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      options.url,
      {
        method: "POST",
        agent,
        headers: {
          ...options.headers,
          "content-type": "application/json",
          "content-length": String(options.body.length),
        },
      },
      (res) => {
        const ok = res.statusCode === 200;
        // Kept only when asked (or to say what went wrong): the calls measured read and drop.
        const parts: Buffer[] | undefined = options.keepBody || !ok ? [] : undefined;
        res.on("data", (chunk: Buffer) => parts?.push(chunk));
        res.on("end", () => {
          const text = parts ? Buffer.concat(parts).toString("utf8") : "";
          if (ok) resolve(text);
          else reject(new Error(`${options.label}: HTTP ${res.statusCode}: ${text.slice(0, 300)}`));
        });
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(options.body);
  });
}

/** Closes the pooled connections postJson keeps, so the bench can exit. */
export function closePostConnections(): void {
  agent.destroy();
}
