// WatchJobTranscript: the job's transcript (the events service's, built from
// its public, redacted events) now, and again each time the events service
// accepted new events of the job. Events that arrive while a transcript is
// being read are answered by one more read, not one each, and a transcript
// equal to the one sent last is not sent again; so the console's operation
// rows and a graph run's node statuses follow the job without the page
// asking, and without a read per event.
import { equals } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { TranscriptResponseSchema, type TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";
import type { WatchJobTranscriptResponse } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { JobTranscripts } from "../jobs/job-transcripts.js";
import { Doorbell } from "./doorbell.js";

export async function* watchJobTranscript(
  transcripts: JobTranscripts,
  jobId: string,
  context: HandlerContext,
): AsyncGenerator<WatchJobTranscriptResponse> {
  const stop = new AbortController();
  const signal = AbortSignal.any([context.signal, stop.signal]);
  const bell = new Doorbell(signal);
  let changed = false;
  let failure: { error: unknown } | undefined;
  const following = (async () => {
    try {
      for await (const _ of transcripts.changes(jobId, signal)) {
        changed = true;
        bell.ring();
      }
      // The events service ended its stream (it is shutting down): the caller watches again, and is sent the whole transcript.
      if (!signal.aborted)
        throw new ConnectError(
          "the events service stopped sending the job's events; watch again (the first answer is the whole transcript)",
          Code.Unavailable,
        );
    } catch (error) {
      failure = { error };
      bell.ring();
    }
  })();
  let sent: TranscriptResponse | undefined;
  try {
    while (!signal.aborted) {
      await bell.wait(() => changed || failure !== undefined);
      // What changed before a failure is sent first.
      if (!changed) {
        if (failure) throw failure.error;
        continue;
      }
      changed = false;
      const transcript = await transcripts.transcript(jobId);
      if (sent && equals(TranscriptResponseSchema, sent, transcript)) continue;
      sent = transcript;
      yield { transcript } as WatchJobTranscriptResponse;
    }
  } finally {
    stop.abort();
    bell.close();
    await following;
  }
}
