// A throwaway PostgreSQL server for tests, from Debian's `postgresql` package
// (its initdb and postgres binaries), in a temporary folder on a loopback
// port: never the system service, so tests never touch shared state.
// PostgreSQL refuses to run as root, so as root it runs as `nobody`.
import { execFileSync } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync, chmodSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import pg from "pg";
import { runToCompletion, spawnOwned, type OwnedProcess } from "./child-process.js";
import { freePort } from "./free-port.js";
import { InfrastructureError } from "./infrastructure-error.js";

export interface PostgresOptions {
  /** Folder with initdb and postgres. Default: the newest /usr/lib/postgresql/<version>/bin. */
  binDir?: string;
  /** Database created for the tests. Default `oz0`. */
  database?: string;
  /** How long to wait for the server to accept connections. Default 60 s. */
  readyTimeoutMs?: number;
}

export interface RunningPostgres {
  /** `postgres://postgres@127.0.0.1:<port>/<database>`, for DATABASE_URL. */
  readonly url: string;
  readonly dir: string;
  /** Stop the server (fast shutdown) and delete its data. */
  close(): Promise<void>;
}

/** The folder of Debian's PostgreSQL binaries, newest version first. */
export function findPostgresBinDir(): string | undefined {
  const base = "/usr/lib/postgresql";
  if (!existsSync(base)) return undefined;
  const versions = readdirSync(base)
    .filter((v) => existsSync(path.join(base, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] ? path.join(base, versions[0], "bin") : undefined;
}

export async function startPostgres(options: PostgresOptions = {}): Promise<RunningPostgres> {
  const binDir = options.binDir ?? findPostgresBinDir();
  if (!binDir) {
    throw new InfrastructureError(
      "POSTGRES_NOT_INSTALLED",
      "PostgreSQL is not installed: run tools/test-infra/bin/install-system-packages.sh as root (Debian's postgresql), or set DATABASE_URL",
    );
  }
  const dir = mkdtempSync(path.join(tmpdir(), "oz0-postgres-"));
  const dataDir = path.join(dir, "data");
  const owner = serverUser();
  if (owner) {
    chownSync(dir, owner.uid, owner.gid);
    chmodSync(dir, 0o700);
  }
  const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", LANG: "C.UTF-8", LC_ALL: "C.UTF-8" };
  await runToCompletion({
    command: path.join(binDir, "initdb"),
    args: ["-D", dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"],
    env,
    cwd: dir,
    ...owner,
  });
  const port = await freePort();
  const server: OwnedProcess = spawnOwned({
    command: path.join(binDir, "postgres"),
    args: [
      "-D",
      dataDir,
      "-p",
      String(port),
      "-h",
      "127.0.0.1",
      "-k",
      dir,
      // A test database: speed over durability.
      "-c",
      "fsync=off",
      "-c",
      "synchronous_commit=off",
      "-c",
      "full_page_writes=off",
      "-c",
      "max_connections=300",
      "-c",
      "shared_buffers=64MB",
    ],
    logFile: path.join(dir, "postgres.log"),
    env,
    cwd: dir,
    ...owner,
  });
  const adminUrl = `postgres://postgres@127.0.0.1:${port}/postgres`;
  try {
    await waitForPostgres({ url: adminUrl, timeoutMs: options.readyTimeoutMs ?? 60_000, exited: server.exited });
  } catch (error) {
    await server.stop({ signal: "SIGKILL" });
    throw new InfrastructureError(
      "POSTGRES_NOT_READY",
      `PostgreSQL did not accept connections on port ${port}: ${(error as Error).message}; see ${path.join(dir, "postgres.log")}`,
    );
  }
  const database = options.database ?? "oz0";
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE "${database.replaceAll('"', '""')}"`);
  } finally {
    await client.end();
  }
  let closed = false;
  return {
    url: `postgres://postgres@127.0.0.1:${port}/${encodeURIComponent(database)}`,
    dir,
    async close() {
      if (closed) return;
      closed = true;
      // SIGINT is PostgreSQL's "fast" shutdown: disconnect clients, stop now.
      await server.stop({ signal: "SIGINT", graceMs: 10_000 });
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Poll with a real connection until the server answers `SELECT 1` (or exits). */
export async function waitForPostgres(options: {
  url: string;
  timeoutMs: number;
  exited?: Promise<number | null>;
}): Promise<void> {
  const deadline = Date.now() + options.timeoutMs;
  let exitedWith: number | null | undefined;
  void options.exited?.then((code) => {
    exitedWith = code;
  });
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (exitedWith !== undefined) throw new Error(`the server exited with code ${exitedWith}`);
    const client = new pg.Client({ connectionString: options.url, connectionTimeoutMillis: 1_000 });
    try {
      await client.connect();
      await client.query("SELECT 1");
      return;
    } catch (error) {
      lastError = error;
    } finally {
      await client.end().catch(() => undefined);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(
    `timed out after ${options.timeoutMs} ms (${String((lastError as Error | undefined)?.message ?? lastError)})`,
  );
}

// PostgreSQL will not run as root; `nobody` owns the throwaway cluster then.
function serverUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number(execFileSync("id", ["-u", "nobody"]).toString().trim());
  const gid = Number(execFileSync("id", ["-g", "nobody"]).toString().trim());
  return { uid, gid };
}
