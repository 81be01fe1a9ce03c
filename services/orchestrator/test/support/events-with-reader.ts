// An events service on loopback for the lifecycle outbox's tests: it takes the orchestrator's events, and a
// viewer reads them back with `reader` (Watch, as the transcript does).
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { startEvents } from "@oz0/events";
import { EventsService, type PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { bearerInterceptor, credentialDigest, newCredential } from "@oz0/serving";

export async function startEventsWithReader(): Promise<{
  events: Awaited<ReturnType<typeof startEvents>>;
  /** The orchestrator's credential, the outbox's token. */
  orchestrator: string;
  /** A viewer's credential. */
  reader: string;
}> {
  const orchestrator = newCredential();
  const reader = newCredential();
  const events = await startEvents({
    port: 0,
    auth: {
      peers: { orchestrator: credentialDigest(orchestrator) },
      people: {
        tokens: [{ user: "reader", sha256: credentialDigest(reader) }],
        roles: { viewer: { users: ["reader"] } },
      },
    },
  });
  return { events, orchestrator, reader };
}

/** A job's events on the events service at `url`, in order, as the viewer `reader` reads them (Watch). */
export async function watchedEvents(url: string, reader: string, jobId: string): Promise<PublicEvent[]> {
  const client = createClient(
    EventsService,
    createGrpcTransport({ baseUrl: url, interceptors: [bearerInterceptor(reader)] }),
  );
  const events: PublicEvent[] = [];
  for await (const r of client.watch({ jobId, untilCaughtUp: true })) if (r.event) events.push(r.event);
  return events;
}
