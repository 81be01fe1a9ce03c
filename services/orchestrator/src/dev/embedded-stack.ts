// The embedded stack: the same four services as a deployment (events,
// llm-proxy, sandbox, orchestrator), each its own child process on loopback,
// with embedded defaults under the data directory. `oz0 dev` keeps it in the
// foreground; any other command starts it for its own length when no server
// is configured. One code path: each child is the service's own dist/main.js.
import { spawn, type ChildProcess } from "node:child_process";
import {
  chmodSync,
  closeSync,
  createWriteStream,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  realpathSync,
  rmSync,
  statSync,
  type WriteStream,
} from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import {
  credentialDigest,
  generateStackCredentials,
  portBelowEphemeralRange,
  serviceIdentityEnv,
  type StackCredentials,
} from "@oz0/serving";
import { assertOwnHome, ensureOwnerCredential } from "./local-credentials.js";
import { STEP_RUNNER_PACKAGES, STEP_RUNNER_SCRIPT } from "../graphs/step-runner-script.js";
import { processAlive } from "./process-liveness.js";
import { replaceFile } from "../replace-file.js";

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
  /**
   * More of the installation that sessions may read, besides what its harnesses run (installationPaths): a test's
   * harness fixtures, for example.
   */
  sessionReadable?: readonly string[];
}

export interface StackProcess {
  readonly name: StackServiceName;
  readonly url: string;
  readonly pid: number;
  readonly logFile: string;
  /** SIGTERM, then SIGKILL after `graceMs`. */
  stop(options?: { signal?: NodeJS.Signals; graceMs?: number }): Promise<void>;
  /** Resolves when the process has exited, with how (unknown for a process this one did not start). */
  readonly exited: Promise<ServiceExit>;
  /** How the sandbox isolates sessions, from its startup line (sandbox only): bwrap, user or none, and why not stronger. */
  readonly isolation?: { mode: string; reason: string };
}

/** How a service process ended. */
export interface ServiceExit {
  code?: number | null;
  signal?: NodeJS.Signals | null;
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
  /** How the sandbox isolates sessions (from its start-up line), when it runs. */
  readonly isolation: { mode: string; reason: string } | undefined;
  close(): Promise<void>;
}

const here = path.dirname(fileURLToPath(import.meta.url));

/** Where a service's main.js is: the orchestrator's beside this file, the others through their packages. */
export function serviceMain(name: StackServiceName): string {
  // From dist/dev/ or, under tsx in tests, from src/dev/: the built one either way.
  if (name === "orchestrator") return path.resolve(here, "..", "..", "dist", "main.js");
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

/**
 * The packages sessions run besides the harness plugins: the harness SDK (its fake harness, its protocol) and what
 * the orchestrator's own harness, the graphs' step runner, imports.
 */
const SESSION_PACKAGES: readonly string[] = ["@oz0/harness", ...STEP_RUNNER_PACKAGES];

/**
 * What of an installation (a checkout) its sessions read: its node_modules, its package.json (the module type), and
 * of its own packages (npm workspaces, which node_modules links to) only those a harness runs: the harness SDK, the
 * harness plugins (a folder with an oz0-plugin.yaml) and the packages they depend on, each only as it would be
 * published (its package.json and its `files`; the whole folder when it names none). Nothing else of it is bound:
 * not its .git (a remote's URL may carry a token), not a `.env` or `.npmrc` beside package.json or in a service's
 * folder, not the dev overlay's generated credentials, not a file someone puts there later (operator review found
 * the dev overlay's admin token read by a tool call when the checkout was bound whole, and a review after that a
 * service's .env while every workspace was).
 */
export function installationPaths(root: string): string[] {
  const packages = linkedPackages(root);
  const wanted = new Set<string>();
  const visit = (name: string): void => {
    const pkg = packages.get(name);
    if (!pkg || wanted.has(name)) return;
    wanted.add(name);
    for (const dependency of Object.keys({ ...pkg.json.dependencies, ...pkg.json.optionalDependencies }))
      visit(dependency);
  };
  for (const [name, pkg] of packages)
    if (SESSION_PACKAGES.includes(name) || existsSync(path.join(pkg.dir, "oz0-plugin.yaml"))) visit(name);
  const bound = [...wanted].flatMap((name) => publishedPaths(packages.get(name)!));
  // The step runner itself, when it is this installation's (not the rest of the orchestrator's files).
  const stepRunner = STEP_RUNNER_SCRIPT.startsWith(root + path.sep) ? [STEP_RUNNER_SCRIPT] : [];
  return [path.join(root, "node_modules"), path.join(root, "package.json"), ...[...bound, ...stepRunner].sort()];
}

interface LinkedPackage {
  dir: string;
  json: {
    files?: unknown;
    dependencies?: Record<string, string>;
    optionalDependencies?: Record<string, string>;
  };
}

/** The installation's own packages by name: what its node_modules links to inside it. */
function linkedPackages(root: string): Map<string, LinkedPackage> {
  const modules = path.join(root, "node_modules");
  const found = new Map<string, LinkedPackage>();
  const scan = (dir: string): void => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      const entryPath = path.join(dir, entry.name);
      if (entry.name.startsWith("@") && entry.isDirectory()) scan(entryPath);
      if (!entry.isSymbolicLink()) continue;
      try {
        const target = realpathSync.native(entryPath);
        if (!target.startsWith(root + path.sep) || target.startsWith(modules + path.sep)) continue;
        const json = JSON.parse(readFileSync(path.join(target, "package.json"), "utf8")) as LinkedPackage["json"] & {
          name?: string;
        };
        if (typeof json.name === "string") found.set(json.name, { dir: target, json });
      } catch {
        // A dangling link or no package.json: nothing a session could run.
      }
    }
  };
  scan(modules);
  return found;
}

/** A package as it would be published: its package.json, its `files`, and its own node_modules (nested versions). */
function publishedPaths(pkg: LinkedPackage): string[] {
  const files = pkg.json.files;
  if (!Array.isArray(files) || !files.every((f): f is string => typeof f === "string")) return [pkg.dir];
  const inside = files
    .map((f) => path.resolve(pkg.dir, f))
    .filter((f) => f.startsWith(pkg.dir + path.sep) && existsSync(f));
  const own = path.join(pkg.dir, "node_modules");
  return [path.join(pkg.dir, "package.json"), ...inside, ...(existsSync(own) ? [own] : [])];
}

const READY_TIMEOUT_MS = 60_000;

const SETPRIV_PATHS = ["/usr/bin/setpriv", "/bin/setpriv"];

/**
 * Starts one service's dist/main.js as a child process and waits until it
 * says where it listens. It stops when the process that started it dies,
 * unless `outlivesParent` (`oz0 dev`: a crashed CLI leaves its sessions
 * running, and the next `oz0 dev` adopts the services); then the service
 * writes its log itself, so it needs nothing of this process.
 */
export async function startServiceProcess(options: ServiceProcessOptions): Promise<StackProcess> {
  const started = await startOnAPort(options);
  // Both stacks (oz0 dev's and the one a command starts) start their sandbox here.
  const refused = unisolatedRefusal(started.isolation);
  if (refused !== undefined) {
    await started.stop();
    throw new Error(refused);
  }
  return started;
}

async function startOnAPort(options: ServiceProcessOptions): Promise<StackProcess> {
  const given = options.env.OZ0_PORT;
  if (given !== undefined && given !== "0") return startServiceOnce(options, given);
  // "Any free port": one below the kernel's ephemeral range, which a process binding port 0 cannot be handed while
  // the service is down (@oz0/serving's ephemeral-ports.ts), another if a program took it first.
  for (let attempt = 1; ; attempt++) {
    const port = portBelowEphemeralRange();
    try {
      return await startServiceOnce(options, String(port));
    } catch (error) {
      if (port === 0 || attempt === 5 || !portTaken(error)) throw error;
    }
  }
}

/** Whether a service failed to start because its port is taken. */
export function portTaken(error: unknown): boolean {
  return /EADDRINUSE|address already in use/i.test((error as Error).message);
}

interface ServiceProcessOptions {
  name: StackServiceName;
  /** OZ0_PORT among them: unset or 0 for a free port below the kernel's ephemeral range. */
  env: Record<string, string>;
  logFile: string;
  logLevel?: "info" | "debug" | "trace";
  outlivesParent?: boolean;
}

async function startServiceOnce(options: ServiceProcessOptions, port: string): Promise<StackProcess> {
  const main = serviceMain(options.name);
  if (!existsSync(main)) {
    throw new Error(
      `the ${options.name} service is not built (${path.relative(process.cwd(), main)} is missing); run \`npm run build\``,
    );
  }
  mkdirSync(path.dirname(options.logFile), { recursive: true });
  // With setpriv (util-linux), the kernel sends the service SIGTERM when the process that
  // started it dies, however it dies: a CLI or a test killed with SIGKILL leaves no service
  // running. setpriv execs, so the pid stays the service's own.
  const setpriv = options.outlivesParent ? undefined : SETPRIV_PATHS.find((candidate) => existsSync(candidate));
  const command = setpriv
    ? [setpriv, "--pdeathsig", "SIGTERM", "--", process.execPath, main]
    : [process.execPath, main];
  // Files the service makes (stores, keys, logs) are its user's alone: a session running as another user reads none.
  const umask = process.umask(0o077);
  let child: ChildProcess;
  let log: WriteStream | undefined;
  let logFd: number | undefined;
  const logStart = existsSync(options.logFile) ? statSync(options.logFile).size : 0;
  try {
    if (options.outlivesParent) logFd = openSync(options.logFile, "a", 0o600);
    else log = createWriteStream(options.logFile, { flags: "a", mode: 0o600 });
    child = spawn(command[0]!, command.slice(1), {
      env: {
        ...serviceEnv(options.name),
        OZ0_HOST: "127.0.0.1",
        ...options.env,
        OZ0_PORT: port,
        OZ0_LOG_LEVEL: options.logLevel ?? "info",
      },
      stdio: logFd === undefined ? ["ignore", "pipe", "pipe"] : ["ignore", logFd, logFd],
      // Its own process group, so a Ctrl-C at the terminal reaches only the CLI, which stops the stack in order.
      detached: true,
    });
  } finally {
    process.umask(umask);
    if (logFd !== undefined) closeSync(logFd);
  }
  const exited = new Promise<ServiceExit>((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  let lines: AsyncIterable<string> | NodeJS.EventEmitter;
  if (log) {
    child.stdout!.pipe(log, { end: false });
    const reader = createInterface({ input: child.stderr! });
    reader.on("line", (line) => log.write(`${line}\n`));
    lines = reader;
  } else {
    lines = followLogLines(options.logFile, logStart, exited);
  }
  const { url, isolation } = await readiness({ name: options.name, logFile: options.logFile, lines, exited });
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
        if (child.exitCode === null && child.signalCode === null) {
          child.kill(signal);
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([exited, new Promise<void>((r) => (timer = setTimeout(r, graceMs)))]);
          clearTimeout(timer);
          if (child.exitCode === null && child.signalCode === null) {
            child.kill("SIGKILL");
            await exited;
          }
        }
        log?.end();
      })();
      return stopping;
    },
  };
}

/**
 * Waits for the service's "listening" log line (its URL; the sandbox's also
 * says how it isolates sessions). `lines`: a readline interface over its
 * stderr, or the lines appended to its log file.
 */
async function readiness(options: {
  name: StackServiceName;
  logFile: string;
  lines: AsyncIterable<string> | NodeJS.EventEmitter;
  exited: Promise<ServiceExit>;
}): Promise<{ url: string; isolation?: { mode: string; reason: string } }> {
  const tail: string[] = [];
  let isolation: { mode: string; reason: string } | undefined;
  let settled = false;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () =>
        fail(
          new Error(
            `the ${options.name} service did not start within ${READY_TIMEOUT_MS / 1000} s; see ${options.logFile}`,
          ),
        ),
      READY_TIMEOUT_MS,
    );
    const fail = (error: Error): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      reject(error);
    };
    const onLine = (line: string): void => {
      if (settled) return;
      tail.push(line);
      if (tail.length > 5) tail.shift();
      try {
        const entry = JSON.parse(line) as { url?: unknown; msg?: unknown; isolation?: unknown; reason?: unknown };
        if (typeof entry.isolation === "string")
          isolation = { mode: entry.isolation, reason: typeof entry.reason === "string" ? entry.reason : "" };
        if (typeof entry.url === "string" && typeof entry.msg === "string" && /listening/.test(entry.msg)) {
          settled = true;
          clearTimeout(timer);
          resolve({ url: entry.url, ...(isolation ? { isolation } : {}) });
        }
      } catch {
        // not a log line
      }
    };
    // The log file's lines end a poll after the exit: its last lines (the reason it exited) are read before the
    // failure is told, or it named an earlier line (a taken port read as "closed the descriptors it inherited").
    let read: Promise<unknown> = Promise.resolve();
    if (Symbol.asyncIterator in options.lines) {
      read = (async () => {
        for await (const line of options.lines as AsyncIterable<string>) {
          onLine(line);
          if (settled) break; // the rest of the log is the service's own business
        }
      })().catch(fail);
    } else {
      (options.lines as NodeJS.EventEmitter).on("line", onLine);
    }
    void options.exited.then(async ({ code, signal }) => {
      await read;
      // Lines still on their way are read first.
      setImmediate(() => {
        const last = tail.map((l) => {
          try {
            const e = JSON.parse(l) as { msg?: string; err?: { message?: string } };
            return e.err?.message ?? e.msg ?? l;
          } catch {
            return l;
          }
        });
        fail(
          new Error(
            `the ${options.name} service exited while starting (${signal ?? `code ${code}`}): ${last.pop() ?? "no output"}; see ${options.logFile}`,
          ),
        );
      });
    });
  });
}

/** The lines appended to `file` from byte `from` on, until `until` settles (then what is left is read once more). */
async function* followLogLines(file: string, from: number, until: Promise<unknown>): AsyncGenerator<string> {
  let done = false;
  void until.then(() => (done = true));
  let position = from;
  let partial = "";
  for (;;) {
    const finished = done;
    const size = existsSync(file) ? statSync(file).size : 0;
    if (size > position) {
      const fd = openSync(file, "r");
      try {
        const buffer = Buffer.alloc(size - position);
        const read = readSync(fd, buffer, 0, buffer.length, position);
        position += read;
        partial += buffer.subarray(0, read).toString("utf8");
      } finally {
        closeSync(fd);
      }
      const parts = partial.split("\n");
      partial = parts.pop() ?? "";
      yield* parts;
    }
    if (finished) return;
    await new Promise((r) => setTimeout(r, 50));
  }
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
  prepareHome(home);
  const ownerToken = ensureOwnerCredential(home);
  const identityEnv = (name: StackServiceName): Record<string, string> =>
    stackIdentityEnv({ credentials, ownerToken, name });
  const startOne = async (name: StackServiceName): Promise<void> => {
    const env = stackServiceEnv({
      name,
      home,
      urls,
      identity: identityEnv(name),
      orchestratorPort: options.orchestratorPort ?? 0,
      extra: options.env?.[name],
      sessionReadable: options.sessionReadable,
    });
    const p = await startServiceProcess({
      name,
      env,
      logFile: path.join(logs, `${name}.log`),
      ...(options.logLevel ? { logLevel: options.logLevel } : {}),
    });
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
  const isolation = started.find((p) => p.name === "sandbox")?.isolation;
  return { urls, credentials, ownerToken, identityEnv, processes: started, isolation, close };
}

/**
 * Makes a stack's data directory, or narrows the one there. The home is passable but not listable by other users:
 * sessions running as a uid of their own reach their working directory under <home>/sandbox; everything else in it
 * is its owner's alone (stores, keys and credentials are made 0700/0600, the logs folder 0700). Both stacks, the
 * embedded one and `oz0 dev`'s, whose home its lock made first with the umask's mode.
 */
export function prepareHome(home: string): void {
  assertOwnHome(home);
  mkdirSync(home, { recursive: true });
  chmodSync(home, 0o711);
  const logs = path.join(home, "logs");
  mkdirSync(logs, { recursive: true, mode: 0o700 });
  chmodSync(logs, 0o700);
}

/** The identity variables of one service of a stack: its own credential, its peers' digests and, where people call, the owner's digest. */
export function stackIdentityEnv(options: {
  credentials: StackCredentials;
  ownerToken: string;
  name: StackServiceName;
}): Record<string, string> {
  const { credentials, ownerToken, name } = options;
  return {
    ...serviceIdentityEnv(credentials, name),
    ...(name === "orchestrator" || name === "events" ? { OZ0_OWNER_TOKEN_SHA256: credentialDigest(ownerToken) } : {}),
  };
}

/** Everything one service of a stack is started with beyond the shell's allowlist: where its data lives, who it is, where the others are. */
export function stackServiceEnv(options: {
  name: StackServiceName;
  home: string;
  /** The services started so far. */
  urls: Partial<Record<StackServiceName, string>>;
  identity: Record<string, string>;
  /** The port it listens on; default 0 (a free one), and the orchestrator's `orchestratorPort`. */
  port?: number;
  orchestratorPort?: number;
  extra?: Record<string, string> | undefined;
  /** More of the installation that sessions may read, besides installationPaths: a test's harness fixtures. */
  sessionReadable?: readonly string[] | undefined;
}): Record<string, string> {
  const { name, home, urls } = options;
  // The sandbox publishes nothing: what a node reports of its sessions, the orchestrator publishes.
  const env: Record<string, string> = {
    ...(urls.events && name !== "sandbox" ? { OZ0_EVENTS_URL: urls.events } : {}),
    ...options.identity,
  };
  if (options.port !== undefined) env.OZ0_PORT = String(options.port);
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
      if (root && !process.env.OZ0_SANDBOX_READ_ONLY_PATHS) {
        env.OZ0_SANDBOX_READ_ONLY_PATHS = [...installationPaths(root), ...(options.sessionReadable ?? [])].join(":");
      }
      break;
    }
    case "orchestrator":
      env.OZ0_HOME = home;
      env.OZ0_PORT = String(options.port ?? options.orchestratorPort ?? 0);
      // Its errors then speak of the local stack's own sandbox, not of OZ0_SANDBOX_URLS (sandbox-placement.ts).
      env.OZ0_LOCAL_STACK = "1";
      if (urls.sandbox) env.OZ0_SANDBOX_URLS = urls.sandbox;
      if (urls["llm-proxy"]) env.OZ0_LLM_PROXY_URL = urls["llm-proxy"];
      break;
  }
  return Object.assign(env, options.extra ?? {});
}

/**
 * Why the stack does not start when its sandbox found no isolation that
 * works here and nobody chose none: agent code would run as this user, able
 * to read the services' memory and files and the environment of the command
 * that started them, a provider key exported in the shell included (attacker
 * review). Undefined when sessions are isolated or OZ0_ISOLATION=none says so.
 */
export function unisolatedRefusal(isolation: EmbeddedStack["isolation"]): string | undefined {
  if (!isolation || isolation.mode !== "none" || /OZ0_ISOLATION=none/.test(isolation.reason)) return undefined;
  return `the local stack's sandbox cannot isolate sessions here (${isolation.reason}), so agent code would run as this user and could read everything it can, the provider keys in this shell's environment included; install bubblewrap (apt-get install bubblewrap) or run the stack as root, or set OZ0_ISOLATION=none to run sessions without isolation anyway`;
}

/**
 * The one line a person must see when sessions run without isolation (only
 * when OZ0_ISOLATION=none chose it: otherwise the stack does not start);
 * undefined when sessions are isolated.
 */
export function isolationNotice(stack: Pick<EmbeddedStack, "isolation">): string | undefined {
  const { isolation } = stack;
  if (!isolation || isolation.mode !== "none") return undefined;
  return "sessions run WITHOUT isolation, as OZ0_ISOLATION=none chose: agent code can read everything this user can, the provider keys in this shell's environment included";
}

/** What `oz0 dev` writes so other commands find its stack. */
export interface DevDiscovery {
  url: string;
  /** The `oz0 dev` process. */
  pid: number;
  /** The orchestrator's process: its stack serves commands while it runs, even after the `oz0 dev` that started it died. */
  orchestratorPid?: number;
  urls: Record<string, string>;
  startedAt: string;
}

export function discoveryFile(home: string): string {
  return path.join(home, "dev.json");
}

export function writeDiscovery(home: string, discovery: DevDiscovery): void {
  mkdirSync(home, { recursive: true });
  replaceFile(discoveryFile(home), `${JSON.stringify(discovery, null, 2)}\n`);
}

export function removeDiscovery(home: string, pid: number): void {
  const found = readDiscovery(home);
  if (found && found.pid === pid) rmSync(discoveryFile(home), { force: true });
}

/** The running `oz0 dev` stack's discovery, or undefined when there is none (its `oz0 dev` and its orchestrator are both gone). */
export function readDiscovery(home: string): DevDiscovery | undefined {
  let found: DevDiscovery;
  try {
    found = JSON.parse(readFileSync(discoveryFile(home), "utf8")) as DevDiscovery;
  } catch {
    return undefined;
  }
  if (processAlive(found.pid)) return found;
  if (found.orchestratorPid !== undefined && isServiceProcess(found.orchestratorPid, "orchestrator")) return found;
  return undefined;
}

/**
 * True when `pid` is a live process running the service's main.js (not a
 * zombie, not another program that got the pid since).
 */
export function isServiceProcess(pid: number, name: StackServiceName): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The state follows the parenthesised command name: Z is a zombie, X dead.
    if (/^\S+ \(.*\) [ZX]/s.test(stat)) return false;
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").includes(serviceMain(name));
  } catch {
    return false;
  }
}

/** What every service takes from the shell: the basics of a process, locale, telemetry, and its OZ0_* settings. */
const SHARED_VARIABLES = new Set([
  "PATH",
  "HOME",
  "USER",
  "LOGNAME",
  "LANG",
  "LANGUAGE",
  "TZ",
  "TMPDIR",
  "NODE_OPTIONS",
  "NODE_EXTRA_CA_CERTS",
  "SSL_CERT_FILE",
  "SSL_CERT_DIR",
]);
const SHARED_PREFIXES = ["LC_", "OTEL_", "OZ0_"];

/**
 * The relay's Kafka user and TLS (services/events, "Configuration"): where its password is, for events alone. And
 * the password itself, which the events service refuses (it reads it from a file), saying so: the other services
 * would have carried it by its OZ0_ prefix, in environments a session's tools may read.
 */
const KAFKA_SECURITY = [
  "OZ0_KAFKA_SASL_MECHANISM",
  "OZ0_KAFKA_SASL_USERNAME",
  "OZ0_KAFKA_SASL_PASSWORD_FILE",
  "OZ0_KAFKA_SASL_PASSWORD",
  "OZ0_KAFKA_TLS",
  "OZ0_KAFKA_TLS_CA_FILE",
];

/** What only one service takes from the shell. */
const SERVICE_VARIABLES: Record<StackServiceName, readonly string[]> = {
  // Upstream calls to providers may need the shell's proxy settings.
  "llm-proxy": [
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
    "OZ0_KEK",
    "OZ0_KEK_FILE",
    "OZ0_SECRETS_DIR",
  ],
  // People are authenticated by the orchestrator and by the events service (Watch, Transcript).
  events: ["KAFKA_BROKERS", "OZ0_AUTH_CONFIG", ...KAFKA_SECURITY],
  orchestrator: ["OZ0_AUTH_CONFIG"],
  sandbox: [],
};

/**
 * Credentials in the shell that no service is given from it: the stack makes
 * its own service credentials, the CLI's own credential stays with the CLI,
 * and provider keys reach the LLM proxy through SetSecret, never an
 * environment a session could read.
 */
const WITHHELD = new Set([
  "OZ0_TOKEN",
  "OZ0_SERVICE_TOKEN",
  "OZ0_NODE_TOKEN",
  "OZ0_OWNER_TOKEN_SHA256",
  "OZ0_LLM_PROXY_ADMIN_TOKEN",
  "OZ0_KEK",
  "OZ0_KEK_FILE",
  "OZ0_SECRETS_DIR",
  "OZ0_AUTH_CONFIG",
  ...KAFKA_SECURITY,
]);

/**
 * How a deployment's services find and name each other, which the stack sets
 * for its own: one left in the shell (from a deployment's shell, or a
 * session's when `oz0` runs inside a job) would join a stack's service to
 * services elsewhere, or name it as one of them. A sandbox given a stray
 * OZ0_ORCHESTRATOR_URL refused to start ("set but OZ0_NODE_TOKEN is not").
 */
const STACK_WIRING = new Set([
  "OZ0_URL",
  "OZ0_ORCHESTRATOR_URL",
  "OZ0_SANDBOX_URL",
  "OZ0_SANDBOX_URLS",
  "OZ0_LOCAL_STACK",
  "OZ0_LLM_PROXY_URL",
  "OZ0_EVENTS_URL",
  "OZ0_PUBLIC_URL",
  "OZ0_ADVERTISE_URL",
  "OZ0_NODE_ID",
  "OZ0_NODE_PORT",
  "OZ0_HEALTH_PORT",
  "OZ0_REPLICA_ID",
  "OZ0_HOME",
  "OZ0_EVENTS_DATA",
  "OZ0_LLM_PROXY_DATA",
  "OZ0_SANDBOX_ROOT",
  // What a session's harness is given, the token among them.
  "OZ0_SESSION_ID",
  "OZ0_JOB_ID",
  "OZ0_LLM_TOKEN",
  "OZ0_LLM_HEADERS",
  "OZ0_ANTHROPIC_BASE_URL",
  "OZ0_OPENAI_BASE_URL",
]);

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
    if (value === undefined || key.startsWith("OZ0_PEER_") || key.startsWith("OZ0_SERVICE_TOKEN_FOR_")) continue;
    const shared = SHARED_VARIABLES.has(key) || SHARED_PREFIXES.some((p) => key.startsWith(p));
    if (own.has(key) || (shared && !WITHHELD.has(key) && !STACK_WIRING.has(key))) env[key] = value;
  }
  return env;
}
