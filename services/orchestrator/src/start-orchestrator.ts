// Wire the orchestrator: store, registry, runner, RPC server; re-attach to
// the jobs that were running when it last stopped.
import { randomBytes } from "node:crypto";
import os from "node:os";
import path from "node:path";
import {
  Authenticator,
  callerToken,
  createLogger,
  serve,
  type AuthSettings,
  type Logger,
  type RunningServer,
} from "@oz0/serving";
import { AgentVersions } from "./agents/agent-versions.js";
import { GRAPH_MANAGER_TOOLS, graphManagerTools } from "./graphs/graph-manager-agent.js";
import { GraphJobs, isGraphJob } from "./graphs/graph-jobs.js";
import { GraphRegistry } from "./graphs/graph-registry.js";
import { openGraphStore } from "./store/graph-store.js";
import { JobFeed } from "./jobs/job-feed.js";
import { JobRunner } from "./jobs/job-runner.js";
import type { JobStore } from "./store/job-store.js";
import { eventsTranscripts } from "./jobs/job-transcripts.js";
import { LifecycleOutbox } from "./cluster/lifecycle-outbox.js";
import { NodeIdentity, type NodeIdentitySettings } from "./cluster/node-identity.js";
import { DurableTokens } from "./sessions/durable-tokens.js";
import { LlmProxyClient } from "./sessions/llm-proxy-client.js";
import { orchestratorServices } from "./rpc/orchestrator-service.js";
import { consoleDirectory, consoleFiles, consoleOidcLogin } from "./console/console-files.js";
import { ConsoleLogin } from "./console/console-login.js";
import { loginService } from "./rpc/login-service.js";
import { HookStage } from "./policy/hook-stage.js";
import { chooseHookIsolation, hookIsolationGaps, type HookIsolationSetting } from "./policy/hook-isolation.js";
import { PermissionPolicy } from "./policy/permission-policy.js";
import { PluginRegistry } from "./plugins/plugin-registry.js";
import { SandboxClient } from "./sessions/sandbox-client.js";
import { startNodeListener } from "./rpc/sandbox-node-service.js";
import { RegistryPlacement, StaticPlacement, type SandboxPlacement } from "./sessions/sandbox-placement.js";
import type { LifecycleSink, ProviderSecrets, SessionRunner, TokenIssuer } from "./sessions/session-runner.js";
import { soleCluster, type Cluster } from "./cluster/cluster.js";
import { openJobStore, openPostgresCluster } from "./cluster/postgres-cluster.js";
import { orchestratorTracing, untracedProbes } from "./tracing.js";

export interface OrchestratorConfig {
  /** Default 127.0.0.1. */
  host?: string;
  /** 0 picks a free port. Default 7700. */
  port?: number;
  /**
   * Folders anyone who may run a job may attach files from
   * (OZ0_ATTACHMENT_ROOTS, `:`-separated). An admin may attach any path but
   * the data directory; without roots, nobody else may attach.
   */
  attachmentRoots?: string[];
  /** The data directory (OZ0_HOME). Default ~/.oz0. */
  home?: string;
  /**
   * How plugins' command hooks run (OZ0_HOOK_ISOLATION): `auto` (default) under bubblewrap when it works
   * here, else as the orchestrator's user, said in the log; `bwrap` refuses to start without it; `none`.
   */
  hookIsolation?: HookIsolationSetting;
  /** Sandbox nodes (OZ0_SANDBOX_URLS); or `sandboxes` for custom runners. */
  sandboxUrls?: string[];
  /** Run by a local stack (OZ0_LOCAL_STACK, set by `oz0 dev` and embedded stacks): its sandbox is the stack's own, new at each start. */
  localStack?: boolean;
  sandboxes?: SessionRunner[];
  /** The LLM proxy (OZ0_LLM_PROXY_URL); or `tokens` and `secrets`. */
  llmProxyUrl?: string;
  tokens?: TokenIssuer & Partial<ProviderSecrets>;
  /** The events service (OZ0_EVENTS_URL); lifecycle events are not published without it. */
  eventsUrl?: string;
  /** PostgreSQL for the job store (DATABASE_URL); migrations run on start-up. */
  databaseUrl?: string;
  /** The PostgreSQL schema to keep the tables in (OZ0_DATABASE_SCHEMA); default the store's own. */
  databaseSchema?: string;
  /** This replica's id among replicas sharing `databaseUrl` (OZ0_REPLICA_ID). Default host name, pid and a random suffix. */
  replicaId?: string;
  /** How long a replica's jobs wait, after it stops renewing their leases, before another takes them over (OZ0_LEASE_TTL_MS). Default 30 s. */
  leaseTtlMs?: number;
  /**
   * The token sandbox nodes present with their heartbeats (OZ0_NODE_TOKEN).
   * With PostgreSQL it turns on node registration: sessions are placed on
   * registered live nodes with free capacity instead of OZ0_SANDBOX_URLS.
   */
  nodeToken?: string;
  /** The node API's own port (OZ0_NODE_PORT); sandboxes' OZ0_ORCHESTRATOR_URL points here. Default 7710; 0 picks a free one. */
  nodePort?: number;
  /**
   * Sandbox nodes prove which pod they are (OZ0_NODE_IDENTITY_ISSUER, _JWKS_FILE, _SERVICE_ACCOUNT): each heartbeat
   * carries the pod's projected service-account token and may register only that pod, at the address it came from.
   */
  nodeIdentity?: NodeIdentitySettings;
  /**
   * Who may call (people by OIDC, configured tokens or the owner credential;
   * roles from OZ0_AUTH_CONFIG), and this orchestrator's own service
   * credential for its calls to the sandboxes, the LLM proxy and events.
   * Without it only health answers.
   */
  auth?: AuthSettings;
  /** A node silent this long gets no sessions and its sessions are lost (OZ0_NODE_STALE_AFTER_MS). Default 15 s. */
  nodeStaleAfterMs?: number;
  /** The most sessions a registering node may offer (OZ0_MAX_NODE_CAPACITY); a heartbeat offering more is refused. Default 256. */
  maxNodeCapacity?: number;
  /**
   * How often session tokens left valid at the LLM proxy (a revoke that failed, or never ran) are revoked
   * (OZ0_TOKEN_SWEEP_MS); also once at start-up. Default 60 s.
   */
  tokenSweepMs?: number;
  /** How much of each session's harness stderr is stored, its last bytes (OZ0_MAX_SESSION_STDERR_BYTES). Default 1 MiB. */
  maxSessionStderrBytes?: number;
  /**
   * How many calls of one session may wait for a person at once (OZ0_MAX_WAITING_APPROVALS); a call beyond it is
   * refused, and the model reads why. Default 32.
   */
  maxWaitingApprovals?: number;
  /**
   * How many harness operations of one job run at once on this replica (OZ0_MAX_OPERATIONS_PER_JOB); later calls
   * wait for one to end. Default 4.
   */
  maxOperationsPerJob?: number;
  /** What a session may spend when its agent sets no harness.max_budget_usd (OZ0_DEFAULT_MAX_BUDGET_USD). */
  defaultBudgetUsd?: number;
  /**
   * The most a sandbox node may send about one session (OZ0_MAX_SESSION_BYTES): past it the session is cancelled
   * at its node and its job fails. Default 1 GiB (session-driver.ts says why).
   */
  maxSessionBytes?: number;
  /**
   * Most WatchJobTranscript streams one person holds open at once on this
   * replica (OZ0_MAX_TRANSCRIPT_WATCHES_PER_PERSON); more are refused with
   * RESOURCE_EXHAUSTED. Default 32.
   */
  maxTranscriptWatchesPerPerson?: number;
  /** The web console's built files (OZ0_CONSOLE_DIR), served at `/`. Default the @oz0/console package's dist/. */
  consoleDir?: string;
  /**
   * The largest request message of the public API and the node API, in bytes
   * (OZ0_MAX_MESSAGE_BYTES). Default 4 MiB: a task's text, an approval's
   * changed tool input (a harness line is at most 1 MiB), a node's heartbeat.
   */
  maxMessageBytes?: number;
  /** A custom store (tests); otherwise PostgreSQL when `databaseUrl` is set, else SQLite at <home>/orchestrator.db. */
  store?: JobStore;
  logger?: Logger;
}

export interface RunningOrchestrator {
  readonly url: string;
  readonly port: number;
  /** The node API's listener (`http://host:port`), when sandbox nodes register themselves. */
  readonly nodeUrl: string | undefined;
  readonly home: string;
  readonly store: JobStore;
  readonly runner: JobRunner;
  /** Stop serving and following sessions; sessions keep running on their sandboxes. */
  close(): Promise<void>;
}

export function defaultHome(): string {
  return process.env.OZ0_HOME || path.join(os.homedir(), ".oz0");
}

/**
 * Host name and port: unique among live replicas (two on one host need two
 * ports), and the same after a restart, so a restarted replica takes its own
 * jobs back at once (postgres-cluster.ts). With a random port, random.
 */
function defaultReplicaId(port: number): string {
  return port > 0 ? `${os.hostname()}:${port}` : `${os.hostname()}:${process.pid}-${randomBytes(3).toString("hex")}`;
}

export async function startOrchestrator(config: OrchestratorConfig = {}): Promise<RunningOrchestrator> {
  const home = path.resolve(config.home ?? defaultHome());
  const hookIsolation = await chooseHookIsolation({ setting: config.hookIsolation ?? "auto", dataDir: home });
  // What the orchestrator sends each audience: sandboxes get a credential of their own where one is configured.
  const sandboxToken = callerToken(config.auth, "sandbox");
  const proxyToken = callerToken(config.auth, "llm-proxy");
  const eventsToken = callerToken(config.auth, "events");
  const logger = config.logger ?? createLogger({ name: "orchestrator" });
  if (!hookIsolation.isolation)
    logger.info(
      { reason: hookIsolation.reason },
      "plugins' command hooks run as the orchestrator's user, not isolated",
    );
  else if (hookIsolation.isolation.kind === "landlock")
    logger.info(
      { reason: hookIsolation.reason },
      "plugins' command hooks run in a Landlock domain: the host's files beyond the system's and their plugin's are walled off",
    );
  const hookGaps = hookIsolation.isolation ? hookIsolationGaps(hookIsolation.isolation) : [];
  if (hookGaps.length > 0) logger.warn({ gaps: hookGaps }, "plugins' command hooks are isolated with guards missing");
  for (const [name, value] of [
    ["OZ0_LEASE_TTL_MS", config.leaseTtlMs],
    ["OZ0_NODE_STALE_AFTER_MS", config.nodeStaleAfterMs],
    ["OZ0_TOKEN_SWEEP_MS", config.tokenSweepMs],
  ] as const) {
    if (value !== undefined && !(Number.isInteger(value) && value >= 100))
      throw new Error(`${name} must be a whole number of milliseconds, at least 100; got ${String(value)}`);
  }
  const waitingApprovals = config.maxWaitingApprovals;
  if (waitingApprovals !== undefined && !(Number.isInteger(waitingApprovals) && waitingApprovals >= 1))
    throw new Error(
      `OZ0_MAX_WAITING_APPROVALS must be a whole number of calls, at least 1; got ${String(waitingApprovals)}`,
    );
  const stderrBytes = config.maxSessionStderrBytes;
  if (stderrBytes !== undefined && !(Number.isInteger(stderrBytes) && stderrBytes >= 0)) {
    throw new Error(
      `OZ0_MAX_SESSION_STDERR_BYTES must be a whole number of bytes (0 keeps none); got ${String(stderrBytes)}`,
    );
  }
  const sessionBytes = config.maxSessionBytes;
  if (sessionBytes !== undefined && !(Number.isInteger(sessionBytes) && sessionBytes >= 1))
    throw new Error(`OZ0_MAX_SESSION_BYTES must be a whole number of bytes, at least 1; got ${String(sessionBytes)}`);
  // On PostgreSQL the orchestrator is one replica of many (one is a cluster of one): jobs are leased.
  // Otherwise it is the only one, on its own store.
  const cluster: Cluster =
    !config.store && config.databaseUrl
      ? await openPostgresCluster({
          connectionString: config.databaseUrl,
          ...(config.databaseSchema ? { schema: config.databaseSchema } : {}),
          replicaId: config.replicaId ?? defaultReplicaId(config.port ?? 7700),
          ...(config.leaseTtlMs ? { leaseTtlMs: config.leaseTtlMs } : {}),
          ...(config.nodeStaleAfterMs ? { nodeStaleAfterMs: config.nodeStaleAfterMs } : {}),
          onError: (error) => logger.warn({ err: error }, "cluster coordination failed; retrying"),
        })
      : soleCluster(config.store ?? (await openJobStore({ dataDir: home })));
  const store = cluster.store;
  // Every session gets its span (tracing.ts); a no-op when OpenTelemetry is not started.
  const sandboxes = (
    config.sandboxes ?? (config.sandboxUrls ?? []).map((url) => new SandboxClient({ url, token: sandboxToken }))
  ).map((runner) => orchestratorTracing.sessionRunner(runner));
  // Nodes that register themselves (several replicas share their capacity), or the configured list.
  const registered = config.nodeToken ? cluster.nodes : undefined;
  if (config.nodeIdentity && !registered)
    throw new Error(
      "node identities (OZ0_NODE_IDENTITY_ISSUER) are for nodes that register themselves: set OZ0_NODE_TOKEN and DATABASE_URL too, or unset them",
    );
  const nodeIdentity = config.nodeIdentity ? new NodeIdentity(config.nodeIdentity) : undefined;
  if (!registered && sandboxes.length === 0) {
    throw new Error(
      cluster.nodes
        ? "no sandbox configured: set OZ0_SANDBOX_URLS (comma-separated sandbox URLs), or OZ0_NODE_TOKEN so sandbox nodes register themselves"
        : "no sandbox configured: set OZ0_SANDBOX_URLS (comma-separated sandbox URLs)",
    );
  }
  if (config.auth?.serviceToken && !config.auth.audienceTokens?.sandbox)
    logger.warn(
      "OZ0_SERVICE_TOKEN_FOR_SANDBOX is unset, so sandboxes are sent OZ0_SERVICE_TOKEN, which the LLM proxy's control API and events accept too: each RunSession carries it into a sandbox's memory, beside agent code. Give the orchestrator a credential of its own for sandboxes, and the sandboxes its digest as OZ0_PEER_ORCHESTRATOR_SHA256",
    );
  const placement: SandboxPlacement = registered
    ? new RegistryPlacement({ registry: registered, logger, sandboxToken })
    : new StaticPlacement({ runners: sandboxes, localStack: config.localStack ?? false });
  const proxy =
    config.tokens ??
    (config.llmProxyUrl ? new LlmProxyClient({ url: config.llmProxyUrl, token: proxyToken }) : undefined);
  if (!proxy) throw new Error("no LLM proxy configured: set OZ0_LLM_PROXY_URL");
  const tokens = new DurableTokens({ issuer: proxy, store, logger });
  const noSecrets = (): never => {
    throw new Error("this LLM proxy keeps no secrets");
  };
  const secrets: ProviderSecrets = {
    setSecret: (s) => (proxy.setSecret ? proxy.setSecret(s) : noSecrets()),
    listSecrets: () => (proxy.listSecrets ? proxy.listSecrets() : noSecrets()),
    deleteSecret: (s) => (proxy.deleteSecret ? proxy.deleteSecret(s) : noSecrets()),
  };
  // Always a sink: the job's span starts and ends with its lifecycle events, published or not.
  const lifecycle: LifecycleSink = orchestratorTracing.lifecycleSink(
    config.eventsUrl ? new LifecycleOutbox({ url: config.eventsUrl, token: eventsToken, store, logger }) : undefined,
  );
  const feed = new JobFeed();
  const subscribeAppended = cluster.subscribeAppended?.bind(cluster);
  const stopFollowing = subscribeAppended
    ? feed.followCluster(
        { listJobEvents: (jobId, afterSeq, limit) => store.listJobEvents(jobId, afterSeq, limit), subscribeAppended },
        { onError: (error) => logger.warn({ err: error }, "could not read another replica's job events") },
      )
    : undefined;
  const runner = new JobRunner({
    store,
    feed,
    placement,
    tokens: orchestratorTracing.tokenIssuer(tokens),
    policy: new PermissionPolicy({ hooks: [new HookStage({ isolation: hookIsolation.isolation })] }),
    home,
    ...(config.attachmentRoots ? { attachmentRoots: config.attachmentRoots } : {}),
    logger,
    ...(lifecycle ? { lifecycle } : {}),
    ownership: cluster.ownership,
    servedTools: { [GRAPH_MANAGER_TOOLS]: graphManagerTools },
    ...(config.maxSessionStderrBytes !== undefined ? { maxStderrBytes: config.maxSessionStderrBytes } : {}),
    ...(config.maxWaitingApprovals !== undefined ? { maxWaitingApprovals: config.maxWaitingApprovals } : {}),
    ...(config.maxOperationsPerJob !== undefined ? { maxOperationsPerJob: config.maxOperationsPerJob } : {}),
    ...(config.defaultBudgetUsd !== undefined ? { defaultBudgetUsd: config.defaultBudgetUsd } : {}),
    ...(config.maxSessionBytes !== undefined ? { maxSessionBytes: config.maxSessionBytes } : {}),
  });
  // Graph versions, graph jobs and their checkpoints: beside the jobs (PostgreSQL), or a SQLite file of their own under the data directory.
  const graphStore = await openGraphStore({
    home,
    ...(cluster.graphStore
      ? { ...cluster.graphStore, ...(config.databaseSchema ? { schema: config.databaseSchema } : {}) }
      : {}),
  });
  const graphRegistry = new GraphRegistry({ graphStore, store });
  const graphJobs = new GraphJobs({
    graphStore,
    store,
    feed,
    jobs: runner,
    registry: graphRegistry,
    placement,
    logger,
    ...(lifecycle ? { lifecycle } : {}),
    ownership: cluster.ownership,
    ...(config.maxSessionBytes !== undefined ? { maxSessionBytes: config.maxSessionBytes } : {}),
  });
  const consoleLogin = new ConsoleLogin({ sessionsFile: path.join(home, "console-sessions.json") });
  const server = await serve({
    name: "orchestrator",
    host: config.host ?? "127.0.0.1",
    port: config.port ?? 7700,
    logger,
    ...(config.maxMessageBytes !== undefined ? { maxMessageBytes: config.maxMessageBytes } : {}),
    auth: new Authenticator({ ...config.auth, sessions: consoleLogin }),
    // Health checks are no trace's work (tracing.ts).
    untracedRpcs: untracedProbes,
    fallback: consoleFiles(consoleDirectory(config.consoleDir), {
      oidc: consoleOidcLogin(config.auth?.people?.oidc),
    }),
    services: [
      loginService(consoleLogin),
      ...orchestratorServices({
        store,
        feed,
        runner,
        plugins: new PluginRegistry({
          store,
          home,
          graphs: graphRegistry,
          ...(config.defaultBudgetUsd !== undefined ? { defaultBudgetUsd: config.defaultBudgetUsd } : {}),
        }),
        agents: new AgentVersions({ store }),
        secrets,
        ...(config.defaultBudgetUsd !== undefined ? { defaultBudgetUsd: config.defaultBudgetUsd } : {}),
        ...(proxy instanceof LlmProxyClient ? { usage: proxy } : {}),
        ...(config.eventsUrl ? { transcripts: eventsTranscripts({ url: config.eventsUrl, token: eventsToken }) } : {}),
        ...(config.maxTranscriptWatchesPerPerson !== undefined
          ? { maxTranscriptWatchesPerPerson: config.maxTranscriptWatchesPerPerson }
          : {}),
        graphs: { jobs: graphJobs, registry: graphRegistry },
      }),
    ],
  });
  let nodeListener: RunningServer | undefined;
  if (registered) {
    try {
      nodeListener = await startNodeListener({
        registry: registered,
        nodeToken: config.nodeToken!,
        ...(nodeIdentity ? { identity: nodeIdentity } : {}),
        ...(config.maxNodeCapacity !== undefined ? { maxNodeCapacity: config.maxNodeCapacity } : {}),
        logger,
        host: config.host ?? "127.0.0.1",
        port: config.nodePort ?? 7710,
        ...(config.maxMessageBytes !== undefined ? { maxMessageBytes: config.maxMessageBytes } : {}),
      });
    } catch (error) {
      await server.close({ graceMs: 0 });
      throw error;
    }
  }
  const abandon = (jobId: string): void => {
    if (isGraphJob({ id: jobId })) graphJobs.abandon(jobId);
    else runner.abandon(jobId);
  };
  // One orchestrator resumes every running job now; a replica resumes jobs as their leases are won:
  // now (orphans and expired leases) and on every sweep.
  await cluster.start({
    onResumeAll: async () => {
      const resumed = await runner.resumeAll();
      if (resumed > 0) logger.info({ resumed }, "re-attached to running jobs");
      // After the job runner: a graph step whose job it re-attached is waited for, not started again.
      const resumedGraphs = await graphJobs.resumeAll();
      if (resumedGraphs > 0) logger.info({ resumed: resumedGraphs }, "resumed running graph jobs");
    },
    onTakeOver: async (lease) => {
      logger.info({ jobId: lease.resource }, "took over a job from a replica that stopped");
      try {
        await (isGraphJob({ id: lease.resource })
          ? graphJobs.resumeJob(lease.resource)
          : runner.resumeJob(lease.resource));
      } catch (error) {
        // Half resumed: stop, so whoever takes the lease next starts clean.
        abandon(lease.resource);
        logger.warn(
          { jobId: lease.resource, err: error },
          "could not resume a job taken over; gave its lease back for the next sweep",
        );
        throw error;
      }
    },
    onLeaseLost: (lease) => {
      logger.warn(
        { jobId: lease.resource },
        "lost a job's lease (not renewed in time: another replica, or this one at its next sweep, takes the job over); stopped working on it",
      );
      abandon(lease.resource);
    },
    onApprovalAnswered: (answer) => {
      runner
        .deliverAnswer(answer)
        .catch((error: unknown) =>
          logger.warn({ err: error, jobId: answer.jobId }, "could not deliver an answer taken at another replica"),
        );
    },
    onApprovalsReconnected: () => {
      runner
        .deliverUndelivered()
        .catch((error: unknown) => logger.warn({ err: error }, "could not deliver answers missed while disconnected"));
      runner
        .heedStoredCancels()
        .catch((error: unknown) =>
          logger.warn({ err: error }, "could not check for cancels missed while disconnected"),
        );
    },
    onCancelRequested: (cancel) => {
      runner
        .heedCancel(cancel.jobId)
        .catch((error: unknown) =>
          logger.warn({ err: error, jobId: cancel.jobId }, "could not stop the session of a job cancelled elsewhere"),
        );
    },
  });
  if (registered) runner.watchNodes({ intervalMs: 1_000 });
  tokens.start({ intervalMs: config.tokenSweepMs ?? 60_000 });
  let closing: Promise<void> | undefined;
  return {
    url: server.url,
    port: server.port,
    nodeUrl: nodeListener?.url,
    home,
    store,
    runner,
    close() {
      closing ??= (async () => {
        await graphJobs.close();
        await runner.close();
        await tokens.close();
        await server.close({ graceMs: 1_000 });
        await nodeListener?.close({ graceMs: 1_000 });
        await lifecycle?.close();
        stopFollowing?.();
        // The cluster closes its store; a replica's leases expire and another replica takes its jobs over.
        await cluster.close();
        await graphStore.close();
      })();
      return closing;
    },
  };
}
