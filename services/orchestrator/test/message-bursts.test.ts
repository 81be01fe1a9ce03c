// A session's messages come a burst at a time: what arrived together is
// handed over together (a job stores it in one transaction), what arrives
// later is a burst of its own, a consumer that stops early closes the
// channel instead of leaving its next read open, and a stream that breaks
// loses none of the messages it delivered.
import assert from "node:assert/strict";
import { test } from "node:test";
import { messageBursts } from "../src/sessions/message-bursts.js";
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
