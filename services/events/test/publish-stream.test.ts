// PublishStream: a producer's batches over one stream it keeps open, each
// answered once durable, as Publish answers it (issue 24: a unary call cost
// the service a few milliseconds of CPU whatever it carried, and producers
// send an event or two at a time). The publisher uses it, and falls back to
// unary Publish against a service without it.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { Code, ConnectError, createClient, type ServiceImpl } from "@connectrpc/connect";
import { createWritableIterable } from "@connectrpc/connect/protocol";
import { startEvents, type RunningEvents } from "@oz0/events";
import { createEventPublisher, createPublishSender, eventsTransport, rawEvent } from "@oz0/events-client";
import { EventsService, type PublishStreamRequest, type RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { Authenticator, createLogger, registration, serve } from "@oz0/serving";
import { testCredentials } from "@oz0/serving/testing";
import { eventsClient, watchAll } from "./fixtures/events-client.js";
import { freePortForTest } from "./fixtures/free-port.js";
import { startTestEvents } from "./fixtures/test-service.js";

const cleanup: (() => Promise<void> | void)[] = [];
after(async () => {
  for (const step of cleanup.reverse()) await step();
});

const service = (options: { dataDir?: string; port?: number } = {}): Promise<RunningEvents> =>
  startTestEvents(cleanup, options);

/** A stand-in events service with these handlers, taking the test credentials. */
const stubEvents = (handlers: Partial<ServiceImpl<typeof EventsService>>) =>
  serve({
    name: "events-stub",
    port: 0,
    auth: new Authenticator(testCredentials.settingsFor("events")),
    logger: createLogger({ name: "events-stub", level: "silent" }),
    services: [registration(EventsService, handlers)],
  });

const batchOf = (events: RawEvent[]): PublishStreamRequest => ({
  $typeName: "oz0.events.v1.PublishStreamRequest",
  events,
});

void test("PublishStream answers each batch in order once stored, as Publish does, and ends on a batch it refuses", async () => {
  const events = await service();
  const [a, b, c] = ["job.created", "session.started", "job.completed"].map((type) =>
    rawEvent(type as "job.created", { jobId: "job-stream" }),
  );
  const requests = createWritableIterable<PublishStreamRequest>();
  const responses = eventsClient(events.url).publishStream(requests)[Symbol.asyncIterator]();
  const answer = async (request: PublishStreamRequest) => {
    const [, next] = await Promise.all([requests.write(request), responses.next()]);
    assert.equal(next.done, false, "one answer per batch");
    return next.value!;
  };
  assert.deepEqual(
    [(await answer(batchOf([a!, b!]))).accepted, (await answer(batchOf([a!, c!]))).duplicates],
    [2, 1],
    "the second batch's copy of a is a duplicate",
  );
  // Answered means stored: Watch sees them, in the order sent.
  assert.deepEqual(
    (await watchAll(events.url, { jobId: "job-stream" })).map((e) => e.type),
    ["job.created", "session.started", "job.completed"],
  );
  // One more than a call may carry (MAX_PUBLISH_BATCH).
  const tooMany = Array.from({ length: 10_001 }, () => rawEvent("job.created", { jobId: "job-big" }));
  await assert.rejects(
    Promise.all([requests.write(batchOf(tooMany)), responses.next()]),
    (error) => ConnectError.from(error).code === Code.InvalidArgument,
  );
  assert.equal((await watchAll(events.url, { jobId: "job-big" })).length, 0);
});

void test("the publisher sends its batches over one stream, and unary Publish calls to a service without PublishStream", async () => {
  const received = { streams: 0, streamBatches: 0, unary: 0, events: [] as string[] };
  const stub = (withStream: boolean) =>
    stubEvents({
      publish(request) {
        received.unary++;
        received.events.push(...request.events.map((e) => e.id));
        return { accepted: request.events.length };
      },
      ...(withStream
        ? {
            async *publishStream(requests: AsyncIterable<PublishStreamRequest>) {
              received.streams++;
              for await (const request of requests) {
                received.streamBatches++;
                received.events.push(...request.events.map((e) => e.id));
                yield { accepted: request.events.length };
              }
            },
          }
        : {}),
    });
  for (const withStream of [true, false]) {
    Object.assign(received, { streams: 0, streamBatches: 0, unary: 0, events: [] });
    const server = await stub(withStream);
    const publisher = createEventPublisher({ url: server.url, token: testCredentials.services.orchestrator });
    const sent: string[] = [];
    for (let i = 0; i < 3; i++) {
      const batch = [
        rawEvent("session.started", { jobId: `job-${i}` }),
        rawEvent("session.ended", { jobId: `job-${i}` }),
      ];
      sent.push(...batch.map((e) => e.id));
      publisher.publish(batch);
      await publisher.flush();
    }
    await publisher.close();
    await server.close();
    assert.deepEqual(received.events, sent, "every event once, in order");
    assert.deepEqual(
      [received.streams, received.streamBatches, received.unary],
      withStream ? [1, 3, 0] : [0, 0, 3],
      withStream ? "three batches on one stream" : "three unary calls",
    );
  }
});

void test("a stream the service's restart ended: the next batch goes on a new one, and each event is stored once", async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-events-stream-restart-"));
  cleanup.push(() => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePortForTest();
  const first = await startEvents({ auth: testCredentials.settingsFor("events"), port, dataDir });
  const publisher = createEventPublisher({
    url: first.url,
    token: testCredentials.services.orchestrator,
    logger: { warn: () => undefined, error: () => undefined },
    maxBackoffMs: 100,
  });
  cleanup.push(() => publisher.close());
  publisher.publish(rawEvent("session.started", { jobId: "job-restart" }));
  await publisher.flush();
  // The publisher's stream is open (idle); closing the service ends it.
  await first.close();
  const second = await service({ dataDir, port });
  publisher.publish(rawEvent("session.ended", { jobId: "job-restart" }));
  await publisher.flush();
  assert.deepEqual(
    (await watchAll(second.url, { jobId: "job-restart" })).map((e) => [e.type, e.position]),
    [
      ["session.started", 1n],
      ["session.ended", 2n],
    ],
  );
});

void test(
  "a producer that never closes its publisher still exits: an idle stream is ended",
  { timeout: 60_000 },
  async () => {
    const events = await service();
    // A process whose only work is one flushed publish: it ends once nothing holds its event loop.
    const child = spawn(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `import { createEventPublisher, createPublishSender, eventsTransport, rawEvent } from "@oz0/events-client";
       const publisher = createEventPublisher({ url: process.env.URL, token: process.env.TOKEN });
       publisher.publish(rawEvent("session.started", { jobId: "job-exit" }));
       await publisher.flush();`,
      ],
      {
        cwd: path.dirname(new URL(import.meta.url).pathname),
        env: { ...process.env, URL: events.url, TOKEN: testCredentials.services.orchestrator },
        stdio: ["ignore", "ignore", "inherit"],
      },
    );
    cleanup.push(() => void child.kill("SIGKILL"));
    const code = await new Promise((resolve) => child.once("exit", resolve));
    assert.equal(code, 0);
    assert.equal((await watchAll(events.url, { jobId: "job-exit" })).length, 1);
  },
);

void test("a sender's deadline ends the stream its batch waits on, and the batch goes again on a new one", async () => {
  const streams: string[][] = [];
  let answering = false;
  const server = await stubEvents({
    publish() {
      throw new ConnectError("streams only here", Code.FailedPrecondition);
    },
    async *publishStream(requests: AsyncIterable<PublishStreamRequest>) {
      const seen: string[] = [];
      streams.push(seen);
      for await (const request of requests) {
        seen.push(...request.events.map((e) => e.jobId));
        // The first stream never answers: a service that hangs.
        if (!answering) await new Promise(() => undefined);
        yield { accepted: request.events.length };
      }
    },
  });
  cleanup.push(() => server.close({ graceMs: 0 }));
  const sender = createPublishSender(
    createClient(EventsService, eventsTransport(server.url, testCredentials.services.orchestrator)),
  );
  const batch = [rawEvent("job.created", { jobId: "job-deadline" })];
  await assert.rejects(
    sender.send(batch, { timeoutMs: 200 }),
    (error) => ConnectError.from(error).code === Code.DeadlineExceeded,
  );
  answering = true;
  assert.equal((await sender.send(batch, { timeoutMs: 10_000 })).accepted, 1);
  sender.close();
  assert.deepEqual(streams, [["job-deadline"], ["job-deadline"]], "sent again on a second stream");
});
