// Following a job to its end (`oz0 run`, `oz0 jobs watch`): its events as
// lines, on a terminal a live status line below them (how long it has run,
// what it does now, tokens and cost so far), and, where someone can answer,
// the approval prompt for each call that waits for a person. The prompt
// does not stop the stream: a call answered elsewhere (another terminal,
// `oz0 approve`, the console) takes its prompt back, and the line saying who
// answered takes its place.
import type { JsonObject } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Usage } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { JobState, type Approval, type JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { JobActivityTracker } from "../jobs/job-activity.js";
import { promptForAnswer, type PromptedCall } from "./approval-prompt.js";
import { describeError } from "./cli-error.js";
import type { Output } from "./commands.js";
import type { Connection } from "./connection.js";
import { EventPrinter } from "./event-printer.js";
import { EXIT } from "./exit-codes.js";
import { LiveTerminal, wantsStatusLine } from "./live-terminal.js";
import { terminalLine } from "./terminal-text.js";
import { clockText, costText, tokensText } from "./usage-format.js";

export const TERMINAL = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]);

export function exitCodeFor(state: JobState): number {
  switch (state) {
    case JobState.SUCCEEDED:
      return EXIT.ok;
    case JobState.FAILED:
      return EXIT.failed;
    case JobState.CANCELLED:
      return EXIT.cancelled;
    case JobState.WAITING:
      return EXIT.waiting;
    default:
      return EXIT.error;
  }
}

/** Every approval ListApprovals has for the request, page after page (a page holds at most 500). */
export async function listAllApprovals(
  conn: Connection,
  request: { jobId?: string; includeAnswered?: boolean },
): Promise<Approval[]> {
  const approvals: Approval[] = [];
  let pageToken = "";
  do {
    const page = await conn.clients.jobs.listApprovals({ ...request, pageToken });
    approvals.push(...page.approvals);
    pageToken = page.nextPageToken;
  } while (pageToken);
  return approvals;
}

function canPrompt(json: boolean): boolean {
  return !json && Boolean(process.stdin.isTTY && process.stdout.isTTY);
}

/** A dropped or refused connection (the orchestrator restarting), as opposed to an answer. */
function isTransient(error: unknown): boolean {
  const err = ConnectError.from(error);
  return ![
    Code.NotFound,
    Code.InvalidArgument,
    Code.FailedPrecondition,
    Code.PermissionDenied,
    Code.Unauthenticated,
    Code.Unimplemented,
  ].includes(err.code);
}

/** The job's metered usage, asked again when something may have changed it (one request at a time). */
class UsageMeter {
  readonly #ask: () => Promise<Usage | undefined>;
  readonly #changed: () => void;
  #usage: Usage | undefined;
  #asking = false;
  #again = false;
  #stopped = false;

  constructor(ask: () => Promise<Usage | undefined>, changed: () => void) {
    this.#ask = ask;
    this.#changed = changed;
  }

  get usage(): Usage | undefined {
    return this.#usage;
  }

  refresh(): void {
    if (this.#stopped) return;
    if (this.#asking) {
      this.#again = true;
      return;
    }
    this.#asking = true;
    // Best effort: a status line without a cost is better than a command that fails for want of one.
    void this.#ask()
      .then(
        (usage) => {
          if (usage) this.#usage = usage;
        },
        () => undefined,
      )
      .finally(() => {
        this.#asking = false;
        if (this.#stopped) return;
        this.#changed();
        if (this.#again) {
          this.#again = false;
          this.refresh();
        }
      });
  }

  stop(): void {
    this.#stopped = true;
  }
}

/**
 * The approval prompts of one job, one at a time in the order the calls
 * came. The stream goes on while a prompt is open; other output waits
 * (LiveTerminal.hold) so the question stays whole.
 */
class ApprovalPrompts {
  readonly #o: { conn: Connection; jobId: string; terminal: LiveTerminal; io: Output };
  readonly #queue: (PromptedCall & { id: string })[] = [];
  #active: { id: string; abort: AbortController; done: Promise<void> } | undefined;

  constructor(options: { conn: Connection; jobId: string; terminal: LiveTerminal; io: Output }) {
    this.#o = options;
  }

  ask(call: PromptedCall & { id: string }): void {
    this.#queue.push(call);
    this.#next();
  }

  /** The call was answered (here or elsewhere): its prompt goes, erased, before the answer is printed. */
  async answered(id: string): Promise<void> {
    const queued = this.#queue.findIndex((c) => c.id === id);
    if (queued >= 0) this.#queue.splice(queued, 1);
    const active = this.#active;
    if (active?.id !== id) return;
    active.abort.abort();
    await active.done;
  }

  async close(): Promise<void> {
    this.#queue.length = 0;
    const active = this.#active;
    active?.abort.abort();
    await active?.done;
  }

  #next(): void {
    if (this.#active) return;
    const call = this.#queue.shift();
    if (!call) return;
    const { conn, jobId, terminal, io } = this.#o;
    const abort = new AbortController();
    let held = false;
    const done = (async () => {
      try {
        // A call that waited long ago (a watch replaying the job from its start) may be answered already.
        const waiting = await listAllApprovals(conn, { jobId }).then(
          (approvals) => approvals.some((a) => a.callId === call.id),
          () => true, // Cannot tell: ask; an answer given meanwhile takes the question back.
        );
        if (abort.signal.aborted || !waiting) return;
        terminal.hold();
        held = true;
        const answer = await promptForAnswer({
          call,
          input: process.stdin,
          output: io.out,
          signal: abort.signal,
          erase: terminal.live,
        });
        if (!answer) return;
        await conn.clients.jobs.answerPermission({
          jobId,
          callId: call.id,
          allow: answer.allow,
          reason: answer.reason,
          ...(answer.input ? { input: answer.input } : {}),
        });
      } catch (error) {
        // Answered elsewhere a moment before, or refused (not an approver here): say so and keep following.
        terminal.around(() =>
          io.err.write(
            `${terminalLine(`oz0: your answer to ${call.tool} (call ${call.id}) was not taken: ${describeError(error, { target: conn.url, mode: conn.mode })}`)}\n`,
          ),
        );
      } finally {
        this.#active = undefined;
        if (held) terminal.release();
        this.#next();
      }
    })();
    this.#active = { id: call.id, abort, done };
  }
}

/**
 * Follow a job's events until it ends; resumes from the last sequence number
 * when the stream drops (the orchestrator restarting), so nothing is lost or
 * printed twice. Returns the exit status for the job's state.
 */
export async function followJob(options: {
  conn: Connection;
  jobId: string;
  json: boolean;
  afterSeq?: number;
  /** Return EXIT.waiting when the job waits for a person and nobody can be asked here. */
  stopWhenWaiting: boolean;
  io: Output;
}): Promise<number> {
  const { conn, jobId, io } = options;
  const tracker = new JobActivityTracker();
  const status = wantsStatusLine(io.out, { json: options.json });
  // The clock counts from the job's creation, also for a watch that joins late.
  const created = status
    ? await conn.clients.jobs.getJob({ jobId }).then(
        (r) => (r.job?.createdAt ? timestampDate(r.job.createdAt).getTime() : undefined),
        () => undefined,
      )
    : undefined;
  const since = created ?? Date.now();
  let approvers: string[] = [];
  let meter: UsageMeter | undefined;
  const render = (): string => {
    const now = Date.now();
    const activity = tracker.activity(approvers);
    const doing =
      activity.since && now - timestampDate(activity.since).getTime() >= 1_000
        ? `${activity.summary} (${clockText(now - timestampDate(activity.since).getTime())})`
        : activity.summary;
    const usage = meter?.usage;
    const tokens = usage ? { input: usage.inputTokens, output: usage.outputTokens } : tracker.tokens;
    const parts = [doing];
    if (Number(tokens.input) + Number(tokens.output) > 0) parts.push(tokensText(tokens));
    if (usage) parts.push(costText(usage));
    // One line: the activity names the harness's tools.
    return terminalLine(`[${clockText(now - since)}] ${parts.join(" · ")}`);
  };
  const terminal = new LiveTerminal({ out: io.out, render: status ? render : undefined });
  if (status)
    meter = new UsageMeter(
      async () => (await conn.clients.jobs.getJobUsage({ jobId })).usage?.total,
      () => terminal.refresh(),
    );
  meter?.refresh();
  const printer = new EventPrinter({
    out: terminal,
    json: options.json,
    style: terminal.live,
    answerable: conn.mode !== "embedded",
  });
  const prompts = canPrompt(options.json) ? new ApprovalPrompts({ conn, jobId, terminal, io }) : undefined;
  // What each waiting call asked to run with, for the prompt.
  const requested = new Map<string, JsonObject>();
  const learnApprovers = (): void => {
    // Who may answer is the pinned version's; asked once, when a call first waits.
    if (!status || approvers.length > 0) return;
    void conn.clients.jobs.listApprovals({ jobId }).then(
      ({ approvals }) => {
        approvers = approvals.find((a) => a.approvers.length > 0)?.approvers ?? [];
        terminal.refresh();
      },
      () => undefined,
    );
  };
  /** Handles one event; returns the exit status once the job is over (or waits with nobody to ask). */
  const handle = async (event: JobEvent): Promise<number | undefined> => {
    const e = event.event;
    // An answer takes its prompt back before it is printed, so its line replaces the question.
    if (e.case === "permissionDecision" && !e.value.pending) await prompts?.answered(e.value.id);
    tracker.observe(event);
    printer.print(event);
    if (e.case === "usage" || e.case === "toolResult" || (e.case === "text" && !e.value.delta)) meter?.refresh();
    if (e.case === "stateChanged" && TERMINAL.has(e.value.state)) return exitCodeFor(e.value.state);
    if (e.case === "permissionRequested" && e.value.input) requested.set(e.value.id, e.value.input);
    if (e.case === "permissionDecision" && e.value.pending) {
      learnApprovers();
      if (prompts) {
        // The input the call runs with: a hook's changed input (named, with the harness's beside it), else the harness's.
        const harnessInput = requested.get(e.value.id);
        const input = e.value.input ?? harnessInput;
        prompts.ask({
          id: e.value.id,
          tool: e.value.tool,
          reason: e.value.reason,
          ...(input ? { input } : {}),
          ...(e.value.input && e.value.inputChangedBy
            ? { inputChangedBy: e.value.inputChangedBy, ...(harnessInput ? { harnessInput } : {}) }
            : {}),
        });
      } else if (options.stopWhenWaiting) {
        printer.end();
        if (conn.mode === "embedded") {
          terminal.around(() =>
            io.err.write(
              "oz0: the job waits for a person, and this embedded stack stops with the command; run `oz0 dev` in another terminal to keep jobs alive between commands\n",
            ),
          );
        }
        return EXIT.waiting;
      }
    }
    terminal.refresh();
    return undefined;
  };
  let last = options.afterSeq ?? 0;
  let failures = 0;
  try {
    for (;;) {
      try {
        for await (const response of conn.clients.jobs.watchJob({ jobId, afterSeq: BigInt(last) })) {
          const event = response.event!;
          last = Number(event.seq);
          failures = 0;
          const code = await handle(event);
          if (code !== undefined) return code;
        }
        const { job } = await conn.clients.jobs.getJob({ jobId });
        if (job && TERMINAL.has(job.state)) return exitCodeFor(job.state);
      } catch (error) {
        if (conn.mode === "embedded" || !isTransient(error) || failures >= 30) throw error;
        failures += 1;
        if (failures === 1 && !options.json)
          terminal.around(() => io.err.write(`oz0: lost the orchestrator at ${conn.url}; reconnecting…\n`));
        await new Promise((r) => setTimeout(r, 1_000));
      }
    }
  } finally {
    await prompts?.close();
    meter?.stop();
    printer.end();
    terminal.stop();
  }
}
