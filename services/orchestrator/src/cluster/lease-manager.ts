// Leases: how several orchestrator replicas share jobs, graph runs and
// pending approvals with exactly one owner at a time. A lease is a row
// (kind, resource) naming its owner, an expiry and a fencing token. The owner
// renews it; a replica that dies stops renewing, the lease expires, and
// another replica takes it over, which hands out a new token. Writes made
// under a lease check the token in the same transaction (`assertLeaseHeld`),
// so a stale owner (paused, partitioned) cannot write after a takeover.
// Expiry is judged by the database's clock (`now()`), never a replica's, so
// clock skew between replicas cannot make two of them owners.
import type pg from "pg";
import { withTransaction } from "@oz0/postgres";
import { OrchestratorError } from "../orchestrator-error.js";
import { migrateOrchestrator } from "../store/migrations.js";
import type { SqlClient } from "../store/postgres-locks.js";
import { createPostgresPool, type PostgresConnectionOptions } from "../store/sql-database.js";

/** What a lease is for: a job (its session), a graph run, or a pending approval. */
export type LeaseKind = "job" | "graph_run" | "approval";

export interface Lease {
  kind: LeaseKind;
  resource: string;
  owner: string;
  /** Fencing token: grows with every acquisition or takeover, never reused. */
  token: bigint;
  acquiredAt: Date;
  expiresAt: Date;
}

/** What a write under a lease carries to prove it is still the owner's. */
export type LeaseFence = Pick<Lease, "kind" | "resource" | "token">;

/** A write was refused because the lease it was made under is no longer held. */
export class LeaseLostError extends OrchestratorError {
  readonly fence: LeaseFence;

  constructor(fence: LeaseFence, holder: string) {
    super(
      "failed_precondition",
      `the lease on ${fence.kind} ${fence.resource} (token ${fence.token}) is no longer the one held (${holder}); it was not renewed in time and the job was taken over (by another replica, or by this one under a new lease), so the work begun under it must stop`,
    );
    this.name = "LeaseLostError";
    this.fence = fence;
  }
}

interface LeaseRow {
  kind: string;
  resource: string;
  owner: string;
  token: string;
  acquired_at: Date;
  expires_at: Date;
  ttl_ms: number;
}

function toLease(row: LeaseRow): Lease {
  return {
    kind: row.kind as LeaseKind,
    resource: row.resource,
    owner: row.owner,
    token: BigInt(row.token),
    acquiredAt: row.acquired_at,
    expiresAt: row.expires_at,
  };
}

/** Runs `write` in a transaction that first checks that `fence`, when given, still holds its lease. */
export async function fencedTransaction<T>(
  pool: pg.Pool,
  fence: LeaseFence | undefined,
  write: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  return withTransaction(pool, async (client) => {
    if (fence) await assertLeaseHeld(client, fence);
    return write(client);
  });
}

/**
 * Refuses (with LeaseLostError) unless `fence` still holds its lease. Run it
 * inside the transaction of the write it guards: FOR SHARE keeps a takeover
 * (an UPDATE of the lease row) waiting until that write has committed, so
 * every write lands strictly before or strictly after the takeover.
 */
export async function assertLeaseHeld(client: SqlClient, fence: LeaseFence): Promise<void> {
  const { rows } = await client.query<{ token: string; owner: string }>(
    "SELECT token, owner FROM leases WHERE kind = $1 AND resource = $2 FOR SHARE",
    [fence.kind, fence.resource],
  );
  const row = rows[0];
  if (!row || BigInt(row.token) !== fence.token)
    throw new LeaseLostError(fence, row ? `now owned by ${row.owner}` : "released");
}

export interface LeaseManagerOptions {
  /** The pool to use (the store's), or connection options for one of its own. */
  pool?: pg.Pool;
  connection?: PostgresConnectionOptions;
  /** This replica's id (a pod name, say): the owner written on its leases. */
  owner: string;
  /** How long a lease lasts without renewal. Default 30 s. */
  ttlMs?: number;
}

export interface RenewalOptions {
  /** How often to renew every held lease. Default a third of the TTL. */
  intervalMs?: number;
  /** Called for each lease found lost on renewal: stop working on its resource. */
  onLost: (lease: Lease) => void;
  /** Called when a renewal round fails (the database unreachable); renewal goes on. */
  onError?: (error: unknown) => void;
}

export class LeaseManager {
  readonly owner: string;
  readonly #pool: pg.Pool;
  readonly #ownsPool: boolean;
  readonly #ttlMs: number;
  /** Leases this manager holds, by `kind/resource`, for background renewal. */
  readonly #held = new Map<string, Lease>();
  /**
   * By the same key: when (this process's monotonic clock) the request that
   * last set the lease's expiry was sent, and for how long it set it. The
   * database set the expiry after that moment, so the lease surely holds
   * until `sentAt + ttlMs` here: past that, this replica may no longer
   * assume it owns the resource, whatever the database (unreachable) says.
   */
  readonly #confirmed = new Map<string, { sentAt: number; ttlMs: number }>();
  #timer: NodeJS.Timeout | undefined;
  #renewing: Promise<void> | undefined;

  private constructor(options: { pool: pg.Pool; ownsPool: boolean; owner: string; ttlMs: number }) {
    this.#pool = options.pool;
    this.#ownsPool = options.ownsPool;
    this.owner = options.owner;
    this.#ttlMs = options.ttlMs;
  }

  /** Runs the orchestrator migrations (idempotent) so leases work on a fresh database. */
  static async open(options: LeaseManagerOptions): Promise<LeaseManager> {
    if (!options.pool && !options.connection) throw new Error("LeaseManager.open needs a pool or connection options");
    const pool = options.pool ?? createPostgresPool(options.connection!);
    // A pool passed in is on a database already migrated (PostgresJobStore.open ran them).
    if (!options.pool) await migrateOrchestrator(pool, options.connection!.schema ?? "oz0");
    return new LeaseManager({ pool, ownsPool: !options.pool, owner: options.owner, ttlMs: options.ttlMs ?? 30_000 });
  }

  /**
   * Takes the lease when it is free, expired, or already this owner's (then
   * its expiry is extended and the token kept). Undefined when another owner
   * holds it unexpired. Taking over an expired lease is the same call.
   */
  async acquire(kind: LeaseKind, resource: string, options: { ttlMs?: number } = {}): Promise<Lease | undefined> {
    const ttl = options.ttlMs ?? this.#ttlMs;
    const sentAt = performance.now();
    const { rows } = await this.#pool.query<LeaseRow>(
      `INSERT INTO leases AS l (kind, resource, owner, token, acquired_at, expires_at, ttl_ms)
       VALUES ($1, $2, $3, nextval('lease_tokens'), now(), now() + $4 * interval '1 millisecond', $4)
       ON CONFLICT (kind, resource) DO UPDATE SET
         token = CASE WHEN l.owner = excluded.owner AND l.expires_at > now() THEN l.token ELSE excluded.token END,
         acquired_at = CASE WHEN l.owner = excluded.owner AND l.expires_at > now() THEN l.acquired_at ELSE excluded.acquired_at END,
         owner = excluded.owner, expires_at = excluded.expires_at, ttl_ms = excluded.ttl_ms
       WHERE l.expires_at <= now() OR l.owner = excluded.owner
       RETURNING *`,
      [kind, resource, this.owner, ttl],
    );
    if (!rows[0]) return undefined;
    return this.#hold(rows[0], sentAt);
  }

  /** Extends the lease (by its own lifetime unless `ttlMs` says otherwise) if its token is still current; undefined when it was lost. */
  async renew(lease: LeaseFence, options: { ttlMs?: number } = {}): Promise<Lease | undefined> {
    const sentAt = performance.now();
    const { rows } = await this.#pool.query<LeaseRow>(
      `UPDATE leases SET ttl_ms = COALESCE($4, ttl_ms), expires_at = now() + COALESCE($4, ttl_ms) * interval '1 millisecond'
       WHERE kind = $1 AND resource = $2 AND token = $3 RETURNING *`,
      [lease.kind, lease.resource, lease.token.toString(), options.ttlMs ?? null],
    );
    if (!rows[0]) {
      this.#drop(`${lease.kind}/${lease.resource}`);
      return undefined;
    }
    return this.#hold(rows[0], sentAt);
  }

  /** Gives the lease up (the work is done); false when it was no longer held. */
  async release(lease: LeaseFence): Promise<boolean> {
    this.#drop(`${lease.kind}/${lease.resource}`);
    const result = await this.#pool.query("DELETE FROM leases WHERE kind = $1 AND resource = $2 AND token = $3", [
      lease.kind,
      lease.resource,
      lease.token.toString(),
    ]);
    return (result.rowCount ?? 0) > 0;
  }

  /** Leases whose owners stopped renewing them, oldest expiry first. */
  async listExpired(kind?: LeaseKind): Promise<Lease[]> {
    const { rows } = await this.#pool.query<LeaseRow>(
      "SELECT * FROM leases WHERE expires_at <= now() AND ($1::text IS NULL OR kind = $1) ORDER BY expires_at, kind, resource",
      [kind ?? null],
    );
    return rows.map(toLease);
  }

  /** The current lease on a resource (expired or not), if any. */
  async get(kind: LeaseKind, resource: string): Promise<Lease | undefined> {
    const { rows } = await this.#pool.query<LeaseRow>("SELECT * FROM leases WHERE kind = $1 AND resource = $2", [
      kind,
      resource,
    ]);
    return rows[0] ? toLease(rows[0]) : undefined;
  }

  /**
   * Takes over up to `limit` expired leases of `kind` in one statement.
   * SKIP LOCKED lets replicas sweeping at the same moment split the dead
   * replica's work between them instead of queueing on the same rows.
   * This owner's own expired leases that it still holds are left alone: it
   * is alive (it is sweeping), its renewal was late, and renewing keeps the
   * token its work is fenced by; taking them over would fence out its own
   * work. Its own leases it gave up (expireUnconfirmed, while the database
   * was unreachable) are taken over like anyone's: nobody else may be left.
   */
  async takeOverExpired(kind: LeaseKind, options: { limit?: number } = {}): Promise<Lease[]> {
    const sentAt = performance.now();
    const { rows } = await this.#pool.query<LeaseRow>(
      `UPDATE leases AS l SET owner = $2, token = nextval('lease_tokens'), acquired_at = now(), expires_at = now() + $3 * interval '1 millisecond', ttl_ms = $3
       FROM (SELECT kind, resource FROM leases WHERE kind = $1 AND expires_at <= now() AND NOT (owner = $2 AND resource = ANY($5::text[]))
             ORDER BY expires_at LIMIT $4 FOR UPDATE SKIP LOCKED) AS due
       WHERE l.kind = due.kind AND l.resource = due.resource AND l.expires_at <= now()
       RETURNING l.*`,
      [
        kind,
        this.owner,
        this.#ttlMs,
        options.limit ?? 100,
        this.held()
          .filter((l) => l.kind === kind)
          .map((l) => l.resource),
      ],
    );
    return rows.map((row) => this.#hold(row, sentAt));
  }

  /**
   * Takes back, with new tokens, the leases held under this owner's id by an
   * earlier process (this replica restarted with the same id), so its work
   * resumes at once instead of after the leases expire. A process still
   * running under the same id (a misconfiguration) loses them, and its
   * fenced writes are refused.
   */
  async reclaim(kind: LeaseKind): Promise<Lease[]> {
    const sentAt = performance.now();
    const { rows } = await this.#pool.query<LeaseRow>(
      `UPDATE leases SET token = nextval('lease_tokens'), acquired_at = now(), expires_at = now() + $3 * interval '1 millisecond', ttl_ms = $3
       WHERE kind = $1 AND owner = $2 RETURNING *`,
      [kind, this.owner, this.#ttlMs],
    );
    return rows.map((row) => this.#hold(row, sentAt));
  }

  /** Leases this manager believes it holds (as of its last acquire or renewal). */
  held(): Lease[] {
    return [...this.#held.values()];
  }

  /** Renews every held lease in the background until `stop()`. */
  startRenewing(options: RenewalOptions): void {
    if (this.#timer) return;
    const interval = options.intervalMs ?? Math.max(1, Math.floor(this.#ttlMs / 3));
    this.#timer = setInterval(() => {
      // Renewals failing or hanging (the database unreachable, a silent network) must not let this replica
      // work on past its leases: another takes them over once they expire. Checked every tick, whatever a
      // round in flight is doing, with a round's length of margin to stop in time.
      this.expireUnconfirmed(options.onLost, { marginMs: interval });
      // One round at a time: a slow database must not pile rounds up.
      if (this.#renewing) return;
      this.#renewing = this.renewAll(options.onLost)
        .catch((error: unknown) => options.onError?.(error))
        .finally(() => {
          this.#renewing = undefined;
        });
    }, interval);
    this.#timer.unref();
  }

  /** Renews every held lease once (in one statement); reports the lost ones. */
  async renewAll(onLost: (lease: Lease) => void): Promise<void> {
    const held = this.held();
    if (held.length === 0) return;
    const sentAt = performance.now();
    const { rows } = await this.#pool.query<LeaseRow>(
      `UPDATE leases AS l SET expires_at = now() + l.ttl_ms * interval '1 millisecond'
       FROM unnest($1::text[], $2::text[], $3::bigint[]) AS h(kind, resource, token)
       WHERE l.kind = h.kind AND l.resource = h.resource AND l.token = h.token
       RETURNING l.*`,
      [held.map((l) => l.kind), held.map((l) => l.resource), held.map((l) => l.token.toString())],
    );
    const renewed = new Map(rows.map((r) => [`${r.kind}/${r.resource}`, r]));
    for (const lease of held) {
      const key = `${lease.kind}/${lease.resource}`;
      const fresh = renewed.get(key);
      if (fresh) {
        // Unless given up meanwhile (expireUnconfirmed while this round was in flight: its work has stopped) or
        // taken again under a new token: renewed on, it would hold a job nobody works on, kept from the sweeps.
        if (this.#held.get(key) === lease) this.#hold(fresh, sentAt);
      } else if (this.#held.get(key) === lease) {
        // Still the lease we tried to renew (not re-acquired meanwhile): it is lost.
        this.#drop(key);
        onLost(lease);
      }
    }
  }

  /**
   * Reports lost every held lease not confirmed for its lifetime less
   * `marginMs`, by this process's clock: when renewals fail, the database
   * cannot say the lease was taken over, but it may be within the margin.
   */
  expireUnconfirmed(onLost: (lease: Lease) => void, options: { marginMs: number; now?: number }): void {
    const now = options.now ?? performance.now();
    for (const [key, lease] of this.#held) {
      const confirmed = this.#confirmed.get(key);
      if (confirmed && now - confirmed.sentAt >= confirmed.ttlMs - options.marginMs) {
        this.#drop(key);
        onLost(lease);
      }
    }
  }

  #hold(row: LeaseRow, sentAt: number): Lease {
    const lease = toLease(row);
    const key = `${lease.kind}/${lease.resource}`;
    this.#held.set(key, lease);
    this.#confirmed.set(key, { sentAt, ttlMs: Number(row.ttl_ms) });
    return lease;
  }

  #drop(key: string): void {
    this.#held.delete(key);
    this.#confirmed.delete(key);
  }

  /** Stops renewing; held leases then expire unless released. */
  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#renewing;
  }

  async close(): Promise<void> {
    await this.stop();
    if (this.#ownsPool) await this.#pool.end();
  }
}
