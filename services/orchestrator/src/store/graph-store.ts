// Where everything graph-related is kept, behind one interface: published
// graph versions, graph jobs (the graph version and agent versions a run is
// pinned to), the job each agent step runs as (keyed by the step's
// idempotency key, so a resumed run waits for it instead of starting it
// again) and the runs' checkpoints (@oz0/graph's CheckpointStore). One
// implementation of its queries for both engines (sql-graph-store.ts): one
// orchestrator keeps them in SQLite (<home>/graphs.db, sqlite-graph-store.ts);
// replicas sharing a PostgreSQL database keep them there, on the job store's
// pool (postgres-graph-store.ts), so any replica can resume any graph run.
import type { CheckpointStore, GraphDefinition } from "@oz0/graph";
import type pg from "pg";
import { PostgresGraphStore } from "./postgres-graph-store.js";
import type { JobFences } from "./postgres-store.js";
import { SqliteGraphStore } from "./sqlite-graph-store.js";

/** A graph version to publish; its content hash decides whether it is new. */
export interface NewGraphVersion {
  name: string;
  contentHash: string;
  plugin: string;
  pluginVersion: string;
  /** The plugin's installed, content-addressed folder: custom step modules resolve against it. */
  pluginPath: string;
  definition: GraphDefinition;
}

/** One immutable, published graph version. */
export interface GraphVersionRecord extends NewGraphVersion {
  version: number;
  publishedAt: Date;
}

/** What a graph job is pinned to when it starts. */
export interface GraphJobRecord {
  jobId: string;
  graph: string;
  version: number;
  /** Agent name → version, pinned when the run started. */
  pinnedAgents: Record<string, number>;
  createdAt: Date;
}

/** The job an agent step runs as, or a manager's job for a control event (graph-manager-agent.ts). */
export interface StepJobRecord {
  /** The step's idempotency key (`<run id><step path>`), or the event's (`managerJobKey`). */
  idempotencyKey: string;
  runId: string;
  stepJobId: string;
}

export interface GraphStore {
  /** The runs' checkpoints. */
  readonly checkpoints: CheckpointStore;
  /**
   * Publishes version N+1 when the content hash differs from the latest
   * version's, else returns the latest (`published: false`). Two publishers
   * of one graph at once (two replicas) get one version between them.
   */
  publishVersion(version: NewGraphVersion): Promise<{ published: boolean; record: GraphVersionRecord }>;
  /** The version asked for, or the latest; undefined when there is none. */
  getVersion(name: string, version?: number): Promise<GraphVersionRecord | undefined>;
  /** Every graph at its latest version, by name. */
  listLatestVersions(): Promise<GraphVersionRecord[]>;
  putGraphJob(job: GraphJobRecord): Promise<void>;
  getGraphJob(jobId: string): Promise<GraphJobRecord | undefined>;
  /** The job recorded for a step, if any. */
  getStepJob(idempotencyKey: string): Promise<string | undefined>;
  /** Records the job a step runs as; a retried step's new job replaces its failed one. */
  putStepJob(record: StepJobRecord): Promise<void>;
  /** The jobs recorded for a run's steps (and its manager's decisions), in the order they were recorded. */
  listStepJobs(runId: string): Promise<StepJobRecord[]>;
  /** Closes what the store opened itself (a pool passed in stays open). */
  close(): Promise<void>;
}

export interface OpenGraphStoreOptions {
  /** The data directory: without a pool, the graphs live in <home>/graphs.db. */
  home: string;
  /** The job store's pool (PostgresJobStore's `.pool`): the graphs live in its database. */
  pool?: pg.Pool;
  /** The pool's schema (OZ0_DATABASE_SCHEMA); default the schema the pool's connections use. */
  schema?: string;
  /** With a pool: the leases a run's writes are made under (the cluster's job leases). */
  fences?: JobFences;
}

/** What graph stores share with a job store on PostgreSQL: its pool, and the leases a run's writes are made under. */
export type GraphStoreSharing = Required<Pick<OpenGraphStoreOptions, "pool" | "fences">>;

/** PostgreSQL when given the job store's pool, else SQLite under the data directory. */
export async function openGraphStore(options: OpenGraphStoreOptions): Promise<GraphStore> {
  if (options.pool)
    return PostgresGraphStore.open({
      pool: options.pool,
      ...(options.schema ? { schema: options.schema } : {}),
      ...(options.fences ? { fences: options.fences } : {}),
    });
  return SqliteGraphStore.open(options.home);
}
