// A job's transcript (GetJobTranscript): the events service builds it from
// the job's public, redacted lifecycle events; the orchestrator asks for it
// with its own service credential. Clients reach only the orchestrator (the
// events service is internal in a cluster, and `oz0` knows no other address
// when it goes to OZ0_URL or a login), and people's credentials never travel
// further than the orchestrator.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { eventsTransport } from "@oz0/events-client";
import { EventsService, type TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";

export interface JobTranscripts {
  transcript(jobId: string): Promise<TranscriptResponse>;
}

export function eventsTranscripts(options: { url: string; token?: string | undefined }): JobTranscripts {
  const client = createClient(EventsService, eventsTransport(options.url, options.token));
  return {
    async transcript(jobId) {
      try {
        return await client.transcript({ jobId }, { timeoutMs: 30_000 });
      } catch (error) {
        const err = ConnectError.from(error);
        // Its address and the connection's details stay here: the caller cannot reach that service anyway.
        if (err.code === Code.Unavailable || err.code === Code.DeadlineExceeded) {
          throw new ConnectError(
            "the events service, which builds transcripts, does not answer the orchestrator now; try again, and check that it runs",
            Code.Unavailable,
          );
        }
        throw new ConnectError(`the events service refused job ${jobId}'s transcript: ${err.rawMessage}`, err.code);
      }
    },
  };
}
