// Claimed lifecycle events as the tests expect them: every one readable.
import assert from "node:assert/strict";
import type { RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import type { StoredLifecycleEvent } from "../../src/store/job-store.js";

export function claimedEvents(claimed: StoredLifecycleEvent[]): { seq: number; event: RawEvent }[] {
  return claimed.map((c) => {
    assert.ok("event" in c, `stored lifecycle event ${c.seq} does not read: ${"unreadable" in c ? c.unreadable : ""}`);
    return c;
  });
}
