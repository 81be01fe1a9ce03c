// The Cluster (cluster.ts) of orchestrator replicas sharing one PostgreSQL
// database: everything one replica needs to share work with the others,
// opened together on one pool: the job store (its job writes fenced by this
// replica's leases), leases, the sandbox node registry, cross-replica
// notifications and the lease sweeper. start-orchestrator.ts opens this when
// DATABASE_URL is set, and a cluster of one on the SQLite store otherwise.
// Opening does no work; `start` begins listening, renewing and sweeping once
// the replica can take work over.
import path from "node:path";
import type { Cluster, ClusterHandlers } from "./cluster.js";
import { ClusterNotifier } from "./cluster-notifier.js";
import { JobLeases } from "./job-leases.js";
import type { JobStore } from "../store/job-store.js";
import { LeaseManager, type Lease } from "./lease-manager.js";
import { LeaseSweeper } from "./lease-sweeper.js";
import { createPostgresPool } from "../store/sql-database.js";
import { PostgresJobStore } from "../store/postgres-store.js";
import { SandboxNodeRegistry } from "./sandbox-node-registry.js";
import { SqliteJobStore } from "../store/sqlite-store.js";

export interface PostgresClusterOptions {
  /** DATABASE_URL. */
  connectionString: string;
  /** Default `oz0`. */
  schema?: string;
  /** This replica's id, unique among live replicas (the pod name). */
  replicaId: string;
  maxConnections?: number;
  /** Lease lifetime without renewal: how long a dead replica's work waits. Default 30 s. */
  leaseTtlMs?: number;
  /** How often to look for orphaned work. Default the lease TTL. */
  sweepIntervalMs?: number;
  /** A sandbox node silent this long gets no sessions and its sessions are lost. Default 15 s. */
  nodeStaleAfterMs?: number;
  onError?: (error: unknown) => void;
}

/** A replica resumes only what it takes over: orphans and expired leases, now and on every sweep. */
export type ReplicaHandlers = Omit<ClusterHandlers, "onResumeAll">;

export interface PostgresCluster extends Cluster {
  /** The job store, its job writes fenced by this replica's leases. */
  store: PostgresJobStore;
  leases: LeaseManager;
  /** The jobs this replica works on (JobOwnership for the job runner and graph jobs). */
  jobs: JobLeases;
  nodes: SandboxNodeRegistry;
  notifier: ClusterNotifier;
  sweeper: LeaseSweeper;
  /** Listen, renew and sweep (one sweep at once, so work orphaned while no replica ran is picked up now). */
  start(handlers: ReplicaHandlers): Promise<void>;
  /** Stops renewing and sweeping; leases are left to expire so another replica takes the work over. */
  close(): Promise<void>;
}

export async function openPostgresCluster(options: PostgresClusterOptions): Promise<PostgresCluster> {
  const connection = {
    connectionString: options.connectionString,
    schema: options.schema ?? "oz0",
    ...(options.maxConnections ? { maxConnections: options.maxConnections } : {}),
  };
  const handlers: Partial<ReplicaHandlers> = {};
  const notifier = new ClusterNotifier({
    ...connection,
    ...(options.onError ? { onError: options.onError } : {}),
    onReconnect: () => handlers.onApprovalsReconnected?.(),
  });
  // Decided permissions and appended events are published in the same transaction that stores them.
  const base = await PostgresJobStore.open({ ...connection, notifier });
  const ttlMs = options.leaseTtlMs ?? 30_000;
  // Leases on a pool of their own: renewals must not queue behind job work, or a busy replica loses its jobs.
  // (The store's open already ran the migrations the leases need.)
  // A renewal stuck on a silent network must fail in time, or this replica never learns to stop (lease-manager.ts).
  const leasePool = createPostgresPool({
    ...connection,
    maxConnections: 2,
    queryTimeoutMs: Math.max(1_000, Math.floor(ttlMs / 3)),
  });
  const leases = await LeaseManager.open({ pool: leasePool, owner: options.replicaId, ttlMs });
  const jobs = new JobLeases(leases);
  const store = base.withFences(jobs);
  const nodes = await SandboxNodeRegistry.open({
    pool: base.pool,
    ...(options.nodeStaleAfterMs ? { staleAfterMs: options.nodeStaleAfterMs } : {}),
  });
  /**
   * Works on a job whose lease this replica just won. A handler that fails
   * (the database blinked mid-resume) gives the lease back: kept and renewed,
   * it would hold a job nobody works on forever. Released, the job is an
   * unleased active job again, which the next sweep here or elsewhere takes.
   */
  const takeOver = async (lease: Lease): Promise<void> => {
    jobs.adopt(lease);
    try {
      // Under this lease to the end: work of an earlier lease here, still in flight, stays refused.
      await jobs.working(lease.resource, async () => handlers.onTakeOver?.(lease));
    } catch (error) {
      await jobs.release(lease.resource).catch(() => undefined);
      throw error;
    }
  };
  const sweeper = new LeaseSweeper({
    pool: base.pool,
    leases,
    kinds: ["job"],
    onTakeOver: takeOver,
    ...(options.onError ? { onError: options.onError } : {}),
  });
  let started = false;
  return {
    store,
    ownership: jobs,
    graphStore: { pool: base.pool, fences: jobs },
    subscribeAppended: (handler) => notifier.subscribeAppended(handler),
    leases,
    jobs,
    nodes,
    notifier,
    sweeper,
    async start(given) {
      if (started) return;
      started = true;
      Object.assign(handlers, given);
      notifier.subscribe(given.onApprovalAnswered);
      if (given.onCancelRequested) notifier.subscribeCancelRequested(given.onCancelRequested);
      await notifier.listen();
      leases.startRenewing({
        onLost: (lease) => {
          if (jobs.lose(lease)) given.onLeaseLost(lease);
        },
        ...(options.onError ? { onError: options.onError } : {}),
      });
      // A restarted replica's own jobs first: they resume now, not when their leases expire.
      for (const lease of await leases.reclaim("job"))
        await takeOver(lease).catch((error: unknown) => options.onError?.(error));
      await sweeper.sweepOnce();
      sweeper.start({ intervalMs: options.sweepIntervalMs ?? ttlMs });
    },
    async close() {
      await sweeper.stop();
      await leases.close();
      await leasePool.end();
      await notifier.close();
      await base.close();
    },
  };
}

/** The store alone: PostgreSQL when DATABASE_URL is set, else the SQLite file under the data directory. */
export async function openJobStore(options: {
  databaseUrl?: string;
  dataDir: string;
  schema?: string;
}): Promise<JobStore> {
  if (options.databaseUrl)
    return PostgresJobStore.open({
      connectionString: options.databaseUrl,
      ...(options.schema ? { schema: options.schema } : {}),
    });
  return new SqliteJobStore({ file: path.join(options.dataDir, "orchestrator.db") });
}
