// A deployment past one machine, on loopback: every service its own process
// (the services' own dist/main.js, as pods would run them), several
// orchestrators, sandbox nodes and LLM proxies sharing one PostgreSQL schema,
// one events service on the real Kafka broker, and the scripted model in the
// test process. Used by the cluster acceptance test and bench/orchestrator-replicas.ts.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { testCredentials } from "@oz0/serving/testing";
import { startScriptedModel, type ScriptedModel, type ScriptedRequest, type ScriptedTurn } from "@oz0/harness/testing";
import { JobService, PluginService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { freePorts } from "@oz0/test-infra";
import {
  installationPaths,
  installRoot,
  startServiceProcess,
  type StackProcess,
  type StackServiceName,
} from "../../src/dev/embedded-stack.js";

export interface ClusterStackOptions {
  databaseUrl: string;
  schema: string;
  /** Kafka brokers for the events service; none: its local log only. */
  kafkaBrokers?: string[];
  topic?: string;
  orchestrators: number;
  sandboxes: number;
  proxies: number;
  /** Sessions each sandbox node runs at once. */
  sandboxCapacity?: number;
  /** Lease lifetime: how soon a dead orchestrator's jobs are taken over. */
  leaseTtlMs?: number;
  /** How soon a silent sandbox node counts as gone. */
  nodeStaleAfterMs?: number;
  turns: (request: ScriptedRequest) => ScriptedTurn | Promise<ScriptedTurn>;
}

export interface ClusterStack {
  home: string;
  model: ScriptedModel;
  events: StackProcess;
  proxies: StackProcess[];
  sandboxes: StackProcess[];
  orchestrators: StackProcess[];
  jobs(index: number): Client<typeof JobService>;
  plugins(index: number): Client<typeof PluginService>;
  close(): Promise<void>;
}

/** The proxies' schema beside the orchestrators' (drop both after a test). */
export function proxySchema(schema: string): string {
  return `${schema}_proxy`;
}

export async function startClusterStack(options: ClusterStackOptions): Promise<ClusterStack> {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-cluster-"));
  const model = await startScriptedModel({ isSideCall: () => false, turns: options.turns });
  const started: StackProcess[] = [];
  const start = async (name: StackServiceName, id: string, env: Record<string, string>): Promise<StackProcess> => {
    const p = await startServiceProcess({ name, env, logFile: path.join(home, "logs", `${id}.log`) });
    started.push(p);
    return p;
  };
  const close = async (): Promise<void> => {
    // Orchestrators first (they stop following sessions), then the nodes, the proxies and the events service.
    for (const p of [...started].reverse()) await p.stop({ graceMs: 5_000 });
    await model.close();
    if (!process.env.OZ0_KEEP_TEST_HOME) rmSync(home, { recursive: true, force: true });
  };
  try {
    const database = { DATABASE_URL: options.databaseUrl, OZ0_DATABASE_SCHEMA: options.schema };
    const nodeToken = randomBytes(32).toString("base64url");
    const providersFile = path.join(home, "providers.json");
    writeFileSync(providersFile, JSON.stringify({ providers: [{ name: "anthropic", baseUrl: model.url }] }));
    const events = await start("events", "events", {
      ...testCredentials.envFor("events"),
      OZ0_EVENTS_DATA: path.join(home, "events"),
      ...(options.kafkaBrokers?.length
        ? { KAFKA_BROKERS: options.kafkaBrokers.join(","), OZ0_KAFKA_TOPIC: options.topic ?? "oz0.lifecycle.v1" }
        : {}),
    });
    // Proxy replicas share the database (tokens, budgets, metering) and the key that encrypts provider keys.
    const kek = randomBytes(32).toString("base64");
    const proxies = await Promise.all(
      Array.from({ length: options.proxies }, (_, i) =>
        start("llm-proxy", `llm-proxy-${i + 1}`, {
          DATABASE_URL: options.databaseUrl,
          OZ0_DATABASE_SCHEMA: proxySchema(options.schema),
          OZ0_EVENTS_URL: events.url,
          OZ0_LLM_PROXY_DATA: path.join(home, `llm-proxy-${i + 1}`),
          ...testCredentials.envFor("llm-proxy"),
          OZ0_KEK: kek,
          OZ0_PROVIDERS_FILE: providersFile,
        }),
      ),
    );
    const lease = {
      OZ0_LEASE_TTL_MS: String(options.leaseTtlMs ?? 10_000),
      ...(options.nodeStaleAfterMs ? { OZ0_NODE_STALE_AFTER_MS: String(options.nodeStaleAfterMs) } : {}),
    };
    // Orchestrator homes are apart (as pods' disks would be); plugin copies are found through the store.
    const orchestrators: StackProcess[] = [];
    // Each replica's node API listens on a port of its own; sandboxes send heartbeats there, never to the public API.
    const nodePorts = await freePorts(options.orchestrators);
    for (let i = 0; i < options.orchestrators; i++) {
      orchestrators.push(
        await start("orchestrator", `orchestrator-${i + 1}`, {
          ...testCredentials.envFor("orchestrator"),
          OZ0_NODE_PORT: String(nodePorts[i]),
          ...database,
          ...lease,
          OZ0_REPLICA_ID: `orchestrator-${i + 1}`,
          OZ0_HOME: path.join(home, `orchestrator-${i + 1}`),
          OZ0_EVENTS_URL: events.url,
          OZ0_LLM_PROXY_URL: proxies[i % proxies.length]!.url,
          OZ0_NODE_TOKEN: nodeToken,
        }),
      );
    }
    const root = installRoot();
    const sandboxes = await Promise.all(
      Array.from({ length: options.sandboxes }, (_, i) =>
        start("sandbox", `sandbox-${i + 1}`, {
          ...testCredentials.envFor("sandbox"),
          OZ0_EVENTS_URL: events.url,
          OZ0_SANDBOX_ROOT: path.join(home, `sandbox-${i + 1}`),
          ...(root
            ? {
                OZ0_SANDBOX_READ_ONLY_PATHS: [
                  ...installationPaths(root),
                  path.join(root, "services/orchestrator/test"),
                ].join(":"),
              }
            : {}),
          OZ0_MAX_SESSIONS: String(options.sandboxCapacity ?? 16),
          // No OZ0_CANCEL_GRACE_MS: the grace a harness has to exit after its result is the default 10 s.
          // At this test's load (200 jobs, load average near 20 on 2 cores) a fake harness took 0.64 s
          // from its result to its exit at the median, 2.1 s at p99 and 3.4 s at most in one run (12 ms
          // when idle); in one run of six one took past 5 s and failed its job as did_not_exit under the
          // 5 s this test used to set.
          // Every orchestrator: a node's heartbeats reach whichever answers (a Kubernetes Service would pick one).
          OZ0_ORCHESTRATOR_URL: nodePorts.map((port) => `http://127.0.0.1:${port}`).join(","),
          OZ0_NODE_TOKEN: nodeToken,
          OZ0_NODE_ID: `sandbox-${i + 1}`,
          OZ0_HEARTBEAT_MS: "500",
          // A node killed here is never started again: its kept sessions end 5 s after it, not 15 min
          // (they outlived the whole suite, their folders already removed).
          OZ0_SESSION_ORPHAN_MS: "5000",
        }),
      ),
    );
    const transports = orchestrators.map((o) =>
      createGrpcTransport({ baseUrl: o.url, interceptors: [testCredentials.caller] }),
    );
    return {
      home,
      model,
      events,
      proxies,
      sandboxes,
      orchestrators,
      jobs: (index) => createClient(JobService, transports[index]!),
      plugins: (index) => createClient(PluginService, transports[index]!),
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}
