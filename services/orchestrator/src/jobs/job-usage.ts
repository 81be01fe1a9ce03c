// What a job's model calls used, as the LLM proxy metered them. The proxy
// meters each call under the job that made it (`Oz0-Job`), so a graph run's
// usage is its jobs' usage: each agent step's job and each of its manager's
// decisions, summed per agent and in total, and listed one by one.
import { create } from "@bufbuild/protobuf";
import {
  GetUsageResponseSchema,
  UsageSchema,
  type GetUsageResponse,
  type Usage,
} from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import {
  GetJobUsageResponseSchema,
  StepJobUsageSchema,
  type GetJobUsageResponse,
} from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { StepJobRecord } from "../store/graph-store.js";
import type { JobRecord } from "../store/job-store.js";

export interface JobUsageSources {
  /** The LLM proxy's metering of one job. */
  meter(jobId: string): Promise<GetUsageResponse>;
  getJob(jobId: string): Promise<JobRecord | undefined>;
  /** A graph run's jobs (none for an agent's job). */
  stepJobs(runId: string): Promise<StepJobRecord[]>;
}

export async function jobUsage(sources: JobUsageSources, job: JobRecord): Promise<GetJobUsageResponse> {
  const steps = await sources.stepJobs(job.id);
  if (steps.length === 0) return create(GetJobUsageResponseSchema, { usage: await sources.meter(job.id) });
  const total = create(UsageSchema);
  const agents = new Map<string, Usage>();
  const response = create(GetJobUsageResponseSchema);
  // The run's own id is metered too, in case a step ever called the model as the run.
  const own = await sources.meter(job.id);
  const metered: { record?: StepJobRecord; usage: GetUsageResponse }[] = [{ usage: own }];
  for (const record of steps) metered.push({ record, usage: await sources.meter(record.stepJobId) });
  for (const { record, usage } of metered) {
    for (const a of usage.agents) {
      const sum = agents.get(a.agent) ?? create(UsageSchema);
      if (a.usage) addUsage(sum, a.usage);
      agents.set(a.agent, sum);
    }
    if (usage.total) addUsage(total, usage.total);
    if (!record) continue;
    const stepJob = await sources.getJob(record.stepJobId);
    response.steps.push(
      create(StepJobUsageSchema, {
        jobId: record.stepJobId,
        step: record.idempotencyKey.startsWith(job.id)
          ? record.idempotencyKey.slice(job.id.length)
          : record.idempotencyKey,
        ...(stepJob ? { agent: { name: stepJob.agentName, version: stepJob.agentVersion } } : {}),
        usage: usage.total ?? create(UsageSchema),
      }),
    );
  }
  response.usage = create(GetUsageResponseSchema, {
    job: job.id,
    total,
    agents: [...agents].sort(([a], [b]) => a.localeCompare(b)).map(([agent, usage]) => ({ agent, usage })),
  });
  return response;
}

function addUsage(into: Usage, add: Usage): void {
  into.calls += add.calls;
  into.attempts += add.attempts;
  into.inputTokens += add.inputTokens;
  into.outputTokens += add.outputTokens;
  into.cacheReadTokens += add.cacheReadTokens;
  into.cacheWriteTokens += add.cacheWriteTokens;
  into.reasoningTokens += add.reasoningTokens;
  into.costUsd += add.costUsd;
  into.estimated ||= add.estimated;
  into.failedCalls += add.failedCalls;
  into.nominal ||= add.nominal;
}
