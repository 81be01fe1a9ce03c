// What a job is doing now, folded from its own events in order: the
// orchestrator fills `Job.activity` from the stored events (GetJob), and the
// CLI's live status line folds the same events as WatchJob streams them, so
// both say the same thing.
//
// - a call waiting for a person outranks everything (the job is stuck on it);
// - then tool calls without a result yet;
// - a graph run shows the steps that started and have not ended;
// - otherwise a started session works with the model (a model call, or the
//   harness's own work between tool calls), and a job whose session has not
//   started is starting.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate, timestampDate } from "@bufbuild/protobuf/wkt";
import {
  JobActivityKind,
  JobActivitySchema,
  JobState,
  type JobActivity,
  type JobEvent,
} from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { approversOf } from "../approvals/approval-deadlines.js";
import { readStepNote } from "../graphs/graph-step-notes.js";
import type { JobRecord, JobStore } from "../store/job-store.js";

const ENDED = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]);

export interface TokenTotals {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
}

export class JobActivityTracker {
  #state = JobState.PENDING;
  #stateSince: Date | undefined;
  #sessionStarted = false;
  /** Tool calls without a result, by call id, in the order called. */
  readonly #tools = new Map<string, { tool: string; since: Date | undefined }>();
  /** Calls waiting for a person, by permission id. */
  readonly #waiting = new Map<string, { tool: string; since: Date | undefined }>();
  /** A graph run's steps that started and have not ended, by where they are. */
  readonly #steps = new Map<string, Date | undefined>();
  #graph = false;
  /** When the harness last got back to the model (its session started, a tool returned, an answer came). */
  #modelSince: Date | undefined;
  readonly #tokens: TokenTotals = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };

  /** Tokens the harness reported in its usage events so far (the LLM proxy's metering is the truth). */
  get tokens(): Readonly<TokenTotals> {
    return this.#tokens;
  }

  get ended(): boolean {
    return ENDED.has(this.#state);
  }

  observe(event: JobEvent): void {
    const at = event.time ? timestampDate(event.time) : undefined;
    const e = event.event;
    switch (e.case) {
      case "stateChanged":
        this.#state = e.value.state;
        this.#stateSince = at;
        return;
      case "sessionStarted":
        this.#sessionStarted = true;
        this.#modelSince = at;
        return;
      case "toolCall":
        this.#tools.set(e.value.callId, { tool: e.value.tool, since: at });
        return;
      case "toolResult":
        this.#tools.delete(e.value.callId);
        if (this.#tools.size === 0) this.#modelSince = at;
        return;
      case "permissionDecision":
        if (e.value.pending) this.#waiting.set(e.value.id, { tool: e.value.tool, since: at });
        else if (this.#waiting.delete(e.value.id) && !e.value.allow) {
          // A refused call gets no tool result: the model hears the refusal instead.
          this.#tools.delete(e.value.callId);
          if (this.#tools.size === 0) this.#modelSince = at;
        }
        return;
      case "usage":
        this.#tokens.input += Number(e.value.inputTokens);
        this.#tokens.output += Number(e.value.outputTokens);
        this.#tokens.cacheRead += Number(e.value.cacheReadTokens);
        this.#tokens.cacheWrite += Number(e.value.cacheWriteTokens);
        return;
      case "text": {
        const note = readStepNote(e.value.text);
        if (!note) return;
        this.#graph = true;
        if (note.kind === "started") this.#steps.set(note.where, at);
        else this.#steps.delete(note.where);
        return;
      }
      default:
        return;
    }
  }

  /** What the job does now. `approvers`: who may answer its waiting calls (the pinned version's `approvals.approvers`). */
  activity(approvers: readonly string[] = []): JobActivity {
    const of = (
      kind: JobActivityKind,
      since: Date | undefined,
      more: Partial<Pick<JobActivity, "tools" | "approvers" | "steps">> = {},
    ): JobActivity => {
      const activity = create(JobActivitySchema, {
        kind,
        ...(since ? { since: timestampFromDate(since) } : {}),
        ...more,
      });
      activity.summary = describeActivity(activity, this.#state);
      return activity;
    };
    if (ENDED.has(this.#state)) return of(JobActivityKind.ENDED, this.#stateSince);
    if (this.#waiting.size > 0) {
      const waiting = [...this.#waiting.values()];
      return of(JobActivityKind.APPROVAL, waiting[0]!.since, {
        tools: waiting.map((w) => w.tool),
        approvers: [...approvers],
      });
    }
    // A graph run waits on a step's call (its own job holds the call).
    if (this.#state === JobState.WAITING) return of(JobActivityKind.APPROVAL, this.#stateSince);
    if (this.#tools.size > 0) {
      const open = [...this.#tools.values()];
      return of(JobActivityKind.TOOL, open[0]!.since, { tools: open.map((t) => t.tool) });
    }
    if (this.#graph || this.#steps.size > 0) {
      const steps = [...this.#steps];
      return of(JobActivityKind.STEPS, steps[0]?.[1] ?? this.#stateSince, { steps: steps.map(([where]) => where) });
    }
    if (this.#sessionStarted) return of(JobActivityKind.MODEL, this.#modelSince);
    return of(JobActivityKind.STARTING, this.#stateSince);
  }
}

/** One line for people: "harness at work", "tool run_command", "waiting for approval of run_command by alice, reviewers". */
export function describeActivity(
  activity: Pick<JobActivity, "kind" | "tools" | "approvers" | "steps">,
  state: JobState,
): string {
  const list = (items: readonly string[]): string => items.join(", ");
  switch (activity.kind) {
    case JobActivityKind.STARTING:
      return "starting (waiting for a sandbox node and the session's start)";
    case JobActivityKind.MODEL:
      // Not "model call": the orchestrator sees no model call, only that the harness has the turn (its model, or
      // its own code between tool calls).
      return "harness at work (its model or its own code)";
    case JobActivityKind.TOOL:
      return `${activity.tools.length === 1 ? "tool" : `${activity.tools.length} tools`} ${list(activity.tools)}`;
    case JobActivityKind.APPROVAL: {
      if (activity.tools.length === 0) return "a step waits for approval (oz0 approvals list)";
      const who = activity.approvers.length > 0 ? list(activity.approvers) : "anyone with the approver role";
      return `waiting for approval of ${list(activity.tools)} by ${who}`;
    }
    case JobActivityKind.STEPS:
      return activity.steps.length === 0
        ? "between steps"
        : `${activity.steps.length === 1 ? "step" : `${activity.steps.length} steps`} ${list(activity.steps)}`;
    case JobActivityKind.ENDED:
      return (JobState[state] ?? "ended").toLowerCase();
    default:
      return "";
  }
}

/** What a stored job does now, from all its stored events (GetJob). */
export async function storedJobActivity(
  store: Pick<JobStore, "listJobEvents" | "getAgentVersion">,
  job: JobRecord,
): Promise<JobActivity> {
  const tracker = new JobActivityTracker();
  for (let after = 0; ;) {
    const page = await store.listJobEvents(job.id, after, 1_000);
    for (const event of page) tracker.observe(event);
    if (page.length === 0) break;
    after = Number(page.at(-1)!.seq);
  }
  // Approvers come from the pinned version (a graph job's "agent" is its graph: no such agent version).
  const agent = await store.getAgentVersion(job.agentName, job.agentVersion);
  return tracker.activity(agent ? approversOf(agent) : []);
}
