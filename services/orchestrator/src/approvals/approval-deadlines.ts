// Deadlines of calls that wait for a person (`approvals.timeout` in the
// agent). The deadline itself is durable without a column of its own: it is
// the request's stored asked-at time plus the timeout of the agent version
// the job is pinned to, so a restarted orchestrator re-arms the same timers
// (and fires the ones that passed while it was down) from the store alone.
import { parseDuration } from "../agents/agent-versions.js";
import type { AgentVersionRecord, JobRecord, PermissionRecord } from "../store/job-store.js";

/** setTimeout's limit; longer waits (days) are re-armed in steps. */
const MAX_TIMER_MS = 2_147_483_647;

/** The deadline of a call that waits for a person, or undefined when it may wait for ever. */
export function approvalDeadline(
  agent: AgentVersionRecord,
  p: Pick<PermissionRecord, "requestedAt" | "needsPerson">,
): Date | undefined {
  const timeout = agent.definition.approvals?.timeout;
  if (!p.needsPerson || !timeout) return undefined;
  return new Date(p.requestedAt.getTime() + parseDuration(timeout));
}

/** Who may answer this agent's calls (user ids or group names); empty means anyone with the approver role. */
export function approversOf(agent: AgentVersionRecord): string[] {
  return agent.definition.approvals?.approvers ?? [];
}

/** The authenticated person answering a call: their id and groups, never a name the request makes up. */
export interface Answerer {
  id: string;
  groups: readonly string[];
}

/**
 * Why `answerer` may not answer a call of `job` under its agent's rules, or
 * undefined when they may. The API's role check (approver) comes first; these
 * are the agent's own rules on top.
 */
export function answerRefusal(options: {
  agent: AgentVersionRecord | undefined;
  job: Pick<JobRecord, "agentName" | "startedBy">;
  callId: string;
  answerer: Answerer;
}): string | undefined {
  const { agent, job, callId, answerer } = options;
  const approvers = agent ? approversOf(agent) : [];
  if (approvers.length > 0 && !approvers.includes(answerer.id) && !answerer.groups.some((g) => approvers.includes(g))) {
    return `${answerer.id} may not answer call ${callId}: agent ${job.agentName} lets only ${approvers.join(", ")} answer (approvals.approvers names users and groups)`;
  }
  if (agent?.definition.approvals?.prevent_self_approval && job.startedBy !== "" && job.startedBy === answerer.id) {
    return `${answerer.id} started this job and may not answer its own call ${callId}: agent ${job.agentName} sets approvals.prevent_self_approval; ask another approver`;
  }
  return undefined;
}

export class ApprovalDeadlines {
  readonly #timers = new Map<string, NodeJS.Timeout>();
  readonly #onDeadline: (jobId: string, permissionId: string) => Promise<void>;
  readonly #onError: (error: unknown) => void;

  constructor(options: {
    onDeadline: (jobId: string, permissionId: string) => Promise<void>;
    onError: (error: unknown) => void;
  }) {
    this.#onDeadline = options.onDeadline;
    this.#onError = options.onError;
  }

  /** Arms (or re-arms) the timer of one call; a deadline already past fires at once. */
  schedule(options: { jobId: string; permissionId: string; at: Date }): void {
    const key = `${options.jobId}\0${options.permissionId}`;
    this.clear(options.jobId, options.permissionId);
    const arm = (): void => {
      const wait = options.at.getTime() - Date.now();
      const timer = setTimeout(
        () => {
          if (wait > MAX_TIMER_MS) {
            arm();
            return;
          }
          this.#timers.delete(key);
          this.#onDeadline(options.jobId, options.permissionId).catch(this.#onError);
        },
        Math.max(0, Math.min(wait, MAX_TIMER_MS)),
      );
      // A waiting approval must not keep a stopping process alive; the store keeps the deadline.
      timer.unref();
      this.#timers.set(key, timer);
    };
    arm();
  }

  clear(jobId: string, permissionId: string): void {
    const key = `${jobId}\0${permissionId}`;
    clearTimeout(this.#timers.get(key));
    this.#timers.delete(key);
  }

  /** Clears every timer of one job (another replica works on it now). */
  clearJob(jobId: string): void {
    for (const [key, timer] of this.#timers) {
      if (!key.startsWith(`${jobId}\0`)) continue;
      clearTimeout(timer);
      this.#timers.delete(key);
    }
  }

  close(): void {
    for (const timer of this.#timers.values()) clearTimeout(timer);
    this.#timers.clear();
  }
}
