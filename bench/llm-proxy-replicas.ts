// The LLM proxy on its stores, in the same run: one proxy on SQLite (the
// baseline), one proxy on PostgreSQL, and two replicas on the same PostgreSQL
// sharing one session (its token minted at the first, calls alternating).
// Every call is budgeted, so each one reserves and settles, and is metered.
// The upstream (the scripted model) and each proxy run in their own process;
// this process generates the load with keep-alive connections.
//   node --import tsx bench/llm-proxy-replicas.ts [--calls 1000] [--concurrency 32] [--seconds 5] [--rounds 2]
// Prints, per setup, the median of the rounds: sequential latency p50/p99,
// calls per second at the concurrency, CPU per call of the proxies, and the
// ratios against SQLite. Uses DATABASE_URL when set, else starts PostgreSQL
// with @oz0/test-infra.
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { benchOptions } from "./bench-options.js";
import { median, MIN_ROUNDS, percentile, startReport } from "./bench-report.js";
import {
  closePostConnections,
  cpuOf,
  postJson,
  serveRoleControl,
  startRoleProcess,
  type Role,
} from "./llm-proxy-role-process.js";

const options = benchOptions({
  calls: { type: "number", default: 1000 },
  concurrency: { type: "number", default: 32 },
  seconds: { type: "number", default: 5 },
  rounds: { type: "number", default: 2 },
  // This file runs itself as the upstream and the proxies, picked by --role.
  role: { type: "string", default: "bench", internal: true },
  upstream: { type: "string", default: "", internal: true },
  "database-url": { type: "string", default: "", internal: true },
  schema: { type: "string", default: "", internal: true },
});
const role = options.role;
if (role !== "bench") serveRoleControl();

const KEK = Buffer.alloc(32, 1).toString("base64");
/** The orchestrator's service credential: the proxy's control API answers only it. */
const ADMIN = "bench-orchestrator-credential-0123456789";

function startRole(name: string, extra: string[] = []): Promise<Role> {
  return startRoleProcess(["--import", "tsx", fileURLToPath(import.meta.url), "--role", name, ...extra]);
}

function call(url: URL, headers: Record<string, string>, body: Buffer): Promise<string> {
  return postJson({ url, headers, body, label: url.host });
}

interface Setup {
  name: string;
  proxies: Role[];
  headers: Record<string, string>;
}

const targetOf = (setup: Setup, i: number): URL =>
  new URL("/anthropic/v1/messages", setup.proxies[i % setup.proxies.length]!.info.url);

async function latency(setup: Setup, body: Buffer, calls: number): Promise<{ p50: number; p99: number }> {
  for (let i = 0; i < 100; i += 1) await call(targetOf(setup, i), setup.headers, body);
  const times: number[] = [];
  for (let i = 0; i < calls; i += 1) {
    const start = performance.now();
    await call(targetOf(setup, i), setup.headers, body);
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  return { p50: percentile(times, 0.5), p99: percentile(times, 0.99) };
}

async function throughput(
  setup: Setup,
  body: Buffer,
  concurrency: number,
  seconds: number,
): Promise<{ perSecond: number; cpuMicrosPerCall: number }> {
  let done = 0;
  const cpuBefore = await Promise.all(setup.proxies.map(cpuOf));
  const start = performance.now();
  const end = start + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      let i = worker;
      while (performance.now() < end) {
        await call(targetOf(setup, i), setup.headers, body);
        i += 1;
        done += 1;
      }
    }),
  );
  const perSecond = done / ((performance.now() - start) / 1000);
  const cpuAfter = await Promise.all(setup.proxies.map(cpuOf));
  const cpu = cpuAfter.reduce((sum, after, i) => sum + after - cpuBefore[i]!, 0);
  return { perSecond, cpuMicrosPerCall: cpu / done };
}

async function mint(proxyUrl: string): Promise<string> {
  const { createClient } = await import("@connectrpc/connect");
  const { createGrpcTransport } = await import("@connectrpc/connect-node");
  const { LlmProxyService } = await import("@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb");
  const control = createClient(LlmProxyService, createGrpcTransport({ baseUrl: proxyUrl }));
  const minted = await control.mintSessionToken(
    { job: "bench", agent: "bench", session: `bench-${randomBytes(4).toString("hex")}`, budgetUsd: 1_000_000 },
    { headers: { authorization: `Bearer ${ADMIN}` } },
  );
  return minted.token;
}

async function bench(): Promise<void> {
  const report = startReport("llm-proxy-replicas");
  const { calls, concurrency, seconds, rounds } = options;
  const { startPostgres } = await import("@oz0/test-infra");
  const postgres = process.env.DATABASE_URL ? undefined : await startPostgres({ database: "oz0_bench" });
  const databaseUrl = process.env.DATABASE_URL ?? postgres!.url;
  const schema = `oz0_proxy_bench_${randomBytes(4).toString("hex")}`;
  const upstream = await startRole("upstream");
  const roles: Role[] = [upstream];
  try {
    const sqlite = await startRole("proxy", ["--upstream", upstream.info.url]);
    roles.push(sqlite);
    const pgArgs = ["--upstream", upstream.info.url, "--database-url", databaseUrl, "--schema", schema];
    // The two replicas start together: the migrations race under their advisory lock.
    const [pg1, pg2] = await Promise.all([startRole("proxy", pgArgs), startRole("proxy", pgArgs)]);
    roles.push(pg1!, pg2!);
    const pgToken = await mint(pg1!.info.url);
    const headersFor = (token: string): Record<string, string> => ({
      "x-api-key": token,
      "Oz0-Job": "bench",
      "Oz0-Agent": "bench",
      "anthropic-version": "2023-06-01",
    });
    const setups: Setup[] = [
      { name: "1 proxy, SQLite", proxies: [sqlite], headers: headersFor(await mint(sqlite.info.url)) },
      { name: "1 proxy, PostgreSQL", proxies: [pg1!], headers: headersFor(pgToken) },
      { name: "2 replicas, PostgreSQL", proxies: [pg1!, pg2!], headers: headersFor(pgToken) },
    ];
    const body = Buffer.from(
      JSON.stringify({
        model: "claude-sonnet-5",
        max_tokens: 256,
        messages: [{ role: "user", content: "Say something short." }],
      }),
    );
    console.log(
      `llm-proxy stores: budgeted non-streaming calls; ${calls} sequential calls, then concurrency ${concurrency} for ${seconds}s; ${rounds} round(s), setups alternating`,
    );
    const results = new Map<string, { p50: number[]; p99: number[]; perSecond: number[]; cpu: number[] }>(
      setups.map((s) => [s.name, { p50: [], p99: [], perSecond: [], cpu: [] }]),
    );
    for (let round = 0; round < rounds; round += 1) {
      for (const setup of setups) {
        const r = results.get(setup.name)!;
        const l = await latency(setup, body, calls);
        const t = await throughput(setup, body, concurrency, seconds);
        r.p50.push(l.p50);
        r.p99.push(l.p99);
        r.perSecond.push(t.perSecond);
        r.cpu.push(t.cpuMicrosPerCall);
      }
    }
    const base = results.get(setups[0]!.name)!;
    for (const setup of setups) {
      const r = results.get(setup.name)!;
      console.log(
        `${setup.name.padEnd(24)} p50 ${median(r.p50).toFixed(3)} ms p99 ${median(r.p99).toFixed(3)} ms | ${median(r.perSecond).toFixed(0)}/s | proxy CPU ${median(r.cpu).toFixed(0)} µs a call` +
          (rounds < MIN_ROUNDS
            ? ""
            : ` | vs SQLite: p50 ${(median(r.p50) / median(base.p50)).toFixed(2)}x, throughput ${(median(r.perSecond) / median(base.perSecond)).toFixed(2)}x, CPU ${(median(r.cpu) / median(base.cpu)).toFixed(2)}x`),
      );
    }
  } finally {
    closePostConnections();
    for (const r of roles) r.child.stdin!.end();
    await new Promise((resolve) => setTimeout(resolve, 300));
    if (postgres) await postgres.close();
    report.end();
  }
}

if (role === "upstream") {
  const { startScriptedModel } = await import("@oz0/harness/testing");
  const model = await startScriptedModel({
    turns: () => ({ text: "A short scripted answer.", usage: { input: 50, output: 25 } }),
    isSideCall: () => false,
  });
  process.stdout.write(`${JSON.stringify({ url: model.url })}\n`);
} else if (role === "proxy") {
  const { startLlmProxy } = await import("@oz0/llm-proxy");
  const pino = (await import("pino")).default;
  const databaseUrl = options["database-url"];
  const proxy = await startLlmProxy({
    dataDir: ":memory:",
    ...(databaseUrl ? { databaseUrl, databaseSchema: options.schema } : {}),
    kek: Buffer.from(KEK, "base64"),
    auth: { peers: { orchestrator: (await import("@oz0/serving")).credentialDigest(ADMIN) } },
    providers: [
      {
        name: "anthropic",
        baseUrl: options.upstream,
        keySecret: "ANTHROPIC_API_KEY",
        prices: { "*": { input: 3, output: 15 } },
      },
    ],
    logger: pino({ level: "warn" }),
  });
  const { createClient } = await import("@connectrpc/connect");
  const { createGrpcTransport } = await import("@connectrpc/connect-node");
  const { SecretService } = await import("@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb");
  await createClient(SecretService, createGrpcTransport({ baseUrl: proxy.url })).setSecret(
    { name: "ANTHROPIC_API_KEY", value: "sk-bench-key-0123456789" },
    { headers: { authorization: `Bearer ${ADMIN}` } },
  );
  process.stdout.write(`${JSON.stringify({ url: proxy.url })}\n`);
} else {
  await bench();
}
