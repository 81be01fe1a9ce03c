// A lifecycle event's token counts are uint32 fields. A harness reports usage
// in 64 bits: a count past 32 bits made an event that encoded but never
// decoded again, and the orchestrator's outbox could never send it (nor, until
// it read rows alone, the events claimed with it). rawEvent saturates them.
import assert from "node:assert/strict";
import { test } from "node:test";
import { fromJsonString, toBinary, fromBinary, toJsonString } from "@bufbuild/protobuf";
import { rawEvent } from "@oz0/events-client";
import { RawEventSchema } from "@oz0/proto/oz0/events/v1/events_pb";

void test("token counts past 32 bits saturate at 2^32 - 1; negative and non-numbers are 0; the event reads back", () => {
  const event = rawEvent("harness.operation_completed", {
    jobId: "j1",
    tokens: { inputTokens: 2 ** 40, outputTokens: -5, cacheReadTokens: Number.NaN, cacheWriteTokens: 12.7 },
  });
  assert.deepEqual(
    [
      event.tokens?.inputTokens,
      event.tokens?.outputTokens,
      event.tokens?.cacheReadTokens,
      event.tokens?.cacheWriteTokens,
    ],
    [4_294_967_295, 0, 0, 12],
  );
  assert.equal(fromJsonString(RawEventSchema, toJsonString(RawEventSchema, event)).tokens?.inputTokens, 4_294_967_295);
  assert.equal(fromBinary(RawEventSchema, toBinary(RawEventSchema, event)).tokens?.inputTokens, 4_294_967_295);
});
