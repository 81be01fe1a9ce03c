import assert from "node:assert/strict";
import http from "node:http";
import { describe, it } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import type { CallRecord } from "../src/proxy-store.js";
import { SqliteProxyStore } from "../src/sqlite-proxy-store.js";
import { startFixture, type SessionEndpoint } from "./proxy-fixture.js";

const ask = { model: "claude-sonnet-5", max_tokens: 100, messages: [{ role: "user" as const, content: "x" }] };

void describe("retries", () => {
  void it("retries a 529 and succeeds: two attempts metered, one logical call charged once", async () => {
    const fx = await startFixture({
      turns: [{ fail: { status: 529 } }, { text: "after the overload", usage: { input: 10, output: 5 } }],
    });
    try {
      const e = await fx.session();
      const client = new Anthropic({
        baseURL: e.anthropicBaseUrl,
        apiKey: e.token,
        defaultHeaders: e.headers,
        maxRetries: 0,
      });
      const message = await client.messages.create(ask);
      assert.equal((message.content[0] as { text: string }).text, "after the overload");
      const attempts = await fx.proxy.store.listAttempts(e.job);
      assert.deepEqual(
        attempts.map((a) => [a.attempt, a.status, a.outcome]),
        [
          [1, 529, "http_error"],
          [2, 200, "ok"],
        ],
      );
      assert.equal(new Set(attempts.map((a) => a.operationId)).size, 1, "one operation id across the retries");
      const calls = await fx.proxy.store.listCalls(e.job);
      assert.equal(calls.length, 1);
      assert.equal(calls[0]!.attempts, 2);
      assert.equal(calls[0]!.status, 200);
      assert.equal(calls[0]!.costUsd, attempts[1]!.costUsd);
      assert.equal(fx.model.requests.length, 2);
    } finally {
      await fx.close();
    }
  });

  void it("gives up after five attempts and returns the fifth error, honouring retry-after; the client SDK does not retry on top", async () => {
    const fx = await startFixture({
      turns: [503, 429, 500, 502, 504].map((status, i) => ({
        fail: {
          status,
          headers: { "retry-after": "0" },
          body: { type: "error", error: { type: "api_error", message: `failure ${i + 1}` } },
        },
      })),
    });
    try {
      const e = await fx.session();
      // The SDK's own retries left on: x-should-retry: false keeps the total at five.
      const client = new Anthropic({
        baseURL: e.anthropicBaseUrl,
        apiKey: e.token,
        defaultHeaders: e.headers,
        maxRetries: 2,
      });
      await assert.rejects(
        client.messages.create(ask),
        (error: unknown) =>
          error instanceof Anthropic.APIError && error.status === 504 && /failure 5/.test(error.message),
      );
      const attempts = await fx.proxy.store.listAttempts(e.job);
      assert.deepEqual(
        attempts.map((a) => a.status),
        [503, 429, 500, 502, 504],
      );
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.attempts, 5);
      assert.equal(call!.status, 504);
      assert.equal(call!.costUsd, 0);
      assert.equal(fx.model.requests.length, 5, "never a sixth attempt");
    } finally {
      await fx.close();
    }
  });

  void it("does not retry a 400", async () => {
    const fx = await startFixture({ turns: [{ fail: { status: 400 } }, { text: "never" }] });
    try {
      const e = await fx.session();
      const r = await fetch(`${e.anthropicBaseUrl}/v1/messages`, {
        method: "POST",
        headers: { "x-api-key": e.token, ...e.headers, "content-type": "application/json" },
        body: JSON.stringify(ask),
      });
      assert.equal(r.status, 400);
      assert.equal(fx.model.requests.length, 1);
    } finally {
      await fx.close();
    }
  });

  void it("retries a streaming call that failed before its first byte reached the client", async () => {
    const fx = await startFixture({
      turns: [{ fail: { status: 502 } }, { text: "second time lucky", usage: { input: 3, output: 4 } }],
    });
    try {
      const e = await fx.session();
      const client = new Anthropic({
        baseURL: e.anthropicBaseUrl,
        apiKey: e.token,
        defaultHeaders: e.headers,
        maxRetries: 0,
      });
      const final = await client.messages.stream(ask).finalMessage();
      assert.equal((final.content[0] as { text: string }).text, "second time lucky");
      assert.equal((await fx.proxy.store.listCalls(e.job))[0]!.attempts, 2);
    } finally {
      await fx.close();
    }
  });
});

void describe("connection failures", () => {
  void it("retries connection errors before the first byte, five attempts, then answers 502", async () => {
    const fx = await startFixture({
      turns: [],
      // Port 9 (discard) on loopback refuses connections.
      config: {
        providers: [
          {
            name: "anthropic",
            baseUrl: "http://127.0.0.1:9",
            keySecret: "ANTHROPIC_API_KEY",
            prices: { "*": { input: 1, output: 1 } },
          },
        ],
      },
    });
    try {
      const e = await fx.session();
      const r = await fetch(`${e.anthropicBaseUrl}/v1/messages`, {
        method: "POST",
        headers: { "x-api-key": e.token, ...e.headers, "content-type": "application/json" },
        body: JSON.stringify(ask),
      });
      assert.equal(r.status, 502);
      assert.match(await r.text(), /could not be reached after 5 attempt/);
      assert.deepEqual(
        (await fx.proxy.store.listAttempts(e.job)).map((a) => a.outcome),
        Array(5).fill("connection_error"),
      );
      assert.equal((await fx.proxy.store.listCalls(e.job))[0]!.attempts, 5);
    } finally {
      await fx.close();
    }
  });
});

void describe("a provider that does not answer", () => {
  void it("gives an attempt up after attemptTimeoutMs, retries, then answers 502 with every attempt metered", async () => {
    const fx = await startFixture({
      turns: [
        { text: "too late", delayMs: 5_000 },
        { text: "too late again", delayMs: 5_000 },
      ],
      config: { retry: { baseDelayMs: 1, maxDelayMs: 5, maxRetryAfterMs: 50, maxAttempts: 2, attemptTimeoutMs: 200 } },
    });
    try {
      const e = await fx.session();
      const r = await fetch(`${e.anthropicBaseUrl}/v1/messages`, {
        method: "POST",
        headers: { "x-api-key": e.token, ...e.headers, "content-type": "application/json" },
        body: JSON.stringify(ask),
      });
      assert.equal(r.status, 502);
      assert.match(await r.text(), /could not be reached after 2 attempt\(s\) \(upstream_timeout\)/);
      const attempts = await fx.proxy.store.listAttempts(e.job);
      assert.deepEqual(
        attempts.map((a) => a.outcome),
        ["connection_error", "connection_error"],
      );
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.attempts, 2);
      assert.equal(call!.costUsd, 0);
    } finally {
      await fx.close();
    }
  });
});

void describe("streams cut short", () => {
  void it("records partial usage of an Anthropic stream cut mid-way and never replays it", async () => {
    const text = "This answer is long enough to be cut in the middle of its deltas, which the client sees as an error.";
    const fx = await startFixture({
      turns: [{ text, cutMidStream: true, usage: { input: 77, output: 40 } }, { text: "a replay would get this" }],
    });
    try {
      const e = await fx.session();
      const client = new Anthropic({
        baseURL: e.anthropicBaseUrl,
        apiKey: e.token,
        defaultHeaders: e.headers,
        maxRetries: 0,
      });
      let received = "";
      await assert.rejects(async () => {
        const stream = await client.messages.create({ ...ask, stream: true });
        for await (const event of stream) {
          if (event.type === "content_block_delta" && event.delta.type === "text_delta") received += event.delta.text;
        }
      });
      assert.ok(received.length > 0 && received.length < text.length, "the client got part of the answer");
      assert.equal(fx.model.requests.length, 1, "no replay after bytes reached the client");
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.outcome, "stream_cut");
      assert.equal(call!.usage.input, 77, "input from message_start");
      assert.ok(call!.usage.output >= Math.ceil(received.length / 4), "output estimated from what was streamed");
      assert.equal(call!.estimated, true);
      assert.ok(call!.costUsd > 0);
    } finally {
      await fx.close();
    }
  });

  void it("records an estimate for an OpenAI stream cut mid-way", async () => {
    const text = "An OpenAI answer long enough to be cut in the middle of its chunks for this test to see.";
    const fx = await startFixture({ turns: [{ text, cutMidStream: true }] });
    try {
      const e = await fx.session();
      const client = new OpenAI({
        baseURL: e.openaiBaseUrl,
        apiKey: e.token,
        defaultHeaders: e.headers,
        maxRetries: 0,
      });
      await assert.rejects(async () => {
        const stream = await client.chat.completions.create({
          model: "gpt-4o",
          stream: true,
          messages: [{ role: "user", content: "x" }],
        });
        for await (const chunk of stream) void chunk;
      });
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.outcome, "stream_cut");
      assert.equal(call!.estimated, true);
      assert.ok(call!.usage.input > 0 && call!.usage.output > 0);
    } finally {
      await fx.close();
    }
  });
});

void describe("clients that leave", () => {
  /** Waits until the proxy has recorded the job's one call (it finishes after the client left). */
  async function oneCall(fx: Awaited<ReturnType<typeof startFixture>>, job: string) {
    for (let i = 0; i < 200; i++) {
      const calls = await fx.proxy.store.listCalls(job);
      if (calls.length > 0) return calls;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.fail(`the proxy recorded no call for job ${job}`);
  }

  /** Asks for `body` and hangs up once the model has the request, while it still "thinks". */
  async function askAndLeave(
    fx: Awaited<ReturnType<typeof startFixture>>,
    e: SessionEndpoint,
    body: object,
  ): Promise<void> {
    const leave = new AbortController();
    const asked = fetch(`${e.anthropicBaseUrl}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": e.token, ...e.headers, "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: leave.signal,
    });
    while (fx.model.requests.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    leave.abort();
    await assert.rejects(asked, { name: "AbortError" });
  }

  void it("meters a whole answer the provider made after its client left, as the provider bills it", async () => {
    const fx = await startFixture({
      turns: [{ text: "nobody reads this", delayMs: 1_000, usage: { input: 40, output: 9 } }],
    });
    try {
      const e = await fx.session();
      await askAndLeave(fx, e, ask);
      const [call] = await oneCall(fx, e.job);
      assert.equal(call!.outcome, "client_aborted");
      assert.deepEqual([call!.usage.input, call!.usage.output], [40, 9], "the usage the provider reported");
      assert.deepEqual(
        [fx.model.tokensServed.input, fx.model.tokensServed.output],
        [40, 9],
        "and what the model served",
      );
      assert.ok(call!.costUsd > 0);
    } finally {
      await fx.close();
    }
  });

  void it("stops a stream whose client left before the answer began: nothing served, nothing metered", async () => {
    const fx = await startFixture({
      turns: [{ text: "never streamed", delayMs: 1_000, usage: { input: 40, output: 9 } }],
    });
    try {
      const e = await fx.session();
      await askAndLeave(fx, e, { ...ask, stream: true });
      const [call] = await oneCall(fx, e.job);
      assert.equal(call!.outcome, "client_aborted");
      assert.equal(call!.usage.input + call!.usage.output, 0);
      // The model saw the proxy hang up while it "thought" and served nothing.
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      assert.equal(fx.model.tokensServed.total, 0);
    } finally {
      await fx.close();
    }
  });
});

/** A store whose call records wait until `release()`: what a client has by then, it had before its call was on record. */
class RecordGate extends SqliteProxyStore {
  readonly reached: Promise<void>;
  readonly release: () => void;
  readonly #reached: () => void;
  readonly #released: Promise<void>;

  constructor() {
    super({ dataDir: ":memory:" });
    let reached!: () => void;
    let release!: () => void;
    this.reached = new Promise((resolve) => (reached = resolve));
    this.#released = new Promise((resolve) => (release = resolve));
    this.#reached = reached;
    this.release = release;
  }

  override async recordCall(call: CallRecord): Promise<void> {
    this.#reached();
    await this.#released;
    return super.recordCall(call);
  }
}

void describe("a stream's end", () => {
  void it("reaches the client only once its call is on record", async () => {
    const store = new RecordGate();
    const fx = await startFixture({ turns: [{ text: "A streamed answer of a few deltas." }], config: { store } });
    try {
      const e = await fx.session();
      let received = "";
      const ended = new Promise<number>((resolve, reject) => {
        const req = http.request(`${e.anthropicBaseUrl}/v1/messages`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": e.token, ...e.headers },
        });
        req.on("response", (res) => {
          res.setEncoding("utf8");
          res.on("data", (text: string) => (received += text));
          res.on("end", () => resolve(res.statusCode ?? 0));
          res.on("error", reject);
        });
        req.on("error", reject);
        req.end(JSON.stringify({ ...ask, stream: true }));
      });
      await store.reached;
      // Whatever the proxy wrote before recording the call is on loopback already: a few turns
      // of this process's event loop read it.
      for (let turn = 0; turn < 5; turn += 1) await new Promise((resolve) => setImmediate(resolve));
      assert.ok(!received.includes("message_stop"), "the stream's last event waits for the call's record");
      store.release();
      assert.equal(await ended, 200);
      assert.ok(received.includes("event: message_stop"));
      const [call] = await store.listCalls(e.job);
      assert.equal(call!.outcome, "ok");
    } finally {
      await fx.close();
      await store.close();
    }
  });
});
