// The LLM proxy's added latency and its throughput, against calling the same
// scripted upstream directly and through a bare Node forwarder
// (llm-proxy-bare-forwarder.ts), in the same run. The upstream (scripted model)
// and the proxy each run in their own process, as in production; the load
// generator is this process, with keep-alive connections to both.
// For each of non-streaming and streaming Anthropic Messages calls:
//   - latency: sequential calls (concurrency 1), median and p99, direct vs proxy;
//   - throughput: calls per second at a fixed concurrency, direct vs proxy.
// Prints the figures and the ratios. The goal (issue 6): under 1 ms added at
// the median and at least 2,000 non-streaming calls per second on 2 cores.
// `--body-kb` gives every request a conversation of about that many kilobytes
// (an agent's later turns carry hundreds), which the proxy does not parse.
//   node --import tsx bench/llm-proxy-latency.ts [--calls 2000] [--concurrency 32] [--seconds 5] [--body-kb 0] [--profile-proxy]
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { benchOptions } from "./bench-options.js";
import { closePostConnections, cpuOf, postJson, serveRoleControl, startRoleProcess, type Role } from "./llm-proxy-role-process.js";

const options = benchOptions({
  calls: { type: "number", default: 2000 },
  concurrency: { type: "number", default: 32 },
  seconds: { type: "number", default: 5 },
  "body-kb": { type: "number", default: 0 },
  // Writes a CPU profile of the proxy process (.cpuprofile in the working directory).
  "profile-proxy": { type: "boolean" },
  // This file runs itself as the upstream and the proxy, picked by --role.
  role: { type: "string", default: "bench", internal: true },
  upstream: { type: "string", default: "", internal: true },
});
const role = options.role;

if (role !== "bench") serveRoleControl();

const ANSWER = "The scripted upstream answers every call with this sentence, which is about a hundred characters long.";

function startBare(url: string): Promise<Role> {
  return startRoleProcess(["--import", "tsx", fileURLToPath(new URL("./llm-proxy-bare-forwarder.ts", import.meta.url)), url]);
}

function startRole(name: string, extra: string[] = []): Promise<Role> {
  const profile = name === "proxy" && options["profile-proxy"] ? ["--cpu-prof"] : [];
  return startRoleProcess([...profile, "--import", "tsx", fileURLToPath(import.meta.url), "--role", name, ...extra]);
}

/** Earlier turns of about `kb` kilobytes, then the question. */
function conversation(kb: number): { role: string; content: string }[] {
  const turns: { role: string; content: string }[] = [];
  for (let size = 0; size < kb * 1024; size += 1024) {
    turns.push({ role: turns.length % 2 === 0 ? "user" : "assistant", content: `Turn ${turns.length}: ${"an earlier \"quoted\" part of the conversation, ".repeat(20)}`.slice(0, 1000) });
  }
  if (turns.length % 2 === 1) turns.push({ role: "assistant", content: "Noted." });
  return [...turns, { role: "user", content: "Say something short." }];
}

interface Target {
  name: string;
  url: URL;
  headers: Record<string, string>;
}

function call(target: Target, body: Buffer): Promise<void> {
  return postJson({ url: target.url, headers: target.headers, body, label: target.name });
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length - 1) * p))]!;
}

async function latency(target: Target, body: Buffer, calls: number): Promise<{ p50: number; p99: number }> {
  for (let i = 0; i < 200; i += 1) await call(target, body); // warm-up: JIT, pools
  const times: number[] = [];
  for (let i = 0; i < calls; i += 1) {
    const start = performance.now();
    await call(target, body);
    times.push(performance.now() - start);
  }
  times.sort((a, b) => a - b);
  return { p50: percentile(times, 0.5), p99: percentile(times, 0.99) };
}

async function throughput(target: Target, body: Buffer, concurrency: number, seconds: number, counted?: Role): Promise<{ perSecond: number; cpuMicrosPerCall?: number }> {
  let done = 0;
  const cpuBefore = counted ? await cpuOf(counted) : 0;
  const end = performance.now() + seconds * 1000;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        await call(target, body);
        done += 1;
      }
    }),
  );
  const perSecond = done / ((performance.now() - start) / 1000);
  return counted ? { perSecond, cpuMicrosPerCall: ((await cpuOf(counted)) - cpuBefore) / done } : { perSecond };
}

async function bench(): Promise<void> {
  const { calls, concurrency, seconds } = options;
  const upstream = await startRole("upstream");
  const proxy = await startRole("proxy", ["--upstream", upstream.info.url]);
  const bare = await startBare(upstream.info.url);
  try {
    const direct: Target = { name: "direct", url: new URL("/v1/messages", upstream.info.url), headers: { "x-api-key": "sk-bench", "anthropic-version": "2023-06-01" } };
    const viaProxy: Target = {
      name: "proxy",
      url: new URL("/anthropic/v1/messages", proxy.info.url),
      headers: { "x-api-key": proxy.info.token!, "Oz0-Job": "bench", "Oz0-Agent": "bench", "anthropic-version": "2023-06-01" },
    };
    const forwarder: Target = { name: "bare forwarder", url: new URL("/v1/messages", bare.info.url), headers: {} };
    console.log(
      `llm-proxy latency and throughput: ${calls} sequential calls each; throughput at concurrency ${concurrency} for ${seconds}s; requests of ${options["body-kb"] > 0 ? `about ${options["body-kb"]} KB` : "a short question"}; upstream and proxy in their own processes`,
    );
    for (const stream of [false, true]) {
      const body = Buffer.from(JSON.stringify({ model: "claude-sonnet-5", max_tokens: 256, stream, messages: conversation(options["body-kb"]) }));
      console.log(`${stream ? "streaming" : "non-streaming"}: measuring…`);
      const d = await latency(direct, body, calls);
      const b = await latency(forwarder, body, calls);
      const p = await latency(viaProxy, body, calls);
      const straight = await throughput(direct, body, concurrency, seconds, upstream);
      const dt = straight.perSecond;
      const forwarded = await throughput(forwarder, body, concurrency, seconds, bare);
      const proxied = await throughput(viaProxy, body, concurrency, seconds, proxy);
      const pt = proxied.perSecond;
      const kind = stream ? "streaming    " : "non-streaming";
      console.log(
        `${kind}  direct p50 ${d.p50.toFixed(3)} ms p99 ${d.p99.toFixed(3)} ms ${dt.toFixed(0)}/s | proxy p50 ${p.p50.toFixed(3)} ms p99 ${p.p99.toFixed(3)} ms ${pt.toFixed(0)}/s`,
      );
      console.log(
        `${kind}  added p50 ${(p.p50 - d.p50).toFixed(3)} ms, p99 ${(p.p99 - d.p99).toFixed(3)} ms; latency ratio p50 ${(p.p50 / d.p50).toFixed(2)}x p99 ${(p.p99 / d.p99).toFixed(2)}x; throughput ratio ${(pt / dt).toFixed(2)}x`,
      );
      const cpu = proxied.cpuMicrosPerCall ?? 0;
      const upstreamCpu = straight.cpuMicrosPerCall ?? 0;
      const bareCpu = forwarded.cpuMicrosPerCall ?? 0;
      console.log(
        `${kind}  bare Node forwarder (the floor for any Node proxy): added p50 ${(b.p50 - d.p50).toFixed(3)} ms p99 ${(b.p99 - d.p99).toFixed(3)} ms, ${forwarded.perSecond.toFixed(0)}/s, CPU ${bareCpu.toFixed(0)} µs per call; proxy vs forwarder: throughput ${(pt / forwarded.perSecond).toFixed(2)}x, CPU ${(cpu / bareCpu).toFixed(2)}x`,
      );
      console.log(
        `${kind}  CPU per call: proxy ${cpu.toFixed(0)} µs (at most ${(1e6 / cpu).toFixed(0)} calls/s a core), scripted upstream ${upstreamCpu.toFixed(0)} µs; ratio ${(cpu / upstreamCpu).toFixed(2)}x`,
      );
    }
  } finally {
    closePostConnections();
    proxy.child.stdin!.end();
    bare.child.stdin!.end();
    upstream.child.stdin!.end();
  }
}

if (role === "upstream") {
  const { startScriptedModel } = await import("@oz0/harness/testing");
  const model = await startScriptedModel({ turns: () => ({ text: ANSWER, usage: { input: 50, output: 25 } }), isSideCall: () => false });
  process.stdout.write(`${JSON.stringify({ url: model.url })}\n`);
} else if (role === "proxy") {
  const { startLlmProxy } = await import("@oz0/llm-proxy");
  const pino = (await import("pino")).default;
  const { testCredentials } = await import("@oz0/serving/testing");
  const proxy = await startLlmProxy({
    dataDir: ":memory:",
    // The control API answers the orchestrator's credential: this process holds it, as the orchestrator does.
    auth: testCredentials.settingsFor("llm-proxy"),
    kek: Buffer.alloc(32, 1),
    providers: [{ name: "anthropic", baseUrl: options.upstream, keySecret: "ANTHROPIC_API_KEY", prices: { "*": { input: 3, output: 15 } } }],
    logger: pino({ level: "warn" }),
  });
  const { createClient } = await import("@connectrpc/connect");
  const { createGrpcTransport } = await import("@connectrpc/connect-node");
  const { LlmProxyService, SecretService } = await import("@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb");
  const transport = createGrpcTransport({ baseUrl: proxy.url, interceptors: [testCredentials.caller] });
  await createClient(SecretService, transport).setSecret({ name: "ANTHROPIC_API_KEY", value: "sk-bench-key-0123456789" });
  // A budget, so the reservation path is measured too.
  const minted = await createClient(LlmProxyService, transport).mintSessionToken({ job: "bench", agent: "bench", session: "bench", budgetUsd: 1_000_000 });
  process.stdout.write(`${JSON.stringify({ url: proxy.url, token: minted.token })}\n`);
} else {
  await bench();
}
