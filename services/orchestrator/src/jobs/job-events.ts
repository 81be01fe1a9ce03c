// A job's events as the orchestrator writes them, typed by the proto: an
// event is a `JobEventInit` (the generated message's init shape), so a
// misspelt case or a field of the wrong type is a compile error, not an event
// silently stored half empty. The constructors below are the shapes written
// in more than one place.
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { JobState, type JobEventSchema } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { JobStateName } from "../store/job-store.js";

/** What a job event is written as; the store gives it its job id and sequence number. */
export type JobEventInit = MessageInitShape<typeof JobEventSchema>;

export const JOB_STATE_TO_PROTO: Record<JobStateName, JobState> = {
  pending: JobState.PENDING,
  running: JobState.RUNNING,
  waiting: JobState.WAITING,
  succeeded: JobState.SUCCEEDED,
  failed: JobState.FAILED,
  cancelled: JobState.CANCELLED,
};

/** The job's state changed; `reason` says why when it waits, failed or was cancelled. */
export function stateChanged(state: JobStateName, reason = ""): JobEventInit {
  return { event: { case: "stateChanged", value: { state: JOB_STATE_TO_PROTO[state], reason } } };
}

/** A whole line of text the orchestrator writes into a job's events itself (a graph run's notes, its result). */
export function textNote(itemId: string, text: string, time?: Timestamp): JobEventInit {
  return { ...(time ? { time } : {}), event: { case: "text", value: { itemId, text, delta: false, role: "" } } };
}
