import assert from "node:assert/strict";
import { it } from "node:test";
import { SessionEventLog } from "../src/event-log.js";

void it("follows from any seq: the replay, then live messages, until the last one", async () => {
  const log = new SessionEventLog("s1");
  log.append({ case: "started", value: { pid: 1 } });
  log.append({ case: "event", value: {} });
  const seen: bigint[] = [];
  const reader = (async () => {
    for await (const message of log.follow(1, new AbortController().signal)) seen.push(message.seq);
  })();
  log.append({ case: "event", value: {} });
  await new Promise((resolve) => setImmediate(resolve));
  log.append({ case: "exited", value: {} }, { last: true });
  await reader;
  assert.deepEqual(seen, [2n, 3n, 4n]);
  assert.throws(() => log.append({ case: "event", value: {} }), /has ended/);
});

void it("stops following when the signal aborts, leaving the log as it is", async () => {
  const log = new SessionEventLog("s2");
  log.append({ case: "started", value: { pid: 1 } });
  const abort = new AbortController();
  const seen: bigint[] = [];
  const reader = (async () => {
    for await (const message of log.follow(0, abort.signal)) seen.push(message.seq);
  })();
  await new Promise((resolve) => setImmediate(resolve));
  abort.abort();
  await reader;
  assert.deepEqual(seen, [1n]);
  log.append({ case: "event", value: {} });
  assert.equal(log.lastSeq, 2);
});

void it("refuses to follow from past the end", async () => {
  const log = new SessionEventLog("s3");
  await assert.rejects(log.follow(1, new AbortController().signal).next(), /past the last seq/);
});
