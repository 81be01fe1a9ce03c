// What a caller can make the proxy hold: a model call's body is refused 413
// past OZ0_MAX_MODEL_REQUEST_BYTES, on its Content-Length before a byte of it
// is read, and a caller without a session token is refused before its body
// is read at all; the control API takes messages up to OZ0_MAX_MESSAGE_BYTES
// (1 MiB by default). A real proxy on loopback in front of the scripted model.
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, it } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { startFixture, type ProxyFixture, type SessionEndpoint } from "./proxy-fixture.js";

const LIMIT = 64 * 1024;

/** An Anthropic Messages body of exactly `bytes` bytes. */
function messagesBody(bytes: number): string {
  const shell = (text: string) =>
    JSON.stringify({ model: "claude-test", max_tokens: 16, messages: [{ role: "user", content: text }] });
  return shell("x".repeat(bytes - shell("").length));
}

/**
 * A POST announcing a body it never sends: only its headers go. An answer
 * that comes was given without the body (a server that read it would wait).
 */
function headersOnly(
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number; text: string; connection: string | undefined }> {
  return new Promise((resolve, reject) => {
    const request = http.request(url, { method: "POST", agent: false, headers });
    request.on("error", reject);
    request.on("response", (response) => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (text += chunk));
      response.on("end", () => {
        resolve({ status: response.statusCode!, text, connection: response.headers.connection });
        request.destroy();
      });
    });
    request.flushHeaders();
  });
}

void describe("the proxy's request size limits", () => {
  let fx: ProxyFixture;
  let endpoint: SessionEndpoint;
  before(async () => {
    fx = await startFixture({ turns: () => ({ text: "ok" }), config: { maxModelRequestBytes: LIMIT } });
    endpoint = await fx.session();
  });
  after(() => fx.close());
  const auth = () => ({ "content-type": "application/json", "x-api-key": endpoint.token, ...endpoint.headers });

  void it("takes a model call's body at the limit", async () => {
    const body = messagesBody(LIMIT);
    assert.equal(Buffer.byteLength(body), LIMIT);
    const response = await fetch(`${endpoint.anthropicBaseUrl}/v1/messages`, { method: "POST", headers: auth(), body });
    assert.equal(response.status, 200, await response.clone().text());
    await response.text();
  });

  void it("refuses a body over the limit 413, naming the size, the limit and the setting, and logs it without content", async () => {
    const before = fx.model.requests.length;
    const body = messagesBody(LIMIT + 1).replace("xxxxxxxx", "PLANTEDx");
    const response = await fetch(`${endpoint.anthropicBaseUrl}/v1/messages`, { method: "POST", headers: auth(), body });
    assert.equal(response.status, 413);
    const { error } = (await response.json()) as { error: { type: string; message: string } };
    assert.equal(error.type, "invalid_request_error");
    assert.match(
      error.message,
      new RegExp(`\\(${LIMIT + 1} bytes\\) is larger than this proxy takes \\(${LIMIT} bytes\\)`),
    );
    assert.match(error.message, /OZ0_MAX_MODEL_REQUEST_BYTES/);
    // Without a Content-Length (chunked), it is refused on the first byte past the limit.
    const chunked = await fetch(`${endpoint.anthropicBaseUrl}/v1/messages`, {
      method: "POST",
      headers: auth(),
      body: new Blob([body]).stream(),
      duplex: "half",
    } as RequestInit);
    assert.equal(chunked.status, 413);
    assert.match(
      ((await chunked.json()) as { error: { message: string } }).error.message,
      /OZ0_MAX_MODEL_REQUEST_BYTES/,
    );
    assert.equal(fx.model.requests.length, before, "the provider was never called");
    // The session's first refusal is logged at once, the second summed up later (refused-calls-log.test.ts).
    const logged = fx.logs.filter((line) => line.includes("MODEL_REQUEST_TOO_LARGE"));
    assert.equal(logged.length, 1);
    assert.ok(!logged.some((line) => line.includes("PLANTED")), "no byte of the body is logged");
  });

  void it("refuses a body whose Content-Length is over the limit before a byte of it is sent, and closes the HTTP/1.1 connection", async () => {
    const answer = await headersOnly(`${endpoint.anthropicBaseUrl}/v1/messages`, {
      ...auth(),
      "content-length": String(1024 ** 3),
    });
    assert.equal(answer.status, 413);
    assert.match(answer.text, /\(1073741824 bytes\) is larger than this proxy takes/);
    assert.equal(answer.connection, "close", "the rest of the body is never read");
  });

  void it("refuses a caller without a session token before reading its body", async () => {
    const answer = await headersOnly(`${endpoint.anthropicBaseUrl}/v1/messages`, {
      "content-type": "application/json",
      "content-length": String(1024 ** 3),
    });
    assert.equal(answer.status, 401);
  });

  void it("takes control API messages up to 1 MiB by default, and refuses a larger one ResourceExhausted", async () => {
    await fx.secrets.setSecret({ name: "SMALL", value: "v".repeat(1024) });
    await assert.rejects(fx.secrets.setSecret({ name: "HUGE", value: "v".repeat(1024 * 1024 + 1) }), (error) => {
      const err = ConnectError.from(error);
      assert.equal(err.code, Code.ResourceExhausted);
      assert.match(err.rawMessage, /limit of 1048576 bytes/);
      assert.match(err.rawMessage, /OZ0_MAX_MESSAGE_BYTES/);
      return true;
    });
  });
});
