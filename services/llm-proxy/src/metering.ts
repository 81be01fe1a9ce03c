// Records what each attempt and each logical call used and cost, and rolls
// usage up per job and agent.
import { newEventId } from "@oz0/events-client";
import type { Logger } from "@oz0/serving";
import type { AttemptRecord, CallRecord, PendingAttempt, ProxyStore, TokenUsage, UsageTotals } from "./proxy-store.js";
import { recordAttempt, recordCall } from "./tracing.js";
import type { UsageSink } from "./usage-sink.js";

/**
 * A new operation id: a time-ordered UUID (version 7), made as event ids are
 * (`newEventId`), so the ids of calls made one after another sort together
 * and the stores' indexes on them grow at one end (random ids touched a page
 * of each index anywhere per call: about half of SQLite's cost per call).
 */
export function newOperationId(now = Date.now()): string {
  return newEventId(now);
}

export interface MeteringOptions {
  store: ProxyStore;
  sink: UsageSink;
  logger: Logger;
}

export interface JobUsage {
  total: UsageTotals;
  agents: Map<string, UsageTotals>;
}

export class Metering {
  readonly #store: ProxyStore;
  readonly #sink: UsageSink;
  readonly #logger: Logger;

  constructor(options: MeteringOptions) {
    this.#store = options.store;
    this.#sink = options.sink;
    this.#logger = options.logger;
  }

  /** Resolves once the record is stored (visible to every replica), or was logged as lost; never rejects. */
  attempt(record: AttemptRecord): Promise<void> {
    // Called inside the call's chat span: the attempt becomes its child.
    recordAttempt(record);
    return this.#stored(
      () => this.#store.recordAttempt(record),
      { operationId: record.operationId, attempt: record.attempt },
      "could not record a metering attempt",
    );
  }

  /**
   * Before an attempt is sent: its pending record, so a proxy that dies
   * mid-call still meters it (as interrupted, at a later start). Resolves once
   * it is durable, or was logged as lost; never rejects (a store that cannot
   * write does not stop calls, as with every metering row).
   */
  beginAttempt(pending: PendingAttempt): Promise<void> {
    return this.#stored(
      () => this.#store.beginAttempt(pending),
      { operationId: pending.operationId, attempt: pending.attempt },
      "could not record an attempt before sending it",
    );
  }

  /**
   * Meters the calls a dead proxy left in flight (all of them at start-up
   * for a store one process uses; those of replicas that stopped renewing for
   * a shared one) as interrupted, with a usage event each, and frees their
   * budget holds. Returns how many.
   */
  async reconcileInterrupted(): Promise<number> {
    const calls = await this.#store.reconcileInterrupted();
    for (const call of calls) {
      this.#sink.callCompleted(call);
      this.#logger.warn(
        { operationId: call.operationId, job: call.job, agent: call.agent, attempt: call.attempts },
        "a model call was in flight when its proxy stopped: metered as interrupted",
      );
    }
    return calls.length;
  }

  /** Like `attempt`, for the call's record; its usage event and metrics are `completed`'s. */
  call(record: CallRecord): Promise<void> {
    return this.#stored(
      () => this.#store.recordCall(record),
      { operationId: record.operationId },
      "could not record a metered call",
    );
  }

  /**
   * The call's usage event (`llm.call_completed`) and its usage on the chat span and in the
   * GenAI metrics, once the client has its answer (called inside the call's chat span): the
   * client needs neither, and publishing the event and recording the metrics were steps on
   * the answer's way out.
   */
  completed(record: CallRecord): void {
    recordCall(record);
    this.#sink.callCompleted(record);
  }

  #stored(write: () => Promise<void>, fields: Record<string, unknown>, message: string): Promise<void> {
    const failed = (error: unknown): void => {
      // The message only: a driver's error object may carry connection details.
      this.#logger.error({ ...fields, error: (error as Error).message }, message);
    };
    try {
      return write().catch(failed);
    } catch (error) {
      failed(error);
      return Promise.resolve();
    }
  }

  async usage(job: string): Promise<JobUsage> {
    return withTotal(await this.#store.usageByAgent(job));
  }

  /** Every job's calls that started in [since, until), per agent. */
  async usageBetween(since: Date, until: Date): Promise<JobUsage> {
    return withTotal(await this.#store.usageByAgentBetween(since, until));
  }
}

function withTotal(agents: Map<string, UsageTotals>): JobUsage {
  const total = emptyTotals();
  for (const totals of agents.values()) addTotals(total, totals);
  return { total, agents };
}

export function emptyTotals(): UsageTotals {
  return {
    calls: 0,
    failedCalls: 0,
    attempts: 0,
    usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
    costUsd: 0,
    estimated: false,
    providers: [],
  };
}

function addTotals(into: UsageTotals, add: UsageTotals): void {
  into.calls += add.calls;
  into.failedCalls += add.failedCalls;
  into.attempts += add.attempts;
  for (const key of Object.keys(into.usage) as (keyof TokenUsage)[]) into.usage[key] += add.usage[key];
  into.costUsd += add.costUsd;
  into.estimated ||= add.estimated;
  into.providers = [...new Set([...into.providers, ...add.providers])].sort();
}
