// A body that is not the method's request message is the caller's mistake:
// InvalidArgument on every protocol, naming the request type, never Internal;
// and a caller the access table refuses hears that first. Raw HTTP requests
// (fetch for HTTP/1.1, node:http2 for gRPC) against a real server.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { gzipSync } from "node:zlib";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { contentTypeMatcher, type UniversalHandler, type UniversalServerRequest } from "@connectrpc/connect/protocol";
import { Health, HealthCheckRequestSchema } from "@oz0/proto/grpc/health/v1/health_pb";
import {
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
} from "@oz0/proto/grpc/reflection/v1/reflection_pb";
import { EventsService, PublishRequestSchema, type PublishRequest } from "@oz0/proto/oz0/events/v1/events_pb";
import { Authenticator } from "../src/auth/authenticator.js";
import { registration, serve, type RunningServer } from "../src/serve.js";
import { testCredentials } from "../src/testing.js";
import { decodingBinaryBodies, handingOnDecodedMessages } from "../src/undecodable-requests.js";
import { connectUnary, envelope, envelopes, grpc, grpcWeb } from "./raw-rpc.js";

/** Not a protobuf message: field 536870911 with wire type 7. */
const GARBAGE = new Uint8Array([0xff, 0xff, 0xff, 0xff, 0x0f, 0x07]);
const CHECK = "/grpc.health.v1.Health/Check";
const WATCH = "/grpc.health.v1.Health/Watch";
const REFLECT = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
const PUBLISH = "/oz0.events.v1.EventsService/Publish";
const orchestrator = `Bearer ${testCredentials.services.orchestrator}`;

void describe("an undecodable request body", () => {
  let server: RunningServer;
  let published = 0;
  const received: PublishRequest[] = [];
  before(async () => {
    server = await serve({
      name: "test",
      port: 0,
      auth: new Authenticator(testCredentials.settingsFor("events")),
      services: [registration(EventsService, { publish: (request) => (published++, received.push(request), {}) })],
    });
  });
  after(() => server.close({ graceMs: 100 }));

  void it("is InvalidArgument on the Connect protocol (HTTP 400), gRPC and gRPC-Web (status 3), naming the request type", async () => {
    const connect = await connectUnary(server.url, CHECK, GARBAGE);
    assert.equal(connect.http, 400);
    assert.equal(connect.code, "invalid_argument");
    assert.match(
      connect.message!,
      /the request body could not be decoded as grpc\.health\.v1\.HealthCheckRequest \(binary protobuf: .+\)/,
    );

    const overGrpc = await grpc(server.url, CHECK, [envelope(GARBAGE)]);
    assert.equal(overGrpc.status, Code.InvalidArgument);
    assert.match(overGrpc.message, /could not be decoded as grpc\.health\.v1\.HealthCheckRequest/);

    const web = await grpcWeb(server.url, CHECK, envelope(GARBAGE));
    assert.equal(web.status, Code.InvalidArgument);
    assert.match(web.message, /could not be decoded as grpc\.health\.v1\.HealthCheckRequest/);
  });

  void it("is InvalidArgument on streams too: Connect server streaming, gRPC bidi", async () => {
    const response = await fetch(server.url + WATCH, {
      method: "POST",
      headers: { "content-type": "application/connect+proto" },
      body: envelope(GARBAGE),
    });
    const end = envelopes(new Uint8Array(await response.arrayBuffer())).find((e) => e.flags & 0x02);
    const { error } = JSON.parse(new TextDecoder().decode(end?.data)) as { error: { code: string; message: string } };
    assert.equal(error.code, "invalid_argument");
    assert.match(error.message, /could not be decoded as grpc\.health\.v1\.HealthCheckRequest/);

    // A good message is answered; the garbage after it ends the stream.
    const listServices = toBinary(
      ServerReflectionRequestSchema,
      create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } }),
    );
    const bidi = await grpc(server.url, REFLECT, [envelope(listServices), envelope(GARBAGE)], {
      authorization: orchestrator,
    });
    assert.equal(bidi.status, Code.InvalidArgument);
    assert.match(bidi.message, /could not be decoded as grpc\.reflection\.v1\.ServerReflectionRequest/);
    assert.equal(bidi.messages.length, 1);
  });

  void it("on the Connect JSON protocol is InvalidArgument naming the type, as connect answers it", async () => {
    const answer = await connectUnary(server.url, CHECK, "{garbage", { "content-type": "application/json" });
    assert.equal(answer.http, 400);
    assert.equal(answer.code, "invalid_argument");
    assert.match(answer.message!, /grpc\.health\.v1\.HealthCheckRequest/);
  });

  void it("from a caller the access table refuses is answered with the refusal first, on every protocol", async () => {
    const before = published;
    assert.equal((await connectUnary(server.url, PUBLISH, GARBAGE)).code, "unauthenticated");
    assert.equal(
      (await connectUnary(server.url, PUBLISH, GARBAGE, { authorization: `Bearer ${testCredentials.owner}` })).code,
      "permission_denied",
    );
    assert.equal((await grpc(server.url, PUBLISH, [envelope(GARBAGE)])).status, Code.Unauthenticated);
    assert.equal((await grpcWeb(server.url, PUBLISH, envelope(GARBAGE))).status, Code.Unauthenticated);
    assert.equal((await grpc(server.url, REFLECT, [envelope(GARBAGE)])).status, Code.Unauthenticated);
    // The same bodies from the caller the method is open to are about the body.
    assert.equal(
      (await connectUnary(server.url, PUBLISH, GARBAGE, { authorization: orchestrator })).code,
      "invalid_argument",
    );
    assert.equal(
      (await grpc(server.url, PUBLISH, [envelope(GARBAGE)], { authorization: orchestrator })).status,
      Code.InvalidArgument,
    );
    assert.equal(published, before, "no undecodable body reached the handler");
  });

  void it("that decodes reaches the handler as it was sent, on every protocol, compressed or not", async () => {
    const sent = (jobId: string) => create(PublishRequestSchema, { events: [{ jobId, type: "job.created" }] });
    const bytes = (jobId: string) => toBinary(PublishRequestSchema, sent(jobId));
    received.length = 0;
    const auth = { authorization: orchestrator };
    assert.equal((await connectUnary(server.url, PUBLISH, bytes("connect"), auth)).http, 200);
    assert.equal(
      (
        await connectUnary(server.url, PUBLISH, gzipSync(bytes("connect gzip")), {
          ...auth,
          "content-encoding": "gzip",
        })
      ).http,
      200,
    );
    assert.equal((await grpc(server.url, PUBLISH, [envelope(bytes("grpc"))], auth)).status, 0);
    assert.equal(
      (
        await grpc(server.url, PUBLISH, [envelope(gzipSync(bytes("grpc gzip")), 1)], {
          ...auth,
          "grpc-encoding": "gzip",
        })
      ).status,
      0,
    );
    const web = await fetch(server.url + PUBLISH, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+proto", ...auth },
      body: envelope(bytes("grpc-web")),
    });
    assert.equal(web.status, 200);
    await web.arrayBuffer();
    assert.deepEqual(received, ["connect", "connect gzip", "grpc", "grpc gzip", "grpc-web"].map(sent));
    // A stream's messages, each in its place (reflection answers each request in turn).
    const list = (host: string) =>
      envelope(
        toBinary(
          ServerReflectionRequestSchema,
          create(ServerReflectionRequestSchema, { host, messageRequest: { case: "listServices", value: "" } }),
        ),
      );
    const bidi = await grpc(server.url, REFLECT, [list("a"), list("b"), list("c")], auth);
    assert.equal(bidi.status, 0, bidi.message);
    assert.deepEqual(
      bidi.messages.map((m) => fromBinary(ServerReflectionResponseSchema, m).validHost),
      ["a", "b", "c"],
    );
  });

  void it("compressed is decoded after decompression; a compressed flag without an encoding is refused", async () => {
    const before = published;
    const good = toBinary(PublishRequestSchema, create(PublishRequestSchema, { events: [{ jobId: "j1" }] }));
    const headers = { authorization: orchestrator, "grpc-encoding": "gzip" };
    assert.equal((await grpc(server.url, PUBLISH, [envelope(gzipSync(good), 1)], headers)).status, 0);
    assert.equal(published, before + 1);
    const garbage = await grpc(server.url, PUBLISH, [envelope(gzipSync(GARBAGE), 1)], headers);
    assert.equal(garbage.status, Code.InvalidArgument, garbage.message);
    const unflagged = await grpc(server.url, PUBLISH, [envelope(good, 1)], { authorization: orchestrator });
    assert.equal(unflagged.status, Code.InvalidArgument);
    assert.match(unflagged.message, /flagged compressed, but the request names no encoding/);
    const connect = await connectUnary(server.url, PUBLISH, gzipSync(GARBAGE), {
      authorization: orchestrator,
      "content-encoding": "gzip",
    });
    assert.equal(connect.code, "invalid_argument");
    assert.equal(published, before + 1);
  });

  void it("with an envelope flagged other than a message is InvalidArgument on every protocol, and the refusal first", async () => {
    const good = toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service: "" }));
    // gRPC has no end-of-stream envelope: 0x02, 0x04, 0x80 and 0x05 are no message's flags.
    for (const flags of [0x02, 0x04, 0x80, 0x05]) {
      for (const message of [good, GARBAGE]) {
        const answer = await grpc(server.url, CHECK, [envelope(message, flags)]);
        assert.equal(answer.status, Code.InvalidArgument, `gRPC, flags ${flags}: ${answer.message}`);
        assert.match(answer.message, new RegExp(`flagged 0x${flags.toString(16).padStart(2, "0")}`));
      }
    }
    // Connect streaming: its end-of-stream flag (0x02) is the server's; a client's compressed one without an
    // encoding, or other bits, are refused.
    for (const flags of [0x03, 0x04, 0x05]) {
      const response = await fetch(server.url + WATCH, {
        method: "POST",
        headers: { "content-type": "application/connect+proto" },
        body: envelope(GARBAGE, flags),
      });
      const end = envelopes(new Uint8Array(await response.arrayBuffer())).find((e) => e.flags & 0x02);
      const { error } = JSON.parse(new TextDecoder().decode(end?.data)) as { error: { code: string } };
      assert.equal(error.code, "invalid_argument", `Connect streaming, flags ${flags}`);
    }
    assert.equal((await grpcWeb(server.url, CHECK, envelope(GARBAGE, 0x04))).status, Code.InvalidArgument);
    // Who may not call hears that, whatever the flags.
    const before = published;
    assert.equal((await grpc(server.url, PUBLISH, [envelope(GARBAGE, 0x04)])).status, Code.Unauthenticated);
    assert.equal(
      (await grpc(server.url, PUBLISH, [envelope(GARBAGE, 0x04)], { authorization: orchestrator })).status,
      Code.InvalidArgument,
    );
    assert.equal(published, before);
  });
});

void describe("the body check", () => {
  /** A handler for Health/Check that reads its body the way connect does, through the check. */
  function reading(): {
    handler: UniversalHandler;
    read: Uint8Array[];
    seen: UniversalServerRequest[];
  } {
    const read: Uint8Array[] = [];
    const seen: UniversalServerRequest[] = [];
    const inner = Object.assign(
      async (request: UniversalServerRequest) => {
        seen.push(request);
        for await (const chunk of request.body as AsyncIterable<Uint8Array>) read.push(chunk);
        return { status: 200 };
      },
      {
        protocolNames: ["grpc"],
        service: Health,
        method: Health.method.check,
        requestPath: CHECK,
        allowedMethods: ["POST"],
        supportedContentType: contentTypeMatcher(/^application\/grpc$/),
      },
    );
    const handler = decodingBinaryBodies(inner, {
      compressions: [],
      maxMessageBytes: 0xffffffff,
    });
    return { handler, read, seen };
  }
  const request = (
    contentType: string,
    chunks: Uint8Array[],
    headers: Record<string, string> = {},
  ): UniversalServerRequest => ({
    httpVersion: "2",
    url: `http://x${CHECK}`,
    method: "POST",
    header: new Headers({ "content-type": contentType, ...headers }),
    body: (async function* () {
      yield* chunks;
    })(),
    signal: new AbortController().signal,
  });
  const bytewise = (bytes: Uint8Array): Uint8Array[] => [...bytes].map((b) => new Uint8Array([b]));
  /** What the first interceptor hands on for each message connect parsed from `read`. */
  async function handedOn(
    seen: UniversalServerRequest,
    read: Uint8Array[],
    parsed: unknown[] = envelopes(Buffer.concat(read)).map((e) => fromBinary(HealthCheckRequestSchema, e.data)),
  ): Promise<unknown[]> {
    const out: unknown[] = [];
    const interceptor = handingOnDecodedMessages()(async (req) => {
      for await (const m of (req as { message: AsyncIterable<unknown> }).message) out.push(m);
      return {} as never;
    });
    await interceptor({
      stream: true,
      contextValues: seen.contextValues!,
      message: (async function* () {
        yield* parsed;
      })(),
    } as never);
    return out;
  }

  void it("hands connect each good envelope empty and its decoded message on, however the body is cut", async () => {
    const one = create(HealthCheckRequestSchema, { service: "x".repeat(300) });
    const two = create(HealthCheckRequestSchema, { service: "second" });
    const body = new Uint8Array([
      ...envelope(toBinary(HealthCheckRequestSchema, one)),
      ...envelope(new Uint8Array()),
      ...envelope(toBinary(HealthCheckRequestSchema, two)),
    ]);
    for (const chunks of [[body], bytewise(body), [body.subarray(0, 3), body.subarray(3, 400), body.subarray(400)]]) {
      const { handler, read, seen } = reading();
      await handler(request("application/grpc", chunks));
      assert.deepEqual(Buffer.concat(read), Buffer.alloc(15), "three empty envelopes");
      assert.deepEqual(await handedOn(seen[0]!, read), [one, create(HealthCheckRequestSchema), two]);
    }
  });

  void it("passes an envelope connect judges itself as it came, and keeps the rest in step", async () => {
    const one = create(HealthCheckRequestSchema, { service: "one" });
    // Compressed in an encoding this check does not take (connect answers it itself).
    const other = gzipSync(toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service: "gz" })));
    const body = new Uint8Array([
      ...envelope(toBinary(HealthCheckRequestSchema, one)),
      ...envelope(other, 1),
      ...envelope(toBinary(HealthCheckRequestSchema, one)),
    ]);
    const { handler, read, seen } = reading();
    await handler(request("application/grpc", [body], { "grpc-encoding": "gzip" }));
    assert.deepEqual(
      Buffer.concat(read),
      Buffer.from([...envelope(new Uint8Array()), ...envelope(other, 1), ...envelope(new Uint8Array())]),
    );
    // What connect parses: two empty messages, and the second decompressed itself.
    const gz = create(HealthCheckRequestSchema, { service: "gz" });
    const empty = create(HealthCheckRequestSchema);
    assert.deepEqual(await handedOn(seen[0]!, read, [empty, gz, empty]), [one, gz, one]);
  });

  void it("ends a body cut anywhere with InvalidArgument, passing on the good envelopes before and never the bad one", async () => {
    const good = envelope(toBinary(HealthCheckRequestSchema, create(HealthCheckRequestSchema, { service: "s" })));
    const body = new Uint8Array([...good, ...envelope(GARBAGE)]);
    for (const chunks of [[body], bytewise(body)]) {
      const { handler, read } = reading();
      await assert.rejects(
        handler(request("application/grpc", chunks)),
        (e: unknown) => (e as { code?: Code }).code === Code.InvalidArgument,
      );
      assert.deepEqual(Buffer.concat(read), Buffer.alloc(5), "the good envelope, empty");
    }
  });

  void it("decodes a Connect unary body whole and hands connect an empty one without its length, and leaves JSON to connect", async () => {
    const whole = reading();
    await assert.rejects(
      whole.handler(request("application/proto", bytewise(GARBAGE))),
      (e: unknown) => (e as { code?: Code }).code === Code.InvalidArgument,
    );
    const message = create(HealthCheckRequestSchema, { service: "unary" });
    const bytes = toBinary(HealthCheckRequestSchema, message);
    const good = reading();
    await good.handler(request("application/proto", bytewise(bytes), { "content-length": String(bytes.byteLength) }));
    assert.equal(Buffer.concat(good.read).byteLength, 0);
    assert.equal(good.seen[0]!.header.get("content-length"), null);
    let handed: unknown;
    await handingOnDecodedMessages()(async (req) => {
      handed = (req as { message: unknown }).message;
      return {} as never;
    })({
      stream: false,
      contextValues: good.seen[0]!.contextValues!,
      message: create(HealthCheckRequestSchema),
    } as never);
    assert.deepEqual(handed, message);
    const json = reading();
    await json.handler(request("application/json", [new TextEncoder().encode("{garbage")]));
    assert.equal(Buffer.concat(json.read).toString(), "{garbage");
  });
});
