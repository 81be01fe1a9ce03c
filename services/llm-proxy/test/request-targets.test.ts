// Where a model call goes upstream: `/v1/{route}` and the client's query,
// as URL parsing reads the client's request target. A plain path and query
// (what SDKs send) is read as it is; a target with dot segments, escapes or
// characters URL parsing would escape goes through URL's rules. Both must
// give the provider the same path.
import assert from "node:assert/strict";
import http from "node:http";
import type net from "node:net";
import { after, before, describe, it } from "node:test";
import { PRICE, startFixture, type ProxyFixture, type SessionEndpoint } from "./proxy-fixture.js";

const ANSWER = JSON.stringify({
  id: "msg_1",
  type: "message",
  role: "assistant",
  model: "claude-sonnet-5",
  content: [{ type: "text", text: "ok" }],
  stop_reason: "end_turn",
  usage: { input_tokens: 1, output_tokens: 1 },
});

void describe("request targets", () => {
  let upstream: http.Server;
  /** Each request target the provider got. */
  const seen: string[] = [];
  let fx: ProxyFixture;
  let e: SessionEndpoint;

  before(async () => {
    upstream = http.createServer((req, res) => {
      seen.push(req.url ?? "");
      req.resume();
      req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end(ANSWER));
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const baseUrl = `http://127.0.0.1:${(upstream.address() as net.AddressInfo).port}`;
    fx = await startFixture({
      turns: () => ({ text: "unused" }),
      config: {
        providers: [
          { name: "anthropic", baseUrl, keySecret: "ANTHROPIC_API_KEY", prices: { "*": PRICE } },
          // A path in a base URL goes nowhere: requests go to /v1/{route} at its host, as new URL(path, baseUrl) made them.
          { name: "prefixed", baseUrl: `${baseUrl}/a/prefix`, keySecret: "ANTHROPIC_API_KEY", prices: { "*": PRICE } },
        ],
      },
    });
    e = await fx.session();
  });
  after(async () => {
    await fx.close();
    await new Promise<void>((resolve) => upstream.close(() => resolve()));
  });

  /** POSTs a model call to the target exactly as written; its status and the target the provider got. */
  async function call(target: string): Promise<{ status: number; upstream: string | undefined }> {
    const before = seen.length;
    const { port } = new URL(fx.proxy.url);
    const body = JSON.stringify({
      model: "claude-sonnet-5",
      max_tokens: 10,
      messages: [{ role: "user", content: "x" }],
    });
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request(
        {
          host: "127.0.0.1",
          port,
          path: target,
          method: "POST",
          agent: false,
          headers: { "content-type": "application/json", "x-api-key": e.token, ...e.headers },
        },
        (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode ?? 0));
        },
      );
      req.on("error", reject);
      req.end(body);
    });
    return { status, upstream: seen.length > before ? seen.at(-1) : undefined };
  }

  void it("passes a plain path's query on as it came", async () => {
    assert.deepEqual(await call("/anthropic/v1/messages?beta=true"), {
      status: 200,
      upstream: "/v1/messages?beta=true",
    });
    assert.deepEqual(await call("/anthropic/v1/messages?a=1&b=(x)"), {
      status: 200,
      upstream: "/v1/messages?a=1&b=(x)",
    });
    assert.deepEqual(await call("/anthropic/messages"), { status: 200, upstream: "/v1/messages" });
    assert.deepEqual(await call("/anthropic/v1/messages/"), { status: 200, upstream: "/v1/messages" });
    // A `?` with nothing after it is no query.
    assert.deepEqual(await call("/anthropic/v1/messages?"), { status: 200, upstream: "/v1/messages" });
    assert.deepEqual(await call("/prefixed/v1/messages?beta=true"), {
      status: 200,
      upstream: "/v1/messages?beta=true",
    });
  });

  void it("reads any other target by URL's rules", async () => {
    assert.deepEqual(await call("/anthropic/v1/./messages?x=1.5"), { status: 200, upstream: "/v1/messages?x=1.5" });
    assert.deepEqual(await call("/anthropic/v1/../v1/messages?q=a"), { status: 200, upstream: "/v1/messages?q=a" });
    assert.deepEqual(await call('/anthropic/v1/messages?x="y"'), { status: 200, upstream: "/v1/messages?x=%22y%22" });
    // An escape is not decoded: no route is named `mess%61ges`.
    assert.deepEqual(await call("/anthropic/v1/mess%61ges"), { status: 404, upstream: undefined });
    // Two slashes begin an authority, not a path.
    assert.deepEqual(await call("//anthropic/v1/messages"), { status: 404, upstream: undefined });
  });
});
