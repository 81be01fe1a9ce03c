// The events service refusing the orchestrator's own credential (a token
// rotated on one side only, a peer digest mistyped) is the orchestrator's
// problem, not its caller's: GetJobTranscript and WatchJobTranscript passed
// the events service's Unauthenticated on, so `oz0` told the person to log in
// again and the console, which ends its session on Unauthenticated, logged
// its person out each time they opened a job.
import assert from "node:assert/strict";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { EventsService } from "@oz0/proto/oz0/events/v1/events_pb";
import { eventsTranscripts } from "../src/jobs/job-transcripts.js";

/** An events service that refuses every call with `code`, as its auth interceptor does. */
async function refusingEventsService(t: { after(fn: () => void): void }, code: Code): Promise<string> {
  const refuse = (): never => {
    throw new ConnectError("the credential is not one this service accepts (not a known token)", code);
  };
  const server = http2.createServer(
    connectNodeAdapter({
      routes: (router) =>
        router.service(EventsService, {
          transcript: refuse,
          // eslint-disable-next-line require-yield -- it refuses before its first message, as the interceptor does
          async *watch() {
            refuse();
          },
        }),
    }),
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => server.close());
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

for (const code of [Code.Unauthenticated, Code.PermissionDenied]) {
  void test(`the events service answering ${Code[code]} to the orchestrator is the orchestrator's failure, not the caller's credential`, async (t) => {
    const transcripts = eventsTranscripts({ url: await refusingEventsService(t, code), token: "the orchestrator's" });
    const read = await transcripts.transcript("job_a").then(
      () => assert.fail("the transcript was read"),
      (error: unknown) => ConnectError.from(error),
    );
    const followed = await (async () => {
      for await (const _ of transcripts.changes("job_a", new AbortController().signal))
        assert.fail("a change was followed");
      return assert.fail("the changes ended without an error");
    })().then(
      () => assert.fail("unreachable"),
      (error: unknown) => ConnectError.from(error),
    );
    for (const error of [read, followed]) {
      assert.equal(error.code, Code.Internal, error.message);
      assert.match(error.rawMessage, /refused the orchestrator's own credential/);
      assert.match(error.rawMessage, /OZ0_SERVICE_TOKEN/);
      assert.doesNotMatch(error.rawMessage, /oz0 login/, "the person's credential is not the one refused");
    }
  });
}
