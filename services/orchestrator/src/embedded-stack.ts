// The embedded stack: the same four services as a deployment (events,
// llm-proxy, sandbox, orchestrator), each its own child process on loopback,
// with embedded defaults under the data directory. `oz0 dev` keeps it in the
// foreground; any other command starts it for its own length when no server
// is configured. One code path: each child is the service's own dist/main.js.
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, createWriteStream, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync, type WriteStream } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { credentialDigest, generateStackCredentials, serviceIdentityEnv, type StackCredentials } from "@oz0/serving";
import { ensureOwnerCredential } from "./local-credentials.js";

export type StackServiceName = "events" | "llm-proxy" | "sandbox" | "orchestrator";

export interface EmbeddedStackOptions {
  /** The data directory (OZ0_HOME). */
  home: string;
  /** The orchestrator's port; default 0 (a free one). The others always take free ports. */
  orchestratorPort?: number;
  /** Extra environment per service (for example the LLM proxy's providers file). */
  env?: Partial<Record<StackServiceName, Record<string, string>>>;
  /** Log level of the services (their logs go to <home>/logs/<service>.log): debug, trace or info (the default; readiness is read from an info line). */
  logLevel?: "info" | "debug" | "trace";
  /** Start only these (in this order); default all four. */
  services?: StackServiceName[];
}

export interface StackProcess {
  readonly name: StackServiceName;
  readonly url: string;
  readonly pid: number;
  readonly logFile: string;
  /** SIGTERM, then SIGKILL after `graceMs`. */
  stop(options?: { signal?: NodeJS.Signals; graceMs?: number }): Promise<void>;
  /** Resolves when the process has exited. */
  readonly exited: Promise<void>;
  /** How the sandbox isolates sessions, from its startup line (sandbox only): bwrap, user or none, and why not stronger. */
  readonly isolation?: { mode: string; reason: string };
}

export interface EmbeddedStack {
  readonly urls: Record<StackServiceName, string>;
  /** Each service's credential, made for this stack (tests call services directly with them). */
  readonly credentials: StackCredentials;
  /** The owner's credential ($OZ0_HOME/credentials/owner): a person with every role. */
  readonly ownerToken: string;
  /** The identity variables a service of this stack is started with (to start one again). */
  identityEnv(name: StackServiceName): Record<string, string>;
  readonly processes: StackProcess[];
  close(): Promise<void>;
}

const here = path.dirname(fileURLToPath(import.meta.url));

/** Where a service's main.js is: the orchestrator's beside this file, the others through their packages. */
export function serviceMain(name: StackServiceName): string {
  // From dist/ or, under tsx in tests, from src/: the built one either way.
  if (name === "orchestrator") return path.resolve(here, "..", "dist", "main.js");
  const entry = fileURLToPath(import.meta.resolve(`@oz0/${name}`));
  return path.join(path.dirname(entry), "main.js");
}

/**
 * Where this installation lives (the folder whose node_modules holds
 * @oz0/harness): harness commands found in node_modules/.bin run from here,
 * so sessions under bubblewrap need it visible, read-only.
 */
export function installRoot(): string | undefined {
  let dir = here;
  for (;;) {
    if (existsSync(path.join(dir, "node_modules", "@oz0", "harness"))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

const READY_TIMEOUT_MS = 60_000;

const SETPRIV_PATHS = ["/usr/bin/setpriv", "/bin/setpriv"];

/**
 * Starts one service's dist/main.js as a child process and waits until it
 * says where it listens. It stops when the process that started it dies.
 */
export async function startServiceProcess(options: {
  name: StackServiceName;
  env: Record<string, string>;
  logFile: string;
  logLevel?: "info" | "debug" | "trace";
}): Promise<StackProcess> {
  const main = serviceMain(options.name);
  if (!existsSync(main)) {
    throw new Error(`the ${options.name} service is not built (${path.relative(process.cwd(), main)} is missing); run \`npm run build\``);
  }
  mkdirSync(path.dirname(options.logFile), { recursive: true });
  const log: WriteStream = createWriteStream(options.logFile, { flags: "a", mode: 0o600 });
  // With setpriv (util-linux), the kernel sends the service SIGTERM when the process that
  // started it dies, however it dies: a CLI or a test killed with SIGKILL leaves no service
  // running. setpriv execs, so the pid stays the service's own.
  const setpriv = SETPRIV_PATHS.find((candidate) => existsSync(candidate));
  const command = setpriv ? [setpriv, "--pdeathsig", "SIGTERM", "--", process.execPath, main] : [process.execPath, main];
  // Files the service makes (stores, keys, logs) are its user's alone: a session running as another user reads none.
  const umask = process.umask(0o077);
  let child: ChildProcess;
  try {
    child = spawn(command[0]!, command.slice(1), {
      env: { ...serviceEnv(options.name), OZ0_HOST: "127.0.0.1", OZ0_PORT: "0", ...options.env, OZ0_LOG_LEVEL: options.logLevel ?? "info" },
      stdio: ["ignore", "pipe", "pipe"],
      // Its own process group, so a Ctrl-C at the terminal reaches only the CLI, which stops the stack in order.
      detached: true,
    });
  } finally {
    process.umask(umask);
  }
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.stdout!.pipe(log, { end: false });
  const tail: string[] = [];
  let isolation: { mode: string; reason: string } | undefined;
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the ${options.name} service did not start within ${READY_TIMEOUT_MS / 1000} s; see ${options.logFile}`)), READY_TIMEOUT_MS);
    const lines = createInterface({ input: child.stderr! });
    let found = false;
    lines.on("line", (line) => {
      log.write(`${line}\n`);
      if (found) return;
      tail.push(line);
      if (tail.length > 5) tail.shift();
      try {
        const entry = JSON.parse(line) as { url?: unknown; msg?: unknown; isolation?: unknown; reason?: unknown };
        if (typeof entry.isolation === "string") isolation = { mode: entry.isolation, reason: typeof entry.reason === "string" ? entry.reason : "" };
        if (typeof entry.url === "string" && typeof entry.msg === "string" && /listening/.test(entry.msg)) {
          found = true;
          clearTimeout(timer);
          resolve(entry.url);
        }
      } catch {
        // not a log line
      }
    });
    child.once("exit", (code, signal) => {
      if (found) return;
      clearTimeout(timer);
      const last = tail.map((l) => {
        try {
          const e = JSON.parse(l) as { msg?: string; err?: { message?: string } };
          return e.err?.message ?? e.msg ?? l;
        } catch {
          return l;
        }
      });
      reject(new Error(`the ${options.name} service exited while starting (${signal ?? `code ${code}`}): ${last.pop() ?? "no output"}; see ${options.logFile}`));
    });
  });
  let stopping: Promise<void> | undefined;
  return {
    name: options.name,
    url,
    pid: child.pid!,
    logFile: options.logFile,
    exited,
    ...(isolation ? { isolation } : {}),
    stop({ signal = "SIGTERM", graceMs = 12_000 } = {}) {
      stopping ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill(signal);
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([exited, new Promise<void>((r) => (timer = setTimeout(r, graceMs)))]);
        clearTimeout(timer);
        if (child.exitCode === null && child.signalCode === null) {
          child.kill("SIGKILL");
          await exited;
        }
        log.end();
      })();
      return stopping;
    },
  };
}

export async function startEmbeddedStack(options: EmbeddedStackOptions): Promise<EmbeddedStack> {
  const home = path.resolve(options.home);
  const logs = path.join(home, "logs");
  const order = options.services ?? ["events", "llm-proxy", "sandbox", "orchestrator"];
  const started: StackProcess[] = [];
  const urls = {} as Record<StackServiceName, string>;
  const close = async (): Promise<void> => {
    // Reverse order: the orchestrator stops following sessions first, then the sandbox ends them.
    for (const p of [...started].reverse()) await p.stop();
  };
  // The LLM proxy and the sandbox need only the events service; the orchestrator needs both: start them in three waves.
  const waves: StackServiceName[][] = [
    order.filter((n) => n === "events"),
    order.filter((n) => n === "llm-proxy" || n === "sandbox"),
    order.filter((n) => n === "orchestrator"),
  ];
  // Each service proves who it is with a credential made for this stack, and
  // accepts only the callers that need it (serviceIdentityEnv); people are the
  // owner, whose credential lives in the data directory.
  const credentials = generateStackCredentials();
  // The home is passable but not listable by other users: sessions running as
  // a uid of their own reach their working directory under <home>/sandbox;
  // everything else in it is its owner's alone (stores, keys and credentials
  // are made 0700/0600).
  mkdirSync(home, { recursive: true });
  chmodSync(home, 0o711);
  mkdirSync(logs, { recursive: true, mode: 0o700 });
  chmodSync(logs, 0o700);
  const ownerToken = ensureOwnerCredential(home);
  const identityEnv = (name: StackServiceName): Record<string, string> => ({
    ...serviceIdentityEnv(credentials, name),
    ...(name === "orchestrator" || name === "events" ? { OZ0_OWNER_TOKEN_SHA256: credentialDigest(ownerToken) } : {}),
  });
  const startOne = async (name: StackServiceName): Promise<void> => {
    const env: Record<string, string> = { ...(urls.events ? { OZ0_EVENTS_URL: urls.events } : {}), ...identityEnv(name) };
    switch (name) {
      case "events":
        env.OZ0_EVENTS_DATA = path.join(home, "events");
        break;
      case "llm-proxy":
        env.OZ0_LLM_PROXY_DATA = path.join(home, "llm-proxy");
        break;
      case "sandbox": {
        env.OZ0_SANDBOX_ROOT = path.join(home, "sandbox");
        const root = installRoot();
        if (root && !process.env.OZ0_SANDBOX_READ_ONLY_PATHS) env.OZ0_SANDBOX_READ_ONLY_PATHS = root;
        break;
      }
      case "orchestrator":
        env.OZ0_HOME = home;
        env.OZ0_PORT = String(options.orchestratorPort ?? 0);
        if (urls.sandbox) env.OZ0_SANDBOX_URLS = urls.sandbox;
        if (urls["llm-proxy"]) env.OZ0_LLM_PROXY_URL = urls["llm-proxy"];
        break;
    }
    Object.assign(env, options.env?.[name] ?? {});
    const p = await startServiceProcess({ name, env, logFile: path.join(logs, `${name}.log`), ...(options.logLevel ? { logLevel: options.logLevel } : {}) });
    started.push(p);
    urls[name] = p.url;
  };
  try {
    for (const wave of waves) {
      const results = await Promise.allSettled(wave.map(startOne));
      const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
      if (failed) throw failed.reason;
    }
  } catch (error) {
    await close();
    throw error;
  }
  return { urls, credentials, ownerToken, identityEnv, processes: started, close };
}

/**
 * The one line a person must see when sessions run without isolation (agent
 * code then runs as the services' own user and can read their files), with
 * what to do; undefined when sessions are isolated.
 */
export function isolationNotice(stack: Pick<EmbeddedStack, "processes">): string | undefined {
  const isolation = stack.processes.find((p) => p.name === "sandbox")?.isolation;
  if (!isolation || isolation.mode !== "none") return undefined;
  const chosen = /OZ0_ISOLATION=none/.test(isolation.reason);
  return chosen
    ? "sessions run WITHOUT isolation, as OZ0_ISOLATION=none chose: agent code can read everything this user can"
    : `sessions run WITHOUT isolation (${isolation.reason}): agent code can read everything this user can; install bubblewrap (apt-get install bubblewrap) or run the stack as root, or set OZ0_ISOLATION=none to accept it`;
}

/** What `oz0 dev` writes so other commands find its stack. */
export interface DevDiscovery {
  url: string;
  pid: number;
  urls: Record<string, string>;
  startedAt: string;
}

export function discoveryFile(home: string): string {
  return path.join(home, "dev.json");
}

export function writeDiscovery(home: string, discovery: DevDiscovery): void {
  mkdirSync(home, { recursive: true });
  writeFileSync(discoveryFile(home), `${JSON.stringify(discovery, null, 2)}\n`);
}

export function removeDiscovery(home: string, pid: number): void {
  const found = readDiscovery(home);
  if (found && found.pid === pid) rmSync(discoveryFile(home), { force: true });
}

/** The running `oz0 dev` stack's discovery, or undefined when there is none (or its process is gone). */
export function readDiscovery(home: string): DevDiscovery | undefined {
  try {
    const found = JSON.parse(readFileSync(discoveryFile(home), "utf8")) as DevDiscovery;
    process.kill(found.pid, 0);
    return found;
  } catch {
    return undefined;
  }
}

/** What every service takes from the shell: the basics of a process, locale, telemetry, and its OZ0_* settings. */
const SHARED_VARIABLES = new Set(["PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "NODE_OPTIONS", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR"]);
const SHARED_PREFIXES = ["LC_", "OTEL_", "OZ0_"];

/** What only one service takes from the shell. */
const SERVICE_VARIABLES: Record<StackServiceName, readonly string[]> = {
  // Upstream calls to providers may need the shell's proxy settings.
  "llm-proxy": ["HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy", "OZ0_KEK", "OZ0_KEK_FILE", "OZ0_SECRETS_DIR"],
  // People are authenticated by the orchestrator and by the events service (Watch, Transcript).
  events: ["KAFKA_BROKERS", "OZ0_AUTH_CONFIG"],
  orchestrator: ["OZ0_AUTH_CONFIG"],
  sandbox: [],
};

/**
 * Credentials in the shell that no service is given from it: the stack makes
 * its own service credentials, the CLI's own credential stays with the CLI,
 * and provider keys reach the LLM proxy through SetSecret, never an
 * environment a session could read.
 */
const WITHHELD = new Set(["OZ0_TOKEN", "OZ0_SERVICE_TOKEN", "OZ0_NODE_TOKEN", "OZ0_OWNER_TOKEN_SHA256", "OZ0_LLM_PROXY_ADMIN_TOKEN", "OZ0_KEK", "OZ0_KEK_FILE", "OZ0_SECRETS_DIR", "OZ0_AUTH_CONFIG"]);

/**
 * The environment a stack process takes from the shell: an allowlist, so a
 * provider key, a token or DATABASE_URL in the shell reaches no service by
 * accident (the embedded stack keeps its jobs in SQLite under its own home;
 * pass DATABASE_URL in `env.orchestrator` to run it on PostgreSQL).
 */
export function serviceEnv(name: StackServiceName, shell: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const own = new Set(SERVICE_VARIABLES[name]);
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(shell)) {
    if (value === undefined || key.startsWith("OZ0_PEER_")) continue;
    const shared = SHARED_VARIABLES.has(key) || SHARED_PREFIXES.some((p) => key.startsWith(p));
    if (own.has(key) || (shared && !WITHHELD.has(key))) env[key] = value;
  }
  return env;
}
