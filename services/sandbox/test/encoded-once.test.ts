// Each logged message is encoded once, for the session's log file and for
// every binary stream following the log (event-log.ts, preEncoded), instead
// of once for the file and again per stream (issue 24). What must hold: a
// binary stream, a JSON stream and the file all carry the very same messages.
import assert from "node:assert/strict";
import path from "node:path";
import { it } from "node:test";
import { equals } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { RunSessionResponseSchema, SandboxService, SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { testCredentials } from "@oz0/serving/testing";
import { readLogMessages } from "../src/session-record.js";
import { scenarioStart, SessionStream, startTestSandbox } from "./sandbox-test-kit.js";

void it("a binary stream, a JSON stream and the session's log file get the same messages", async (t) => {
  const sandbox = await startTestSandbox({ isolation: "bwrap" });
  t.after(() => sandbox.close());
  const json = createClient(
    SandboxService,
    createConnectTransport({
      baseUrl: sandbox.sandbox.url,
      httpVersion: "2",
      useBinaryFormat: false,
      interceptors: [testCredentials.caller],
    }),
  );

  // gRPC (binary) from the start; stderr pieces, then a permission request it waits on.
  const binary = new SessionStream(sandbox.client, {
    message: {
      case: "start",
      value: scenarioStart({ mode: "stderr", lines: 2, ask: true }, {}, { sessionId: "once-1" }),
    },
  });
  await binary.waitFor((m) => m.message.case === "event" && m.message.value.event.case === "permissionRequest", "p1");
  const onDisk = readLogMessages(path.join(sandbox.root, "internal", "once-1"));
  assert.ok(onDisk.length >= 3, "started, the harness's started event, the request");
  const sameAs = (expected: readonly unknown[], got: readonly unknown[], what: string): void => {
    assert.equal(got.length, expected.length, what);
    got.forEach((message, i) =>
      assert.ok(
        equals(RunSessionResponseSchema, message as never, expected[i] as never),
        `${what}: message ${i + 1} differs`,
      ),
    );
  };
  sameAs(onDisk, binary.received.slice(0, onDisk.length), "the log file and the binary stream");

  binary.send({ message: { case: "permissionAnswer", value: { id: "p1", allow: true } } });
  await binary.finished;
  assert.ok(binary.exited().status !== SessionStatus.RUNNING, "the session ended");

  // Read again from the start, once as JSON (encoded by Connect) and once as gRPC again.
  const readAll = async (client: typeof json): Promise<unknown[]> => {
    const got: unknown[] = [];
    for await (const message of client.runSession(
      (async function* () {
        yield { message: { case: "attach" as const, value: { sessionId: "once-1", afterSeq: 0n } } };
      })(),
    ))
      got.push(message);
    return got;
  };
  sameAs(binary.received, await readAll(json), "JSON");
  sameAs(binary.received, await readAll(sandbox.client), "binary, attached after the end");
  assert.ok(
    binary.received.some((m) => m.message.case === "stderr" && m.message.value.text.includes("line 1")),
    "the stream carries the session's stderr",
  );
});
