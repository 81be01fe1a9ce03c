// What reaches the provider of a client's request headers: the allowlist of
// the route's API and nothing else. A session token in a header the proxy
// does not know, a random header, cookies and the SDKs' telemetry stay at the
// proxy; what the API needs (version, betas, who is calling) arrives as sent.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import http from "node:http";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { PLANTED_KEY, post, startFixture, type ProxyFixture, type SessionEndpoint } from "./proxy-fixture.js";

/** Every header name a provider may see: the allowlist, plus what the proxy and HTTP itself set. */
const ANTHROPIC_UPSTREAM = new Set([
  "anthropic-version",
  "anthropic-beta",
  "accept",
  "user-agent",
  "x-app",
  "x-api-key",
  "content-type",
  "accept-encoding",
  "content-length",
  "host",
  "connection",
]);
const OPENAI_UPSTREAM = new Set([
  "accept",
  "user-agent",
  "authorization",
  "content-type",
  "accept-encoding",
  "content-length",
  "host",
  "connection",
]);

/** Headers no provider may see, each carrying the session token or something else it must not get. */
function unwanted(token: string, randomName: string): Record<string, string> {
  return {
    "x-foo": token,
    [randomName]: "a header the proxy has never heard of",
    "x-session-copy": `Bearer ${token}`,
    cookie: `session=${token}`,
    "proxy-authorization": `Bearer ${token}`,
    "x-stainless-os": "Linux",
    "x-claude-code-session-id": "09e0d145-5fd2-4102-894f-828dd511d958",
    "anthropic-dangerous-direct-browser-access": "true",
    "openai-organization": "org-chosen-by-the-session",
    "openai-project": "proj_chosen-by-the-session",
    "x-forwarded-for": "10.0.0.1",
    traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
  };
}

void describe("request headers forwarded to a provider", () => {
  let fx: ProxyFixture;
  let e: SessionEndpoint;
  const randomName = `x-${randomBytes(6).toString("hex")}`;

  before(async () => {
    fx = await startFixture({ turns: () => ({ text: "ok" }) });
    e = await fx.session();
  });
  after(async () => {
    await fx.close();
  });

  /** The upstream requests of the calls made in `run`. */
  async function upstreamOf(run: () => Promise<void>): Promise<Record<string, string>[]> {
    const before = fx.model.requests.length;
    await run();
    return fx.model.requests.slice(before).map((r) => r.headers);
  }

  void it("Anthropic routes (messages, streamed and whole, and count_tokens): only the allowlist, with what Claude Code sends intact", async () => {
    const needed = {
      "anthropic-version": "2023-06-01",
      "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27",
      accept: "application/json",
      "user-agent": "claude-cli/2.1.332 (external, sdk-ts, agent-sdk/0.3.332)",
      "x-app": "cli",
    };
    const seen = await upstreamOf(async () => {
      for (const path of ["/v1/messages", "/v1/messages/count_tokens"]) {
        for (const stream of path.endsWith("messages") ? [false, true] : [false]) {
          const r = await post(
            `${e.anthropicBaseUrl}${path}`,
            { model: "claude-sonnet-5", max_tokens: 20, stream, messages: [{ role: "user", content: "hi" }] },
            { ...unwanted(e.token, randomName), ...needed, ...e.headers, "x-api-key": e.token },
          );
          assert.equal(r.status, 200, r.text);
        }
      }
    });
    assert.equal(seen.length, 3);
    for (const headers of seen) {
      assert.deepEqual(
        Object.keys(headers).filter((name) => !ANTHROPIC_UPSTREAM.has(name)),
        [],
        "nothing outside the allowlist",
      );
      assert.ok(!JSON.stringify(headers).includes(e.token), "the session token reached the provider");
      for (const [name, value] of Object.entries(needed)) assert.equal(headers[name], value, name);
      assert.equal(headers["x-api-key"], PLANTED_KEY, "the custodied key, set by the proxy");
      assert.equal(headers["content-type"], "application/json");
    }
  });

  void it("OpenAI chat completions: only the allowlist; the organization and project are not a session's to choose", async () => {
    const seen = await upstreamOf(async () => {
      for (const stream of [false, true]) {
        const r = await post(
          `${e.openaiBaseUrl}/chat/completions`,
          { model: "gpt-4o", stream, messages: [{ role: "user", content: "hi" }] },
          {
            ...unwanted(e.token, randomName),
            accept: "application/json",
            "user-agent": "OpenAI/JS 6.49.0",
            ...e.headers,
            authorization: `Bearer ${e.token}`,
          },
        );
        assert.equal(r.status, 200, r.text);
      }
    });
    assert.equal(seen.length, 2);
    for (const headers of seen) {
      assert.deepEqual(
        Object.keys(headers).filter((name) => !OPENAI_UPSTREAM.has(name)),
        [],
        "nothing outside the allowlist",
      );
      assert.ok(!JSON.stringify(headers).includes(e.token), "the session token reached the provider");
      assert.equal(headers.accept, "application/json");
      assert.equal(headers["user-agent"], "OpenAI/JS 6.49.0");
      assert.equal(headers.authorization, `Bearer ${PLANTED_KEY}`);
    }
  });

  void it("drops an allowlisted header that carries the session token", async () => {
    const [headers] = await upstreamOf(async () => {
      const r = await post(
        `${e.anthropicBaseUrl}/v1/messages`,
        { model: "claude-sonnet-5", max_tokens: 20, messages: [{ role: "user", content: "hi" }] },
        {
          ...e.headers,
          authorization: `Bearer ${e.token}`,
          "user-agent": `harness/1.0 (${e.token})`,
          "anthropic-beta": `beta,${e.token}`,
          "x-app": "cli",
        },
      );
      assert.equal(r.status, 200, r.text);
    });
    assert.ok(headers);
    assert.equal(headers["user-agent"], undefined);
    assert.equal(headers["anthropic-beta"], undefined);
    assert.equal(headers["x-app"], "cli");
    assert.equal(headers["anthropic-version"], "2023-06-01", "the proxy names a version when the client names none");
    assert.ok(!JSON.stringify(headers).includes(e.token));
  });
});

void describe("a provider's answer to a client on HTTP/2", () => {
  // A provider behind an HTTP/1.1 hop may answer with hop-by-hop headers HTTP/2 forbids; Node's HTTP/2 answer
  // throws on them, which left the client without its answer and the call without its usage event.
  let fixture: ProxyFixture;
  let upstream: http.Server;
  before(async () => {
    upstream = http.createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        res.writeHead(200, { "content-type": "application/json", te: "gzip", "http2-settings": "AAMAAABk" });
        res.end(
          JSON.stringify({
            id: "msg_h2",
            type: "message",
            role: "assistant",
            model: "claude-sonnet-5",
            content: [{ type: "text", text: "over h2" }],
            stop_reason: "end_turn",
            usage: { input_tokens: 3, output_tokens: 2 },
          }),
        );
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const { port } = upstream.address() as AddressInfo;
    fixture = await startFixture({
      turns: [],
      config: {
        providers: [
          {
            name: "anthropic",
            baseUrl: `http://127.0.0.1:${port}`,
            keySecret: "ANTHROPIC_API_KEY",
            prices: { "*": { input: 3, output: 15 } },
          },
        ],
      },
    });
  });
  after(async () => {
    await fixture.close();
    await new Promise((resolve) => upstream.close(resolve));
  });

  void it("gets it without te or http2-settings, and the call its usage event", async () => {
    const session = await fixture.session();
    const client = http2.connect(fixture.proxy.url);
    try {
      const answer = await new Promise<{ status: number; headers: http2.IncomingHttpHeaders; body: string }>(
        (resolve, reject) => {
          const stream = client.request({
            ":method": "POST",
            ":path": `${new URL(session.anthropicBaseUrl).pathname.replace(/\/$/, "")}/v1/messages`,
            "content-type": "application/json",
            "anthropic-version": "2023-06-01",
            "x-api-key": session.token,
            ...session.headers,
          });
          let headers: http2.IncomingHttpHeaders = {};
          let body = "";
          stream.on("response", (h) => (headers = h));
          stream.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
          stream.on("end", () => resolve({ status: Number(headers[":status"]), headers, body }));
          stream.on("error", reject);
          stream.end(
            JSON.stringify({ model: "claude-sonnet-5", max_tokens: 10, messages: [{ role: "user", content: "hi" }] }),
          );
        },
      );
      assert.equal(answer.status, 200, answer.body);
      assert.match(answer.body, /over h2/);
      assert.equal(answer.headers.te, undefined);
      assert.equal(answer.headers["http2-settings"], undefined);
      assert.equal(fixture.events.filter((e) => e.session === session.session).length, 1, "one usage event");
    } finally {
      client.close();
    }
  });
});
