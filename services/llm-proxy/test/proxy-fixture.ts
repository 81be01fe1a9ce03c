// A real proxy on loopback in front of a scripted model, with its logs
// captured, a planted provider key and gRPC clients for its control API.
import { Writable } from "node:stream";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { startScriptedModel, type Script, type ScriptedModel } from "@oz0/harness/testing";
import { LlmProxyService, SecretService } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import pino from "pino";
import { startLlmProxy, type LlmProxy, type LlmProxyConfig } from "../src/index.js";
import { memoryUsageSink } from "../src/usage-sink.js";
import type { ModelPrice } from "../src/provider-config.js";
import type { CallRecord } from "../src/proxy-store.js";
import { testCredentials } from "@oz0/serving/testing";

/** Looks like a real Anthropic key so fragment scrubbing is exercised on a realistic shape. */
export const PLANTED_KEY = "sk-ant-api03-PLANTEDq9Zx7Lw2Vb8Nc4Md6Kf1Hg3Js5Tr0Yu-xYz0123456789AbCdEf";

export const PRICE = { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 };

export interface ProxyFixture {
  model: ScriptedModel;
  proxy: LlmProxy;
  logs: string[];
  events: CallRecord[];
  secrets: Client<typeof SecretService>;
  control: Client<typeof LlmProxyService>;
  /** Mint a token and return what a harness gets in LlmEndpoint. */
  session(options?: {
    job?: string;
    agent?: string;
    session?: string;
    budgetUsd?: number;
    budgetSession?: string;
    /** The most model calls the session may make (its agent's limits.max_steps); default none. */
    maxModelCalls?: number;
    /** The trace context the token is minted in, as the orchestrator mints it inside the session's span. */
    traceparent?: string;
  }): Promise<SessionEndpoint>;
  close(): Promise<void>;
}

export interface SessionEndpoint {
  job: string;
  agent: string;
  session: string;
  token: string;
  headers: Record<string, string>;
  anthropicBaseUrl: string;
  openaiBaseUrl: string;
}

let sessionCounter = 0;

export async function startFixture(options: {
  turns: Script;
  config?: Partial<LlmProxyConfig>;
  /** Both providers' price table; default PRICE for every model. */
  prices?: Record<string, ModelPrice>;
}): Promise<ProxyFixture> {
  const prices = options.prices ?? { "*": PRICE };
  const model = await startScriptedModel({ turns: options.turns });
  const logs: string[] = [];
  const logger = pino(
    { level: "debug", base: { service: "llm-proxy" } },
    new Writable({
      write(chunk: Buffer, _encoding, callback) {
        logs.push(chunk.toString("utf8"));
        callback();
      },
    }),
  );
  const sink = memoryUsageSink(true);
  const proxy = await startLlmProxy({
    auth: testCredentials.settingsFor("llm-proxy"),
    providers: [
      { name: "anthropic", baseUrl: model.url, keySecret: "ANTHROPIC_API_KEY", prices },
      { name: "openai", baseUrl: model.url, keySecret: "OPENAI_API_KEY", auth: "bearer", prices },
    ],
    kek: Buffer.alloc(32, 7),
    usageSink: sink,
    logger,
    retry: { baseDelayMs: 1, maxDelayMs: 5, maxRetryAfterMs: 50 },
    ...options.config,
  });
  const transport = createGrpcTransport({ baseUrl: proxy.url, interceptors: [testCredentials.caller] });
  const secrets = createClient(SecretService, transport);
  const control = createClient(LlmProxyService, transport);
  await secrets.setSecret({ name: "ANTHROPIC_API_KEY", value: PLANTED_KEY });
  await secrets.setSecret({ name: "OPENAI_API_KEY", value: PLANTED_KEY });
  return {
    model,
    proxy,
    logs,
    events: sink.events,
    secrets,
    control,
    async session(s = {}) {
      sessionCounter += 1;
      const job = s.job ?? `job-${sessionCounter}`;
      const agent = s.agent ?? "coder";
      const session = s.session ?? `session-${sessionCounter}`;
      const minted = await control.mintSessionToken(
        {
          job,
          agent,
          session,
          budgetUsd: s.budgetUsd ?? 0,
          budgetSession: s.budgetSession ?? "",
          maxModelCalls: s.maxModelCalls ?? 0,
        },
        s.traceparent !== undefined ? { headers: { traceparent: s.traceparent } } : {},
      );
      return {
        job,
        agent,
        session,
        token: minted.token,
        headers: { ...minted.headers },
        anthropicBaseUrl: minted.anthropicBaseUrl,
        openaiBaseUrl: minted.openaiBaseUrl,
      };
    },
    async close() {
      // Clients keep idle connections open; nothing is in flight when a test closes.
      await proxy.close({ graceMs: 50 });
      await model.close();
    },
  };
}

/** A raw POST to the proxy, for the tests that check status codes and bodies byte for byte. */
export async function post(
  url: string,
  body: unknown,
  headers: Record<string, string>,
): Promise<{ status: number; text: string; headers: Headers }> {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  return { status: response.status, text: await response.text(), headers: response.headers };
}
