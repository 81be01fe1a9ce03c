// A session's messages come a burst at a time: what arrived together is
// handed over together (a job stores it in one transaction), what arrives
// later is a burst of its own, a consumer that stops early closes the
// channel instead of leaving its next read open, and a stream that breaks
// loses none of the messages it delivered.
import assert from "node:assert/strict";
import { test } from "node:test";
import { messageBursts, READ_AHEAD } from "../src/sessions/message-bursts.js";
import { MessageQueue } from "../src/sessions/message-queue.js";
import type { SandboxMessage, SessionChannel } from "../src/sessions/session-runner.js";

function fakeChannel(): { channel: SessionChannel; queue: MessageQueue<SandboxMessage>; closed: () => boolean } {
  const queue = new MessageQueue<SandboxMessage>();
  let closed = false;
  const channel: SessionChannel = {
    [Symbol.asyncIterator]: () => queue[Symbol.asyncIterator](),
    answerPermission: async () => undefined,
    answerRuntimeTool: async () => undefined,
    close: () => {
      closed = true;
      queue.end();
    },
  };
  return { channel, queue, closed: () => closed };
}

const started = (seq: number): SandboxMessage => ({ seq, kind: "started", sessionId: "s" });
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

void test("messages pushed together come as one burst; one pushed a turn later comes as the next; the end ends it", async () => {
  const { channel, queue, closed } = fakeChannel();
  const bursts: number[][] = [];
  const reading = (async () => {
    for await (const burst of messageBursts(channel)) bursts.push(burst.map((m) => m.seq));
  })();
  queue.push(started(1));
  queue.push(started(2));
  queue.push(started(3));
  await nextTurn();
  await nextTurn();
  queue.push(started(4));
  await nextTurn();
  await nextTurn();
  queue.push(started(5));
  queue.end();
  await reading;
  assert.deepEqual(bursts, [[1, 2, 3], [4], [5]]);
  assert.equal(closed(), false, "a stream read to its end is not closed by the reader");
});

void test("a consumer that stops in the middle of the stream closes the channel (its next read ends)", async () => {
  const { channel, queue, closed } = fakeChannel();
  queue.push(started(1));
  const reading = (async () => {
    for await (const burst of messageBursts(channel)) {
      assert.deepEqual(
        burst.map((m) => m.seq),
        [1],
      );
      throw new Error("the store refused the burst");
    }
  })();
  await assert.rejects(reading, /the store refused the burst/);
  assert.equal(closed(), true);
});

void test("a stream that breaks right after a message hands that message over, then throws", async () => {
  const channel: SessionChannel = {
    async *[Symbol.asyncIterator]() {
      yield started(1);
      yield started(2);
      throw new Error("the stream broke");
    },
    answerPermission: async () => undefined,
    answerRuntimeTool: async () => undefined,
    close: () => undefined,
  };
  const bursts: number[][] = [];
  await assert.rejects(
    (async () => {
      for await (const burst of messageBursts(channel)) bursts.push(burst.map((m) => m.seq));
    })(),
    /the stream broke/,
  );
  assert.deepEqual(bursts, [[1, 2]]);
});

// A harness that exits while a hook decides its call: its exit was read only after the burst that asked was handled,
// which waited for the hook. The stream is read on meanwhile, so the exit is heard while the hook still runs.
void test("messages that arrive while a burst is handled are heard as they come, and come in the next burst", async () => {
  const { channel, queue } = fakeChannel();
  const heard: number[] = [];
  const bursts: number[][] = [];
  const handling = Promise.withResolvers<void>();
  const reading = (async () => {
    for await (const burst of messageBursts(channel, { readAhead: (m) => heard.push(m.seq) })) {
      bursts.push(burst.map((m) => m.seq));
      if (bursts.length === 1) await handling.promise;
    }
  })();
  queue.push(started(1));
  while (bursts.length === 0) await nextTurn();
  queue.push(started(2));
  queue.push(started(3));
  while (heard.length < 2) await nextTurn();
  assert.deepEqual(heard, [2, 3], "heard while the first burst is still being handled");
  handling.resolve();
  queue.end();
  await reading;
  assert.deepEqual(bursts, [[1], [2, 3]]);
  assert.deepEqual(heard, [2, 3], "what the caller asks for in its turn is not heard ahead");
});

void test("the stream is read ahead only so far: a session writing without end while a burst is handled fills no memory", async () => {
  const { channel, queue } = fakeChannel();
  const heard: number[] = [];
  const sizes: number[] = [];
  const handling = Promise.withResolvers<void>();
  const reading = (async () => {
    for await (const burst of messageBursts(channel, { readAhead: (m) => heard.push(m.seq) })) {
      sizes.push(burst.length);
      if (sizes.length === 1) await handling.promise;
    }
  })();
  queue.push(started(0));
  while (sizes.length === 0) await nextTurn();
  const total = READ_AHEAD.messages * 2;
  for (let seq = 1; seq <= total; seq++) queue.push(started(seq));
  for (let i = 0; i < 20; i++) await nextTurn();
  assert.equal(heard.length, READ_AHEAD.messages, "read up to the bound, then not at all until the caller takes them");
  handling.resolve();
  queue.end();
  await reading;
  assert.equal(
    sizes.slice(1).reduce((a, b) => a + b, 0),
    total,
    "nothing is lost: the rest is read once the caller takes what was read ahead",
  );
  assert.ok(Math.max(...sizes) <= READ_AHEAD.messages, `no burst is larger than the bound: ${sizes.join(", ")}`);
});

void test("bytes bound the read-ahead too: one message over the bound is still read when nothing else is", async () => {
  const { channel, queue } = fakeChannel();
  const heard: number[] = [];
  const handling = Promise.withResolvers<void>();
  const bursts: number[][] = [];
  const reading = (async () => {
    for await (const burst of messageBursts(channel, { readAhead: (m) => heard.push(m.seq) })) {
      bursts.push(burst.map((m) => m.seq));
      if (bursts.length === 1) await handling.promise;
    }
  })();
  queue.push(started(0));
  while (bursts.length === 0) await nextTurn();
  for (let seq = 1; seq <= 3; seq++) queue.push({ ...started(seq), bytes: READ_AHEAD.bytes });
  for (let i = 0; i < 20; i++) await nextTurn();
  assert.deepEqual(heard, [1], "the first big one is read, the next waits for room");
  handling.resolve();
  queue.end();
  await reading;
  assert.deepEqual(bursts, [[0], [1], [2], [3]]);
});
