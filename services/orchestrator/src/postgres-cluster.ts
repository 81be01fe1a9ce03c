// Everything one orchestrator replica needs to share work with others on one
// PostgreSQL database, opened together on one pool: the job store, leases,
// the sandbox node registry, approval notifications and the lease sweeper.
// start-orchestrator.ts opens this when DATABASE_URL is set (see
// `openJobStore` for the store alone) and the SQLite store otherwise.
import path from "node:path";
import { ApprovalNotifier, type ApprovalAnswered } from "./approval-notifier.js";
import type { JobStore } from "./job-store.js";
import { LeaseManager, type Lease } from "./lease-manager.js";
import { LeaseSweeper } from "./lease-sweeper.js";
import { PostgresJobStore } from "./postgres-store.js";
import { SandboxNodeRegistry } from "./sandbox-node-registry.js";
import { SqliteJobStore } from "./sqlite-store.js";

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
  /** Resume a resource this replica now owns: re-attach a job's session, resume a graph run, re-read an approval. */
  onTakeOver: (lease: Lease) => Promise<void>;
  /** A lease was lost (this replica was too slow to renew): stop working on the resource at once. */
  onLeaseLost: (lease: Lease) => void;
  /** An approval was answered at some replica; act on it when this replica holds the job's lease. */
  onApprovalAnswered: (answer: ApprovalAnswered) => void;
  /** Listening resumed after the connection was lost: re-read undelivered answers of the jobs this replica owns. */
  onApprovalsReconnected?: () => void;
  onError?: (error: unknown) => void;
}

export interface PostgresCluster {
  store: PostgresJobStore;
  leases: LeaseManager;
  nodes: SandboxNodeRegistry;
  approvals: ApprovalNotifier;
  sweeper: LeaseSweeper;
  /** Stops renewing and sweeping; leases are left to expire so another replica takes the work over. */
  close(): Promise<void>;
}

export async function openPostgresCluster(options: PostgresClusterOptions): Promise<PostgresCluster> {
  const connection = { connectionString: options.connectionString, schema: options.schema ?? "oz0", ...(options.maxConnections ? { maxConnections: options.maxConnections } : {}) };
  const approvals = new ApprovalNotifier({
    ...connection,
    ...(options.onError ? { onError: options.onError } : {}),
    ...(options.onApprovalsReconnected ? { onReconnect: options.onApprovalsReconnected } : {}),
  });
  // Decided permissions the store appends are published to the job's owner in the same transaction.
  const store = await PostgresJobStore.open({ ...connection, approvals });
  const ttlMs = options.leaseTtlMs ?? 30_000;
  const leases = await LeaseManager.open({ pool: store.pool, owner: options.replicaId, ttlMs });
  const nodes = await SandboxNodeRegistry.open({ pool: store.pool, ...(options.nodeStaleAfterMs ? { staleAfterMs: options.nodeStaleAfterMs } : {}) });
  approvals.subscribe(options.onApprovalAnswered);
  const sweeper = new LeaseSweeper({ pool: store.pool, leases, onTakeOver: options.onTakeOver, ...(options.onError ? { onError: options.onError } : {}) });
  try {
    await approvals.listen();
  } catch (error) {
    await store.close();
    throw error;
  }
  leases.startRenewing({ onLost: options.onLeaseLost, ...(options.onError ? { onError: options.onError } : {}) });
  sweeper.start({ intervalMs: options.sweepIntervalMs ?? ttlMs });
  return {
    store,
    leases,
    nodes,
    approvals,
    sweeper,
    async close() {
      await sweeper.stop();
      await leases.stop();
      await approvals.close();
      await store.close();
    },
  };
}

/** The store alone: PostgreSQL when DATABASE_URL is set, else the SQLite file under the data directory. */
export async function openJobStore(options: { databaseUrl?: string; dataDir: string; schema?: string }): Promise<JobStore> {
  if (options.databaseUrl) return PostgresJobStore.open({ connectionString: options.databaseUrl, ...(options.schema ? { schema: options.schema } : {}) });
  return new SqliteJobStore({ file: path.join(options.dataDir, "orchestrator.db") });
}
