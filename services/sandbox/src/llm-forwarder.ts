// The node side of the LLM path under bubblewrap: one Unix socket per LLM
// origin, bind-mounted into the sandbox, each piped to that origin and to
// nothing else. The sandbox's network namespace has no other way out.
//
// The node listens once per origin, for every session (SharedLlmListeners):
// each origin's socket has a folder of its own, `<root>/forward/<key>`,
// which a session whose request names that origin gets bound read-only at
// `/run/oz0/<i>`. A socket per session was an inode made and freed per
// session, a bind, a listen and a server (issue 24). The folder holds that
// socket alone and nothing of any session: a session reaches the origins its
// request names, as before, and learns nothing of the sessions sharing them
// (a hard link per session would have shown their number as the socket's
// link count). Sessions a previous version started keep their sockets in
// their own internal folder (`run/`, bound at /run/oz0), listened on per
// session as before.
import { createHash } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import { invalidField } from "./sandbox-errors.js";

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
 * its own there (SharedLlmListeners); without, the session's own in
 * `socketDir` (the layout of sessions a previous version started).
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

/** Accepts connections on a forward's socket and pipes each to `origin`; `sockets` holds both ends of each while open. */
function forwardingServer(origin: URL, sockets: Set<net.Socket>): net.Server {
  const port = Number(origin.port || "80");
  const host = origin.hostname.replace(/^\[|\]$/g, "");
  return net.createServer((inbound) => {
    const outbound = net.connect({ host, port });
    for (const socket of [inbound, outbound]) {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
    }
    inbound.pipe(outbound);
    outbound.pipe(inbound);
    inbound.on("error", () => outbound.destroy());
    outbound.on("error", () => inbound.destroy());
  });
}

/** Listens on `socketPath` (through an alias of its folder when too long, kept in `aliasedDirs`). */
async function listenOn(server: net.Server, socketPath: string, aliasedDirs: FileHandle[]): Promise<void> {
  const where = await bindablePath(socketPath, aliasedDirs);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(where, () => {
      server.off("error", reject);
      resolve();
    });
  });
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
  #closed = false;

  constructor(options: { dir: string }) {
    this.#dir = options.dir;
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
    const server = forwardingServer(forward.origin, this.#sockets);
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

/** Listens on each forward's Unix socket, the session's own, and pipes connections to its origin. */
export async function startLlmForwarding(forwards: LlmForward[]): Promise<LlmForwarding> {
  const servers: net.Server[] = [];
  const sockets = new Set<net.Socket>();
  const aliasedDirs: FileHandle[] = [];
  try {
    for (const forward of forwards) {
      const server = forwardingServer(forward.origin, sockets);
      servers.push(server);
      await listenOn(server, forward.socketPath, aliasedDirs);
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
