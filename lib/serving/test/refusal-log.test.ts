// Refused calls end at the access gate, before tracing: the service's log is
// where an operator sees them. An authenticated caller's refusal is a line of
// its own, by name; strangers' refusals are counted, so however many requests
// they send the log gets one line a minute.
import assert from "node:assert/strict";
import { after, before, describe, it, mock } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GetUsageResponseSchema, LlmProxyService } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { Authenticator, credentialDigest } from "../src/auth/authenticator.js";
import type { Principal } from "../src/auth/principal.js";
import { RefusalLog } from "../src/auth/refusal-log.js";
import { newCredential } from "../src/auth/stack-credentials.js";
import { registration, serve, type RunningServer } from "../src/serve.js";
import { capturingLogger, type CapturedLogLine as LogLine } from "../src/testing.js";

void describe("the access gate's refusals in the service's log", () => {
  const orchestratorToken = newCredential();
  const sandboxToken = newCredential();
  const { lines, logger } = capturingLogger();
  let server: RunningServer;
  let closed = false;
  const client = (token?: string) =>
    createClient(
      LlmProxyService,
      createGrpcTransport({
        baseUrl: server.url,
        interceptors: token
          ? [
              (next) => (request) => {
                request.header.set("authorization", `Bearer ${token}`);
                return next(request);
              },
            ]
          : [],
      }),
    );
  const refusedWith = async (call: Promise<unknown>, code: Code): Promise<void> =>
    assert.rejects(call, (e: unknown) => ConnectError.from(e).code === code);
  const withCode = (code: string): LogLine[] => lines.filter((l) => l.code === code);

  before(async () => {
    server = await serve({
      name: "refusals",
      port: 0,
      auth: new Authenticator({
        peers: { orchestrator: credentialDigest(orchestratorToken), sandbox: credentialDigest(sandboxToken) },
      }),
      services: [registration(LlmProxyService, { getUsage: () => create(GetUsageResponseSchema) })],
      logger,
    });
  });
  after(async () => {
    if (!closed) await server.close({ graceMs: 100 });
  });

  void it("an authenticated caller refused by the access table is logged by name, with the method", async () => {
    await client(orchestratorToken).getUsage({});
    assert.equal(withCode("ACCESS_DENIED").length, 0, "an allowed call logs no refusal");
    await refusedWith(client(sandboxToken).getUsage({}), Code.PermissionDenied);
    const denied = withCode("ACCESS_DENIED");
    assert.equal(denied.length, 1, "the first refusal is logged at once");
    assert.equal(denied[0]!.method, "oz0.llmproxy.v1.LlmProxyService/GetUsage");
    assert.equal(denied[0]!.principal, "the sandbox service");
    assert.match(
      denied[0]!.msg!,
      /GetUsage is open only to the orchestrator service; the sandbox service may not call it/,
    );
    // A caller with a credential may flood too (a sandbox node's is in the hands of whoever runs the node).
    for (let i = 0; i < 10; i++) await refusedWith(client(sandboxToken).getUsage({}), Code.PermissionDenied);
    assert.equal(withCode("ACCESS_DENIED").length, 1, "the rest of the minute is counted, not logged");
  });

  void it("calls with no or a bad credential: the first is logged at once, the rest summed up, and no credential is written", async () => {
    const stranger = `not-a-token-${newCredential()}`;
    await refusedWith(client().getUsage({}), Code.Unauthenticated);
    const first = withCode("CALLS_REFUSED_UNAUTHENTICATED");
    assert.equal(first.length, 1, "the first refusal is logged at once");
    assert.equal(first[0]!.calls, 1);
    assert.match(first[0]!.msg!, /GetUsage needs a credential/);
    for (let i = 0; i < 20; i++) await refusedWith(client().getUsage({}), Code.Unauthenticated);
    for (let i = 0; i < 5; i++) await refusedWith(client(stranger).getUsage({}), Code.Unauthenticated);
    assert.equal(withCode("CALLS_REFUSED_UNAUTHENTICATED").length, 1, "25 more refusals within the minute add no line");
    await server.close({ graceMs: 100 });
    closed = true;
    const all = withCode("CALLS_REFUSED_UNAUTHENTICATED");
    assert.equal(all.length, 2, "closing writes what was counted");
    assert.equal(all[1]!.calls, 25);
    assert.deepEqual(all[1]!.methods, { "oz0.llmproxy.v1.LlmProxyService/GetUsage": 25 });
    const denied = withCode("ACCESS_DENIED");
    assert.equal(denied.length, 2);
    assert.equal(denied[1]!.principal, "the sandbox service");
    assert.equal(denied[1]!.calls, 10, "the first test's ten refusals after its first");
    const everything = JSON.stringify(lines);
    for (const secret of [stranger, orchestratorToken, sandboxToken]) assert.ok(!everything.includes(secret));
  });
});

void describe("RefusalLog's counting", () => {
  void it("a flood gets one line a minute; after a quiet minute the next refusal is logged at once again", () => {
    mock.timers.enable({ apis: ["setTimeout"] });
    try {
      const { lines, logger } = capturingLogger();
      const log = new RefusalLog({ logger, intervalMs: 60_000 });
      const refuse = (method = "a/B"): void => log.unauthenticated({ method, message: "no credential" });
      refuse();
      for (let i = 0; i < 99; i++) refuse();
      mock.timers.tick(60_000);
      assert.deepEqual(
        lines.map((l) => l.calls),
        [1, 99],
      );
      for (let i = 0; i < 10; i++) refuse();
      mock.timers.tick(60_000);
      assert.deepEqual(
        lines.map((l) => l.calls),
        [1, 99, 10],
      );
      mock.timers.tick(60_000); // a minute with none: the counting ends
      refuse();
      assert.deepEqual(
        lines.map((l) => l.calls),
        [1, 99, 10, 1],
        "logged at once after a quiet minute",
      );
      log.close();
    } finally {
      mock.timers.reset();
    }
  });

  void it("each named caller is counted apart, and a caller's flood is one line a minute", () => {
    mock.timers.enable({ apis: ["setTimeout"] });
    try {
      const { lines, logger } = capturingLogger();
      const log = new RefusalLog({ logger, intervalMs: 60_000 });
      const node: Principal = { kind: "node", id: "node" };
      const viewer: Principal = { kind: "person", id: "dave", groups: [], roles: new Set(), via: "token" };
      for (let i = 0; i < 50; i++) log.denied({ method: "a/Approve", principal: node, message: "not for nodes" });
      log.denied({ method: "a/Approve", principal: viewer, message: "dave may not" });
      log.unauthenticated({ method: "a/Approve", message: "no credential" });
      assert.deepEqual(
        lines.map((l) => [l.code, l.principal, l.calls]),
        [
          ["ACCESS_DENIED", "a sandbox node", undefined],
          ["ACCESS_DENIED", "dave", undefined],
          ["CALLS_REFUSED_UNAUTHENTICATED", undefined, 1],
        ],
        "each caller's first refusal at once",
      );
      mock.timers.tick(60_000);
      assert.deepEqual(
        lines.slice(3).map((l) => [l.code, l.principal, l.calls]),
        [["ACCESS_DENIED", "a sandbox node", 49]],
        "then one line for the caller that went on",
      );
      log.close();
    } finally {
      mock.timers.reset();
    }
  });

  void it("counts at most 32 methods by name: the rest together, since an unknown path is the caller's to choose", () => {
    const { lines, logger } = capturingLogger();
    const log = new RefusalLog({ logger });
    log.unauthenticated({ method: "first/M", message: "no credential" });
    for (let i = 0; i < 100; i++) log.unauthenticated({ method: `x.Y/M${i}`, message: "no credential" });
    log.close();
    const methods = lines[1]!.methods as Record<string, number>;
    assert.equal(Object.keys(methods).length, 33);
    assert.equal(methods["(other)"], 68);
    assert.equal(lines[1]!.calls, 100);
  });
});
