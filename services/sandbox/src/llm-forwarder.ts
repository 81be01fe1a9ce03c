// The node side of the LLM path under bubblewrap: one Unix socket per LLM
// origin, bind-mounted into the sandbox, each piped to that origin and to
// nothing else. The sandbox's network namespace has no other way out.
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
}

export interface LlmForwarding {
  forwards: LlmForward[];
  /** Rewrites a base URL the request gave to the one the harness uses inside the sandbox ("" stays ""). */
  innerUrl(url: string): string;
  close(): Promise<void>;
}

/** Plans the forwards for the request's base URLs; starts nothing. */
export function planLlmForwards(options: { socketDir: string; urls: { field: string; url: string }[] }): LlmForward[] {
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
    forwards.push({
      origin: new URL(parsed.origin),
      socketPath: path.join(options.socketDir, `llm-${index}.sock`),
      innerSocketPath: `${SANDBOX_SOCKET_DIR}/llm-${index}.sock`,
      innerPort: FIRST_INNER_PORT + index,
    });
  }
  return forwards;
}

/** Listens on each forward's Unix socket and pipes connections to its origin. */
export async function startLlmForwarding(forwards: LlmForward[]): Promise<LlmForwarding> {
  const servers: net.Server[] = [];
  const sockets = new Set<net.Socket>();
  const aliasedDirs: FileHandle[] = [];
  try {
    for (const forward of forwards) {
      const port = Number(forward.origin.port || "80");
      const host = forward.origin.hostname.replace(/^\[|\]$/g, "");
      const server = net.createServer((inbound) => {
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
      servers.push(server);
      const where = await bindablePath(forward.socketPath, aliasedDirs);
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(where, () => resolve());
      });
    }
  } catch (error) {
    await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
    await Promise.all(aliasedDirs.map((dir) => dir.close()));
    throw error;
  }
  return {
    forwards,
    innerUrl(url: string): string {
      if (url === "") return "";
      const parsed = new URL(url);
      const forward = forwards.find((f) => f.origin.host === parsed.host);
      if (forward === undefined) return url;
      return `http://127.0.0.1:${forward.innerPort}${parsed.pathname === "/" ? "" : parsed.pathname.replace(/\/$/, "")}${parsed.search}`;
    },
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
