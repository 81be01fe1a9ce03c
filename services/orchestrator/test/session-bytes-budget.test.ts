// A sandbox node may send only so much about one session
// (SessionDriverOptions.maxSessionBytes, OZ0_MAX_SESSION_BYTES): each message
// was bounded, but a node sending events, stderr or artifacts without end
// filled the orchestrator's store. Past the budget the driver hands over
// nothing more, cancels the session at its node and ends following as
// `refused` with a SessionTooLargeError; the count goes on across a
// re-attach. Here on a fake node whose messages say their size; the job
// runner's side, behind a node that is the attacker's, is in
// session-bytes-budget-job.test.ts.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { SessionDriver, type SessionEnd } from "../src/sessions/session-driver.js";
import {
  SessionTooLargeError,
  type SandboxMessage,
  type SessionChannel,
  type SessionRunner,
} from "../src/sessions/session-runner.js";

/** A stderr piece of `bytes` bytes, as the node's client weighs it. */
const piece = (seq: number, bytes: number): SandboxMessage => ({
  seq,
  kind: "stderr",
  sessionId: "ses_budget",
  text: `piece ${seq}\n`,
  droppedBytes: 0,
  bytes,
});

/** A stream that sends `messages`, then ends (or breaks, as a connection the node drops). */
function channel(messages: SandboxMessage[], then: "end" | "break"): SessionChannel {
  return {
    answeredAt: Date.now(),
    answerPermission: () => Promise.resolve(),
    answerRuntimeTool: () => Promise.resolve(),
    close: () => undefined,
    async *[Symbol.asyncIterator]() {
      for (const message of messages) yield message;
      if (then === "break") throw new ConnectError("the node dropped the stream", Code.Unavailable);
    },
  };
}

/** A node whose re-attach streams are `reattaches`, in turn; it records the cancels it is asked. */
function node(reattaches: SessionChannel[] = []): SessionRunner & { cancels: string[] } {
  const runner = {
    url: "http://127.0.0.1:1",
    cancels: [] as string[],
    start: () => {
      throw new Error("sessions here are only followed");
    },
    reattach: () => reattaches.shift() ?? channel([], "end"),
    cancel: (o: { sessionId: string }) => {
      runner.cancels.push(o.sessionId);
      return Promise.resolve();
    },
  };
  return runner;
}

/** Follows the session from `first` on `runner` with a budget of `maxSessionBytes`; what was handled and how it ended. */
async function follow(options: {
  runner: SessionRunner;
  first: SessionChannel;
  maxSessionBytes: number;
  bursts?: boolean;
}): Promise<{ end: SessionEnd; handled: number[] }> {
  const driver = new SessionDriver({ maxSessionBytes: options.maxSessionBytes });
  const handled: number[] = [];
  const state = { sandbox: options.runner, channel: options.first, sandboxSeq: 0 };
  const settings = { jobId: "job_budget", sessionId: "ses_budget", state, stopped: () => false };
  const end = options.bursts
    ? await driver.follow({
        ...settings,
        handleBurst: (messages) => {
          for (const message of messages) {
            handled.push(message.seq);
            state.sandboxSeq = message.seq;
          }
          return Promise.resolve();
        },
      })
    : await driver.follow({
        ...settings,
        handle: (message) => {
          handled.push(message.seq);
          state.sandboxSeq = message.seq;
          return Promise.resolve();
        },
      });
  return { end, handled };
}

const tooLarge =
  /^session_too_large: the sandbox node at http:\/\/127\.0\.0\.1:1 sent 1200 bytes about session ses_budget, more than the 1000 a session may send \(OZ0_MAX_SESSION_BYTES\); the node was asked to cancel the session, and nothing past the budget was stored\. .*a larger OZ0_MAX_SESSION_BYTES$/;

function assertTooLarge(end: SessionEnd): void {
  assert.equal(end.kind, "refused");
  const error = end.kind === "refused" ? end.error : undefined;
  assert.ok(error instanceof SessionTooLargeError, `ended by ${String(error)}`);
  assert.match(error.message, tooLarge);
  assert.equal(error.code, "session_too_large");
}

for (const bursts of [false, true])
  void test(`a node that sends more than the budget is followed no further, and its session is cancelled there (${bursts ? "in bursts" : "one at a time"})`, async () => {
    const runner = node();
    const messages = Array.from({ length: 10 }, (_, i) => piece(i + 1, 200));
    const { end, handled } = await follow({ runner, first: channel(messages, "end"), maxSessionBytes: 1000, bursts });
    assertTooLarge(end);
    assert.deepEqual(handled, [1, 2, 3, 4, 5], "the five pieces that fit are handled; the sixth passes the budget");
    assert.deepEqual(runner.cancels, ["ses_budget"]);
  });

void test("a session that sends no more than the budget is followed to its end", async () => {
  const runner = node();
  const messages = Array.from({ length: 5 }, (_, i) => piece(i + 1, 200));
  const { end, handled } = await follow({ runner, first: channel(messages, "end"), maxSessionBytes: 1000 });
  assert.equal(end.kind, "ended");
  assert.deepEqual(handled, [1, 2, 3, 4, 5]);
  assert.deepEqual(runner.cancels, []);
});

void test("the count goes on across a re-attach: a node that breaks its stream does not start it again", async () => {
  // 600 bytes on the first stream, 600 on the re-attached one: each under the budget of 1000, both over it.
  const runner = node([channel([piece(4, 200), piece(5, 200), piece(6, 200)], "end")]);
  const first = channel([piece(1, 200), piece(2, 200), piece(3, 200)], "break");
  const { end, handled } = await follow({ runner, first, maxSessionBytes: 1000 });
  assertTooLarge(end);
  assert.deepEqual(handled, [1, 2, 3, 4, 5]);
  assert.deepEqual(runner.cancels, ["ses_budget"]);
});
