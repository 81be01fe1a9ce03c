// Wire the orchestrator: store, registry, runner, RPC server; re-attach to
// the jobs that were running when it last stopped.
import os from "node:os";
import path from "node:path";
import { createLogger, serve, type Logger } from "@oz0/serving";
import { AgentVersions } from "./agent-versions.js";
import { GraphJobs } from "./graph-jobs.js";
import { GraphRegistry, openGraphDatabase } from "./graph-registry.js";
import { JobFeed } from "./job-feed.js";
import { JobRunner } from "./job-runner.js";
import type { JobStore } from "./job-store.js";
import { createLifecycleSink } from "./lifecycle-events.js";
import { LlmProxyClient } from "./llm-proxy-client.js";
import { orchestratorServices } from "./orchestrator-service.js";
import { HookStage } from "./hook-stage.js";
import { PermissionPolicy } from "./permission-policy.js";
import { PluginRegistry } from "./plugin-registry.js";
import { SandboxClient } from "./sandbox-client.js";
import type { LifecycleSink, SecretWriter, SessionRunner, TokenIssuer } from "./session-runner.js";
import { openJobStore } from "./postgres-cluster.js";
import { orchestratorTracing } from "./tracing.js";

export interface OrchestratorConfig {
  /** Default 127.0.0.1. */
  host?: string;
  /** 0 picks a free port. Default 7700. */
  port?: number;
  /** The data directory (OZ0_HOME). Default ~/.oz0. */
  home?: string;
  /** Sandbox nodes (OZ0_SANDBOX_URLS); or `sandboxes` for custom runners. */
  sandboxUrls?: string[];
  sandboxes?: SessionRunner[];
  /** The LLM proxy (OZ0_LLM_PROXY_URL); or `tokens` and `secrets`. */
  llmProxyUrl?: string;
  tokens?: TokenIssuer & Partial<SecretWriter>;
  /** The events service (OZ0_EVENTS_URL); lifecycle events are not published without it. */
  eventsUrl?: string;
  /** PostgreSQL for the job store (DATABASE_URL); migrations run on start-up. */
  databaseUrl?: string;
  /** The PostgreSQL schema to keep the tables in (OZ0_DATABASE_SCHEMA); default the store's own. */
  databaseSchema?: string;
  /** Defaults to PostgreSQL when `databaseUrl` is set, else SQLite at <home>/orchestrator.db. */
  store?: JobStore;
  logger?: Logger;
}

export interface RunningOrchestrator {
  readonly url: string;
  readonly port: number;
  readonly home: string;
  readonly store: JobStore;
  readonly runner: JobRunner;
  /** Stop serving and following sessions; sessions keep running on their sandboxes. */
  close(): Promise<void>;
}

export function defaultHome(): string {
  return process.env.OZ0_HOME || path.join(os.homedir(), ".oz0");
}

export async function startOrchestrator(config: OrchestratorConfig = {}): Promise<RunningOrchestrator> {
  const home = path.resolve(config.home ?? defaultHome());
  const logger = config.logger ?? createLogger({ name: "orchestrator" });
  const store = config.store ?? (await openJobStore({ dataDir: home, ...(config.databaseUrl ? { databaseUrl: config.databaseUrl } : {}), ...(config.databaseSchema ? { schema: config.databaseSchema } : {}) }));
  // Every session gets its span (tracing.ts); a no-op when OpenTelemetry is not started.
  const sandboxes = (config.sandboxes ?? (config.sandboxUrls ?? []).map((url) => new SandboxClient({ url }))).map((runner) => orchestratorTracing.sessionRunner(runner));
  if (sandboxes.length === 0) throw new Error("no sandbox configured: set OZ0_SANDBOX_URLS (comma-separated sandbox URLs)");
  const proxy = config.tokens ?? (config.llmProxyUrl ? new LlmProxyClient({ url: config.llmProxyUrl }) : undefined);
  if (!proxy) throw new Error("no LLM proxy configured: set OZ0_LLM_PROXY_URL");
  const secrets: SecretWriter = {
    setSecret: async (s) => {
      if (!proxy.setSecret) throw new Error("this LLM proxy takes no secrets");
      await proxy.setSecret(s);
    },
  };
  // Always a sink: the job's span starts and ends with its lifecycle events, published or not.
  const lifecycle: LifecycleSink = orchestratorTracing.lifecycleSink(config.eventsUrl ? createLifecycleSink({ url: config.eventsUrl, logger }) : undefined);
  const feed = new JobFeed();
  const runner = new JobRunner({ store, feed, sandboxes, tokens: proxy, policy: new PermissionPolicy({ hooks: [new HookStage()] }), home, logger, ...(lifecycle ? { lifecycle } : {}) });
  // Graph versions, graph jobs and their checkpoints: one SQLite file of their own under the data directory.
  const graphDb = openGraphDatabase(home);
  const graphRegistry = new GraphRegistry({ db: graphDb, store });
  const graphJobs = new GraphJobs({ db: graphDb, store, feed, jobs: runner, registry: graphRegistry, sandboxes, logger, ...(lifecycle ? { lifecycle } : {}) });
  const server = await serve({
    name: "orchestrator",
    host: config.host ?? "127.0.0.1",
    port: config.port ?? 7700,
    logger,
    services: orchestratorServices({
      store,
      feed,
      runner,
      plugins: new PluginRegistry({ store, home, graphs: graphRegistry }),
      agents: new AgentVersions({ store }),
      secrets,
      ...(proxy instanceof LlmProxyClient ? { usage: proxy } : {}),
      graphs: { jobs: graphJobs, registry: graphRegistry },
    }),
  });
  const resumed = await runner.resumeAll();
  if (resumed > 0) logger.info({ resumed }, "re-attached to running jobs");
  // After the job runner: a graph step whose job it re-attached is waited for, not started again.
  const resumedGraphs = await graphJobs.resumeAll();
  if (resumedGraphs > 0) logger.info({ resumed: resumedGraphs }, "resumed running graph jobs");
  let closing: Promise<void> | undefined;
  return {
    url: server.url,
    port: server.port,
    home,
    store,
    runner,
    close() {
      closing ??= (async () => {
        await graphJobs.close();
        await runner.close();
        await server.close({ graceMs: 1_000 });
        await lifecycle?.close();
        await store.close();
        graphDb.close();
      })();
      return closing;
    },
  };
}
