// A session's messages in bursts: the first that arrives, with every further
// one that is already there (parsed from the same read of the stream) before
// the event loop turns. A harness writes its lines in bursts (text, usage,
// a tool call and its permission request at once), and a job stores a burst
// in one transaction instead of one per message (issue 24: 11 of a job's 14
// transactions were one append per message).
//
// The stream is read on while the caller handles a burst, up to a bound, so
// what the session says meanwhile is heard then (`readAhead`): a harness that
// exits while a hook decides its call is known to be gone before the hook
// answers, and its hook can be stopped, rather than the job waiting out the
// hook's timeout with nobody left to run the call.
import type { SandboxMessage, SessionChannel } from "./session-runner.js";

/**
 * The most messages, and bytes of them, read ahead of the caller. Past either the stream is not read until the
 * caller takes them: a session that writes without end while a hook decides fills no memory beyond this.
 */
export const READ_AHEAD = { messages: 256, bytes: 4 * 1024 * 1024 };

export interface MessageBurstsOptions {
  /** Each message read while the caller still handles a burst, as it arrives; it comes in a later burst too. */
  readAhead?(message: SandboxMessage): void;
}

/** Resolves on the event loop's next turn: after the I/O callbacks and microtasks of this one. */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * The channel's messages, a burst at a time, in order. A burst is never
 * empty. While a burst is handled the stream is read on (READ_AHEAD); when
 * the caller stops early (a throw, a break) the channel is closed, so the
 * open read ends too instead of holding the call open. A stream that breaks
 * after some messages hands those over first, then throws.
 */
export async function* messageBursts(
  channel: SessionChannel,
  options: MessageBurstsOptions = {},
): AsyncGenerator<SandboxMessage[]> {
  const messages = channel[Symbol.asyncIterator]();
  const queued: SandboxMessage[] = [];
  let queuedBytes = 0;
  let end: { error: unknown } | "done" | undefined;
  let handing = false;
  let stopped = false;
  /** The caller waiting for a message or the end; the reader waiting for room. */
  let arrived: (() => void) | undefined;
  let room: (() => void) | undefined;
  const full = (): boolean =>
    queued.length >= READ_AHEAD.messages || (queued.length > 0 && queuedBytes >= READ_AHEAD.bytes);
  // Never rejects: how the stream ended is kept in `end`.
  const reading = (async () => {
    try {
      while (!stopped) {
        if (full()) {
          await new Promise<void>((resolve) => (room = resolve));
          continue;
        }
        const next = await messages.next();
        if (next.done) break;
        queued.push(next.value);
        queuedBytes += next.value.bytes ?? 0;
        if (handing) options.readAhead?.(next.value);
        arrived?.();
      }
      end ??= "done";
    } catch (error) {
      end ??= { error };
    }
    arrived?.();
  })();
  try {
    for (;;) {
      if (queued.length === 0 && !end) await new Promise<void>((resolve) => (arrived = resolve));
      arrived = undefined;
      if (queued.length === 0) {
        if (end === "done") return;
        throw end!.error;
      }
      // The rest of what was parsed from the same read arrives before the loop turns.
      await nextTurn();
      const burst = queued.splice(0);
      queuedBytes = 0;
      room?.();
      room = undefined;
      handing = true;
      try {
        yield burst;
      } finally {
        handing = false;
      }
    }
  } finally {
    stopped = true;
    room?.();
    // Stopped before the stream's end: the open read is ended by closing, and the reader with it.
    if (!end) channel.close();
    void reading;
  }
}
