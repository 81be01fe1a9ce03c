// A job's transcript (GetJobTranscript): the events service builds it from
// the job's public, redacted lifecycle events; the orchestrator asks for it
// with its own service credential. Clients reach only the orchestrator (the
// events service is internal in a cluster, and `oz0` knows no other address
// when it goes to OZ0_URL or a login), and people's credentials never travel
// further than the orchestrator. `changes` follows the same public events
// (the events service's Watch), so WatchJobTranscript sends the transcript
// again when it changed instead of its clients asking again and again.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { eventsTransport } from "@oz0/events-client";
import { EventsService, type TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";

export interface JobTranscripts {
  transcript(jobId: string): Promise<TranscriptResponse>;
  /**
   * Yields once when it has caught up with the job's events accepted so far
   * (read the transcript then), and once for each of the job's public events
   * accepted after that, until `signal` aborts. A transcript read after a
   * yield includes the event it was for: both come from the events service's
   * one local log.
   */
  changes(jobId: string, signal: AbortSignal): AsyncIterable<void>;
}

export function eventsTranscripts(options: { url: string; token?: string | undefined }): JobTranscripts {
  const client = createClient(EventsService, eventsTransport(options.url, options.token));
  return {
    async transcript(jobId) {
      try {
        return await client.transcript({ jobId }, { timeoutMs: 30_000 });
      } catch (error) {
        throw refused(error, `job ${jobId}'s transcript`);
      }
    },
    async *changes(jobId, signal) {
      try {
        // Where the job's events end now; the transcript read at the first yield holds them all.
        let last = 0n;
        for await (const { event } of client.watch({ jobId, untilCaughtUp: true }, { signal }))
          if (event) last = event.position;
        yield;
        // 0 when the job had no event yet: from the oldest the events service keeps.
        for await (const { event } of client.watch({ jobId, fromPosition: last > 0n ? last + 1n : 0n }, { signal }))
          if (event) yield;
      } catch (error) {
        if (signal.aborted) return;
        throw refused(error, `job ${jobId}'s events`);
      }
    },
  };
}

/** What the caller is told when the events service did not answer: its address and the connection's details stay here. */
function refused(error: unknown, what: string): ConnectError {
  const err = ConnectError.from(error);
  if (err.code === Code.Unavailable || err.code === Code.DeadlineExceeded) {
    return new ConnectError(
      "the events service, which builds transcripts, does not answer the orchestrator now; try again, and check that it runs",
      Code.Unavailable,
    );
  }
  // The orchestrator asked with its own credential: a refusal of it is this deployment's to mend, and passed on as
  // it is, it told the caller their credential was refused (`oz0 login`; the console logged its person out).
  if (err.code === Code.Unauthenticated || err.code === Code.PermissionDenied) {
    return new ConnectError(
      `the events service refused the orchestrator's own credential when asked for ${what} (${err.rawMessage}): give the orchestrator the token the events service knows it by (OZ0_SERVICE_TOKEN, or OZ0_SERVICE_TOKEN_FOR_EVENTS; the events service's OZ0_PEER_ORCHESTRATOR_SHA256 is its SHA-256)`,
      Code.Internal,
    );
  }
  return new ConnectError(`the events service refused ${what}: ${err.rawMessage}`, err.code);
}
