// WatchJobTranscript: the job's transcript (the events service's, built from
// its public, redacted events) now, and again each time the events service
// accepted new events of the job that changed it. The streams on one job share
// one follower (`jobs/transcript-followers.ts`): one Watch of the events
// service and one transcript read per change, whatever the number of
// streams; and one person holds at most OZ0_MAX_TRANSCRIPT_WATCHES_PER_PERSON
// of them at once. So the console's operation rows and a graph run's node
// statuses follow the job without the page asking, and without a read per
// event or per stream.
import type { HandlerContext } from "@connectrpc/connect";
import type { WatchJobTranscriptResponse } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { principalOf } from "@oz0/serving";
import type { TranscriptFollowers } from "../jobs/transcript-followers.js";
import type { StreamsPerPerson } from "./streams-per-person.js";

export async function* watchJobTranscript(
  followers: TranscriptFollowers,
  streamsPerPerson: StreamsPerPerson,
  jobId: string,
  context: HandlerContext,
): AsyncGenerator<WatchJobTranscriptResponse> {
  const principal = principalOf(context);
  // Services and nodes are counted under their own names, apart from people's.
  const close = streamsPerPerson.open(
    principal?.kind === "person" ? principal.id : `${principal?.kind}:${principal?.id}`,
  );
  try {
    for await (const transcript of followers.watch(jobId, context.signal))
      yield { transcript } as WatchJobTranscriptResponse;
  } finally {
    close();
  }
}
