// Batches to the events service over one PublishStream kept open while there
// is something to send (issue 24: a unary Publish cost the events service
// 2-5 ms of CPU whatever it carried, most of it the call's own: an HTTP/2
// stream, its headers, the credential's check; a batch on an open stream
// about a third of that, and producers send an event or two at a time). Used
// by the publisher and by the orchestrator's lifecycle outbox.
import { Code, ConnectError, type Client } from "@connectrpc/connect";
import { createWritableIterable, type WritableIterable } from "@connectrpc/connect/protocol";
import type {
  EventsService,
  PublishResponse,
  PublishStreamRequest,
  PublishStreamResponse,
  RawEvent,
} from "@oz0/proto/oz0/events/v1/events_pb";

/**
 * How long a stream stays open with nothing to send. An open stream keeps
 * the producer's connection in use, and so its process alive: a producer
 * that never ends it exits this much later.
 */
export const PUBLISH_STREAM_IDLE_MS = 2_000;

/** The service's answer to a batch: a PublishStream's, or a unary Publish's (the same fields). */
export type PublishAnswer = PublishStreamResponse | PublishResponse;

export interface PublishSender {
  /**
   * Sends one batch and resolves with the service's answer, once its events
   * are durable. One batch at a time: the caller waits for the answer before
   * it sends the next. A rejected batch was not acknowledged (send it again;
   * ids already stored are ignored). `signal` and `timeoutMs` end the stream
   * the batch waits on, as they end a unary call.
   */
  send(events: RawEvent[], options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<PublishAnswer>;
  /** Ends the stream, if one is open; a later send opens another. */
  close(): void;
}

interface OpenStream {
  requests: WritableIterable<PublishStreamRequest>;
  responses: AsyncIterator<PublishStreamResponse>;
  cancel: AbortController;
  idle: NodeJS.Timeout;
  busy: boolean;
}

/**
 * A sender over `client`. To an events service without PublishStream (older
 * than this client, or a stand-in) it sends unary Publish calls instead, for
 * as long as it lives.
 */
export function createPublishSender(client: Client<typeof EventsService>): PublishSender {
  let stream: OpenStream | undefined;
  let unaryOnly = false;

  const close = (): void => {
    const ending = stream;
    stream = undefined;
    if (!ending) return;
    clearTimeout(ending.idle);
    // Ends the request side: the service ends its own, which is read so the HTTP/2 stream closes.
    ending.requests.close();
    void ending.responses.next().catch(() => undefined);
  };

  const open = (): OpenStream => {
    const requests = createWritableIterable<PublishStreamRequest>();
    const cancel = new AbortController();
    const responses = client.publishStream(requests, { signal: cancel.signal })[Symbol.asyncIterator]();
    const opened: OpenStream = {
      requests,
      responses,
      cancel,
      busy: false,
      // One timer a stream, pushed back after each answer (refresh) rather than made again.
      idle: setTimeout(() => {
        if (stream === opened && !opened.busy) close();
      }, PUBLISH_STREAM_IDLE_MS),
    };
    opened.idle.unref();
    return opened;
  };

  const send = async (
    events: RawEvent[],
    options: { signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<PublishAnswer> => {
    const { signal, timeoutMs } = options;
    if (unaryOnly) return client.publish({ events }, { signal, timeoutMs });
    const current = (stream ??= open());
    current.busy = true;
    let timedOut = false;
    const cancel = (): void => current.cancel.abort();
    const deadline =
      timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            cancel();
          }, timeoutMs);
    signal?.addEventListener("abort", cancel, { once: true });
    if (signal?.aborted) cancel();
    try {
      const [, answer] = await Promise.all([
        current.requests.write({ $typeName: "oz0.events.v1.PublishStreamRequest", events }),
        current.responses.next(),
      ]);
      if (answer.done) {
        throw new ConnectError("the events service ended the publish stream; send the batch again", Code.Unavailable);
      }
      current.busy = false;
      current.idle.refresh();
      return answer.value;
    } catch (error) {
      // Not acknowledged: this stream is done with, and the caller sends the batch again.
      if (stream === current) close();
      if (timedOut) {
        throw new ConnectError(
          `the events service did not answer a batch within ${timeoutMs} ms`,
          Code.DeadlineExceeded,
        );
      }
      if (ConnectError.from(error).code !== Code.Unimplemented) throw error;
      unaryOnly = true;
      return client.publish({ events }, { signal, timeoutMs });
    } finally {
      clearTimeout(deadline);
      signal?.removeEventListener("abort", cancel);
    }
  };

  return { send, close };
}
