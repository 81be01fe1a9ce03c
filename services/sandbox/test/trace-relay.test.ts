// A session's spans join its job's trace through the sandbox's relay: the
// harness posts OTLP trace exports to the endpoint it was given (loopback,
// or its forward under bubblewrap), and the sandbox passes them on to the
// collector it exports to itself, with the collector's credential, which the
// harness never sees. Nothing but trace exports passes, and not without bound:
// a session's share of the exports in flight, a body's deadline.
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { isText, runToEnd, scenarioStart, SessionStream, startTestSandbox } from "./sandbox-test-kit.js";

const COLLECTOR_SECRET = "collector-credential-4f1d";

interface Received {
  path: string;
  authorization: string;
  contentType: string;
  body: string;
}

void describe("the sandbox's trace relay", () => {
  let collector: http.Server;
  let collectorUrl: string;
  const received: Received[] = [];
  before(async () => {
    collector = http.createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", () => {
        received.push({
          path: request.url ?? "",
          authorization: request.headers.authorization ?? "",
          contentType: request.headers["content-type"] ?? "",
          body: Buffer.concat(chunks).toString(),
        });
        response.writeHead(200, { "content-type": "application/x-protobuf" }).end();
      });
    });
    await new Promise<void>((resolve) => collector.listen(0, "127.0.0.1", resolve));
    collectorUrl = `http://127.0.0.1:${(collector.address() as AddressInfo).port}/v1/traces`;
  });
  after(() => collector.close());

  for (const isolation of ["none", "bwrap"] as const) {
    void it(`passes a session's trace exports on to the collector with its credential (${isolation})`, async () => {
      received.length = 0;
      const t = await startTestSandbox({
        isolation,
        sessionTraces: {
          url: collectorUrl,
          protocol: "http/protobuf",
          headers: { authorization: `Bearer ${COLLECTOR_SECRET}` },
        },
      });
      try {
        const stream = await runToEnd(
          t.client,
          scenarioStart({ mode: "otlp", needle: COLLECTOR_SECRET }, {}, { sessionId: `ses_relay_${isolation}` }),
        );
        const exited = stream.exited();
        const outcome = JSON.parse(exited.result?.text ?? "{}") as {
          endpoint: string;
          statuses: string[];
          leaked: boolean;
          disabled: string;
        };
        assert.ok(exited.result !== undefined, `${exited.errorCode}: ${exited.errorMessage} ${exited.stderrTail}`);
        assert.match(outcome.endpoint, /^http:\/\/127\.0\.0\.1:\d+\/sessions\/ses_relay_\w+\/[\w-]+\/v1\/traces$/);
        assert.equal(outcome.disabled, "false", "the harness's OpenTelemetry is switched on");
        assert.deepEqual(
          outcome.statuses,
          ["200", "404", "413"],
          "a trace export passes; metrics and an export past 4 MiB do not",
        );
        assert.equal(outcome.leaked, false, "the collector's credential is nowhere in the harness's environment");
        assert.equal(received.length, 1, JSON.stringify(received));
        assert.deepEqual(received[0], {
          path: "/v1/traces",
          authorization: `Bearer ${COLLECTOR_SECRET}`,
          contentType: "application/x-protobuf",
          body: "spans of the harness",
        });
      } finally {
        await t.close();
      }
    });
  }

  void it("drops a slow export's body at its deadline, and another session's exports get through meanwhile", async (ctx) => {
    received.length = 0;
    const t = await startTestSandbox({ sessionTraces: { url: collectorUrl, protocol: "http/protobuf", headers: {} } });
    ctx.after(() => t.close());
    // 16 exports trickling their bodies: before, they held every slot of the node for as long as they were open.
    const slow = new SessionStream(t.client, {
      message: {
        case: "start",
        value: scenarioStart({ mode: "slow-exports", count: 16 }, {}, { sessionId: "ses_slow" }),
      },
    });
    await slow.waitFor(isText("whole export: 429"), "its own whole export refused: its share is taken");
    const other = await runToEnd(t.client, scenarioStart({ mode: "otlp" }, {}, { sessionId: "ses_other" }));
    const outcome = JSON.parse(other.exited().result?.text ?? "{}") as { statuses: string[] };
    assert.equal(outcome.statuses[0], "200", "another session's export passes while the slow ones are held");
    await slow.finished;
    assert.deepEqual(
      JSON.parse(slow.exited().result?.text ?? "{}"),
      { "429": 12, "408": 4 },
      "its share of four held until their deadline, the rest refused at once",
    );
    assert.deepEqual(
      received.map((r) => r.body),
      ["spans of the harness"],
      "nothing of a body cut short reaches the collector",
    );
  });

  void it("leaves the harness's OpenTelemetry off when the sandbox records no traces", async () => {
    const t = await startTestSandbox();
    try {
      const stream = await runToEnd(t.client, scenarioStart({ mode: "otlp" }));
      const outcome = JSON.parse(stream.exited().result?.text ?? "{}") as { endpoint: string; disabled: string };
      assert.deepEqual(outcome, { endpoint: "", statuses: [], leaked: false, disabled: "true" });
    } finally {
      await t.close();
    }
  });
});
