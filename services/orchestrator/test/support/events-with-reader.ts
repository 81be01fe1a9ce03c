// An events service on loopback for the lifecycle outbox's tests: it takes the orchestrator's events, and a
// viewer reads them back with `reader` (Watch, as the transcript does).
import { startEvents } from "@oz0/events";
import { credentialDigest, newCredential } from "@oz0/serving";

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
