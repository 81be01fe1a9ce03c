// encodedSize() counts what toBinary() would write, byte for byte: the
// orchestrator weighs a node's session messages with it against the
// session's byte budget (sandbox-client.ts), where they were encoded again
// to be weighed.
import assert from "node:assert/strict";
import { test } from "node:test";
import { create, fromBinary, fromJson, toBinary, type DescMessage, type Message } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema, StructSchema, ValueSchema } from "@bufbuild/protobuf/wkt";
import { file_oz0_harness_v1_harness } from "@oz0/proto/oz0/harness/v1/harness_pb";
import {
  file_oz0_sandbox_v1_sandbox,
  RunSessionResponseSchema,
  type RunSessionResponse,
} from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { encodedSize } from "../src/sessions/encoded-size.js";

function assertSameSize(schema: DescMessage, message: Message, what: string): void {
  assert.equal(encodedSize(schema, message), toBinary(schema, message).byteLength, what);
}

const response = (json: unknown): RunSessionResponse => fromJson(RunSessionResponseSchema, json as never);

void test("a sandbox's session messages, of every kind, weigh what their encoding takes", () => {
  const input = {
    command: "ls -la",
    n: 3.5,
    neg: -1,
    big: 1e300,
    flag: false,
    none: null,
    list: [1, "two", [true, null], { deep: { deeper: ["x".repeat(300)] } }],
    empty: {},
    emptyList: [],
    unicode: "héllo ✓ 😀",
    long: "y".repeat(20_000),
    longer: "v".repeat(10_000),
  };
  const messages: [string, unknown][] = [
    [
      "started",
      {
        seq: "1",
        sessionId: "s-1",
        started: { pid: 42, isolation: "ISOLATION_MODE_BWRAP", startTime: "2026-12-07T10:00:00Z" },
      },
    ],
    ["harness started", { seq: "2", event: { started: { harnessName: "h", capabilities: { permissions: true } } } }],
    [
      "text",
      {
        seq: "3",
        sessionId: "s-1",
        event: { time: "2026-12-07T10:00:00.123456789Z", text: { text: "hi ✓", delta: true } },
      },
    ],
    ["tool call", { seq: "4", event: { toolCall: { callId: "c1", tool: "run_command", input } } }],
    ["tool result", { seq: "5", event: { toolResult: { callId: "c1", output: input, isError: true } } }],
    ["tool result of a scalar", { seq: "6", event: { toolResult: { callId: "c1", output: "text" } } }],
    ["permission request", { seq: "7", event: { permissionRequest: { id: "p", tool: "t", input: {} } } }],
    [
      "usage",
      { seq: "8", event: { usage: { model: "m", inputTokens: "123456789012", outputTokens: "7", costUsd: 0.25 } } },
    ],
    ["heartbeat", { seq: "9", event: { heartbeat: {} } }],
    ["stderr", { seq: "10", stderr: { text: "warn: ✓\n".repeat(100), droppedBytes: "4096" } }],
    [
      "exited with a result",
      {
        seq: "900000000000",
        exited: {
          exitCode: -1,
          status: "SESSION_STATUS_FAILED",
          errorCode: "x",
          result: {
            stopReason: "STOP_REASON_ERROR",
            structuredOutput: input,
            usage: [{ inputTokens: "1" }, {}],
            turns: 300,
          },
          endTime: "2026-12-07T10:00:00Z",
        },
      },
    ],
    ["exited by a signal", { seq: "11", exited: { signal: "SIGKILL", status: "SESSION_STATUS_CANCELLED" } }],
    ["exited with code 0", { seq: "12", exited: { exitCode: 0, status: "SESSION_STATUS_COMPLETED" } }],
    ["rejected", { seq: "0", rejected: { code: "unknown_permission", message: "no such permission" } }],
    ["empty", {}],
  ];
  for (const [what, json] of messages) assertSameSize(RunSessionResponseSchema, response(json), what);
});

void test("fields a newer node sends that this orchestrator does not know are weighed as they are kept", () => {
  const known = toBinary(RunSessionResponseSchema, response({ seq: "1", stderr: { text: "x" } }));
  // Field 99 (varint 300) and field 100 (20 bytes), unknown here.
  const unknown = new Uint8Array([0x98, 0x06, 0xac, 0x02, 0xa2, 0x06, 20, ...new Uint8Array(20)]);
  const message = fromBinary(RunSessionResponseSchema, new Uint8Array([...known, ...unknown]));
  assertSameSize(RunSessionResponseSchema, message, "unknown fields");
});

void test("proto2 messages with explicit presence, enums, lists and nested messages weigh what their encoding takes", () => {
  assertSameSize(FileDescriptorProtoSchema, file_oz0_harness_v1_harness.proto, "harness.proto");
  assertSameSize(FileDescriptorProtoSchema, file_oz0_sandbox_v1_sandbox.proto, "sandbox.proto");
  assertSameSize(FileDescriptorProtoSchema, create(FileDescriptorProtoSchema), "empty");
});

void test("any JSON a Struct or a Value holds weighs what its encoding takes", () => {
  let seed = 7;
  const random = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const strings = ["", "a", "é", "😀", "\ud800", "z".repeat(130), "w".repeat(17_000)];
  const value = (depth: number): unknown => {
    switch (random(depth > 3 ? 5 : 7)) {
      case 0:
        return null;
      case 1:
        return [0, -0, 1.5, -(2 ** 40), Number.MAX_VALUE][random(5)];
      case 2:
        return strings[random(strings.length)];
      case 3:
        return random(2) === 0;
      case 4:
        return undefined;
      case 5:
        return Array.from({ length: random(4) }, () => value(depth + 1));
      default:
        return Object.fromEntries(
          Array.from({ length: random(5) }, (_, i) => [`${strings[random(4)]}${i}`, value(depth + 1)]),
        );
    }
  };
  for (let i = 0; i < 300; i++) {
    const json = { root: value(0), [strings[random(strings.length)]!]: value(0) };
    const struct = fromJson(StructSchema, JSON.parse(JSON.stringify(json)));
    assertSameSize(StructSchema, struct, `Struct ${JSON.stringify(json).slice(0, 200)}`);
    assertSameSize(ValueSchema, create(ValueSchema, { kind: { case: "structValue", value: struct } }), "Value");
    // As a field, a Struct is held as the JSON object itself (undefined values in it included).
    const call = create(RunSessionResponseSchema, {
      message: {
        case: "event",
        value: { event: { case: "toolCall", value: { callId: "c", tool: "t", input: json as never } } },
      },
    });
    assertSameSize(RunSessionResponseSchema, call, `a tool call's input ${JSON.stringify(json).slice(0, 200)}`);
  }
});
