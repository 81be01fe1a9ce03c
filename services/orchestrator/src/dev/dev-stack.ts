// The stack `oz0 dev` runs: the embedded stack's four services, kept running.
// - Stable addresses: each service's port is chosen once per data directory
//   (ports.json) and used again by every start, so a service started again
//   (after a crash, or by the next `oz0 dev`) is where the others, and every
//   stored job, expect it.
// - Supervision: a service that dies is started again with backoff, with the
//   same credential, port and settings, while the others keep running.
// - Services outlive `oz0 dev`: they write their own logs and are not tied to
//   the CLI's life, so a crashed `oz0 dev` loses no session. The next `oz0 dev`
//   adopts the services still running (their pids and credentials are kept in
//   credentials/dev-stack.json, 0600) and starts only the missing ones.
// What a restart cannot save: sessions live in the sandbox's process, so the
// sandbox's own crash ends them, and their jobs fail saying so.
import { createHash } from "node:crypto";
import { existsSync, readFileSync, rmSync, statSync } from "node:fs";
import path from "node:path";
import {
  ephemeralRangeStart,
  generateStackCredentials,
  stackCredentialNames,
  type StackCredentials,
} from "@oz0/serving";
import {
  isServiceProcess,
  portTaken,
  prepareHome,
  stackIdentityEnv,
  stackServiceEnv,
  startServiceProcess,
  type EmbeddedStackOptions,
  type ServiceExit,
  type StackProcess,
  type StackServiceName,
} from "./embedded-stack.js";
import { ensureCredentialsDir, ensureOwnerCredential } from "./local-credentials.js";
import { replaceFile } from "../replace-file.js";

const SERVICES: readonly StackServiceName[] = ["events", "llm-proxy", "sandbox", "orchestrator"];
/** Started in waves: the LLM proxy and the sandbox need the events service; the orchestrator needs them all. */
const WAVES: readonly (readonly StackServiceName[])[] = [["events"], ["llm-proxy", "sandbox"], ["orchestrator"]];

export interface DevStackOptions {
  home: string;
  /** The orchestrator's port; 0: one chosen once for this data directory, like the other services'. */
  orchestratorPort: number;
  env?: EmbeddedStackOptions["env"];
  logLevel?: EmbeddedStackOptions["logLevel"];
  /** One line for the person at the terminal: a service stopped, came back, was adopted. */
  notify(line: string): void;
  /** Restart backoff: the first delay, doubled after each failed start up to `max`. Default 500 ms and 30 s. */
  restartDelayMs?: { first: number; max: number };
}

export interface DevStack {
  readonly urls: Record<StackServiceName, string>;
  readonly ownerToken: string;
  /** The services a previous `oz0 dev` left running, adopted rather than started. */
  readonly adopted: StackServiceName[];
  /** How the sandbox isolates sessions (from its start-up line). */
  readonly isolation: { mode: string; reason: string } | undefined;
  /** The services' pids now (a restart changes one). */
  pids(): Record<StackServiceName, number>;
  /** Called after a service was started again (its pid changed). */
  onRestart(listener: (name: StackServiceName) => void): void;
  /** Stops supervising, then every service in reverse order, and forgets them. */
  close(): Promise<void>;
}

/** The ports of a data directory's dev stack, chosen once. */
export function devPortsFile(home: string): string {
  return path.join(home, "ports.json");
}

/** What a running dev stack keeps so the next `oz0 dev` can adopt its services. */
interface DevStackRecord {
  version: 1;
  credentials: StackCredentials;
  services: Partial<
    Record<
      StackServiceName,
      {
        pid: number;
        url: string;
        isolation?: { mode: string; reason: string };
        /** settingsDigest of what it was started with beyond the stack's wiring (the LLM proxy's model script). */
        settings?: string;
      }
    >
  >;
}

/**
 * A digest of a service's own settings (`oz0 dev`'s env for it), to tell whether a running one was started with
 * these: the variables, and the content of each file one names (the LLM proxy's providers file, rewritten with
 * each start's model script under the same name).
 */
function settingsDigest(extra: Record<string, string> | undefined): string {
  const hash = createHash("sha256");
  for (const [name, value] of Object.entries(extra ?? {}).sort(([a], [b]) => a.localeCompare(b))) {
    hash.update(`${name}=${value}\n`);
    if (path.isAbsolute(value) && statSync(value, { throwIfNoEntry: false })?.isFile())
      hash.update(readFileSync(value));
  }
  return hash.digest("hex");
}

function recordFile(home: string): string {
  return path.join(ensureCredentialsDir(home), "dev-stack.json");
}

function readRecord(home: string): DevStackRecord | undefined {
  try {
    const record = JSON.parse(readFileSync(recordFile(home), "utf8")) as DevStackRecord;
    return record.version === 1 ? record : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Each service's port for this data directory as far as it is chosen: the
 * orchestrator's given port, or the one recorded in ports.json. A service
 * without one listens on a free port below the kernel's ephemeral range at its
 * first start (startServiceProcess), which is then recorded.
 */
function recordedPorts(home: string, orchestratorPort: number): Partial<Record<StackServiceName, number>> {
  const file = devPortsFile(home);
  let recorded: Partial<Record<StackServiceName, number>> = {};
  if (existsSync(file)) {
    try {
      recorded = JSON.parse(readFileSync(file, "utf8")) as Partial<Record<StackServiceName, number>>;
    } catch (error) {
      throw new Error(
        `${file} is not valid JSON (${(error as Error).message}); delete it and oz0 dev chooses new ports`,
      );
    }
  }
  const ports: Partial<Record<StackServiceName, number>> = {};
  for (const name of SERVICES) {
    const kept = recorded[name];
    if (name === "orchestrator" && orchestratorPort !== 0) ports[name] = orchestratorPort;
    else if (Number.isInteger(kept) && kept! > 0 && kept! < 65_536) ports[name] = kept!;
  }
  return ports;
}

function writePorts(home: string, ports: Partial<Record<StackServiceName, number>>): void {
  const file = devPortsFile(home);
  const inOrder = Object.fromEntries(SERVICES.filter((name) => ports[name] !== undefined).map((n) => [n, ports[n]]));
  const text = `${JSON.stringify(inOrder, null, 2)}\n`;
  if (!existsSync(file) || readFileSync(file, "utf8") !== text) replaceFile(file, text);
}

/** A service a previous `oz0 dev` started: watched by its pid, stopped by signals. */
function adoptedProcess(options: {
  name: StackServiceName;
  pid: number;
  url: string;
  logFile: string;
  isolation?: { mode: string; reason: string };
}): StackProcess {
  const { name, pid } = options;
  let timer: NodeJS.Timeout | undefined;
  const exited = new Promise<ServiceExit>((resolve) => {
    timer = setInterval(() => {
      if (isServiceProcess(pid, name)) return;
      clearInterval(timer);
      resolve({});
    }, 250);
  });
  let stopping: Promise<void> | undefined;
  return {
    name,
    url: options.url,
    pid,
    logFile: options.logFile,
    exited,
    ...(options.isolation ? { isolation: options.isolation } : {}),
    stop({ signal = "SIGTERM", graceMs = 12_000 } = {}) {
      stopping ??= (async () => {
        if (!isServiceProcess(pid, name)) return clearInterval(timer);
        process.kill(pid, signal);
        let wait: NodeJS.Timeout | undefined;
        const gone = await Promise.race([
          exited.then(() => true),
          new Promise<false>((r) => (wait = setTimeout(() => r(false), graceMs))),
        ]);
        clearTimeout(wait);
        if (!gone && isServiceProcess(pid, name)) process.kill(pid, "SIGKILL");
        await exited;
      })();
      return stopping;
    },
  };
}

function describeExit(exit: ServiceExit): string {
  if (exit.signal) return `killed by ${exit.signal}`;
  if (exit.code !== undefined && exit.code !== null) return `exit code ${exit.code}`;
  return "it ended; it was adopted, so how is not known";
}

export async function startDevStack(options: DevStackOptions): Promise<DevStack> {
  const home = path.resolve(options.home);
  const logs = path.join(home, "logs");
  const delays = options.restartDelayMs ?? { first: 500, max: 30_000 };
  prepareHome(home);
  const ownerToken = ensureOwnerCredential(home);
  const ports = recordedPorts(home, options.orchestratorPort);
  const rangeStart = ephemeralRangeStart();
  for (const name of SERVICES) {
    const port = ports[name];
    if (port !== undefined && port >= rangeStart)
      options.notify(
        `the ${name} service's port ${port} (${name === "orchestrator" ? "--port" : devPortsFile(home)}) is in the kernel's ephemeral range (from ${rangeStart}): while the service is down, a process binding port 0, a user-mode sandbox session among them, could be handed it and sent its callers' credentials; when no job is in flight, delete ${devPortsFile(home)} (oz0 dev then chooses ports below the range)${name === "orchestrator" ? " and give --port one below it" : ""}`,
      );
  }
  // Filled in as services are adopted or started; complete once the stack is up.
  const urls: Partial<Record<StackServiceName, string>> = {};
  for (const name of SERVICES) if (ports[name] !== undefined) urls[name] = `http://127.0.0.1:${ports[name]}`;

  // Services a crashed `oz0 dev` left running keep their credentials; those they accept must not change.
  const previous = readRecord(home);
  const leftRunning = SERVICES.filter((name) => {
    const kept = previous?.services[name];
    return kept !== undefined && kept.url === urls[name] && isServiceProcess(kept.pid, name);
  });
  // One started with other settings (the LLM proxy with another model script) would go on answering as it was
  // started, while this oz0 dev said otherwise (operator review): it is stopped, and started again below.
  const settings = (name: StackServiceName): string => settingsDigest(options.env?.[name]);
  // Services an older oz0 dev started lack a credential this one makes (the orchestrator's for sandboxes): kept,
  // they would go on with the orchestrator's own credential in every sandbox's memory.
  const credentialsOutdated = previous !== undefined && stackCredentialNames().some((n) => !previous.credentials[n]);
  const changed = leftRunning.filter((name) => {
    const kept = previous!.services[name]!.settings;
    return credentialsOutdated || (kept !== undefined && kept !== settings(name));
  });
  for (const name of changed) {
    const kept = previous!.services[name]!;
    options.notify(
      credentialsOutdated
        ? `the ${name} service a previous oz0 dev left running (pid ${kept.pid}) has credentials of an older oz0 dev: stopping it, to start it with new ones`
        : `the ${name} service a previous oz0 dev left running (pid ${kept.pid}) was started with other settings${name === "llm-proxy" ? " (another model script, or provider keys)" : ""}: stopping it, to start it with these`,
    );
    await adoptedProcess({ name, pid: kept.pid, url: kept.url, logFile: path.join(logs, `${name}.log`) }).stop();
  }
  const alive = leftRunning.filter((name) => !changed.includes(name));
  const credentials = alive.length > 0 && previous ? previous.credentials : generateStackCredentials();
  const running = new Map<StackServiceName, StackProcess>();
  for (const name of alive) {
    const kept = previous!.services[name]!;
    running.set(
      name,
      adoptedProcess({
        name,
        pid: kept.pid,
        url: kept.url,
        logFile: path.join(logs, `${name}.log`),
        ...(kept.isolation ? { isolation: kept.isolation } : {}),
      }),
    );
  }
  const save = (): void => {
    const services: DevStackRecord["services"] = {};
    for (const [name, p] of running)
      services[name] = {
        pid: p.pid,
        url: p.url,
        ...(p.isolation ? { isolation: p.isolation } : {}),
        settings: settings(name),
      };
    replaceFile(
      recordFile(home),
      `${JSON.stringify({ version: 1, credentials, services } satisfies DevStackRecord, null, 2)}\n`,
      { mode: 0o600 },
    );
  };

  // A first start takes a free port below the ephemeral range (startServiceProcess), recorded from then on.
  const start = (name: StackServiceName): Promise<StackProcess> =>
    startServiceProcess({
      name,
      env: stackServiceEnv({
        name,
        home,
        urls,
        identity: stackIdentityEnv({ credentials, ownerToken, name }),
        port: ports[name] ?? 0,
        extra: options.env?.[name],
      }),
      logFile: path.join(logs, `${name}.log`),
      outlivesParent: true,
      ...(options.logLevel ? { logLevel: options.logLevel } : {}),
    }).then(
      (started) => {
        ports[name] = Number(new URL(started.url).port);
        urls[name] = started.url;
        return started;
      },
      (error: unknown) => {
        throw portTakenHint(error, name, ports[name], home);
      },
    );

  let closing = false;
  const wakeOnClose: (() => void)[] = [];
  const sleep = (ms: number): Promise<void> =>
    new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      wakeOnClose.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  const restartListeners: ((name: StackServiceName) => void)[] = [];
  const supervising: Promise<void>[] = [];

  const supervise = async (name: StackServiceName): Promise<void> => {
    let delay = delays.first;
    for (;;) {
      const current = running.get(name)!;
      const since = Date.now();
      const exit = await current.exited;
      if (closing) return;
      // A service that ran a while before it died starts again at once; one that keeps dying waits longer each time.
      if (Date.now() - since > 60_000) delay = delays.first;
      options.notify(
        `the ${name} service stopped (${describeExit(exit)}); starting it again (log: ${current.logFile})`,
      );
      for (;;) {
        await sleep(delay);
        delay = Math.min(delay * 2, delays.max);
        if (closing) return;
        try {
          const p = await start(name);
          if (closing) {
            await p.stop();
            return;
          }
          running.set(name, p);
          save();
          options.notify(`the ${name} service is back at ${p.url}`);
          for (const listener of restartListeners) listener(name);
          break;
        } catch (error) {
          options.notify(
            `could not start the ${name} service again: ${(error as Error).message}; trying again in ${Math.round(delay / 100) / 10} s`,
          );
        }
      }
    }
  };

  const stopAll = async (): Promise<void> => {
    closing = true;
    for (const wake of wakeOnClose.splice(0)) wake();
    // Reverse order: the orchestrator stops following sessions first, then the sandbox ends them.
    for (const name of [...SERVICES].reverse()) await running.get(name)?.stop();
    await Promise.all(supervising);
    rmSync(recordFile(home), { force: true });
  };

  try {
    for (const wave of WAVES) {
      const results = await Promise.allSettled(
        wave
          .filter((name) => !running.has(name))
          .map(async (name) => {
            running.set(name, await start(name));
            // Recorded as soon as it listens: services outlive oz0 dev, and one killed before the wave ends must
            // leave each started service adoptable (its port and pid), not a second one started on its data.
            writePorts(home, ports);
            save();
          }),
      );
      const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
      if (failed) throw failed.reason;
    }
  } catch (error) {
    await stopAll();
    throw error;
  }
  for (const name of SERVICES) supervising.push(supervise(name));

  return {
    urls: urls as Record<StackServiceName, string>,
    ownerToken,
    adopted: alive,
    get isolation() {
      return running.get("sandbox")?.isolation;
    },
    pids: () =>
      Object.fromEntries(SERVICES.map((name) => [name, running.get(name)!.pid])) as Record<StackServiceName, number>,
    onRestart: (listener) => void restartListeners.push(listener),
    close: stopAll,
  };
}

/** A start that failed because the recorded port is taken says so, and what to do. */
function portTakenHint(error: unknown, name: StackServiceName, port: number | undefined, home: string): Error {
  if (port === undefined || !portTaken(error)) return error as Error;
  // The orchestrator's port is oz0 dev's --port (7700 unless given), not one of ports.json's.
  if (name === "orchestrator")
    return new Error(
      `the orchestrator's port ${port} is taken by another program (another oz0 dev, of another OZ0_HOME?); stop that program, or give this one another port: oz0 dev --port N`,
    );
  return new Error(
    `the ${name} service's port ${port} is taken by another program; stop that program, or delete ${devPortsFile(home)} (oz0 dev then chooses new ports; jobs in flight are then lost)`,
  );
}
