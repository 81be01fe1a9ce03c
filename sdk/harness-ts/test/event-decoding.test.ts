import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { equals, fromJson, toJsonString } from "@bufbuild/protobuf";
import type { JsonValue } from "@bufbuild/protobuf";
import { SessionEventSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { decodeEventLine } from "@oz0/harness/host";

const lines: Array<Record<string, unknown>> = [
  { text: { itemId: "i1", text: "héllo ✨", delta: true, role: "thinking" } },
  { text: {} },
  {
    toolCall: {
      callId: "c1",
      tool: "Bash",
      input: { command: "ls", nested: { list: [1, null, "x", { deep: true }] } },
      title: "Run ls",
    },
  },
  {
    toolResult: {
      callId: "c1",
      output: { exitCode: 0, lines: ["a", "b"], nothing: null, ok: true, ratio: 0.5 },
      isError: false,
    },
  },
  { toolResult: { callId: "c2", output: "plain text" } },
  { toolResult: { callId: "c3", output: [1, [2, [3]], {}] } },
  { toolResult: { callId: "c4", output: 42, isError: true } },
  { permissionRequest: { id: "p1", tool: "Write", input: { file_path: "/w/a" }, title: "Write a", callId: "c1" } },
  { runtimeToolCall: { id: "r1", name: "lookup", input: {} } },
  { usage: { model: "m", inputTokens: "18446744073709551615", outputTokens: 12, cacheReadTokens: "0", costUsd: 0.25 } },
  { usage: { model: "m", inputTokens: "1234567890123456789" } },
  { heartbeat: {}, time: "2026-11-29T20:00:00Z" },
  { heartbeat: {}, time: "2026-11-29T20:00:00.123456789Z" },
  { text: { text: "t" }, time: "1970-01-01T00:00:00.5Z" },
  // Forms only the reference decoder handles: they must still decode the same.
  { text: { item_id: "snake", text: "t" } },
  { text: { itemId: "i", futureField: 1 }, futureTopLevel: true },
  { heartbeat: {}, time: "2026-11-29T21:00:00+01:00" },
  { usage: { model: "m", costUsd: "Infinity" } },
  { toolResult: { callId: "c", output: null } },
  { result: { stopReason: "STOP_REASON_COMPLETED", text: "done", structuredOutput: { a: 1 }, turns: 3 } },
  { fancyNewKind: {} },
];

void describe("decodeEventLine", () => {
  for (const json of lines) {
    void it(`decodes ${JSON.stringify(json)} exactly as fromJson does`, () => {
      const decoded = decodeEventLine(JSON.stringify(json));
      assert.ok(decoded.ok, decoded.ok ? "" : decoded.detail);
      const reference = fromJson(SessionEventSchema, json as JsonValue, { ignoreUnknownFields: true });
      assert.ok(equals(SessionEventSchema, decoded.message, reference), "messages differ");
      assert.equal(toJsonString(SessionEventSchema, decoded.message), toJsonString(SessionEventSchema, reference));
    });
  }

  void it("rejects non-JSON, non-objects and wrongly typed fields", () => {
    const bad = (line: string): string => {
      const decoded = decodeEventLine(line);
      assert.equal(decoded.ok, false, line);
      return decoded.ok ? "" : decoded.reason;
    };
    assert.equal(bad("{oops"), "invalid_json");
    assert.equal(bad("[1,2]"), "invalid_message");
    assert.equal(bad('"text"'), "invalid_message");
    assert.equal(bad('{"text":{"text":5}}'), "invalid_message");
    assert.equal(bad('{"usage":{"inputTokens":"-1"}}'), "invalid_message");
    assert.equal(bad('{"toolCall":{"input":[1]}}'), "invalid_message");
  });

  void it("refuses a stop reason or protocol version by a name its enum does not have, naming the ones it has", () => {
    const detail = (line: string): string => {
      const decoded = decodeEventLine(line);
      assert.equal(decoded.ok, false, line);
      return decoded.ok ? "" : decoded.detail;
    };
    const completed = detail('{"result":{"stopReason":"completed","text":"done"}}');
    assert.match(
      completed,
      /^result\.stopReason "completed" is not a StopReason name; use one of STOP_REASON_COMPLETED, /,
    );
    assert.match(completed, /STOP_REASON_ERROR\b.*\(proto3 JSON names, upper case, or their numbers\)$/);
    assert.doesNotMatch(completed, /UNSPECIFIED/, "not a name to use");
    assert.match(detail('{"result":{"stop_reason":"DONE"}}'), /^result\.stop_reason "DONE" is not a/);
    assert.match(
      detail('{"started":{"protocolVersion":"PROTOCOL_VERSION_2"}}'),
      /^started\.protocolVersion "PROTOCOL_VERSION_2" is not a ProtocolVersion name; use one of PROTOCOL_VERSION_1 /,
    );
    // Known names and numbers decode as before; a number it does not know is the host's to judge (a version it does not speak).
    for (const line of [
      '{"result":{"stopReason":"STOP_REASON_COMPLETED"}}',
      '{"result":{"stopReason":4}}',
      '{"started":{"protocolVersion":7}}',
      '{"started":{"protocolVersion":"PROTOCOL_VERSION_1"}}',
    ])
      assert.equal(decodeEventLine(line).ok, true, line);
  });
});
