import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { toJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  GetUsageResponseSchema,
  ListSecretsResponseSchema,
  SecretService,
} from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { PLANTED_KEY, startFixture } from "./proxy-fixture.js";
import { scrubSecret, stackTokenFor } from "@oz0/serving";
import { testCredentials } from "@oz0/serving/testing";

/** Every run of 8 characters of the key: a fragment this long in any output is a leak. */
function leaks(text: string): string[] {
  const found: string[] = [];
  for (let i = 0; i + 8 <= PLANTED_KEY.length; i += 1) {
    const window = PLANTED_KEY.slice(i, i + 8);
    if (text.includes(window)) found.push(window);
  }
  return found;
}

void describe("key custody", () => {
  void it("a planted key is found in no output: logs, responses, errors, metering rows, events, RPC answers, the data file", async (t) => {
    const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-keys-"));
    t.after(() => rmSync(dataDir, { recursive: true, force: true }));
    const echo = `invalid x-api-key ${PLANTED_KEY} (starts ${PLANTED_KEY.slice(0, 14)}…, ends …${PLANTED_KEY.slice(-10)})`;
    const fx = await startFixture({
      config: { dataDir },
      turns: [
        // A provider echoing the key in an error body, retried, then final.
        { fail: { status: 529, body: { type: "error", error: { type: "overloaded_error", message: echo } } } },
        { fail: { status: 401, body: { type: "error", error: { type: "authentication_error", message: echo } } } },
        // A model repeating the key in its answer, streamed and not.
        { text: `the key is ${PLANTED_KEY}` },
        { text: `streamed: ${PLANTED_KEY}` },
        {
          fail: {
            status: 400,
            body: {
              error: {
                message: `Incorrect API key provided: ${PLANTED_KEY.slice(0, 12)}********${PLANTED_KEY.slice(-12)}`,
                type: "invalid_request_error",
              },
            },
          },
        },
      ],
    });
    const outputs: string[] = [];
    try {
      const e = await fx.session();
      const anthropic = new Anthropic({
        baseURL: e.anthropicBaseUrl,
        apiKey: e.token,
        defaultHeaders: e.headers,
        maxRetries: 0,
      });
      const openai = new OpenAI({
        baseURL: e.openaiBaseUrl,
        apiKey: e.token,
        defaultHeaders: e.headers,
        maxRetries: 0,
      });
      const ask = { model: "claude-sonnet-5", max_tokens: 50, messages: [{ role: "user" as const, content: "x" }] };

      await assert.rejects(anthropic.messages.create(ask), (error: unknown) => {
        outputs.push(String(error), JSON.stringify(error), (error as Error).message);
        return error instanceof Anthropic.AuthenticationError;
      });
      const plain = await anthropic.messages.create(ask);
      outputs.push(JSON.stringify(plain));
      let streamed = "";
      for await (const event of await anthropic.messages.create({ ...ask, stream: true }))
        streamed += JSON.stringify(event);
      outputs.push(streamed);
      await assert.rejects(
        openai.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] }),
        (error: unknown) => {
          outputs.push(String(error), JSON.stringify(error));
          return error instanceof OpenAI.BadRequestError;
        },
      );
      const raw = await fetch(`${e.anthropicBaseUrl}/v1/messages`, {
        method: "POST",
        headers: { "x-api-key": e.token, ...e.headers, "content-type": "application/json" },
        body: JSON.stringify(ask),
      });
      outputs.push(await raw.text(), JSON.stringify([...raw.headers]));

      // The key did reach the provider: custody works, it is just never shown.
      assert.ok(
        fx.model.requests.every(
          (r) => r.headers["x-api-key"] === PLANTED_KEY || r.headers.authorization === `Bearer ${PLANTED_KEY}`,
        ),
      );

      outputs.push(
        JSON.stringify(await fx.proxy.store.listAttempts(e.job)),
        JSON.stringify(await fx.proxy.store.listCalls(e.job)),
      );
      outputs.push(JSON.stringify(fx.events));
      outputs.push(toJsonString(ListSecretsResponseSchema, await fx.secrets.listSecrets({})));
      outputs.push(toJsonString(GetUsageResponseSchema, await fx.control.getUsage({ job: e.job })));
      assert.ok(plain.content.length > 0 && streamed.length > 0);
    } finally {
      await fx.close();
    }
    outputs.push(...fx.logs);
    assert.ok(fx.logs.length > 0, "logs were captured");
    // Every file, the calls in flight's slot files (in-flight/) too.
    for (const entry of readdirSync(dataDir, { recursive: true, withFileTypes: true }))
      if (entry.isFile()) outputs.push(readFileSync(path.join(entry.parentPath, entry.name)).toString("latin1"));
    const all = outputs.join("\n");
    assert.deepEqual(leaks(all), []);
    assert.match(all, /\[redacted\]/, "the echoes were there and were scrubbed");
  });

  void it("has no way to read a secret back: set, replace, list names, delete", async () => {
    const fx = await startFixture({ turns: [] });
    try {
      assert.deepEqual(
        SecretService.methods.map((m) => m.name),
        ["SetSecret", "DeleteSecret", "ListSecrets"],
      );
      const replaced = await fx.secrets.setSecret({ name: "ANTHROPIC_API_KEY", value: "sk-new-value-123456" });
      assert.equal(replaced.replaced, true);
      const created = await fx.secrets.setSecret({ name: "OTHER_KEY", value: "v" });
      assert.equal(created.replaced, false);
      const list = await fx.secrets.listSecrets({});
      assert.deepEqual(
        list.secrets.map((s) => s.name),
        ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OTHER_KEY"],
      );
      await fx.secrets.deleteSecret({ name: "OTHER_KEY" });
      await assert.rejects(
        fx.secrets.deleteSecret({ name: "OTHER_KEY" }),
        (e: unknown) => e instanceof ConnectError && e.code === Code.NotFound,
      );
      await assert.rejects(
        fx.secrets.setSecret({ name: "lower case", value: "v" }),
        (e: unknown) => e instanceof ConnectError && e.code === Code.InvalidArgument,
      );
    } finally {
      await fx.close();
    }
  });

  void it("answers the control API for the orchestrator's credential only, leaving health open", async () => {
    const { startLlmProxy } = await import("../src/index.js");
    const { Health } = await import("@oz0/proto/grpc/health/v1/health_pb");
    const proxy = await startLlmProxy({
      auth: testCredentials.settingsFor("llm-proxy"),
      providers: [],
      logger: (await import("pino")).default({ level: "silent" }),
    });
    try {
      const transport = createGrpcTransport({ baseUrl: proxy.url });
      const health = await createClient(Health, transport).check({ service: "readiness" });
      assert.equal(health.status, 1);
      const secrets = createClient(SecretService, transport);
      await assert.rejects(
        secrets.setSecret({ name: "X_KEY", value: "v" }),
        (e: unknown) =>
          e instanceof ConnectError && e.code === Code.Unauthenticated && /needs a credential/.test(e.rawMessage),
      );
      // A person, even the owner with every role, is not the orchestrator.
      await assert.rejects(
        secrets.setSecret(
          { name: "X_KEY", value: "v" },
          { headers: { authorization: `Bearer ${testCredentials.owner}` } },
        ),
        (e: unknown) => e instanceof ConnectError && e.code === Code.Unauthenticated,
      );
      // Nor is the sandbox, nor the orchestrator's credential for sandboxes, which a sandbox's memory holds.
      for (const token of [
        testCredentials.services.sandbox,
        stackTokenFor(testCredentials.services, "orchestrator", "sandbox"),
      ]) {
        await assert.rejects(
          secrets.setSecret({ name: "X_KEY", value: "v" }, { headers: { authorization: `Bearer ${token}` } }),
          (e: unknown) => e instanceof ConnectError && e.code === Code.Unauthenticated,
        );
      }
      const ok = await secrets.setSecret(
        { name: "X_KEY", value: "v" },
        { headers: { authorization: `Bearer ${testCredentials.services.orchestrator}` } },
      );
      assert.equal(ok.replaced, false);
    } finally {
      await proxy.close();
    }
  });

  void it("scrubs keys and their fragments from text", () => {
    assert.equal(scrubSecret("key: abcdefghijklmnop!", "abcdefghijklmnop"), "key: [redacted]!");
    assert.equal(scrubSecret("starts abcdefghij…", "abcdefghijklmnop"), "starts [redacted]…");
    assert.equal(scrubSecret("unrelated text", "abcdefghijklmnop"), "unrelated text");
  });

  void it("refuses a proxy started with a different KEK to decrypt, with a message saying what to do", async (t) => {
    const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-kek-"));
    t.after(() => rmSync(dataDir, { recursive: true, force: true }));
    const first = await startFixture({ turns: [], config: { dataDir } });
    await first.close();
    const { startLlmProxy } = await import("../src/index.js");
    const proxy = await startLlmProxy({
      auth: testCredentials.settingsFor("llm-proxy"),
      dataDir,
      kek: Buffer.alloc(32, 9),
      providers: [{ name: "anthropic", baseUrl: "http://127.0.0.1:9", keySecret: "ANTHROPIC_API_KEY" }],
      logger: (await import("pino")).default({ level: "silent" }),
    });
    try {
      const control = createClient(
        (await import("@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb")).LlmProxyService,
        createGrpcTransport({ baseUrl: proxy.url, interceptors: [testCredentials.caller] }),
      );
      const minted = await control.mintSessionToken({ job: "j", agent: "a", session: "s" });
      const r = await fetch(`${proxy.url}/anthropic/v1/messages`, {
        method: "POST",
        headers: { "x-api-key": minted.token, "Oz0-Job": "j", "Oz0-Agent": "a" },
        body: "{}",
      });
      assert.equal(r.status, 500);
      assert.match(await r.text(), /cannot be decrypted with the current KEK/);
    } finally {
      await proxy.close();
    }
  });
});
