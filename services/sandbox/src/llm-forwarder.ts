// The node side of the LLM path under bubblewrap: Unix sockets bind-mounted
// into the sandbox, each piped to one LLM origin and to nothing else. The
// sandbox's network namespace has no other way out.
//
// Each session listens on sockets of its own, in its internal folder
// (`run/`, bound read-only at /run/oz0), so the sandbox knows whose every
// connection is: a session holds at most `perSession` forwarded connections
// at once, all sessions together at most `total` (each costs the sandbox two
// descriptors, the Unix side and the TCP one to the origin, and the sandbox
// needs the rest for sessions' files and processes), and a connection idle
// for `idleTimeoutMs` is closed. A harness reaches the sockets directly, not
// only through the entry, so none of this can be left to it.
//
// For a while the node listened once per origin for every session
// (SharedLlmListeners, issue 24: a socket per session is an inode, a bind
// and a server per session), but a shared socket cannot tell sessions apart,
// and one session holding ten thousand connections to it took the node's
// descriptors from every other (attacker review). Sessions that version
// started keep the origin's shared folder (`<root>/forward/<key>`, bound at
// `/run/oz0/<i>`) when taken over; only the overall cap and the idle
// timeout apply to them.
import { createHash } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { chmod, lchown, open, type FileHandle } from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import type { Logger } from "@oz0/serving";
import { invalidField } from "./sandbox-errors.js";
import { ownOpenFilesLimit } from "./session-process-limit.js";
import type { SessionUser } from "./session-user-processes.js";

/** Inside the sandbox, forwarder ports count up from here (the namespace is empty, so any port is free). */
const FIRST_INNER_PORT = 41_000;
/** Where the socket directory is mounted inside the sandbox. */
export const SANDBOX_SOCKET_DIR = "/run/oz0";
/** The longest path Linux binds a Unix socket to (sun_path holds 108 bytes with the NUL). */
const MAX_SOCKET_PATH_BYTES = 107;

export interface LlmForward {
  /** `host:port` of the real endpoint. */
  origin: URL;
  /** The Unix socket on the node. */
  socketPath: string;
  /** The same socket as seen inside the sandbox. */
  innerSocketPath: string;
  innerPort: number;
  /** The folder bound read-only into the sandbox for it (shared by a session's forwards in the per-session layout). */
  mount: { source: string; dest: string };
}

export interface LlmForwarding {
  forwards: LlmForward[];
  /** Rewrites a base URL the request gave to the one the harness uses inside the sandbox ("" stays ""). */
  innerUrl(url: string): string;
  close(): Promise<void>;
}

/**
 * Plans the forwards for the request's base URLs; starts nothing. With
 * `sharedDir` each origin's socket is the node's shared one in a folder of
 * its own there (SharedLlmListeners: the layout of sessions a previous
 * version started); without, the session's own in `socketDir`.
 */
export function planLlmForwards(options: {
  socketDir: string;
  sharedDir?: string;
  urls: { field: string; url: string }[];
}): LlmForward[] {
  const forwards: LlmForward[] = [];
  for (const { field, url } of options.urls) {
    if (url === "") continue;
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw invalidField(field, "is not a URL");
    }
    if (parsed.protocol !== "http:") {
      throw invalidField(
        field,
        "must be an http:// URL (the node's LLM proxy) when sessions run under bubblewrap, which forwards plain connections to it",
      );
    }
    if (forwards.some((f) => f.origin.host === parsed.host)) continue;
    const index = forwards.length;
    const origin = new URL(parsed.origin);
    if (options.sharedDir !== undefined) {
      const folder = path.join(options.sharedDir, originKey(origin));
      forwards.push({
        origin,
        socketPath: path.join(folder, SHARED_SOCKET),
        innerSocketPath: `${SANDBOX_SOCKET_DIR}/${index}/${SHARED_SOCKET}`,
        innerPort: FIRST_INNER_PORT + index,
        mount: { source: folder, dest: `${SANDBOX_SOCKET_DIR}/${index}` },
      });
    } else
      forwards.push({
        origin,
        socketPath: path.join(options.socketDir, `llm-${index}.sock`),
        innerSocketPath: `${SANDBOX_SOCKET_DIR}/llm-${index}.sock`,
        innerPort: FIRST_INNER_PORT + index,
        mount: { source: options.socketDir, dest: SANDBOX_SOCKET_DIR },
      });
  }
  return forwards;
}

/** The socket's name in an origin's shared folder. */
const SHARED_SOCKET = "llm.sock";

/** An origin's folder name: the same in every run of the sandbox, so a session taken over after a restart finds its origin's socket again in the folder bound into it. */
function originKey(origin: URL): string {
  return createHash("sha256").update(origin.host).digest("hex").slice(0, 16);
}

export interface ForwardLimits {
  /** Forwarded connections one session holds at once, across its origins. */
  perSession: number;
  /** Forwarded connections all sessions hold at once. */
  total: number;
  /** A connection with no bytes either way for this long is closed. */
  idleTimeoutMs: number;
}

/** Connections a session may hold: enough for a harness's parallel model calls, subagents and trace exports. */
export const DEFAULT_FORWARDS_PER_SESSION = 64;
/** A model's answer can pause for minutes (a long think before the first token); a pooled keep-alive connection is dropped by its client sooner. */
export const DEFAULT_FORWARD_IDLE_TIMEOUT_MS = 10 * 60_000;

/**
 * The overall cap when none is set: a quarter of the process's descriptor
 * limit, so forwarded connections (two descriptors each) take at most half
 * of the descriptors and the other half stays for the sandbox's own work.
 */
export function defaultTotalForwards(descriptorLimit = ownOpenFilesLimit()): number {
  return Math.max(1, Math.floor(descriptorLimit / 4));
}

/** A group's refusals are logged at most this often, with how many came since: a harness retrying in a loop must not flood the log. */
export const REFUSAL_LOG_INTERVAL_MS = 60_000;

/**
 * Counts the node's forwarded connections against `limits.total`; each
 * session's (or the shared listeners') against its own cap through a
 * {@link ForwardBudget.group}. A connection past a cap is closed, and the
 * operator told which cap (the harness sees only a closed connection).
 */
export class ForwardBudget {
  readonly limits: ForwardLimits;
  readonly #logger: Logger | undefined;
  readonly #now: () => number;
  #open = 0;

  constructor(limits: ForwardLimits, options: { logger?: Logger; now?: () => number } = {}) {
    this.limits = limits;
    this.#logger = options.logger;
    this.#now = options.now ?? Date.now;
  }

  /** A count of its own, capped at `cap`, within the node's; `whose` names its connections in the log. */
  group(cap: number, whose: { sessionId: string } | "sessions on the shared sockets"): ConnectionGroup {
    let open = 0;
    let loggedAt = -Infinity;
    let unlogged = 0;
    const refuse = (): false => {
      unlogged++;
      const now = this.#now();
      if (now - loggedAt < REFUSAL_LOG_INTERVAL_MS) return false;
      loggedAt = now;
      const ownCap = open >= cap;
      const fields = {
        ...(typeof whose === "string" ? { forwards: whose } : { sessionId: whose.sessionId }),
        open: ownCap ? open : this.#open,
        cap: ownCap ? cap : this.limits.total,
        refusedSinceLastLine: unlogged,
      };
      unlogged = 0;
      this.#logger?.warn(
        fields,
        ownCap && typeof whose !== "string"
          ? "a session's harness holds as many LLM connections as one session may (OZ0_LLM_FORWARD_MAX_CONNECTIONS_PER_SESSION); its further connections are closed until some end"
          : "the node's forwarded LLM connections are at their cap (OZ0_LLM_FORWARD_MAX_CONNECTIONS); further connections are closed until some end",
      );
      return false;
    };
    return {
      admit: () => {
        if (open >= cap || this.#open >= this.limits.total) return refuse();
        open++;
        this.#open++;
        return true;
      },
      release: () => {
        open--;
        this.#open--;
      },
    };
  }
}

interface ConnectionGroup {
  /** Counts a connection in, or says false when a cap is reached. */
  admit(): boolean;
  release(): void;
}

/**
 * Accepts connections on a forward's socket and pipes each to `origin`;
 * `sockets` holds both ends of each while open. A connection past the
 * group's cap is closed at once, before its TCP side is made.
 */
function forwardingServer(
  origin: URL,
  options: { sockets: Set<net.Socket>; group: ConnectionGroup; idleTimeoutMs: number },
): net.Server {
  const port = Number(origin.port || "80");
  const host = origin.hostname.replace(/^\[|\]$/g, "");
  const { sockets, group, idleTimeoutMs } = options;
  return net.createServer((inbound) => {
    if (!group.admit()) {
      inbound.destroy();
      return;
    }
    const outbound = net.connect({ host, port });
    // Counted until both ends are gone: both hold a descriptor.
    let ends = 2;
    const ended = (): void => {
      if (--ends === 0) group.release();
    };
    inbound.once("close", ended);
    outbound.once("close", ended);
    for (const socket of [inbound, outbound]) {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
    }
    // A socket's reads and writes both count as activity; each side has a timer, as one may outlive the other.
    for (const socket of [inbound, outbound])
      socket.setTimeout(idleTimeoutMs, () => {
        inbound.destroy();
        outbound.destroy();
      });
    inbound.pipe(outbound);
    outbound.pipe(inbound);
    inbound.on("error", () => outbound.destroy());
    outbound.on("error", () => inbound.destroy());
  });
}

/** Listens on `socketPath` (through an alias of its folder when too long, kept in `aliasedDirs`); the path bound. */
async function listenOn(server: net.Server, socketPath: string, aliasedDirs: FileHandle[]): Promise<string> {
  const where = await bindablePath(socketPath, aliasedDirs);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(where, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return where;
}

function innerUrlFor(forwards: readonly LlmForward[], url: string): string {
  if (url === "") return "";
  const parsed = new URL(url);
  const forward = forwards.find((f) => f.origin.host === parsed.host);
  if (forward === undefined) return url;
  return `http://127.0.0.1:${forward.innerPort}${parsed.pathname === "/" ? "" : parsed.pathname.replace(/\/$/, "")}${parsed.search}`;
}

/**
 * The node's listeners for forwards planned with `sharedDir`: one per
 * origin, started by the first session that needs it and kept until
 * {@link close}. `dir` is made when missing and never emptied: a session a
 * previous run started has its origin's folder bound into it, and finds the
 * socket this run listens on there.
 */
export class SharedLlmListeners {
  readonly #dir: string;
  /** Socket path to its listener, listening once the promise resolves. */
  readonly #listening = new Map<string, Promise<void>>();
  readonly #servers: net.Server[] = [];
  readonly #sockets = new Set<net.Socket>();
  readonly #aliasedDirs: FileHandle[] = [];
  readonly #budget: ForwardBudget;
  /** Every session on these sockets counts as one: the sockets cannot tell them apart. */
  readonly #group: ConnectionGroup;
  #closed = false;

  constructor(options: { dir: string; budget: ForwardBudget }) {
    this.#dir = options.dir;
    this.#budget = options.budget;
    this.#group = options.budget.group(options.budget.limits.total, "sessions on the shared sockets");
  }

  get dir(): string {
    return this.#dir;
  }

  /** Makes sure each forward's origin is listened on; the forwarding's close() leaves the listeners to the next sessions. */
  async open(forwards: LlmForward[]): Promise<LlmForwarding> {
    await Promise.all(forwards.map((forward) => this.#listen(forward)));
    return { forwards, innerUrl: (url) => innerUrlFor(forwards, url), close: () => Promise.resolve() };
  }

  #listen(forward: LlmForward): Promise<void> {
    let listening = this.#listening.get(forward.socketPath);
    if (listening === undefined) {
      listening = this.#start(forward);
      this.#listening.set(forward.socketPath, listening);
      // A failed start is tried again by the next session.
      listening.catch(() => this.#listening.delete(forward.socketPath));
    }
    return listening;
  }

  async #start(forward: LlmForward): Promise<void> {
    if (this.#closed) throw new Error("the sandbox's LLM forwarding is closed");
    const folder = path.dirname(forward.socketPath);
    mkdirSync(folder, { recursive: true, mode: 0o700 });
    // What a previous run of the sandbox bound there; its sessions, taken over, reach this run's socket in its place.
    rmSync(forward.socketPath, { force: true });
    const server = forwardingServer(forward.origin, {
      sockets: this.#sockets,
      group: this.#group,
      idleTimeoutMs: this.#budget.limits.idleTimeoutMs,
    });
    this.#servers.push(server);
    await listenOn(server, forward.socketPath, this.#aliasedDirs);
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const socket of this.#sockets) socket.destroy();
    await Promise.all(this.#servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
    await Promise.all(this.#aliasedDirs.map((dir) => dir.close()));
  }
}

/**
 * Listens on each forward's Unix socket, the session's own, and pipes
 * connections to its origin: at most `budget.limits.perSession` at once
 * across the session's forwards.
 */
export async function startLlmForwarding(options: {
  forwards: LlmForward[];
  budget: ForwardBudget;
  sessionId: string;
  /**
   * The session's own uid (bubblewrap run by a root sandbox): its sockets are made its own to connect to, and their
   * folder passable for it. Root's and private otherwise, where the session runs as the sandbox's user.
   */
  owner?: SessionUser;
}): Promise<LlmForwarding> {
  const { forwards, budget, sessionId, owner } = options;
  const servers: net.Server[] = [];
  const sockets = new Set<net.Socket>();
  const aliasedDirs: FileHandle[] = [];
  const group = budget.group(budget.limits.perSession, { sessionId });
  try {
    for (const forward of forwards) {
      const server = forwardingServer(forward.origin, { sockets, group, idleTimeoutMs: budget.limits.idleTimeoutMs });
      servers.push(server);
      const where = await listenOn(server, forward.socketPath, aliasedDirs);
      if (owner !== undefined) {
        await lchown(where, owner.uid, owner.gid);
        await chmod(path.dirname(where), 0o711);
      }
    }
  } catch (error) {
    await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
    await Promise.all(aliasedDirs.map((dir) => dir.close()));
    throw error;
  }
  return {
    forwards,
    innerUrl: (url) => innerUrlFor(forwards, url),
    async close(): Promise<void> {
      for (const socket of sockets) socket.destroy();
      await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
      await Promise.all(aliasedDirs.map((dir) => dir.close()));
    },
  };
}

/**
 * The path to bind `socketPath` by. Under a deep sandbox root (a long
 * OZ0_HOME or OZ0_SANDBOX_ROOT) the socket's path is longer than Linux binds
 * (EINVAL), so it is bound through a short alias of its directory,
 * /proc/self/fd/N/<name>. The directory stays open until the server is
 * closed: libuv unlinks the bound path then, and N must still be that
 * directory.
 */
async function bindablePath(socketPath: string, aliasedDirs: FileHandle[]): Promise<string> {
  if (Buffer.byteLength(socketPath) <= MAX_SOCKET_PATH_BYTES) return socketPath;
  const dir = await open(path.dirname(socketPath), "r");
  aliasedDirs.push(dir);
  return `/proc/self/fd/${dir.fd}/${path.basename(socketPath)}`;
}
