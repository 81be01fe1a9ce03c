// The orchestrator's part of a job's trace (OpenTelemetry GenAI conventions):
//
//   invoke_agent {agent}            one per job, the root of the job's trace
//   └─ session {agent}              one per harness session (its context goes
//      │                            into SessionRequest.trace and onto the RPC)
//      ├─ execute_tool {tool}       from the harness's tool_call .. tool_result
//      │  └─ permission {tool}      from the permission request to its answer
//      │     └─ hook {name}         one per hook that gave a verdict
//      └─ execute_tool {operation}  a runtime tool call (a harness operation),
//         └─ session {agent}        whose scratch sessions nest below it
//
// Built as decorators around the SessionRunner and the LifecycleSink the job
// runner already uses, so the runner itself needs no tracing code: a job's
// start and end come from its lifecycle events, the session's steps from the
// sandbox's messages. Lifecycle events get the traceparent of the innermost
// span they belong to. Only names, ids, counts and outcomes are recorded:
// never the task, tool input or output, model text or a reason a hook wrote.
//
// The job's session token is minted and revoked in the job's trace (the
// TokenIssuer decorator), not in the trace of whichever RPC happened to start
// or end the job; calls that act on a job (approve, cancel, watch) keep their
// own traces and link the job's span (linkJob).
//
// The root span lives in this process only, so its traceparent is stored with
// the job: a replica that resumes the job (after a restart or a takeover)
// parents the job's further work to it as a remote parent (`resumed`), and a
// call about a job that runs elsewhere links it from the store. The root span
// itself ended with the process that started it (it was never exported, or
// was exported by that process only if it ended cleanly).
import { create } from "@bufbuild/protobuf";
import {
  context,
  isSpanContextValid,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Context,
  type Span,
  type SpanContext,
} from "@opentelemetry/api";
import { publicIdentifier, type LifecycleType } from "@oz0/events-client";
import type { GraphTracer } from "@oz0/graph";
import {
  PermissionAnswer_Outcome,
  StopReason,
  TraceContextSchema,
  type PermissionAnswer,
  type RuntimeToolResult,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import { SandboxNodeService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import {
  contextFromTraceparent,
  GenAi,
  oz0Tracer,
  traceContextOf,
  workMetrics,
  type UntracedRpcPolicy,
} from "@oz0/serving";
import type {
  LifecycleInit,
  LifecycleSink,
  SandboxMessage,
  SessionChannel,
  SessionRunner,
  StartSessionOptions,
  TokenIssuer,
} from "./sessions/session-runner.js";

const tracer = oz0Tracer("@oz0/orchestrator");

type WorkMetrics = ReturnType<typeof workMetrics>;

interface Traced {
  span: Span;
  ctx: Context;
  started: number;
}

interface JobTrace extends Traced {
  agent: string;
  /** Resumed here: `span` is the stored root's context, recorded by the process that started the job. */
  resumed?: boolean;
}

interface SessionTrace extends Traced {
  jobId: string;
  agent: string;
  tools: Map<string, Traced>;
  runtimeCalls: Map<string, Traced>;
  permissions: Map<string, Traced & { tool: string; callId: string; needsPerson: boolean }>;
  usage: { input: number; output: number; cacheRead: number; cacheWrite: number };
}

const TERMINAL_JOB_EVENTS = new Map<LifecycleType, "succeeded" | "failed" | "cancelled">([
  ["job.completed", "succeeded"],
  ["job.failed", "failed"],
  ["job.cancelled", "cancelled"],
  ["graph.run_completed", "succeeded"],
  ["graph.run_failed", "failed"],
  ["graph.run_cancelled", "cancelled"],
]);

/** A harness operation's end, as its call span's `oz0.operation.outcome`. */
const OPERATION_OUTCOMES: Readonly<Partial<Record<LifecycleType, string>>> = {
  "harness.operation_completed": "completed",
  "harness.operation_failed": "failed",
  "harness.operation_cancelled": "cancelled",
  "harness.operation_timed_out": "timed_out",
};

function start(
  name: string,
  parent: Context,
  attributes: Record<string, string | number | boolean>,
  kind = SpanKind.INTERNAL,
): Traced {
  const span = tracer.startSpan(name, { kind, attributes }, parent);
  return { span, ctx: trace.setSpan(parent, span), started: performance.now() };
}

/**
 * A name the harness chose (a tool, a call id, a permission id, its own name), when it may go on a span: an
 * identifier of at most 128 characters that holds no session token; else undefined, and the span goes without
 * it. A harness line may be a megabyte, so a name held whole made a span of one (and, the exporter batching
 * 512 spans, an export the collector refused with every other job's spans in it); and prose or a token the
 * session read from its environment would reach the collector, where the events service drops the same name.
 */
function harnessIdentifier(value: string): string | undefined {
  // As the events service keeps one (@oz0/events-client).
  return publicIdentifier(value);
}

/** `{operation} {name}`, or the operation alone when the harness's name may not go on a span. */
function nameWith(operation: string, harnessName: string): string {
  const name = harnessIdentifier(harnessName);
  return name === undefined ? operation : `${operation} ${name}`;
}

/** `attributes` without the ones whose value is undefined (a harness's name that may not go on a span). */
function defined(
  attributes: Record<string, string | number | boolean | undefined>,
): Record<string, string | number | boolean> {
  return Object.fromEntries(Object.entries(attributes).filter(([, v]) => v !== undefined)) as Record<
    string,
    string | number | boolean
  >;
}

/** `execute_tool {tool}` below the session: a harness's own tool, or a runtime tool (a harness operation). */
function toolSpan(
  session: Traced,
  options: { sessionId: string; tool: string; callId: string; runtime: boolean },
): Traced {
  return start(
    nameWith("execute_tool", options.tool),
    session.ctx,
    defined({
      [GenAi.operationName]: "execute_tool",
      [GenAi.toolName]: harnessIdentifier(options.tool),
      [GenAi.toolCallId]: harnessIdentifier(options.callId),
      [GenAi.conversationId]: options.sessionId,
      "oz0.tool.runtime": options.runtime,
    }),
  );
}

/** An error span: its type, also as the status message (a name, never an error's text, which may quote content). */
function fail(span: Span, errorType: string): void {
  span.setAttribute("error.type", errorType);
  span.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
}

/** A proto enum value as the lower-case name a trace viewer shows (`max_turns`, `timed_out`), never its number. */
function enumName(names: Record<number, string>, value: number): string {
  return (names[value] ?? "UNSPECIFIED").toLowerCase();
}

/**
 * serve()'s `untracedRpcs` for the orchestrator's listeners: sandbox nodes'
 * heartbeats come every few seconds and belong to no trace, so unless their
 * caller sent a trace context they leave no span (each was a lone one-span
 * trace), as serve() does for health checks. Any other call starts a trace
 * of its own.
 */
export const untracedProbes: UntracedRpcPolicy = (request) =>
  request.service.typeName === SandboxNodeService.typeName &&
  request.method.name === SandboxNodeService.method.heartbeat.name
    ? "none"
    : "root";

/** Where linkJob finds the traceparent of a job this process holds no span of. */
export interface StoredTraces {
  getJob(jobId: string): Promise<{ traceparent?: string } | undefined>;
}

/** The span context a stored traceparent names (remote), or undefined for none or a malformed one. */
function spanContextOf(traceparent: string | undefined): SpanContext | undefined {
  if (!traceparent) return undefined;
  const span = trace.getSpanContext(contextFromTraceparent(traceparent, undefined, ROOT_CONTEXT));
  return span && isSpanContextValid(span) ? span : undefined;
}

/** One per process: the hook stage and the job runner's decorators share it. */
export class OrchestratorTracing {
  readonly #jobs = new Map<string, JobTrace>();
  readonly #sessions = new Map<string, SessionTrace>();
  /** Open graph.step spans by `runId|stepPath`, and their span ids with the run (the graph job) of each. */
  readonly #graphSteps = new Map<string, Context>();
  readonly #graphStepSpans = new Map<string, string>();
  /** Root span ids of graph runs work was started in (inGraphRun): a job created there joins the run's trace. */
  readonly #graphRunSpans = new Set<string>();
  /** Sessions of jobs resumed here, by session id, until re-attached: their session span starts then. */
  readonly #resumedSessions = new Map<string, string>();
  /** The job context each live session token was minted in (by token id), for its revoke. */
  readonly #tokenTraces = new Map<string, Context>();
  /**
   * What a job's `job.created` (or `graph.run_started`) replaced, when its id was known here already (a
   * creation asked again with the same id, which the store refuses): restored when that creation is withdrawn.
   */
  readonly #replaced = new Map<string, JobTrace>();
  #instruments: { jobs: WorkMetrics; sessions: WorkMetrics; approvals: WorkMetrics } | undefined;

  // Created on first use, not at import: the metrics API has no proxy, so an
  // instrument made before startTelemetry registers the provider stays a no-op.
  get #metrics(): { jobs: WorkMetrics; sessions: WorkMetrics; approvals: WorkMetrics } {
    this.#instruments ??= {
      jobs: workMetrics("job", "Jobs"),
      sessions: workMetrics("session", "Harness sessions"),
      approvals: workMetrics("approval", "Tool calls that waited for a person"),
    };
    return this.#instruments;
  }

  /** The SessionRunner with a session span around every session it starts. */
  sessionRunner(inner: SessionRunner): SessionRunner {
    return {
      url: inner.url,
      start: (options) => this.#start(inner, options),
      reattach: (options) => this.#reattach(inner, options),
      cancel: (options) => inner.cancel(options),
    };
  }

  /**
   * The TokenIssuer with each job's token minted and revoked in the job's
   * trace, below its `invoke_agent` span. The job's work runs on in the async
   * context of the RPC that started it (and a cancel ends it in the cancel's),
   * so without this the revoke at the job's end was a child of a 40 ms
   * RunAgent call, outside the job's trace. The revoke follows the job's last
   * event, which ends the job's span: it is the one child that starts after.
   */
  tokenIssuer(inner: TokenIssuer): TokenIssuer {
    return {
      mint: async (options) => {
        const ctx = this.#jobs.get(options.jobId)?.ctx;
        if (!ctx) return inner.mint(options);
        const minted = await context.with(ctx, () => inner.mint(options));
        this.#tokenTraces.set(minted.tokenId, ctx);
        return minted;
      },
      revoke: (options) => {
        const ctx = this.#tokenTraces.get(options.tokenId);
        if (!ctx) return inner.revoke(options);
        this.#tokenTraces.delete(options.tokenId);
        return context.with(ctx, () => inner.revoke(options));
      },
    };
  }

  /**
   * Links the active span (an RPC that approves, cancels or watches a job) to
   * the job's `invoke_agent` span: the call keeps its own trace, and a viewer
   * goes from either to the other. A job this replica works on is linked from
   * memory; any other (run elsewhere, ended, or started before a restart) from
   * its stored traceparent. A job stored without one (from before it was
   * kept) is only named (`oz0.job.id`). Never fails the call: a store that
   * cannot be read leaves the call unlinked.
   */
  async linkJob(jobId: string, store: StoredTraces): Promise<void> {
    // Taken now: the handler's span is the active one only until its first await.
    const span = trace.getActiveSpan();
    if (!span?.isRecording()) return;
    span.setAttribute("oz0.job.id", jobId);
    let job = this.#jobs.get(jobId)?.span.spanContext();
    if (!job) {
      const stored = await store.getJob(jobId).catch(() => undefined);
      job = spanContextOf(stored?.traceparent);
    }
    if (job && isSpanContextValid(job)) span.addLink({ context: job, attributes: { "oz0.job.id": jobId } });
  }

  /**
   * A job this process did not start is worked on here (a restart, a
   * takeover): its further work (sessions, the token's revoke, permission
   * spans, its lifecycle events' traceparent) goes below its stored root span,
   * a remote parent, so the job stays one trace. A job stored without a
   * traceparent is left as before: its later work is in traces of its own.
   */
  resumed(job: { id: string; agentName: string; sessionId: string; traceparent?: string; tokenId: string }): void {
    if (this.#jobs.has(job.id)) return;
    const root = spanContextOf(job.traceparent);
    if (!root) return;
    const ctx = trace.setSpanContext(ROOT_CONTEXT, root);
    this.#jobs.set(job.id, {
      span: trace.wrapSpanContext(root),
      ctx,
      started: performance.now(),
      agent: job.agentName,
      resumed: true,
    });
    // The token minted before the restart is revoked in the job's trace too (at its end, or before a new one).
    if (job.tokenId) this.#tokenTraces.set(job.tokenId, ctx);
    if (job.sessionId) this.#resumedSessions.set(job.sessionId, job.id);
  }

  /** The LifecycleSink (or none) with job spans from the job's events and a traceparent on each event. */
  lifecycleSink(inner: LifecycleSink | undefined): LifecycleSink {
    const stamped = (type: LifecycleType, init: LifecycleInit): LifecycleInit => {
      // A job's last event ends its span (observing it forgets the job): its context is taken first,
      // so job.completed and the like carry the job's trace like every other event of it.
      const ending = TERMINAL_JOB_EVENTS.has(type) ? this.#contextOf(init) : undefined;
      this.#observeLifecycle(type, init);
      const ctx = ending ?? this.#contextOf(init);
      const traceparent = ctx ? traceContextOf(ctx).traceparent : "";
      return traceparent ? { ...init, traceparent } : init;
    };
    return {
      // Stamped (and observed, for the job's spans) first, whether or not an inner sink publishes.
      event: (type, init) => {
        const stampedInit = stamped(type, init);
        return inner?.event(type, stampedInit);
      },
      committed: () => inner?.committed(),
      publish: (type, init) => {
        const stampedInit = stamped(type, init);
        inner?.publish(type, stampedInit);
      },
      close: async () => {
        await inner?.close();
      },
      traceparentOf: (jobId) => {
        const ctx = this.#jobs.get(jobId)?.ctx;
        return (ctx && traceContextOf(ctx).traceparent) || undefined;
      },
      resumed: (job) => this.resumed(job),
      withdrawn: (jobId) => this.#withdrawn(jobId),
      traceIdOf: (jobId) => {
        const span = this.#jobs.get(jobId)?.span.spanContext();
        // A trace nobody records (no exporter, or not sampled) has no id worth showing.
        return span && isSpanContextValid(span) && (span.traceFlags & TraceFlags.SAMPLED) !== 0
          ? span.traceId
          : undefined;
      },
    };
  }

  /** Runs one hook's evaluation in a `hook {name}` span below the permission request it decides. */
  async traceHook<T extends { decision: string }>(
    options: { sessionId: string; permissionId: string; hook: string; source: string },
    run: () => Promise<T>,
  ): Promise<T> {
    const session = this.#sessions.get(options.sessionId);
    const parent = session?.permissions.get(options.permissionId)?.ctx ?? session?.ctx;
    if (!parent) return run();
    const hook = start(`hook ${options.hook}`, parent, {
      "oz0.hook.name": options.hook,
      "oz0.hook.source": options.source,
    });
    try {
      const verdict = await run();
      hook.span.setAttribute("oz0.hook.decision", verdict.decision);
      return verdict;
    } catch (error) {
      fail(hook.span, "hook_error");
      throw error;
    } finally {
      hook.span.end();
    }
  }

  /**
   * The tracer hook for a graph job's GraphRunner: its `graph.step` spans (run
   * id, node, path, iteration and attempt as attributes) nest below the graph
   * run's span. A step's error message is dropped: it may quote content.
   */
  graphTracer(jobId: string): GraphTracer {
    return {
      startSpan: (name, options) => {
        const parent = this.#jobs.get(jobId)?.ctx ?? ROOT_CONTEXT;
        const span = tracer.startSpan(name, { attributes: options?.attributes ?? {} }, parent);
        const key = `${String(options?.attributes?.["oz0.run_id"] ?? jobId)}|${String(options?.attributes?.["oz0.step_path"] ?? "")}`;
        this.#graphSteps.set(key, trace.setSpan(parent, span));
        this.#graphStepSpans.set(span.spanContext().spanId, jobId);
        return {
          setStatus: (status: { code: number }) =>
            // The step's own message may quote content: a fixed one says what happened.
            span.setStatus(
              status.code === 2
                ? { code: SpanStatusCode.ERROR, message: "graph_step_failed" }
                : { code: SpanStatusCode.UNSET },
            ),
          end: () => {
            span.end();
            this.#graphSteps.delete(key);
            this.#graphStepSpans.delete(span.spanContext().spanId);
          },
        };
      },
    };
  }

  /**
   * Runs `work` (starting a graph step's agent job, or a custom step's
   * session) with the step's span active, so the step's job is an
   * `invoke_agent` child of its `graph.step` instead of the root of a trace
   * of its own, and a custom step's session is a child of its step.
   */
  inGraphStep<T>(step: { runId: string; path: string }, work: () => T): T {
    const ctx = this.#graphSteps.get(`${step.runId}|${step.path}`);
    return ctx ? context.with(ctx, work) : work();
  }

  /**
   * Runs `work` (starting a graph manager's job) with the graph run's span
   * active, so the job deciding the run's control event is an
   * `invoke_agent` child of the run instead of the root of a trace of its
   * own, linked to whichever RPC happened to start (or resume) the run.
   */
  inGraphRun<T>(runId: string, work: () => T): T {
    const run = this.#jobs.get(runId);
    if (!run) return work();
    this.#graphRunSpans.add(run.span.spanContext().spanId);
    return context.with(run.ctx, work);
  }

  #start(inner: SessionRunner, options: StartSessionOptions): SessionChannel {
    const request = options.request;
    const job = this.#jobs.get(request.jobId);
    const parentSession = options.shareWorkingDirOf ? this.#sessions.get(options.shareWorkingDirOf) : undefined;
    // A graph's custom step runs as a session of the graph job, started inside its step's span (inGraphStep).
    // Only a step of this session's own job: an agent step's job starts its sessions in that context too.
    const active = trace.getSpanContext(context.active());
    const graphStep =
      active && this.#graphStepSpans.get(active.spanId) === request.jobId ? context.active() : undefined;
    // A harness operation's scratch session nests below the runtime tool call that asked for it.
    const parent =
      (parentSession && [...parentSession.runtimeCalls.values()].at(-1)?.ctx) ??
      parentSession?.ctx ??
      graphStep ??
      job?.ctx ??
      ROOT_CONTEXT;
    const session = this.#openSession(
      { sessionId: request.sessionId, jobId: request.jobId, agent: request.agent?.name ?? job?.agent ?? "" },
      parent,
      {
        "oz0.sandbox.url": inner.url,
        ...(options.shareWorkingDirOf ? { "oz0.session.shares_working_dir_of": options.shareWorkingDirOf } : {}),
      },
    );
    const { traceparent, tracestate } = traceContextOf(session.ctx);
    if (traceparent) request.trace = create(TraceContextSchema, { traceparent, tracestate });
    // Active while the RunSession call starts, so the sandbox's server span continues it.
    return this.#channel(
      context.with(session.ctx, () => inner.start(options)),
      request.sessionId,
    );
  }

  /**
   * A re-attach. The first one of a job resumed here opens its session span
   * (the one opened before the restart ended with that process), below the
   * job's stored root, and the RunSession call continues it; any other keeps
   * the session span it has.
   */
  #reattach(inner: SessionRunner, options: { sessionId: string; afterSeq: number }): SessionChannel {
    const jobId = this.#resumedSessions.get(options.sessionId);
    const job = jobId ? this.#jobs.get(jobId) : undefined;
    this.#resumedSessions.delete(options.sessionId);
    if (!jobId || !job || this.#sessions.has(options.sessionId))
      return this.#channel(inner.reattach(options), options.sessionId);
    const session = this.#openSession({ sessionId: options.sessionId, jobId, agent: job.agent }, job.ctx, {
      "oz0.sandbox.url": inner.url,
      "oz0.session.reattached": true,
    });
    return this.#channel(
      context.with(session.ctx, () => inner.reattach(options)),
      options.sessionId,
    );
  }

  /** `session {agent}`, below `parent`, followed by its session id. */
  #openSession(
    o: { sessionId: string; jobId: string; agent: string },
    parent: Context,
    attributes: Record<string, string | number | boolean>,
  ): Traced {
    const session = start(`session ${o.agent}`, parent, {
      [GenAi.conversationId]: o.sessionId,
      [GenAi.agentName]: o.agent,
      "oz0.job.id": o.jobId,
      "oz0.session.id": o.sessionId,
      ...attributes,
    });
    this.#sessions.set(o.sessionId, {
      ...session,
      jobId: o.jobId,
      agent: o.agent,
      tools: new Map(),
      runtimeCalls: new Map(),
      permissions: new Map(),
      usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
    });
    return session;
  }

  #channel(inner: SessionChannel, sessionId: string): SessionChannel {
    const observe = (message: SandboxMessage): void => this.#observeMessage(sessionId, message);
    return {
      async *[Symbol.asyncIterator]() {
        for await (const message of inner) {
          observe(message);
          yield message;
        }
      },
      answerPermission: (answer: PermissionAnswer) => {
        this.#answered(sessionId, answer);
        return inner.answerPermission(answer);
      },
      answerRuntimeTool: (result: RuntimeToolResult) => {
        const session = this.#sessions.get(sessionId);
        const call = session?.runtimeCalls.get(result.id);
        if (call) {
          if (result.isError) fail(call.span, "tool_error");
          call.span.end();
          session!.runtimeCalls.delete(result.id);
        }
        return inner.answerRuntimeTool(result);
      },
      close: () => inner.close(),
    };
  }

  #observeMessage(sessionId: string, message: SandboxMessage): void {
    const session = this.#sessions.get(sessionId);
    if (!session) return;
    if (message.kind === "exited") {
      this.#endSession(sessionId, message.error ? "session_failed" : undefined);
      return;
    }
    if (message.kind !== "event") return;
    const e = message.event.event;
    switch (e.case) {
      case "started": {
        const harness = harnessIdentifier(e.value.harnessName);
        if (harness !== undefined) session.span.setAttribute("oz0.harness.name", harness);
        return;
      }
      case "toolCall":
        session.tools.set(
          e.value.callId,
          toolSpan(session, { sessionId, tool: e.value.tool, callId: e.value.callId, runtime: false }),
        );
        return;
      case "toolResult": {
        const tool = session.tools.get(e.value.callId);
        if (!tool) return;
        if (e.value.isError) fail(tool.span, "tool_error");
        tool.span.end();
        session.tools.delete(e.value.callId);
        return;
      }
      case "permissionRequest": {
        const parent = session.tools.get(e.value.callId)?.ctx ?? session.ctx;
        const permission = start(
          nameWith("permission", e.value.tool),
          parent,
          defined({
            "oz0.permission.id": harnessIdentifier(e.value.id),
            [GenAi.toolName]: harnessIdentifier(e.value.tool),
            [GenAi.toolCallId]: harnessIdentifier(e.value.callId),
          }),
        );
        session.permissions.set(e.value.id, {
          ...permission,
          tool: e.value.tool,
          callId: e.value.callId,
          needsPerson: false,
        });
        return;
      }
      case "runtimeToolCall":
        session.runtimeCalls.set(
          e.value.id,
          toolSpan(session, { sessionId, tool: e.value.name, callId: e.value.id, runtime: true }),
        );
        return;
      case "usage":
        session.usage.input += Number(e.value.inputTokens);
        session.usage.output += Number(e.value.outputTokens);
        session.usage.cacheRead += Number(e.value.cacheReadTokens);
        session.usage.cacheWrite += Number(e.value.cacheWriteTokens);
        return;
      case "result":
        session.span.setAttribute("oz0.session.stop_reason", enumName(StopReason, e.value.stopReason));
        return;
      default:
        return;
    }
  }

  #answered(sessionId: string, answer: PermissionAnswer): void {
    const session = this.#sessions.get(sessionId);
    const permission = session?.permissions.get(answer.id);
    if (!session || !permission) return;
    permission.span.setAttributes({
      "oz0.permission.allowed": answer.allow,
      "oz0.permission.outcome": enumName(PermissionAnswer_Outcome, answer.outcome),
      "oz0.permission.needs_person": permission.needsPerson,
    });
    permission.span.end();
    session.permissions.delete(answer.id);
    if (permission.needsPerson) {
      // A metric's attributes name a series each: a harness's every new name would be one more, kept for good.
      const attributes = defined({
        "oz0.approval.allowed": answer.allow,
        [GenAi.toolName]: harnessIdentifier(permission.tool),
      });
      this.#metrics.approvals.count.add(1, attributes);
      this.#metrics.approvals.duration.record((performance.now() - permission.started) / 1000, attributes);
    }
  }

  #endSession(sessionId: string, errorType: string | undefined): void {
    const session = this.#sessions.get(sessionId);
    if (!session) return;
    this.#sessions.delete(sessionId);
    // Whatever the harness left open ends with its session.
    for (const open of [...session.tools.values(), ...session.runtimeCalls.values(), ...session.permissions.values()])
      open.span.end();
    session.span.setAttributes({
      [GenAi.inputTokens]: session.usage.input,
      [GenAi.outputTokens]: session.usage.output,
      [GenAi.cacheReadInputTokens]: session.usage.cacheRead,
      [GenAi.cacheCreationInputTokens]: session.usage.cacheWrite,
    });
    if (errorType) fail(session.span, errorType);
    session.span.end();
    const attributes = { [GenAi.agentName]: session.agent, "oz0.session.outcome": errorType ?? "exited" };
    this.#metrics.sessions.count.add(1, attributes);
    this.#metrics.sessions.duration.record((performance.now() - session.started) / 1000, attributes);
  }

  #observeLifecycle(type: LifecycleType, init: LifecycleInit): void {
    if (type === "job.created") {
      // The job is the root of its own trace, the RPC that created it (if traced) linked;
      // a graph step's agent job is a child of its graph.step span instead, a graph manager's of its run.
      const caller = trace.getSpanContext(context.active());
      const inGraphStep =
        caller !== undefined && (this.#graphStepSpans.has(caller.spanId) || this.#graphRunSpans.has(caller.spanId));
      const parent = inGraphStep ? context.active() : ROOT_CONTEXT;
      const span = tracer.startSpan(
        `invoke_agent ${init.agentName ?? ""}`.trim(),
        {
          kind: SpanKind.INTERNAL,
          root: !inGraphStep,
          ...(caller && !inGraphStep ? { links: [{ context: caller }] } : {}),
          attributes: {
            [GenAi.operationName]: "invoke_agent",
            [GenAi.agentName]: init.agentName ?? "",
            "oz0.agent.version": init.agentVersion ?? "",
            "oz0.job.id": init.jobId,
          },
        },
        parent,
      );
      this.#begin(init.jobId, {
        span,
        ctx: trace.setSpan(parent, span),
        started: performance.now(),
        agent: init.agentName ?? "",
      });
      return;
    }
    if (type === "graph.run_started") {
      const graph = String(init.attributes?.graph_name ?? "");
      const span = tracer.startSpan(
        `invoke_agent ${graph}`.trim(),
        {
          kind: SpanKind.INTERNAL,
          root: true,
          attributes: {
            [GenAi.operationName]: "invoke_agent",
            [GenAi.agentName]: graph,
            "oz0.graph.name": graph,
            "oz0.graph.version": String(init.attributes?.graph_version ?? ""),
            "oz0.job.id": init.jobId,
          },
        },
        ROOT_CONTEXT,
      );
      this.#begin(init.jobId, {
        span,
        ctx: trace.setSpan(ROOT_CONTEXT, span),
        started: performance.now(),
        agent: graph,
      });
      return;
    }
    if (type === "approval.requested") {
      const session = init.sessionId ? this.#sessions.get(init.sessionId) : undefined;
      for (const permission of session?.permissions.values() ?? []) {
        if (permission.callId === (init.toolCallId ?? "")) permission.needsPerson = true;
      }
      return;
    }
    if (type.startsWith("harness.operation_") && init.sessionId && init.toolCallId) {
      const call = this.#sessions.get(init.sessionId)?.runtimeCalls.get(init.toolCallId);
      const key = init.attributes?.operation_key;
      if (call && typeof key === "string") call.span.setAttribute("oz0.operation.key", key);
      const outcome = OPERATION_OUTCOMES[type];
      if (call && outcome) call.span.setAttribute("oz0.operation.outcome", outcome);
      return;
    }
    const state = TERMINAL_JOB_EVENTS.get(type);
    if (!state) return;
    const job = this.#jobs.get(init.jobId);
    if (!job) return;
    this.#jobs.delete(init.jobId);
    this.#graphRunSpans.delete(job.span.spanContext().spanId);
    for (const [sessionId, jobId] of this.#resumedSessions)
      if (jobId === init.jobId) this.#resumedSessions.delete(sessionId);
    for (const [id, session] of this.#sessions)
      if (session.jobId === init.jobId) this.#endSession(id, state === "succeeded" ? undefined : `job_${state}`);
    job.span.setAttributes({
      "oz0.job.state": state,
      ...(init.sessionId ? { [GenAi.conversationId]: init.sessionId } : {}),
    });
    // A resumed job's span is the stored root's context: these record nothing (its process ended it).
    if (state !== "succeeded") fail(job.span, `job_${state}`);
    job.span.end();
    const attributes = { [GenAi.agentName]: job.agent, "oz0.job.state": state };
    this.#metrics.jobs.count.add(1, attributes);
    // Its duration here would be since the resume, not since the job began.
    if (!job.resumed) this.#metrics.jobs.duration.record((performance.now() - job.started) / 1000, attributes);
  }

  /**
   * A job's root span begins. One already known under its id is kept aside: a job known here exists in the
   * store, so this creation is refused there and withdrawn, and the one kept aside is known again.
   */
  #begin(jobId: string, job: JobTrace): void {
    const previous = this.#jobs.get(jobId);
    if (previous) this.#replaced.set(jobId, previous);
    this.#jobs.set(jobId, job);
  }

  /**
   * A job whose creation failed after its span began: the span ends as an error and nothing keeps it. A job
   * known under the same id before (the creation asked again) is the one known again.
   */
  #withdrawn(jobId: string): void {
    const job = this.#jobs.get(jobId);
    if (!job) return;
    this.#jobs.delete(jobId);
    fail(job.span, "job_not_created");
    job.span.end();
    const previous = this.#replaced.get(jobId);
    if (previous) {
      this.#replaced.delete(jobId);
      this.#jobs.set(jobId, previous);
    }
  }

  /** The innermost span an event belongs to: its tool call, else its session, else its job. */
  #contextOf(init: { jobId: string; sessionId?: string; toolCallId?: string }): Context | undefined {
    const session = init.sessionId ? this.#sessions.get(init.sessionId) : undefined;
    if (init.toolCallId) {
      // tool.called names the job and the call but not the session.
      const candidates = session ? [session] : [...this.#sessions.values()].filter((s) => s.jobId === init.jobId);
      for (const candidate of candidates) {
        const call = candidate.tools.get(init.toolCallId) ?? candidate.runtimeCalls.get(init.toolCallId);
        if (call) return call.ctx;
      }
    }
    return session?.ctx ?? this.#jobs.get(init.jobId)?.ctx;
  }
}

/** The process's tracing, shared by the job runner's decorators and the hook stage. */
export const orchestratorTracing = new OrchestratorTracing();
