// Event ids are UUIDs of version 7: unique, and in the order they were made
// from one millisecond to the next, which is what keeps the events service's
// index on ids growing at one end.
import assert from "node:assert/strict";
import { test } from "node:test";
import { newEventId, rawEvent } from "@oz0/events-client";

const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

void test("an event id is a UUID of version 7 and variant 10 whose first 48 bits are the time in milliseconds", () => {
  const now = Date.UTC(2026, 11, 2, 4, 10, 0, 123);
  const id = newEventId(now);
  assert.match(id, UUID_V7);
  assert.equal(Number.parseInt(id.slice(0, 8) + id.slice(9, 13), 16), now);
  // The earliest and the latest time 48 bits hold keep the form.
  assert.match(newEventId(0), /^00000000-0000-7/);
  assert.match(newEventId(2 ** 48 - 1), /^ffffffff-ffff-7/);
});

void test("ids made in later milliseconds sort after earlier ones, and none repeats", () => {
  const base = Date.UTC(2026, 11, 2);
  const ids: string[] = [];
  for (let ms = 0; ms < 50; ms++) for (let i = 0; i < 200; i++) ids.push(newEventId(base + ms * 37));
  assert.equal(new Set(ids).size, ids.length);
  for (let i = 200; i < ids.length; i += 200) {
    assert.ok(ids[i - 1]! < ids[i]!, `an id of ${ids[i]!.slice(0, 13)} sorts after one of ${ids[i - 1]!.slice(0, 13)}`);
  }
});

void test("rawEvent gives each event such an id unless one is given", () => {
  const before = Date.now();
  const event = rawEvent("job.created", { jobId: "job-1" });
  assert.match(event.id, UUID_V7);
  const ms = Number.parseInt(event.id.slice(0, 8) + event.id.slice(9, 13), 16);
  assert.ok(ms >= before && ms <= Date.now());
  assert.equal(rawEvent("job.created", { id: "given-1" }).id, "given-1");
});
