// What one unary call costs a service and its caller on the gRPC protocol
// and on the Connect protocol (binary, HTTP/2), through the serving stack
// every service runs (`@oz0/serving`'s serve(): the body check, tracing, the
// error and auth interceptors, the access table), issue 24. The services call
// each other many times a job (the orchestrator mints and revokes a session
// token at the LLM proxy, every producer publishes to the events service), a
// few calls a second at the rates control-plane-cost.ts runs, so each call
// runs cache-cold: the bench paces its calls as a job does (`--gap-ms`) and
// also runs them back to back (`--gap-ms 0`).
//
// The server is a child process answering `LlmProxyService.GetUsage` with an
// empty answer, for a caller that authenticates as the orchestrator (the
// access rule of Mint and Revoke too); the bench reads its CPU from /proc
// before and after each round, and its own (the client's) from
// process.cpuUsage(). Rounds alternate the two protocols on one server and
// one connection each.
//
//   node --import tsx bench/rpc-protocol-cost.ts [--calls 300] [--gap-ms 20] [--rounds 6] [--warmup 300]
import { spawn } from "node:child_process";
import { create } from "@bufbuild/protobuf";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { GetUsageResponseSchema, LlmProxyService } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { Authenticator, bearerInterceptor, credentialDigest, registration, serve } from "@oz0/serving";
import { benchOptions } from "./bench-options.js";
import { median, startReport } from "./bench-report.js";
import { readProcessCpu, ticksPerSecond } from "./process-cpu.js";

const options = benchOptions({
  calls: { type: "number", default: 300 },
  "gap-ms": { type: "number", default: 20 },
  rounds: { type: "number", default: 6 },
  warmup: { type: "number", default: 300 },
  role: { type: "string", internal: true },
});

const TOKEN = "bench-orchestrator-token";

if (options.role === "server") {
  const server = await serve({
    name: "rpc-protocol-cost",
    port: 0,
    auth: new Authenticator({ peers: { orchestrator: credentialDigest(TOKEN) } }),
    services: [registration(LlmProxyService, { getUsage: () => create(GetUsageResponseSchema) })],
    logger: undefined,
  });
  process.stdout.write(`${server.url}\n`);
} else {
  await main();
}

async function main(): Promise<void> {
  const report = startReport("rpc-protocol-cost");
  const child = spawn(process.execPath, ["--import", "tsx", import.meta.filename, "--role", "server"], {
    stdio: ["ignore", "pipe", "ignore"],
  });
  try {
    const url = await new Promise<string>((resolve, reject) => {
      child.once("exit", (code) => reject(new Error(`the server ended (exit ${code}) before it listened`)));
      child.stdout.once("data", (data: Buffer) => resolve(data.toString().trim()));
    });
    const interceptors = [bearerInterceptor(TOKEN)];
    const clients: Record<"grpc" | "connect", Client<typeof LlmProxyService>> = {
      grpc: createClient(LlmProxyService, createGrpcTransport({ baseUrl: url, interceptors })),
      connect: createClient(
        LlmProxyService,
        createConnectTransport({ baseUrl: url, httpVersion: "2", useBinaryFormat: true, interceptors }),
      ),
    };
    const protocols = ["grpc", "connect"] as const;
    const ticks = ticksPerSecond();
    console.log(
      `unary calls of LlmProxyService.GetUsage (empty answer) through @oz0/serving, authenticated as the orchestrator; ` +
        `${options.calls} calls a round, ${options["gap-ms"]} ms between calls, ${options.rounds} rounds a protocol after ${options.warmup} warm-up calls each; ` +
        `CPU clock ${ticks} ticks/s`,
    );
    for (const protocol of protocols) for (let i = 0; i < options.warmup; i++) await clients[protocol].getUsage({});
    const perCall: Record<(typeof protocols)[number], { server: number[]; client: number[] }> = {
      grpc: { server: [], client: [] },
      connect: { server: [], client: [] },
    };
    for (let round = 0; round < options.rounds; round++) {
      // Alternating which goes first, so a drift in the machine's load weighs on both alike.
      for (const protocol of round % 2 === 0 ? protocols : [...protocols].reverse()) {
        const client = clients[protocol];
        const serverBefore = readProcessCpu(child.pid!, ticks).ownMs;
        const clientBefore = process.cpuUsage();
        for (let i = 0; i < options.calls; i++) {
          await client.getUsage({});
          if (options["gap-ms"] > 0) await new Promise((resolve) => setTimeout(resolve, options["gap-ms"]));
        }
        const server = ((readProcessCpu(child.pid!, ticks).ownMs - serverBefore) * 1000) / options.calls;
        const used = process.cpuUsage(clientBefore);
        const clientUs = (used.user + used.system) / options.calls;
        perCall[protocol].server.push(server);
        perCall[protocol].client.push(clientUs);
        console.log(
          `round ${round + 1} ${protocol.padEnd(7)}: server ${server.toFixed(0)} µs a call, client ${clientUs.toFixed(0)} µs a call`,
        );
      }
    }
    console.log("");
    for (const protocol of protocols)
      console.log(
        `${protocol.padEnd(7)}: server ${median(perCall[protocol].server).toFixed(0)} µs a call, client ${median(perCall[protocol].client).toFixed(0)} µs a call (medians of ${options.rounds} rounds)`,
      );
    report.ratio(
      "server CPU a call, Connect protocol / gRPC",
      perCall.connect.server.map((x, i) => x / perCall.grpc.server[i]!),
    );
    report.ratio(
      "client CPU a call, Connect protocol / gRPC",
      perCall.connect.client.map((x, i) => x / perCall.grpc.client[i]!),
    );
  } finally {
    child.kill();
    report.end();
  }
}
