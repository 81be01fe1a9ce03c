// A call to a scripted provider is metered at the table's prices, for show:
// nobody was called and nobody charged. `oz0 usage` says so (nominal), and so
// does its llm.call_completed event, which the transcript shows: before, the
// event read as a real provider's call (newcomer review).
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { EventsService, PublishResponseSchema, type RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { rawAttributes } from "@oz0/events-client";
import { Authenticator, createLogger, credentialDigest, newCredential, registration, serve } from "@oz0/serving";
import { eventsUsageSink } from "../src/usage-sink.js";
import type { CallRecord } from "../src/proxy-store.js";

const call = (provider: string): CallRecord => ({
  operationId: `op-${provider}`,
  job: "job-1",
  agent: "fixer",
  session: "s1",
  provider,
  model: "claude-sonnet-5-5",
  wire: "anthropic",
  stream: false,
  status: 200,
  outcome: "ok",
  usage: { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
  costUsd: 0.0001,
  latencyMs: 3,
  estimated: false,
  startedAt: new Date(),
  attempts: 1,
});

void test("a scripted provider's calls are published as nominal, a real provider's not", async () => {
  const token = newCredential();
  const received: RawEvent[] = [];
  const events = await serve({
    name: "events",
    port: 0,
    auth: new Authenticator({ peers: { "llm-proxy": credentialDigest(token) } }),
    services: [
      registration(EventsService, {
        publish(request) {
          received.push(...request.events);
          return create(PublishResponseSchema, { accepted: request.events.length });
        },
      }),
    ],
  });
  const sink = eventsUsageSink({
    url: events.url,
    token,
    logger: createLogger({ name: "llm-proxy", level: "warn" }),
    nominal: (provider) => provider === "scripted",
  });
  try {
    sink.callCompleted(call("scripted"));
    sink.callCompleted(call("anthropic"));
    await sink.close();
    assert.deepEqual(
      received.map((e) => [rawAttributes(e).provider, rawAttributes(e).nominal]),
      [
        ["scripted", true],
        ["anthropic", false],
      ],
    );
  } finally {
    await events.close({ graceMs: 0 });
  }
});
