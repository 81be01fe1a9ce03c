// The SDK's real fake harness (an agent loop on @oz0/harness) against the
// scripted model, through the sandbox in both isolation modes: model calls
// reach the endpoint (through the forwarder under bubblewrap) with the
// session token and headers, the permission round trip goes over the stream,
// and the file the agent wrote comes back in the patch.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startScriptedModel, type ScriptedModel } from "@oz0/harness/testing";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { SessionStream, startTestSandbox, type TestSandbox } from "./sandbox-test-kit.js";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const FAKE_HARNESS = path.join(REPO, "sdk", "harness-ts", "bin", "oz0-fake-harness.js");

for (const isolation of ["none", "bwrap"] as const) {
  void describe(`oz0-fake-harness through the sandbox (isolation ${isolation})`, () => {
    let t: TestSandbox;
    let model: ScriptedModel;
    before(async () => {
      // The harness and its node_modules live in the repository: readable, never writable.
      t = await startTestSandbox({ isolation, readOnlyPaths: [REPO] });
      model = await startScriptedModel({
        turns: [
          { toolCalls: [{ name: "write_file", input: { path: "out/answer.txt", content: "42\n" } }] },
          { text: "I wrote the answer." },
        ],
      });
    });
    after(async () => {
      await t.close();
      await model.close();
    });

    void it("runs a model turn, asks permission over the stream, and returns the patch", async () => {
      const stream = new SessionStream(t.client, {
        message: {
          case: "start",
          value: {
            command: [process.execPath, FAKE_HARNESS],
            pluginDir: path.dirname(FAKE_HARNESS),
            artifactPaths: ["out"],
            request: {
              jobId: "job-42",
              agent: { name: "coder", version: 1 },
              model: { primary: "anthropic/claude-test" },
              input: "write the answer",
              permissions: true,
              llm: {
                anthropicBaseUrl: model.url,
                token: "session-token-42",
                headers: { "Oz0-Job": "job-42", "Oz0-Agent": "coder" },
              },
            },
          },
        },
      });
      const asked = await stream.waitFor(
        (m) => m.message.case === "event" && m.message.value.event.case === "permissionRequest",
        "a permission request",
      );
      assert(asked.message.case === "event" && asked.message.value.event.case === "permissionRequest");
      assert.equal(asked.message.value.event.value.tool, "write_file");
      stream.send({
        message: { case: "permissionAnswer", value: { id: asked.message.value.event.value.id, allow: true } },
      });
      await stream.finished;
      const exited = stream.exited();
      assert.equal(
        exited.status,
        SessionStatus.COMPLETED,
        `${exited.errorCode} ${exited.errorMessage} ${exited.stderrTail}`,
      );
      assert.equal(exited.result?.stopReason, StopReason.COMPLETED);
      assert.equal(exited.result?.text, "I wrote the answer.");
      const artifacts = stream.received.find((m) => m.message.case === "artifacts")?.message;
      assert(artifacts?.case === "artifacts");
      assert.match(artifacts.value.patch, /out\/answer\.txt[\s\S]*\+42/);
      assert.deepEqual(
        artifacts.value.files.map((f) => [f.path, new TextDecoder().decode(f.content)]),
        [["out/answer.txt", "42\n"]],
      );
      const calls = model.requests.filter((r) => !r.sideCall);
      assert.equal(calls.length, 2);
      for (const call of calls) {
        assert.equal(call.headers["x-api-key"], "session-token-42");
        assert.equal(call.headers["oz0-job"], "job-42");
        assert.equal(call.headers["oz0-agent"], "coder");
      }
    });
  });
}
