// A job's events as the orchestrator writes them, typed by the proto: an
// event is a `JobEventInit` (the generated message's init shape), so a
// misspelt case or a field of the wrong type is a compile error, not an event
// silently stored half empty. The constructors below are the shapes written
// in more than one place.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import type { TextEvent } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { JobEventSchema, JobState, type JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type {
  JobPatch,
  JobRecord,
  JobStateName,
  JobStore,
  PermissionRecord,
  StderrAppend,
} from "../store/job-store.js";
import type { LifecycleSink } from "../sessions/session-runner.js";
import type { JobFeed } from "./job-feed.js";

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

/**
 * A whole line of text the orchestrator writes into a job's events itself (a graph run's notes, its result): the
 * one text with no role. A harness's text always has one (harnessText), so a harness cannot write a line that
 * reads as the orchestrator's, whatever item id it picks.
 */
export function textNote(itemId: string, text: string, time?: Timestamp): JobEventInit {
  return { ...(time ? { time } : {}), event: { case: "text", value: { itemId, text, delta: false, role: "" } } };
}

/**
 * A harness's text as stored: its role one the protocol names, `thinking` or `assistant` (its default, and what
 * any other role is read as). An empty role once stayed empty, and with item id `graph` the console showed the
 * harness's words as the graph's own line.
 */
export function harnessText(text: TextEvent): TextEvent {
  const role = text.role === "thinking" ? "thinking" : "assistant";
  return text.role === role ? text : { ...text, role };
}

/** What a step of a job writes, besides its events. */
export interface JobStepWrites {
  job?: JobPatch;
  permissions?: PermissionRecord[];
  /** The lifecycle events reporting it (from the sink's `event`; undefined ones are left out). */
  lifecycle?: (RawEvent | undefined)[];
  stderr?: StderrAppend;
}

/**
 * One step of a job, in one transaction: its events, the job's changes,
 * permission records, and the lifecycle events reporting it. Once it
 * committed, watchers in this process hear of the events and the outbox
 * ships the lifecycle events.
 */
export async function appendJobStep(
  deps: JobStepDeps,
  step: { jobId: string; events: JobEventInit[] } & JobStepWrites,
): Promise<JobEvent[]> {
  const lifecycle = definedEvents(step.lifecycle);
  const stored = await deps.store.append({
    jobId: step.jobId,
    events: step.events.map((e) => create(JobEventSchema, e)),
    ...(step.job ? { job: step.job } : {}),
    ...(step.permissions ? { permissions: step.permissions } : {}),
    ...(lifecycle.length ? { lifecycle } : {}),
    ...(step.stderr ? { stderr: step.stderr } : {}),
  });
  return committed(deps, step.jobId, stored, lifecycle);
}

/**
 * A new job with its first events and the lifecycle events reporting it, in
 * one transaction (JobStore.createJob); then as appendJobStep.
 */
export async function createJobStep(
  deps: JobStepDeps,
  job: JobRecord,
  first: { events: JobEventInit[]; lifecycle: (RawEvent | undefined)[] },
): Promise<JobEvent[]> {
  const lifecycle = definedEvents(first.lifecycle);
  const stored = await deps.store.createJob(job, {
    events: first.events.map((e) => create(JobEventSchema, e)),
    lifecycle,
  });
  return committed(deps, job.id, stored, lifecycle);
}

interface JobStepDeps {
  store: JobStore;
  feed: JobFeed;
  lifecycle?: LifecycleSink | undefined;
}

function definedEvents(events: (RawEvent | undefined)[] | undefined): RawEvent[] {
  return (events ?? []).filter((e): e is RawEvent => e !== undefined);
}

/** What follows a step's commit: the outbox ships its lifecycle events, watchers here hear of its events. */
function committed(deps: JobStepDeps, jobId: string, stored: JobEvent[], lifecycle: RawEvent[]): JobEvent[] {
  if (lifecycle.length) deps.lifecycle?.committed();
  deps.feed.publish(jobId, stored);
  return stored;
}
