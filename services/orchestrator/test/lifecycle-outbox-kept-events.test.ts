// A claim of the lifecycle outbox hands over the events this store put there
// without decoding their JSON again (issue 24: 1.2% of the orchestrator's
// CPU), and still ships exactly what each row holds: a row whose text is not
// the text stored with the event, and an event whose text does not read
// back as itself, are read from the row as before.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { create, fromJsonString, ScalarType, toBinary, toJsonString } from "@bufbuild/protobuf";
import Database from "better-sqlite3";
import { rawEvent } from "@oz0/events-client";
import { RawEventSchema, TokenCountsSchema, type RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { readsBack, type StoredLifecycleEvent } from "../src/store/job-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";

function withStore(run: (store: SqliteJobStore, file: string) => Promise<void>): () => Promise<void> {
  return async () => {
    const home = mkdtempSync(path.join(os.tmpdir(), "oz0-outbox-kept-"));
    const file = path.join(home, "orchestrator.db");
    const store = new SqliteJobStore({ file });
    try {
      await run(store, file);
    } finally {
      await store.close();
      rmSync(home, { recursive: true, force: true });
    }
  };
}

const claimAll = (store: SqliteJobStore): Promise<StoredLifecycleEvent[]> =>
  store.claimLifecycleEvents({ limit: 100, claimMs: 60_000 });

function claimedEvent(stored: StoredLifecycleEvent | undefined): RawEvent {
  assert.ok(
    stored && "event" in stored,
    stored ? `unreadable: ${"unreadable" in stored && stored.unreadable}` : "none",
  );
  return stored.event;
}

/** What the row holds, read back: what the events service must get. */
const encodedAsStored = (event: RawEvent): Uint8Array =>
  toBinary(RawEventSchema, fromJsonString(RawEventSchema, toJsonString(RawEventSchema, event)));

void test(
  "the events this store put are claimed as themselves, encoding as their rows read",
  withStore(async (store) => {
    const events = [
      rawEvent("job.created", { jobId: "j", attributes: { harness: "fake", n: 1.5, unicode: "✓ \ud800" } }),
      rawEvent("tool.called", { jobId: "j", toolCallId: "c", attributes: { input: { command: "ls" } } }),
      rawEvent("job.completed", { jobId: "j", status: "completed", tokens: { inputTokens: 12, outputTokens: 3 } }),
    ];
    await store.putLifecycleEvents(events);
    const claimed = await claimAll(store);
    assert.equal(claimed.length, 3);
    for (const [i, stored] of claimed.entries()) {
      assert.equal(claimedEvent(stored), events[i], "the event itself, not decoded again");
      assert.deepEqual(toBinary(RawEventSchema, claimedEvent(stored)), encodedAsStored(events[i]!));
    }
    // Given back (a failed send) and claimed again: read from the rows, the same.
    await store.releaseLifecycleEvents(claimed.map((c) => c.seq));
    const again = await claimAll(store);
    for (const [i, stored] of again.entries()) {
      assert.notEqual(claimedEvent(stored), events[i]);
      assert.deepEqual(toBinary(RawEventSchema, claimedEvent(stored)), encodedAsStored(events[i]!));
    }
  }),
);

void test(
  "a row whose text is not what was stored with an event is claimed as the row says",
  withStore(async (store, file) => {
    const stored = rawEvent("job.created", { jobId: "j" });
    const other = rawEvent("job.failed", { jobId: "k" });
    await store.putLifecycleEvents([stored]);
    // Another writer of the file (a rolled-back transaction's seq used again is the same for the claim).
    const handle = new Database(file);
    try {
      handle.prepare("UPDATE lifecycle_outbox SET event = ?").run(toJsonString(RawEventSchema, other));
    } finally {
      handle.close();
    }
    const [claimed] = await claimAll(store);
    assert.equal(claimedEvent(claimed).id, other.id);
    assert.equal(claimedEvent(claimed).type, "job.failed");
  }),
);

void test(
  "an event whose text does not read back as itself is claimed as its row reads",
  withStore(async (store) => {
    const notANumber = create(RawEventSchema, { id: "e-nan", type: "job.completed", tokens: { inputTokens: 1 } });
    notANumber.tokens!.inputTokens = Number.NaN;
    const asStruct = create(RawEventSchema, {
      id: "e-struct",
      type: "job.created",
      attributes: { zero: 0 },
    });
    asStruct.attributes!.zero = -0;
    assert.equal(readsBack(notANumber), false);
    assert.equal(readsBack(asStruct), false);
    await store.putLifecycleEvents([notANumber, asStruct]);
    const [nan, struct] = await claimAll(store);
    assert.equal(claimedEvent(nan).tokens?.inputTokens, 0, "NaN is stored as null, which reads as 0");
    assert.ok(Object.is(claimedEvent(struct).attributes?.zero, 0), "-0 is stored as 0");
  }),
);

void test("RawEvent's fields are the ones readsBack knows how its JSON reads back", () => {
  // Strings read back as written; the time is refused out of range when written; the tokens and attributes are
  // checked. A new field needs its own look in readsBack before this changes.
  const known = new Set(["tokens", "attributes", "time"]);
  for (const field of RawEventSchema.fields) {
    if (known.has(field.localName)) continue;
    assert.equal(field.fieldKind === "scalar" && field.scalar, ScalarType.STRING, field.name);
  }
  assert.deepEqual(
    RawEventSchema.fields.filter((f) => known.has(f.localName)).map((f) => f.message?.typeName),
    ["google.protobuf.Timestamp", "oz0.events.v1.TokenCounts", "google.protobuf.Struct"],
  );
  assert.deepEqual(
    TokenCountsSchema.fields.map((f) => [f.localName, f.fieldKind === "scalar" && f.scalar]),
    ["inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens"].map((name) => [name, ScalarType.UINT32]),
  );
});
