// A request message larger than the service's limit is refused
// ResourceExhausted on every protocol, as soon as its size is known, naming
// the limit, the size and the setting; one at the limit is served; a caller
// with no credential is refused before it sends a byte of its body; and the
// refusal ends one call, never its HTTP/2 connection or the calls beside it.
// Raw HTTP requests (fetch and node:http for HTTP/1.1, node:http2 for gRPC)
// against a real server on loopback.
import assert from "node:assert/strict";
import http from "node:http";
import { connect as http2Connect } from "node:http2";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { gzipSync } from "node:zlib";
import { create, fromBinary, toBinary, toJsonString } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { pino } from "pino";
import {
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
} from "@oz0/proto/grpc/reflection/v1/reflection_pb";
import { EventsService, PublishRequestSchema, type PublishRequest } from "@oz0/proto/oz0/events/v1/events_pb";
import { Authenticator } from "../src/auth/authenticator.js";
import { envMaxMessageBytes } from "../src/message-size-limit.js";
import { registration, serve, type RunningServer } from "../src/serve.js";
import { testCredentials } from "../src/testing.js";
import { connectStream, connectUnary, envelope, envelopes, grpc, grpcOn, grpcWeb } from "./raw-rpc.js";

const LIMIT = 64 * 1024;
const PUBLISH = "/oz0.events.v1.EventsService/Publish";
const WATCH = "/grpc.health.v1.Health/Watch";
const REFLECT = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
const auth = { authorization: `Bearer ${testCredentials.services.orchestrator}` };
const SETTING = /OZ0_MAX_MESSAGE_BYTES/;

/** A Publish request of exactly `bytes` bytes in binary protobuf. */
function publishOfSize(bytes: number): Uint8Array {
  // A length prefix grows a byte at some sizes; a short second field fills the gap.
  for (let pad = Math.max(1, bytes - 32); pad <= bytes; pad++)
    for (const type of ["", "t", "tt"]) {
      const request = create(PublishRequestSchema, { events: [{ jobId: "x".repeat(pad), type }] });
      const encoded = toBinary(PublishRequestSchema, request);
      if (encoded.byteLength === bytes) return encoded;
    }
  throw new Error(`no Publish request of ${bytes} bytes`);
}

/** Only an envelope's header: a message of `size` bytes announced, none of it sent. */
function header(size: number): Uint8Array {
  const out = new Uint8Array(5);
  new DataView(out.buffer).setUint32(1, size);
  return out;
}

void describe("a request message over the service's limit", () => {
  let server: RunningServer;
  const received: PublishRequest[] = [];
  const logLines: Record<string, unknown>[] = [];
  before(async () => {
    const logs = new Writable({
      write(chunk: Buffer, _encoding, done) {
        logLines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
        done();
      },
    });
    server = await serve({
      name: "test",
      port: 0,
      auth: new Authenticator(testCredentials.settingsFor("events")),
      services: [registration(EventsService, { publish: (request) => (received.push(request), {}) })],
      maxMessageBytes: LIMIT,
      logger: pino({ level: "warn" }, logs),
    });
  });
  after(() => server.close({ graceMs: 100 }));

  void it("is refused ResourceExhausted on gRPC, gRPC-Web, Connect unary (binary and JSON) and streaming, naming the limit, the size and the setting", async () => {
    const over = publishOfSize(LIMIT + 1);
    const before = received.length;

    const overGrpc = await grpc(server.url, PUBLISH, [envelope(over)], auth);
    assert.equal(overGrpc.status, Code.ResourceExhausted, overGrpc.message);
    assert.match(overGrpc.message, new RegExp(`Publish: a request message of ${LIMIT + 1} bytes is over`));
    assert.match(overGrpc.message, new RegExp(`limit of ${LIMIT} bytes`));
    assert.match(overGrpc.message, SETTING);

    const web = await grpcWeb(server.url, PUBLISH, envelope(over), auth);
    assert.equal(web.status, Code.ResourceExhausted, web.message);
    assert.match(web.message, SETTING);

    const unary = await connectUnary(server.url, PUBLISH, over, auth);
    assert.equal(unary.code, "resource_exhausted");
    assert.match(unary.message!, new RegExp(`of ${LIMIT + 1} bytes is over this service's limit of ${LIMIT} bytes`));
    assert.match(unary.message!, SETTING);

    const json = toJsonString(PublishRequestSchema, fromBinary(PublishRequestSchema, over));
    const overJson = await connectUnary(server.url, PUBLISH, json, { ...auth, "content-type": "application/json" });
    assert.equal(overJson.code, "resource_exhausted");
    assert.match(overJson.message!, SETTING);

    // Connect streaming, and a gRPC stream whose first message was served.
    const stream = await connectStream(server.url, WATCH, envelope(new Uint8Array(LIMIT + 1)));
    assert.equal(stream?.code, "resource_exhausted");
    assert.match(stream!.message, SETTING);
    const list = envelope(
      toBinary(
        ServerReflectionRequestSchema,
        create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } }),
      ),
    );
    const bidi = await grpc(server.url, REFLECT, [list, envelope(new Uint8Array(LIMIT + 1))], auth);
    assert.equal(bidi.status, Code.ResourceExhausted, bidi.message);
    assert.equal(bidi.messages.length, 1, "the message before it was answered");

    // Connect's GET (a message in the query) is only for methods marked free of side effects; none is.
    const viaGet = await fetch(
      `${server.url}${PUBLISH}?connect=v1&encoding=proto&base64=1&message=${"A".repeat(8000)}`,
      {
        headers: auth,
      },
    );
    assert.equal(viaGet.status, 405);
    await viaGet.arrayBuffer();

    assert.equal(received.length, before, "no oversized message reached the handler");
    const refusals = logLines.filter((l) => l.code === "MESSAGE_TOO_LARGE");
    assert.ok(refusals.length >= 6, `each refusal is logged (${refusals.length})`);
    assert.deepEqual(
      Object.keys(refusals[0]!)
        .filter((k) => !["level", "time", "pid", "hostname", "msg"].includes(k))
        .sort(),
      ["code", "decompressed", "limit", "method", "setting", "size"],
      "the log line says what was refused and never carries the message",
    );
  });

  void it("is refused when it decompresses past the limit, however small it came", async () => {
    const bomb = gzipSync(new Uint8Array(LIMIT * 16));
    assert.ok(bomb.byteLength < LIMIT / 16);
    const overGrpc = await grpc(server.url, PUBLISH, [envelope(bomb, 1)], { ...auth, "grpc-encoding": "gzip" });
    assert.equal(overGrpc.status, Code.ResourceExhausted, overGrpc.message);
    assert.match(overGrpc.message, new RegExp(`decompresses to more than this service's limit of ${LIMIT} bytes`));
    assert.match(overGrpc.message, SETTING);
    const unary = await connectUnary(server.url, PUBLISH, bomb, { ...auth, "content-encoding": "gzip" });
    assert.equal(unary.code, "resource_exhausted");
    assert.match(unary.message!, /decompresses to more than/);
    const web = await grpcWeb(server.url, PUBLISH, envelope(bomb, 1), { ...auth, "grpc-encoding": "gzip" });
    assert.equal(web.status, Code.ResourceExhausted, web.message);
    // JSON is decompressed by connect itself, to the same limit.
    const json = await connectUnary(server.url, PUBLISH, bomb, {
      ...auth,
      "content-type": "application/json",
      "content-encoding": "gzip",
    });
    assert.equal(json.code, "resource_exhausted");
  });

  void it("at the limit is served, on every protocol, compressed or not", async () => {
    const atLimit = publishOfSize(LIMIT);
    const before = received.length;
    assert.equal((await grpc(server.url, PUBLISH, [envelope(atLimit)], auth)).status, 0);
    assert.equal((await grpcWeb(server.url, PUBLISH, envelope(atLimit), auth)).status, 0);
    assert.equal((await connectUnary(server.url, PUBLISH, atLimit, auth)).http, 200);
    const json = toJsonString(PublishRequestSchema, fromBinary(PublishRequestSchema, publishOfSize(LIMIT / 2)));
    assert.equal(
      (await connectUnary(server.url, PUBLISH, json, { ...auth, "content-type": "application/json" })).http,
      200,
    );
    const gzip = { ...auth, "grpc-encoding": "gzip" };
    assert.equal((await grpc(server.url, PUBLISH, [envelope(gzipSync(atLimit), 1)], gzip)).status, 0);
    assert.equal(
      (await connectUnary(server.url, PUBLISH, gzipSync(atLimit), { ...auth, "content-encoding": "gzip" })).http,
      200,
    );
    assert.equal(received.length, before + 6);
    assert.equal(toBinary(PublishRequestSchema, received[before]!).byteLength, LIMIT);
  });

  void it("from a caller with no credential is refused before its body is read: none of it on HTTP/2, on HTTP/1.1 at most what connect drops", async () => {
    const tooLarge = (): number => logLines.filter((l) => l.code === "MESSAGE_TOO_LARGE").length;
    const loggedBefore = tooLarge();
    const session = http2Connect(server.url);
    try {
      // gRPC: headers only, the body never written and the request never ended.
      const open = grpcOn(session, PUBLISH, [], { end: false });
      const refused = await open.answer;
      assert.equal(refused.status, Code.Unauthenticated, refused.message);
      // An envelope announcing 1 GiB: the answer comes after its 5-byte header.
      const huge = grpcOn(session, PUBLISH, [header(1024 ** 3)], { end: false });
      assert.equal((await huge.answer).status, Code.Unauthenticated);
    } finally {
      session.close();
    }
    // HTTP/1.1 has no way to end one request: connect reads and drops at most 256 KiB of the rest, then
    // answers and closes the connection, so a 64 MiB body is never taken whole.
    for (const contentType of ["application/proto", "application/grpc-web+proto", "application/json"]) {
      const answer = await sendingBody(server.url, PUBLISH, contentType, BIG, {});
      assert.ok(
        answer.status === 401 || answer.grpcStatus === String(Code.Unauthenticated),
        `${contentType}: ${answer.status} ${answer.grpcStatus}`,
      );
      assert.ok(answer.written < BIG / 4, `${contentType}: the server took ${answer.written} bytes of ${BIG}`);
    }
    // Refused for who it is, not for its size: a stranger's Content-Length writes nothing to the log.
    assert.equal(tooLarge(), loggedBefore, "no MESSAGE_TOO_LARGE logged for a caller the access table refuses");
  });

  void it("from a caller with a credential is refused once the size is announced, before the message is sent", async () => {
    const session = http2Connect(server.url);
    try {
      const huge = grpcOn(session, PUBLISH, [header(1024 ** 3)], { headers: auth, end: false });
      const answer = await huge.answer;
      assert.equal(answer.status, Code.ResourceExhausted, answer.message);
      assert.match(answer.message, /a request message of 1073741824 bytes is over/);
    } finally {
      session.close();
    }
    const answer = await sendingBody(server.url, PUBLISH, "application/proto", BIG, auth);
    assert.equal(answer.status, 429, "Connect's HTTP status for resource_exhausted");
    assert.match(answer.body, /resource_exhausted/);
    assert.match(answer.body, new RegExp(`of ${BIG} bytes is over`), "refused on its Content-Length");
    assert.ok(answer.written < BIG / 4, `the server took ${answer.written} bytes of ${BIG}`);
  });

  void it("ends its own call only: other calls on the same HTTP/2 connection go on", async () => {
    const session = http2Connect(server.url);
    let goaway = false;
    session.on("goaway", () => (goaway = true));
    try {
      const list = (host: string) =>
        envelope(
          toBinary(
            ServerReflectionRequestSchema,
            create(ServerReflectionRequestSchema, { host, messageRequest: { case: "listServices", value: "" } }),
          ),
        );
      // A stream opened first, answered once, and left open across the refusal.
      const bidi = grpcOn(session, REFLECT, [list("before")], { headers: auth, end: false });
      const firstAnswer = new Promise<void>((resolve) => bidi.stream.once("data", () => resolve()));
      await firstAnswer;
      const refused = await grpcOn(session, PUBLISH, [header(LIMIT + 1), new Uint8Array(1024)], {
        headers: auth,
        end: false,
      }).answer;
      assert.equal(refused.status, Code.ResourceExhausted, refused.message);
      const served = await grpcOn(session, PUBLISH, [envelope(publishOfSize(100))], { headers: auth }).answer;
      assert.equal(served.status, 0, served.message);
      bidi.stream.write(list("after"));
      bidi.stream.end();
      const answered = await bidi.answer;
      assert.equal(answered.status, 0, answered.message);
      assert.deepEqual(
        answered.messages.map((m) => fromBinary(ServerReflectionResponseSchema, m).validHost),
        ["before", "after"],
      );
      assert.equal(goaway, false, "the connection was not told to go away");
      assert.equal(session.destroyed, false);
    } finally {
      session.close();
    }
  });
});

void describe("OZ0_MAX_MESSAGE_BYTES", () => {
  void it("is read as a whole number of bytes up to 4 GiB - 1, and a malformed value names the variable", () => {
    assert.equal(envMaxMessageBytes({}), undefined);
    assert.equal(envMaxMessageBytes({ OZ0_MAX_MESSAGE_BYTES: "16777216" }), 16 * 1024 * 1024);
    for (const bad of ["0", "-1", "4294967296", "16MiB", "1.5"])
      assert.throws(() => envMaxMessageBytes({ OZ0_MAX_MESSAGE_BYTES: bad }), /OZ0_MAX_MESSAGE_BYTES/);
  });
});

/** A body far larger than any socket buffers on loopback hold. */
const BIG = 64 * 1024 * 1024;

/**
 * An HTTP/1.1 POST of `length` zero bytes (a gRPC-Web one's first envelope
 * announcing all of them), written as fast as the server takes them until its
 * answer comes: `written` is how much it took (at most what it read, plus
 * what the sockets hold).
 */
function sendingBody(
  url: string,
  path: string,
  contentType: string,
  length: number,
  headers: Record<string, string>,
): Promise<{ status: number; grpcStatus: string | undefined; body: string; written: number }> {
  return new Promise((resolve, reject) => {
    const request = http.request(url + path, {
      method: "POST",
      agent: false,
      headers: { "content-type": contentType, "content-length": String(length), ...headers },
    });
    let written = 0;
    let answered = false;
    const chunk = Buffer.alloc(64 * 1024);
    const write = (): void => {
      while (!answered && written < length) {
        const piece = written === 0 && contentType.includes("grpc") ? Buffer.from(header(length - 5)) : chunk;
        const part = piece.subarray(0, Math.min(piece.byteLength, length - written));
        written += part.byteLength;
        if (!request.write(part)) return void request.once("drain", write);
      }
      if (!answered) request.end();
    };
    request.on("error", (error) => (answered ? undefined : reject(error)));
    request.on("response", (response) => {
      answered = true;
      const chunks: Buffer[] = [];
      response.on("data", (data: Buffer) => chunks.push(data));
      response.on("end", () => {
        const body = Buffer.concat(chunks);
        const trailer = envelopes(body).find((e) => e.flags & 0x80);
        const fromTrailer = /grpc-status:\s*(\d+)/i.exec(new TextDecoder().decode(trailer?.data))?.[1];
        const grpcStatus = response.headers["grpc-status"];
        resolve({
          status: response.statusCode!,
          grpcStatus: fromTrailer ?? (Array.isArray(grpcStatus) ? grpcStatus[0] : grpcStatus),
          body: body.toString(),
          written,
        });
        request.destroy();
      });
    });
    write();
  });
}
