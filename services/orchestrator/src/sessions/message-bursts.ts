// A session's messages in bursts: the first that arrives, with every further
// one that is already there (parsed from the same read of the stream) before
// the event loop turns. A harness writes its lines in bursts (text, usage,
// a tool call and its permission request at once), and a job stores a burst
// in one transaction instead of one per message (issue 24: 11 of a job's 14
// transactions were one append per message).
import type { SandboxMessage, SessionChannel } from "./session-runner.js";

const TURNED = Symbol("turned");

/** Resolves on the event loop's next turn: after the I/O callbacks and microtasks of this one. */
function nextTurn(): Promise<typeof TURNED> {
  return new Promise((resolve) => setImmediate(resolve, TURNED));
}

/**
 * The channel's messages, a burst at a time, in order. A burst is never
 * empty. While a burst is handled the next message is already asked for;
 * when the caller stops early (a throw, a break) the channel is closed, so
 * that request ends too instead of holding the call open. A stream that
 * breaks after some messages of a burst hands those over first, then throws.
 */
export async function* messageBursts(channel: SessionChannel): AsyncGenerator<SandboxMessage[]> {
  const messages = channel[Symbol.asyncIterator]();
  let pending: Promise<IteratorResult<SandboxMessage>> | undefined;
  try {
    for (;;) {
      const asked = pending ?? messages.next();
      pending = undefined;
      const first = await asked;
      if (first.done) return;
      const burst = [first.value];
      let end: { error: unknown } | "done" | undefined;
      for (;;) {
        pending = messages.next();
        let next: IteratorResult<SandboxMessage> | typeof TURNED;
        try {
          next = await Promise.race([pending, nextTurn()]);
        } catch (error) {
          pending = undefined;
          end = { error };
          break;
        }
        // Not there yet: the next burst begins with it.
        if (next === TURNED) break;
        pending = undefined;
        if (next.done) {
          end = "done";
          break;
        }
        burst.push(next.value);
      }
      yield burst;
      if (end === "done") return;
      if (end) throw end.error;
    }
  } finally {
    if (pending) {
      // Asked for and never taken: its outcome is nobody's, and the open request is ended by closing.
      void pending.catch(() => undefined);
      channel.close();
    }
  }
}
