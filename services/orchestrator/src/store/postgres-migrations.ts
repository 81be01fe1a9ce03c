// The orchestrator's PostgreSQL schema as numbered migrations, and the pool
// every PostgreSQL module of the orchestrator shares. The migrations run with
// @oz0/postgres's runMigrations, safe when several replicas start at once.
import { createSchemaPool, runMigrations, type Migration } from "@oz0/postgres";
import type pg from "pg";

/** The job store (version 1), leases (2, 4), the sandbox node registry (3), operation checkpoints (5), graph runs (6) and sessions' stderr (10). Append only: never edit an applied one. */
export const ORCHESTRATOR_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "job store",
    sql: `
CREATE TABLE plugins (
  name text PRIMARY KEY, version text NOT NULL, description text NOT NULL, source text NOT NULL,
  path text NOT NULL, manifest jsonb NOT NULL, installed_at timestamptz NOT NULL);
CREATE TABLE agent_versions (
  name text NOT NULL, version integer NOT NULL, content_hash text NOT NULL, plugin text NOT NULL,
  plugin_version text NOT NULL, plugin_path text NOT NULL, definition jsonb NOT NULL, instructions text NOT NULL,
  harness jsonb NOT NULL, published_at timestamptz NOT NULL, PRIMARY KEY (name, version));
CREATE TABLE jobs (
  id text PRIMARY KEY, agent_name text NOT NULL, agent_version integer NOT NULL, input text NOT NULL,
  state text NOT NULL, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL, finished_at timestamptz,
  result_text text NOT NULL, stop_reason integer NOT NULL, error text NOT NULL, session_id text NOT NULL,
  sandbox_url text NOT NULL, last_seq bigint NOT NULL, sandbox_seq bigint NOT NULL, attachments jsonb NOT NULL,
  token_id text NOT NULL, cancel_requested_at timestamptz,
  -- Insertion order, to break ties between jobs created in the same millisecond (SQLite's rowid).
  ord bigserial NOT NULL);
CREATE INDEX jobs_by_state ON jobs (state);
CREATE INDEX jobs_by_created ON jobs (created_at DESC, ord DESC);
CREATE TABLE job_events (
  job_id text NOT NULL, seq bigint NOT NULL, time timestamptz NOT NULL, event jsonb NOT NULL,
  PRIMARY KEY (job_id, seq));
CREATE TABLE permissions (
  job_id text NOT NULL, id text NOT NULL, call_id text NOT NULL, session_id text NOT NULL, tool text NOT NULL,
  input jsonb, title text NOT NULL, needs_person boolean NOT NULL, status text NOT NULL, reason text NOT NULL,
  decider text, answered_by text NOT NULL, answer_input jsonb, requested_at timestamptz NOT NULL, answered_at timestamptz,
  delivered boolean NOT NULL, ord bigserial NOT NULL, PRIMARY KEY (job_id, id));
CREATE INDEX permissions_by_status ON permissions (status);
CREATE INDEX permissions_by_call ON permissions (job_id, call_id);
`,
  },
  {
    version: 2,
    name: "leases",
    sql: `
-- Fencing tokens come from one sequence, so a token is never handed out twice,
-- even after a lease row is released and acquired again.
CREATE SEQUENCE lease_tokens;
CREATE TABLE leases (
  kind text NOT NULL, resource text NOT NULL, owner text NOT NULL, token bigint NOT NULL,
  acquired_at timestamptz NOT NULL, expires_at timestamptz NOT NULL, PRIMARY KEY (kind, resource));
CREATE INDEX leases_by_expiry ON leases (kind, expires_at);
CREATE INDEX leases_by_owner ON leases (owner);
`,
  },
  {
    version: 3,
    name: "sandbox nodes",
    sql: `
CREATE TABLE sandbox_nodes (
  id text PRIMARY KEY, url text NOT NULL, capacity integer NOT NULL, placed integer NOT NULL DEFAULT 0,
  registered_at timestamptz NOT NULL, last_heartbeat timestamptz NOT NULL);
CREATE TABLE session_placements (
  session_id text PRIMARY KEY, job_id text NOT NULL, node_id text NOT NULL REFERENCES sandbox_nodes (id),
  placed_at timestamptz NOT NULL);
CREATE INDEX session_placements_by_node ON session_placements (node_id);
`,
  },
  {
    version: 4,
    name: "lease lifetimes",
    // Each lease renews for the lifetime it was acquired with, not the manager's default.
    sql: "ALTER TABLE leases ADD COLUMN ttl_ms integer NOT NULL DEFAULT 30000;",
  },
  {
    version: 5,
    name: "harness operation checkpoints",
    // One row per runtime tool call of a job (operation-runner.ts), so the replica that takes a job over resumes its operations.
    sql: `
CREATE TABLE operation_checkpoints (
  job_id text NOT NULL, call_id text NOT NULL, record jsonb NOT NULL, delivered boolean NOT NULL,
  PRIMARY KEY (job_id, call_id));
`,
  },
  {
    version: 6,
    name: "graph runs",
    // Graph versions, graph jobs, step jobs and run checkpoints (postgres-graph-store.ts), shared by every replica so
    // one can resume another's graph run. Definitions, deltas and bags are json, not jsonb: key order is kept as written.
    sql: `
CREATE TABLE graph_versions (
  name text NOT NULL, version integer NOT NULL, content_hash text NOT NULL, plugin text NOT NULL,
  plugin_version text NOT NULL, plugin_path text NOT NULL, definition json NOT NULL, published_at timestamptz NOT NULL,
  PRIMARY KEY (name, version));
CREATE TABLE graph_jobs (
  job_id text PRIMARY KEY, graph text NOT NULL, version integer NOT NULL, pinned_agents jsonb NOT NULL,
  created_at timestamptz NOT NULL);
CREATE TABLE graph_step_jobs (
  idempotency_key text PRIMARY KEY, run_id text NOT NULL, step_job_id text NOT NULL, created_at timestamptz NOT NULL);
CREATE INDEX graph_step_jobs_by_run ON graph_step_jobs (run_id);
CREATE TABLE graph_definitions (hash text PRIMARY KEY, definition json NOT NULL);
CREATE TABLE graph_runs (
  run_id text PRIMARY KEY, graph text NOT NULL, definition_hash text NOT NULL REFERENCES graph_definitions (hash),
  definition_version text, input json NOT NULL, status text NOT NULL, started_at text NOT NULL, finished_at text,
  error json, conflicts json, result json,
  -- Creation order: listRuns returns runs oldest first.
  ord bigserial NOT NULL);
CREATE INDEX graph_runs_by_status ON graph_runs (status, ord);
CREATE TABLE graph_steps (
  run_id text NOT NULL REFERENCES graph_runs (run_id) ON DELETE CASCADE, path text NOT NULL, node_id text NOT NULL,
  iteration integer NOT NULL, outcome text NOT NULL, delta json NOT NULL, decision json,
  PRIMARY KEY (run_id, path));
`,
  },
  {
    version: 7,
    name: "served tools",
    // The runtime tools the orchestrator serves a job itself (a graph manager's decisions), so any replica serves them.
    sql: "ALTER TABLE jobs ADD COLUMN served_tools text NOT NULL DEFAULT '';",
  },
  {
    version: 8,
    name: "lifecycle outbox",
    // Lifecycle events written with the job change they report, until the events service accepts them.
    sql: `
CREATE TABLE lifecycle_outbox (seq bigserial PRIMARY KEY, event text NOT NULL, claimed_until timestamptz);`,
  },
  {
    version: 9,
    name: "job starter",
    // Who started a job, so approvals.prevent_self_approval can refuse that principal's answers.
    sql: "ALTER TABLE jobs ADD COLUMN started_by text NOT NULL DEFAULT '';",
  },
  {
    version: 10,
    name: "session stderr",
    // What each session's harness wrote to stderr, bounded per session (`oz0 jobs logs`): a row per session
    // (in the order they first wrote, `ord`), and its pieces by the sandbox's seq.
    sql: `
CREATE TABLE session_stderr (
  job_id text NOT NULL, session_id text NOT NULL, last_seq bigint NOT NULL, kept_bytes bigint NOT NULL,
  dropped_bytes bigint NOT NULL, trailing_dropped_bytes bigint NOT NULL, ord bigserial NOT NULL,
  PRIMARY KEY (job_id, session_id));
CREATE TABLE stderr_pieces (
  job_id text NOT NULL, session_id text NOT NULL, seq bigint NOT NULL, text text NOT NULL, bytes integer NOT NULL,
  dropped_bytes bigint NOT NULL, PRIMARY KEY (job_id, session_id, seq));`,
  },
  {
    version: 11,
    name: "job start and trace",
    // When a job began running and the id of its trace, for `oz0 jobs show` (and a link to a trace viewer).
    sql: "ALTER TABLE jobs ADD COLUMN started_at timestamptz; ALTER TABLE jobs ADD COLUMN trace_id text NOT NULL DEFAULT '';",
  },
];

export interface PostgresConnectionOptions {
  /** A `postgres://` URL (DATABASE_URL). */
  connectionString: string;
  /**
   * The schema holding the tables, created when missing. Default `oz0`.
   * Tests give each run its own so runs sharing a server never collide.
   */
  schema?: string;
  /** Pool size. Default 10. */
  maxConnections?: number;
  /** How long a query may take before it fails here (see createSchemaPool). Default: as long as it takes. */
  queryTimeoutMs?: number;
}

/** A pool whose connections resolve unqualified table names in the orchestrator's schema. */
export function createPostgresPool(options: PostgresConnectionOptions): pg.Pool {
  return createSchemaPool({ ...options, schema: options.schema ?? "oz0" });
}

/** The orchestrator's migrations on `schema`; every orchestrator PostgreSQL module calls it on open. */
export async function migrateOrchestrator(pool: pg.Pool, schema: string): Promise<number[]> {
  return runMigrations({ pool, schema, component: "orchestrator", migrations: ORCHESTRATOR_MIGRATIONS });
}
