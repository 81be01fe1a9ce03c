// Sandbox nodes in PostgreSQL, shared by every orchestrator replica: nodes
// register with a capacity and send heartbeats; the orchestrator places each
// session on a live node with free capacity and stops placing on a node whose
// heartbeats stop. Placements are rows, so capacity is counted once across
// replicas, and the sessions of a node that went silent can be found and their
// jobs failed (resuming a harness session elsewhere is out of scope).
// Liveness is judged by the database's clock, so replicas' clocks never matter.
// A slot is given back by the job's runner after it wrote the job's end; one
// it never gave back (it died in between, or the release failed) is freed at
// the node's next heartbeat, from the jobs table the registry shares.
import type pg from "pg";
import { ACTIVE_JOB_STATES } from "../store/job-store.js";
import { migrateOrchestrator } from "../store/migrations.js";
import { createPostgresPool, type PostgresConnectionOptions } from "../store/sql-database.js";
import { withTransaction } from "@oz0/postgres";

export interface SandboxNode {
  id: string;
  /** The sandbox service's URL on this node. */
  url: string;
  /** How many sessions it takes at once. */
  capacity: number;
  /** Sessions placed on it now. */
  placed: number;
  /** capacity - placed, never below 0. */
  free: number;
  registeredAt: Date;
  lastHeartbeat: Date;
}

export interface Placement {
  sessionId: string;
  jobId: string;
  node: SandboxNode;
  placedAt: Date;
}

/** A session whose node stopped sending heartbeats: its job must fail with `reason`. */
export interface LostSession {
  sessionId: string;
  jobId: string;
  nodeId: string;
  nodeUrl: string;
  lastHeartbeat: Date;
  reason: string;
}

interface NodeRow {
  id: string;
  url: string;
  capacity: number;
  placed: number;
  registered_at: Date;
  last_heartbeat: Date;
}

function toNode(row: NodeRow): SandboxNode {
  return {
    id: row.id,
    url: row.url,
    capacity: row.capacity,
    placed: row.placed,
    free: Math.max(0, row.capacity - row.placed),
    registeredAt: row.registered_at,
    lastHeartbeat: row.last_heartbeat,
  };
}

/** A heartbeat with the identity of the pod that registered a node, from another URL than that pod's (register). */
export class NodePinnedError extends Error {
  constructor(node: { id: string; url: string; registeredUrl: string }) {
    super(
      `node ${node.id} was registered by its pod at ${node.registeredUrl}, and a pod keeps its address for life: the same pod's identity from ${node.url}, or an earlier pod's of that name, is a copy of its token, refused`,
    );
    this.name = "NodePinnedError";
  }
}

export interface SandboxNodeRegistryOptions {
  /** The store's pool, or connection options for one of its own. */
  pool?: pg.Pool;
  connection?: PostgresConnectionOptions;
  /** A node without a heartbeat for this long gets no new sessions and its sessions count as lost. Default 15 s. */
  staleAfterMs?: number;
}

export class SandboxNodeRegistry {
  readonly #pool: pg.Pool;
  readonly #ownsPool: boolean;
  readonly #staleAfterMs: number;

  private constructor(options: { pool: pg.Pool; ownsPool: boolean; staleAfterMs: number }) {
    this.#pool = options.pool;
    this.#ownsPool = options.ownsPool;
    this.#staleAfterMs = options.staleAfterMs;
  }

  /** How long a node may go without a heartbeat before it gets no sessions and loses the ones it has. */
  get staleAfterMs(): number {
    return this.#staleAfterMs;
  }

  static async open(options: SandboxNodeRegistryOptions): Promise<SandboxNodeRegistry> {
    if (!options.pool && !options.connection)
      throw new Error("SandboxNodeRegistry.open needs a pool or connection options");
    const pool = options.pool ?? createPostgresPool(options.connection!);
    // A pool passed in is the store's, already migrated by PostgresJobStore.open.
    if (!options.pool) await migrateOrchestrator(pool, options.connection!.schema ?? "oz0");
    return new SandboxNodeRegistry({ pool, ownsPool: !options.pool, staleAfterMs: options.staleAfterMs ?? 15_000 });
  }

  /**
   * Registers a node (or updates its URL and capacity when it restarts);
   * counts as a heartbeat, so it frees the node's slots whose jobs ended
   * (the RPC handler calls this on every heartbeat). `pod`: the pod its
   * identity token proved (node identities), and when the token was issued.
   * A node registered by a pod stays at the URL it came with while that
   * pod's token registers it: a pod keeps its address for life, so the same
   * pod elsewhere is a copy of its token, refused with NodePinnedError.
   * Another pod of that name (a StatefulSet's next) takes the node over with
   * a token issued later than the last one it registered with; an earlier
   * pod's token (a copy, valid for minutes after its pod was replaced) is
   * refused.
   */
  async register(node: {
    id: string;
    url: string;
    capacity: number;
    pod?: { uid: string; issuedAt: number };
  }): Promise<SandboxNode> {
    return withTransaction(this.#pool, async (client) => {
      const freed = await this.#freeEnded(client, node.id);
      const { rows } = await client.query<NodeRow>(
        `INSERT INTO sandbox_nodes (id, url, capacity, placed, registered_at, last_heartbeat, pod_uid, pod_issued_at)
         VALUES ($1, $2, $3, 0, now(), now(), $5, $6)
         ON CONFLICT (id) DO UPDATE SET url = excluded.url, capacity = excluded.capacity, placed = sandbox_nodes.placed - $4,
           last_heartbeat = now(), pod_uid = excluded.pod_uid, pod_issued_at = GREATEST(sandbox_nodes.pod_issued_at, excluded.pod_issued_at)
         WHERE excluded.pod_uid = ''
           OR (sandbox_nodes.pod_uid = excluded.pod_uid AND sandbox_nodes.url = excluded.url)
           OR (sandbox_nodes.pod_uid <> excluded.pod_uid AND excluded.pod_issued_at > sandbox_nodes.pod_issued_at)
         RETURNING *`,
        [node.id, node.url, node.capacity, freed, node.pod?.uid ?? "", node.pod?.issuedAt ?? 0],
      );
      if (rows.length === 0) {
        const { rows: pinned } = await client.query<{ url: string }>("SELECT url FROM sandbox_nodes WHERE id = $1", [
          node.id,
        ]);
        throw new NodePinnedError({ id: node.id, url: node.url, registeredUrl: pinned[0]?.url ?? "?" });
      }
      return toNode(rows[0]!);
    });
  }

  /** Records a heartbeat and frees the node's slots whose jobs ended; false when the node is unknown (it must register again). */
  async heartbeat(id: string): Promise<boolean> {
    return withTransaction(this.#pool, async (client) => {
      const freed = await this.#freeEnded(client, id);
      const result = await client.query(
        "UPDATE sandbox_nodes SET last_heartbeat = now(), placed = placed - $2 WHERE id = $1",
        [id, freed],
      );
      return (result.rowCount ?? 0) > 0;
    });
  }

  /**
   * Deletes the node's placements whose job is terminal, for the caller to
   * take their count off the node's `placed` in the same transaction.
   * A runner that writes a job's end releases its slot right after, so this
   * frees only what a crash or a failed release left behind; it needs no
   * grace, since a terminal job's session is never started again. A
   * placement is the job's (`job_id`, the jobs table's key): a graph's custom
   * step, placed under its graph's job, is freed once the graph job ended.
   * A placement without a job row, or of a job still active, stays: the
   * heartbeat says only how many sessions the node runs, not which, so
   * nothing shows such a session is over (with the node's list of sessions,
   * one it no longer runs could go too once older than the stale limit; as
   * long as its job is active, its runner may still be reading its end).
   * Rows a concurrent release() holds are skipped (it frees them itself),
   * and rows are locked before the node, as release() does: no deadlock.
   */
  async #freeEnded(client: pg.PoolClient, nodeId: string): Promise<number> {
    const freed = await client.query(
      `DELETE FROM session_placements WHERE session_id IN (
         SELECT p.session_id FROM session_placements p JOIN jobs j ON j.id = p.job_id
         WHERE p.node_id = $1 AND NOT j.state = ANY($2::text[]) FOR UPDATE OF p SKIP LOCKED)`,
      [nodeId, ACTIVE_JOB_STATES],
    );
    return freed.rowCount ?? 0;
  }

  /** Live nodes (heartbeat within the stale limit), most free capacity first. */
  async listLive(): Promise<SandboxNode[]> {
    const { rows } = await this.#pool.query<NodeRow>(
      `SELECT * FROM sandbox_nodes WHERE last_heartbeat > now() - $1 * interval '1 millisecond'
       ORDER BY capacity - placed DESC, id`,
      [this.#staleAfterMs],
    );
    return rows.map(toNode);
  }

  /**
   * Places a session on the live node with the most free capacity (by share
   * of its capacity). Undefined when no live node has room. Placing the same
   * session again returns its placement, live node or not, so a retried call
   * does not take two slots and a session is never moved behind its caller's
   * back: one on a node that went silent is reported lost (lostSessions). A
   * caller that knows such a session never started there (or, as a graph's
   * custom step, starts it again) gives it back first (release) and places it
   * afresh.
   */
  async place(request: { sessionId: string; jobId: string }): Promise<Placement | undefined> {
    const existing = await this.#placementOf(request.sessionId);
    if (existing)
      return { sessionId: request.sessionId, jobId: request.jobId, node: existing.node, placedAt: existing.placedAt };
    return withTransaction(this.#pool, async (client) => {
      // One node row is locked at a time, the one taken: every live row was locked (and read whole) at each
      // placement, which serialised job starts across replicas, and made each take seconds once a node token's
      // holder had registered thousands of nodes (attacker review). SKIP LOCKED: a replica never waits for a node
      // another is placing on (so no two wait for each other), it takes the next best; when every node with room is
      // being placed on, it asks again at once.
      const live = "last_heartbeat > now() - $1 * interval '1 millisecond' AND capacity > 0 AND placed < capacity";
      let chosen: NodeRow | undefined;
      for (let tries = 0; chosen === undefined && tries < 100; tries++) {
        const free = await client.query<{ id: string }>(
          `SELECT id FROM sandbox_nodes WHERE ${live} ORDER BY placed::float8 / capacity, id LIMIT 1 FOR UPDATE SKIP LOCKED`,
          [this.#staleAfterMs],
        );
        const id = free.rows[0]?.id;
        if (id !== undefined) {
          const updated = await client.query<NodeRow>(
            "UPDATE sandbox_nodes SET placed = placed + 1 WHERE id = $1 RETURNING *",
            [id],
          );
          chosen = updated.rows[0];
          break;
        }
        const room = await client.query(`SELECT 1 FROM sandbox_nodes WHERE ${live} LIMIT 1`, [this.#staleAfterMs]);
        if (room.rowCount === 0) break;
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
      if (!chosen) return undefined;
      const placement = await client.query<{ placed_at: Date }>(
        "INSERT INTO session_placements (session_id, job_id, node_id, placed_at) VALUES ($1, $2, $3, now()) RETURNING placed_at",
        [request.sessionId, request.jobId, chosen.id],
      );
      return {
        sessionId: request.sessionId,
        jobId: request.jobId,
        node: toNode(chosen),
        placedAt: placement.rows[0]!.placed_at,
      };
    });
  }

  /**
   * Frees a session's slot (it ended, its loss was handled, or it is to be
   * placed afresh); false when it was not placed. `fromNode`: only from that
   * node, so a caller acting on an old view never frees the slot another
   * replica placed the session in since.
   */
  /**
   * The node the session is placed on, as it is now: a node that came back
   * at another address (a new pod IP, another port) is found by its id, with
   * its new URL. Undefined when the session has no placement.
   */
  async nodeOfSession(sessionId: string): Promise<SandboxNode | undefined> {
    return (await this.#placementOf(sessionId))?.node;
  }

  async #placementOf(sessionId: string): Promise<{ node: SandboxNode; placedAt: Date } | undefined> {
    const { rows } = await this.#pool.query<NodeRow & { placed_at: Date }>(
      `SELECT n.*, p.placed_at FROM session_placements p JOIN sandbox_nodes n ON n.id = p.node_id WHERE p.session_id = $1`,
      [sessionId],
    );
    const row = rows[0];
    return row ? { node: toNode(row), placedAt: row.placed_at } : undefined;
  }

  async release(sessionId: string, options: { fromNode?: string } = {}): Promise<boolean> {
    return withTransaction(this.#pool, async (client) => {
      const removed = await client.query<{ node_id: string }>(
        "DELETE FROM session_placements WHERE session_id = $1 AND ($2::text IS NULL OR node_id = $2) RETURNING node_id",
        [sessionId, options.fromNode ?? null],
      );
      const from = removed.rows[0]?.node_id;
      if (from === undefined) return false;
      await client.query("UPDATE sandbox_nodes SET placed = placed - 1 WHERE id = $1", [from]);
      return true;
    });
  }

  /** Sessions placed on nodes whose heartbeats stopped: the owners of their jobs deal with them (most fail, with `reason`). */
  async lostSessions(): Promise<LostSession[]> {
    return this.#lost();
  }

  /** The session, when it is placed on a node whose heartbeats stopped. */
  async lostSession(sessionId: string): Promise<LostSession | undefined> {
    return (await this.#lost(sessionId))[0];
  }

  async #lost(sessionId?: string): Promise<LostSession[]> {
    const { rows } = await this.#pool.query<{
      session_id: string;
      job_id: string;
      node_id: string;
      url: string;
      last_heartbeat: Date;
    }>(
      `SELECT p.session_id, p.job_id, p.node_id, n.url, n.last_heartbeat FROM session_placements p JOIN sandbox_nodes n ON n.id = p.node_id
       WHERE n.last_heartbeat <= now() - $1 * interval '1 millisecond' AND ($2::text IS NULL OR p.session_id = $2)
       ORDER BY p.placed_at, p.session_id`,
      [this.#staleAfterMs, sessionId ?? null],
    );
    return rows.map((r) => ({
      sessionId: r.session_id,
      jobId: r.job_id,
      nodeId: r.node_id,
      nodeUrl: r.url,
      lastHeartbeat: r.last_heartbeat,
      reason: `sandbox node ${r.node_id} (${r.url}) stopped sending heartbeats at ${r.last_heartbeat.toISOString()}; its session ${r.session_id} is lost — resuming a session on another node is not supported; run the job again`,
    }));
  }

  async close(): Promise<void> {
    if (this.#ownsPool) await this.#pool.end();
  }
}
