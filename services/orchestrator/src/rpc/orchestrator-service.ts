// Thin RPC handlers: JobService, PluginService, AgentService and SecretService
// over the domain modules. Domain errors map to Connect codes here.
import { create, type JsonObject as ProtoJsonObject } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import {
  AgentService,
  AgentVersionSchema,
  BudgetSource,
  ApprovalSchema,
  ApprovalState,
  ArtifactSchema,
  GetJobLogsResponseSchema,
  JobSchema,
  JobService,
  PluginSchema,
  PluginService,
  SecretService,
  type AgentVersion,
  JobState,
  type Approval,
  type GetJobLogsResponse,
  type Job,
  type JobEvent,
  type Plugin,
  type WatchJobResponse,
} from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { principalOf, registration, type ServiceRegistration } from "@oz0/serving";
import { existsSync, readFileSync, statSync } from "node:fs";
import type { AgentVersions } from "../agents/agent-versions.js";
import { approvalDeadline, approversOf } from "../approvals/approval-deadlines.js";
import { listApprovalsPage } from "../approvals/approval-pages.js";
import { isGraphJob, type GraphJobs } from "../graphs/graph-jobs.js";
import type { GraphRegistry, GraphVersionRecord } from "../graphs/graph-registry.js";
import { readJobStderr } from "../sessions/harness-stderr.js";
import { storedJobActivity } from "../jobs/job-activity.js";
import type { JobFeed } from "../jobs/job-feed.js";
import type { JobRunner } from "../jobs/job-runner.js";
import { JOB_STATE_TO_PROTO } from "../jobs/job-events.js";
import {
  isTerminal,
  type AgentVersionRecord,
  type JobRecord,
  type JobStateName,
  type JobStore,
  type JsonObject,
  type PermissionRecord,
  type PluginRecord,
} from "../store/job-store.js";
import { OrchestratorError } from "../orchestrator-error.js";
import type { JobTranscripts } from "../jobs/job-transcripts.js";
import { TranscriptFollowers } from "../jobs/transcript-followers.js";
import { listJobsPage } from "../jobs/job-pages.js";
import { Doorbell } from "../doorbell.js";
import { StreamsPerPerson } from "./streams-per-person.js";
import { watchJobTranscript } from "./watch-job-transcript.js";
import { watchJobs } from "./watch-jobs.js";
import { sessionBudget } from "../policy/session-budget.js";
import { checkUsageWindow } from "../jobs/usage-window.js";
import { jobUsage } from "../jobs/job-usage.js";
import { sourceWithoutCredentials, type PluginRegistry } from "../plugins/plugin-registry.js";
import type { ProviderSecrets } from "../sessions/session-runner.js";
import { orchestratorTracing } from "../tracing.js";
import type { GetUsageResponse, SummarizeUsageResponse } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";

const CODES: Record<OrchestratorError["code"], Code> = {
  not_found: Code.NotFound,
  invalid_argument: Code.InvalidArgument,
  already_exists: Code.AlreadyExists,
  failed_precondition: Code.FailedPrecondition,
  permission_denied: Code.PermissionDenied,
  unavailable: Code.Unavailable,
  internal: Code.Internal,
};

function mapError(error: unknown): never {
  if (error instanceof OrchestratorError)
    throw new ConnectError(error.message, CODES[error.code], undefined, undefined, error);
  throw error;
}

/** The person behind a call (the auth interceptor put them on its context). */
function answererOf(context: HandlerContext): { id: string; groups: readonly string[] } {
  const principal = principalOf(context);
  if (principal?.kind !== "person")
    throw new ConnectError("this call needs a person's credential", Code.PermissionDenied);
  return { id: principal.id, groups: principal.groups };
}

async function handle<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    mapError(error);
  }
}

function required(value: string, field: string): string {
  if (!value.trim()) throw new ConnectError(`${field} is required`, Code.InvalidArgument);
  return value.trim();
}

const PROTO_TO_STATE = new Map<JobState, JobStateName>(
  Object.entries(JOB_STATE_TO_PROTO).map(([k, v]) => [v, k as JobStateName]),
);

export function jobToProto(job: JobRecord): Job {
  return create(JobSchema, {
    id: job.id,
    agent: { name: job.agentName, version: job.agentVersion },
    input: job.input,
    state: JOB_STATE_TO_PROTO[job.state],
    createdAt: timestampFromDate(job.createdAt),
    updatedAt: timestampFromDate(job.updatedAt),
    ...(job.finishedAt ? { finishedAt: timestampFromDate(job.finishedAt) } : {}),
    resultText: job.resultText,
    stopReason: job.stopReason,
    error: job.error,
    sessionId: job.sessionId,
    sandboxUrl: job.sandboxUrl,
    lastSeq: BigInt(job.lastSeq),
    attachments: job.attachments,
    ...(job.startedAt ? { startedAt: timestampFromDate(job.startedAt) } : {}),
    traceId: job.traceId ?? "",
  });
}

/** What BudgetSource each of sessionBudget's sources is. */
const BUDGET_SOURCES = {
  agent: BudgetSource.AGENT,
  orchestrator_default: BudgetSource.ORCHESTRATOR_DEFAULT,
  none: BudgetSource.NONE,
} as const;

/** `defaultBudgetUsd`: the orchestrator's OZ0_DEFAULT_MAX_BUDGET_USD, which applies to an agent that sets no budget. */
export function agentToProto(a: AgentVersionRecord, defaultBudgetUsd?: number): AgentVersion {
  const budget = sessionBudget(a.definition, defaultBudgetUsd);
  return create(AgentVersionSchema, {
    budgetUsd: budget.usd ?? 0,
    budgetSource: BUDGET_SOURCES[budget.source],
    name: a.name,
    version: a.version,
    description: a.definition.description ?? "",
    runtime: a.definition.runtime,
    plugin: a.plugin,
    pluginVersion: a.pluginVersion,
    contentHash: a.contentHash,
    publishedAt: timestampFromDate(a.publishedAt),
    definition: JSON.parse(JSON.stringify({ ...a.definition, instructions_text: a.instructions })) as ProtoJsonObject,
  });
}

/** A graph in the agents' name space: runtime `graph`, its definition as the definition. */
export function graphToProto(g: GraphVersionRecord): AgentVersion {
  return create(AgentVersionSchema, {
    name: g.name,
    version: g.version,
    description: `graph harness ${g.definition.id}`,
    runtime: "graph",
    plugin: g.plugin,
    pluginVersion: g.pluginVersion,
    contentHash: g.contentHash,
    publishedAt: timestampFromDate(g.publishedAt),
    definition: JSON.parse(JSON.stringify(g.definition)) as ProtoJsonObject,
  });
}

export function pluginToProto(p: PluginRecord): Plugin {
  return create(PluginSchema, {
    name: p.name,
    version: p.version,
    description: p.description,
    // A record an earlier version kept may still hold the URL's credential.
    source: sourceWithoutCredentials(p.source),
    path: p.path,
    installedAt: timestampFromDate(p.installedAt),
    agents: p.manifest.agents ?? [],
    harnesses: (p.manifest.harnesses ?? []).map((h) => ({
      name: h.name,
      command: h.command,
      permissions: h.permissions ?? false,
      capabilities: h.capabilities ?? [],
      defaultTools: h.tools ?? [],
    })),
  });
}

const APPROVAL_STATE: Record<PermissionRecord["status"], ApprovalState> = {
  pending: ApprovalState.PENDING,
  approved: ApprovalState.APPROVED,
  denied: ApprovalState.DENIED,
  cancelled: ApprovalState.CANCELLED,
  timed_out: ApprovalState.TIMED_OUT,
};

/** Who chose a changed input; a row stored before migration 18 names nobody, so its decider says which kind did. */
function inputChangedBy(p: PermissionRecord): string {
  if (p.inputChangedBy) return p.inputChangedBy;
  return p.decider === "person" ? `person ${p.answeredBy}` : "a hook";
}

export function approvalToProto(p: PermissionRecord, job?: JobRecord, agent?: AgentVersionRecord): Approval {
  const deadline = agent ? approvalDeadline(agent, p) : undefined;
  const inputToRun = p.answerInput ?? p.input;
  return create(ApprovalSchema, {
    jobId: p.jobId,
    callId: p.id,
    sessionId: p.sessionId,
    tool: p.tool,
    ...(p.input ? { input: p.input as ProtoJsonObject } : {}),
    // What an approval runs: the hook's (or the approver's) input when one changed it, else the harness's.
    ...(inputToRun ? { inputToRun: inputToRun as ProtoJsonObject } : {}),
    ...(p.answerInput ? { inputChangedBy: inputChangedBy(p) } : {}),
    title: p.title,
    state: APPROVAL_STATE[p.status],
    requestedAt: timestampFromDate(p.requestedAt),
    ...(p.answeredAt ? { answeredAt: timestampFromDate(p.answeredAt) } : {}),
    answeredBy: p.answeredBy,
    reason: p.reason,
    ...(job ? { agent: { name: job.agentName, version: job.agentVersion } } : {}),
    ...(deadline ? { deadline: timestampFromDate(deadline) } : {}),
    approvers: agent ? approversOf(agent) : [],
  });
}

function isTerminalEvent(event: JobEvent): boolean {
  if (event.event.case !== "stateChanged") return false;
  const state = PROTO_TO_STATE.get(event.event.value.state);
  return state !== undefined && isTerminal(state);
}

export interface OrchestratorServiceDeps {
  store: JobStore;
  feed: JobFeed;
  runner: JobRunner;
  plugins: PluginRegistry;
  agents: AgentVersions;
  secrets: ProviderSecrets;
  /** The LLM proxy's metering, for GetJobUsage; absent when the proxy is a test double. */
  usage?: {
    jobUsage(jobId: string): Promise<GetUsageResponse>;
    usageBetween(since: Date, until: Date): Promise<SummarizeUsageResponse>;
  };
  /** The events service's transcripts (GetJobTranscript); absent when no events are published. */
  transcripts?: JobTranscripts;
  /** Most WatchJobTranscript streams one person holds at once (OZ0_MAX_TRANSCRIPT_WATCHES_PER_PERSON). Default 32. */
  maxTranscriptWatchesPerPerson?: number;
  /** Graph harnesses: RunAgent, CancelJob and the agent listings share their name space with agents. */
  graphs?: { jobs: GraphJobs; registry: GraphRegistry };
  /** The budget of sessions whose agent sets none (OZ0_DEFAULT_MAX_BUDGET_USD), shown with each agent version. */
  defaultBudgetUsd?: number;
}

/** A console tab per job page, and then some: beyond it, one person's streams are refused. */
export const DEFAULT_TRANSCRIPT_WATCHES_PER_PERSON = 32;

/** Stored events a watcher reads at once before following the feed. */
const WATCH_PAGE = 500;

async function* watch(
  deps: OrchestratorServiceDeps,
  jobId: string,
  afterSeq: number,
  context: HandlerContext,
  linked: Promise<unknown>,
): AsyncGenerator<WatchJobResponse> {
  await linked;
  const buffer: JobEvent[] = [];
  const bell = new Doorbell(context.signal);
  const unsubscribe = deps.feed.subscribe(jobId, (event) => {
    buffer.push(event);
    bell.ring();
  });
  try {
    // Read once, after subscribing: an end committed later reaches the buffer (issue 24: it was read twice).
    const job = await deps.store.getJob(jobId);
    if (!job) throw new ConnectError(`job ${jobId} not found; list jobs with \`oz0 jobs list\``, Code.NotFound);
    let last = afterSeq;
    for (;;) {
      const page = await deps.store.listJobEvents(jobId, last, WATCH_PAGE);
      for (const event of page) {
        yield { event } as WatchJobResponse;
        last = Number(event.seq);
        if (isTerminalEvent(event)) return;
      }
      // A short page was all there was: what was appended since is in the buffer (no read that finds nothing).
      if (page.length < WATCH_PAGE) break;
    }
    if (isTerminal(job.state) && Number(job.lastSeq) <= last) return;
    while (!context.signal.aborted) {
      while (buffer.length > 0) {
        const event = buffer.shift()!;
        if (Number(event.seq) <= last) continue;
        yield { event } as WatchJobResponse;
        last = Number(event.seq);
        if (isTerminalEvent(event)) return;
      }
      await bell.wait(() => buffer.length > 0);
    }
  } finally {
    unsubscribe();
    bell.close();
  }
}

async function* jobLogs(deps: OrchestratorServiceDeps, jobId: string): AsyncGenerator<GetJobLogsResponse> {
  if (!(await deps.store.getJob(jobId)))
    throw new ConnectError(`job ${jobId} not found; list jobs with \`oz0 jobs list\``, Code.NotFound);
  for await (const piece of readJobStderr(deps.store, jobId)) {
    yield create(GetJobLogsResponseSchema, {
      sessionId: piece.sessionId,
      text: piece.text,
      droppedBytes: BigInt(piece.droppedBytes),
    });
  }
}

export function orchestratorServices(deps: OrchestratorServiceDeps): ServiceRegistration[] {
  // The transcripts, when lifecycle events are published, and their followers: shared by every
  // WatchJobTranscript stream of this replica, one follower per job.
  const transcribing = deps.transcripts
    ? { transcripts: deps.transcripts, followers: new TranscriptFollowers(deps.transcripts) }
    : undefined;
  /** Who builds `jobId`'s transcript and follows it, once the job is known here. */
  const transcriptsOf = async (jobId: string): Promise<NonNullable<typeof transcribing>> => {
    if (!(await deps.store.getJob(jobId)))
      throw new ConnectError(`job ${jobId} not found; list jobs with \`oz0 jobs list\``, Code.NotFound);
    if (!transcribing)
      throw new ConnectError(
        "this orchestrator publishes no lifecycle events, so no transcript is built; set OZ0_EVENTS_URL",
        Code.FailedPrecondition,
      );
    return transcribing;
  };
  const transcriptWatches = new StreamsPerPerson(
    deps.maxTranscriptWatchesPerPerson ?? DEFAULT_TRANSCRIPT_WATCHES_PER_PERSON,
    {
      streams: "job transcript watches (WatchJobTranscript)",
      opensOne: "a console tab showing a job",
      setting: "OZ0_MAX_TRANSCRIPT_WATCHES_PER_PERSON",
    },
  );
  const jobs = registration(JobService, {
    runAgent: (req, context) =>
      handle(async () => {
        const name = required(req.agent, "agent");
        const startedBy = answererOf(context).id;
        if (deps.graphs && (await deps.graphs.jobs.hasGraph(name))) {
          if (req.attachments.length > 0)
            throw new ConnectError(
              `${name} is a graph; graphs take no attachments (run an agent with them instead)`,
              Code.InvalidArgument,
            );
          return { job: jobToProto(await deps.graphs.jobs.run({ graph: name, input: req.input, startedBy })) };
        }
        const principal = principalOf(context);
        return {
          job: jobToProto(
            await deps.runner.runAgent({
              agent: name,
              input: req.input,
              attachments: req.attachments,
              startedBy,
              attachFromAnywhere: principal?.kind === "person" && principal.roles.has("admin"),
            }),
          ),
        };
      }),
    getJob: (req) =>
      handle(async () => {
        const job = await deps.store.getJob(required(req.jobId, "job_id"));
        if (!job) throw new ConnectError(`job ${req.jobId} not found; list jobs with \`oz0 jobs list\``, Code.NotFound);
        const proto = jobToProto(job);
        // Only here: it reads the job's events, which ListJobs would do for every job it lists.
        proto.activity = await storedJobActivity(deps.store, job);
        return { job: proto };
      }),
    listJobs: (req) =>
      handle(async () => {
        const state = req.state ? PROTO_TO_STATE.get(req.state) : undefined;
        // An unknown state filters nothing: refused, rather than listing every job as if no filter was given.
        if (req.state && !state)
          throw new ConnectError(
            `state ${req.state} is not a job state; use one of ${[...PROTO_TO_STATE.keys()].map((s) => JobState[s]).join(", ")}`,
            Code.InvalidArgument,
          );
        const page = await listJobsPage(deps.store, {
          limit: req.limit,
          ...(state ? { state } : {}),
          agent: req.agent,
          text: req.text,
          pageToken: req.pageToken,
        });
        return { jobs: page.jobs.map(jobToProto), nextPageToken: page.nextPageToken };
      }),
    watchJob: (req, context) => {
      const jobId = required(req.jobId, "job_id");
      // Calls about a job keep their own traces, linked to the job's (tracing.ts); started here, while the call's span is active.
      // Awaited inside watch: a generator around it would cost each message one more hop (issue 24).
      return watch(deps, jobId, Number(req.afterSeq), context, orchestratorTracing.linkJob(jobId, deps.store));
    },
    watchJobs: (_req, context) => watchJobs({ feed: deps.feed, store: deps.store, toProto: jobToProto }, context),
    cancelJob: (req) =>
      handle(async () => {
        const jobId = required(req.jobId, "job_id");
        await orchestratorTracing.linkJob(jobId, deps.store);
        const cancelled =
          deps.graphs && isGraphJob({ id: jobId })
            ? await deps.graphs.jobs.cancel({ jobId, reason: req.reason })
            : await deps.runner.cancel({ jobId, reason: req.reason });
        return { job: jobToProto(cancelled) };
      }),
    getArtifacts: (req) =>
      handle(async () => {
        const job = await deps.store.getJob(required(req.jobId, "job_id"));
        if (!job) throw new ConnectError(`job ${req.jobId} not found; list jobs with \`oz0 jobs list\``, Code.NotFound);
        const found = [];
        for (const event of await deps.store.listJobEvents(job.id, 0, 100_000)) {
          if (event.event.case === "artifacts") found.push(...event.event.value.artifacts);
        }
        const artifacts = found
          .filter((a) => existsSync(a.path))
          .map((a) => create(ArtifactSchema, { ...a, sizeBytes: BigInt(statSync(a.path).size) }));
        return { artifacts, contents: req.includeContent ? artifacts.map((a) => readFileSync(a.path)) : [] };
      }),
    answerPermission: (req, context) =>
      handle(async () => {
        const jobId = required(req.jobId, "job_id");
        await orchestratorTracing.linkJob(jobId, deps.store);
        const record = await deps.runner.answerPermission({
          jobId,
          callId: required(req.callId, "call_id"),
          allow: req.allow,
          ...(req.input ? { input: req.input as JsonObject } : {}),
          reason: req.reason,
          // The authenticated principal answers; the request's answered_by is ignored.
          answeredBy: answererOf(context),
        });
        const job = await deps.store.getJob(record.jobId);
        return {
          approval: approvalToProto(
            record,
            job,
            job ? await deps.store.getAgentVersion(job.agentName, job.agentVersion) : undefined,
          ),
        };
      }),
    listApprovals: (req) =>
      handle(async () => {
        const { rows, nextPageToken } = await listApprovalsPage(deps.store, {
          ...(req.jobId ? { jobId: req.jobId } : {}),
          includeAnswered: req.includeAnswered,
          limit: req.limit,
          pageToken: req.pageToken,
        });
        return { approvals: rows.map((r) => approvalToProto(r.permission, r.job, r.agent)), nextPageToken };
      }),
    getJobLogs: (req) => jobLogs(deps, required(req.jobId, "job_id")),
    getJobUsage: (req) =>
      handle(async () => {
        const jobId = required(req.jobId, "job_id");
        const job = await deps.store.getJob(jobId);
        if (!job) throw new ConnectError(`job ${jobId} not found; list jobs with \`oz0 jobs list\``, Code.NotFound);
        const meter = deps.usage;
        if (!meter)
          throw new ConnectError(
            "this orchestrator has no LLM proxy to ask for usage; set OZ0_LLM_PROXY_URL",
            Code.FailedPrecondition,
          );
        return jobUsage(
          {
            meter: (id) => meter.jobUsage(id),
            getJob: (id) => deps.store.getJob(id),
            stepJobs: (id) => deps.graphs?.jobs.stepJobs(id) ?? Promise.resolve([]),
          },
          job,
        );
      }),
    summarizeUsage: (req) =>
      handle(async () => {
        if (!req.since || !req.until)
          throw new ConnectError(
            "SummarizeUsage needs since and until: the window whose model calls it sums (`oz0 usage --since 24h`)",
            Code.InvalidArgument,
          );
        if (!deps.usage)
          throw new ConnectError(
            "this orchestrator has no LLM proxy to ask for usage; set OZ0_LLM_PROXY_URL",
            Code.FailedPrecondition,
          );
        const since = timestampDate(req.since);
        const until = timestampDate(req.until);
        checkUsageWindow(since, until);
        return { usage: await deps.usage.usageBetween(since, until) };
      }),
    getJobTranscript: (req) =>
      handle(async () => {
        const jobId = required(req.jobId, "job_id");
        return { transcript: await (await transcriptsOf(jobId)).transcripts.transcript(jobId) };
      }),
    watchJobTranscript: async function* (req, context) {
      const jobId = required(req.jobId, "job_id");
      await orchestratorTracing.linkJob(jobId, deps.store);
      const { followers } = await transcriptsOf(jobId);
      yield* watchJobTranscript(followers, transcriptWatches, jobId, context);
    },
  });
  const plugins = registration(PluginService, {
    installPlugin: (req) =>
      handle(async () => {
        const result = await deps.plugins.install({
          source: required(req.source, "source"),
          allowHostHooks: req.allowHostHooks,
        });
        return {
          plugin: pluginToProto(result.plugin),
          published: result.published.map((a) => ({ name: a.name, version: a.version })),
          reasons: result.published.map((a) => ({ agent: a.name, reasons: a.reasons })),
          warnings: result.warnings,
        };
      }),
    listPlugins: () => handle(async () => ({ plugins: (await deps.plugins.list()).map(pluginToProto) })),
  });
  const agents = registration(AgentService, {
    listAgents: () =>
      handle(async () => ({
        agents: [
          ...(await deps.agents.list()).map((a) => agentToProto(a, deps.defaultBudgetUsd)),
          ...(deps.graphs ? await deps.graphs.registry.listLatest() : []).map(graphToProto),
        ],
      })),
    listAgentVersions: (req) =>
      handle(async () => ({
        versions: (await deps.agents.versions(required(req.name, "name"))).map((a) =>
          agentToProto(a, deps.defaultBudgetUsd),
        ),
      })),
    getAgent: (req) =>
      handle(async () => {
        const name = required(req.name, "name");
        const graph = await deps.graphs?.registry.findVersion(name);
        if (graph)
          return {
            agent: graphToProto(req.version ? await deps.graphs!.registry.resolveVersion(name, req.version) : graph),
          };
        return { agent: agentToProto(await deps.agents.resolve(name, req.version), deps.defaultBudgetUsd) };
      }),
  });
  const secrets = registration(SecretService, {
    setSecret: (req) =>
      handle(async () => {
        await deps.secrets.setSecret({ name: required(req.name, "name"), value: req.value });
        return {};
      }),
    listSecrets: () =>
      handle(async () => ({
        secrets: (await deps.secrets.listSecrets()).map((s) => ({
          name: s.name,
          ...(s.createdAt ? { createdAt: timestampFromDate(s.createdAt) } : {}),
          ...(s.updatedAt ? { updatedAt: timestampFromDate(s.updatedAt) } : {}),
        })),
      })),
    deleteSecret: (req) =>
      handle(async () => {
        await deps.secrets.deleteSecret({ name: required(req.name, "name") });
        return {};
      }),
  });
  return [jobs, plugins, agents, secrets];
}
