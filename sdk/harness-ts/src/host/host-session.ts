// The runtime side of one harness session: start the command, write the
// request, frame and validate every stdout line, relay answers, enforce the
// line limit, the deadline and the grace period, and report exactly one
// outcome however the harness behaves.
import { create } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  PermissionAnswer_Outcome,
  PermissionAnswerSchema,
  ProtocolVersion,
  RuntimeMessageSchema,
  RuntimeToolResultSchema,
  SessionRequestSchema,
  StopReason,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import type {
  RuntimeMessage,
  SessionEvent,
  SessionRequest,
  SessionResult,
  SessionStarted,
  Usage,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import { LineSplitter } from "../protocol/line-framing.js";
import { describeLine, encodeLine } from "../protocol/message-codec.js";
import { decodeEventLine } from "../protocol/event-decoding.js";
import {
  escapeRefusedCharacters,
  REQUEST_ID_RULES,
  quotedRequestId,
  requestIdProblem,
} from "../protocol/request-id-rules.js";
import type { SessionError, SessionErrorCode } from "./host-errors.js";
import { HostSessionError } from "./host-errors.js";
import { processGroupLauncher } from "./process-launcher.js";
import type { HarnessLauncher, LaunchedHarness } from "./process-launcher.js";

/** Default longest stdout line accepted: 1 MiB. */
export const DEFAULT_MAX_LINE_BYTES = 1024 * 1024;
/** Default time between SIGTERM and SIGKILL (protocol rule 5): 10 s. */
export const DEFAULT_GRACE_MS = 10_000;
/** How much of the harness's stderr the outcome keeps. */
const STDERR_TAIL_BYTES = 4096;
/** setTimeout fires at once for delays above this, so longer waits are chained. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** A PermissionAnswer as a message or as its init object. */
export type PermissionAnswerInit = MessageInitShape<typeof PermissionAnswerSchema>;
/** A RuntimeToolResult as a message or as its init object. */
export type RuntimeToolResultInit = MessageInitShape<typeof RuntimeToolResultSchema>;

/** Options of {@link startHostSession}. */
export interface HostSessionOptions {
  /** The harness command and its arguments (from the plugin manifest). */
  command: string[];
  /** Working directory of the process (usually the request's `working_dir`). */
  cwd: string;
  /** The complete environment of the harness; nothing of the host's is inherited. */
  env: Record<string, string>;
  /** The session request, written as the first stdin line. */
  request: SessionRequest;
  /**
   * Called synchronously for every valid event, in order, `started` and
   * `result` included. Permission requests and runtime tool calls arrive
   * here; answer them with {@link HostSession.answerPermission} and
   * {@link HostSession.sendRuntimeToolResult}. A throw stops the session
   * with `event_callback_failed`.
   */
  onEvent?: (event: SessionEvent) => void;
  /** Called with each chunk of the harness's stderr (free-form logs). */
  onStderr?: (chunk: Buffer) => void;
  /** Longest stdout line accepted, in bytes; default {@link DEFAULT_MAX_LINE_BYTES}. */
  maxLineBytes?: number;
  /** Time between SIGTERM and SIGKILL, and allowed between the result and exit; default {@link DEFAULT_GRACE_MS}. */
  graceMs?: number;
  /** When the session is timed out; defaults to the request's `limits.deadline`. */
  deadline?: Date;
  /** How the process is started and signalled; default {@link processGroupLauncher}. */
  launcher?: HarnessLauncher;
  /**
   * Takes over a harness that is already running (its host process was
   * restarted): the launcher hands back the running process, whose stdout is
   * read again from its start to rebuild the session's state, and the request
   * is not written again. Requests whose ids are listed here were answered
   * before: they are not pending again.
   */
  adopt?: { answeredPermissions: ReadonlySet<string>; answeredToolCalls: ReadonlySet<string> };
}

/**
 * How the session ended, from the runtime's side. `completed` means the
 * harness followed the protocol to a result; the result's `stopReason`
 * says how the agent itself ended.
 */
export type SessionStatus = "completed" | "failed" | "cancelled" | "timed_out";

/** Counters over one session. */
export interface SessionCounts {
  /** Non-blank stdout lines read. */
  lines: number;
  /** Valid events delivered to `onEvent`. */
  events: number;
  permissionRequests: number;
  runtimeToolCalls: number;
  stderrBytes: number;
}

/** The one outcome of a session. */
export interface SessionOutcome {
  status: SessionStatus;
  /** The harness's result, when it wrote one (also for cancelled and timed-out sessions). */
  result?: SessionResult;
  /** The first problem detected; unset when the harness followed the protocol. */
  error?: SessionError;
  /** The harness's `started` event, when it sent one. */
  started?: SessionStarted;
  /** Exit code of the harness process, or null when a signal ended it. */
  exitCode: number | null;
  /** The signal that ended the harness process, if any. */
  signal: NodeJS.Signals | null;
  /** True when processes of the harness were still alive after it exited (they were killed). */
  leftoverProcesses: boolean;
  /** The reason given to {@link HostSession.cancel}. */
  cancelReason?: string;
  counts: SessionCounts;
  /** The last few KiB of stderr, for diagnosis. */
  stderrTail: string;
  /** Wall time from start to outcome. */
  durationMs: number;
}

/** A running harness session. */
export interface HostSession {
  /** The harness process id (the process group id with the default launcher); undefined when it failed to start. */
  readonly pid: number | undefined;
  /** Resolves exactly once, when the process has exited and its output is drained. Never rejects. */
  readonly outcome: Promise<SessionOutcome>;
  /** Ids of permission requests waiting for an answer. */
  readonly pendingPermissions: readonly string[];
  /**
   * Answers a permission request. Throws {@link HostSessionError} for an
   * unknown or already answered id, or once the result is out.
   */
  answerPermission(answer: PermissionAnswerInit): void;
  /**
   * Answers a runtime tool call. Throws {@link HostSessionError} for an
   * unknown or already answered id, or once the result is out.
   */
  sendRuntimeToolResult(result: RuntimeToolResultInit): void;
  /**
   * Cancels the session: pending permissions are answered OUTCOME_CANCELLED,
   * then SIGTERM, then SIGKILL after the grace. A `cancelled` result the
   * harness writes within the grace is recorded. Idempotent.
   */
  cancel(reason?: string): void;
  /**
   * Ends the session at once: pending permissions are answered
   * OUTCOME_CANCELLED, then SIGKILL, with no grace. For a harness that broke
   * a limit of its host (a flood of output to the host's disk), which is owed
   * no time to go on. Idempotent; it cuts short a cancel's grace.
   */
  kill(reason?: string): void;
}

/** Starts a harness session. Never throws for harness problems: they end up in the outcome. */
export function startHostSession(options: HostSessionOptions): HostSession {
  return new RunningHostSession(options);
}

type EndReason = "cancelled" | "timed_out";

class RunningHostSession implements HostSession {
  readonly outcome: Promise<SessionOutcome>;
  readonly #options: HostSessionOptions;
  readonly #graceMs: number;
  readonly #startedAt = performance.now();
  #resolve!: (outcome: SessionOutcome) => void;
  #launched: LaunchedHarness | undefined;

  #started: SessionStarted | undefined;
  #handshakeDone = false;
  #result: SessionResult | undefined;
  #error: SessionError | undefined;
  #endReason: EndReason | undefined;
  #cancelReason: string | undefined;
  /** False after a fatal protocol error: later lines are drained but ignored. */
  #processing = true;
  #stopping = false;
  #finalized = false;
  #exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  #stdoutEnded = false;
  /** Stderr is drained too before the outcome, so `onStderr` has had every chunk by then. */
  #stderrEnded = false;
  #leftoverProcesses = false;

  readonly #pendingPermissions = new Set<string>();
  readonly #usedPermissionIds = new Set<string>();
  /** The call ids of the session's permission requests, each with who claimed it (#claimCallId). */
  readonly #permissionCallIds = new Map<string, string>();
  readonly #pendingToolCalls = new Set<string>();
  readonly #usedToolCallIds = new Set<string>();
  /** The call ids tool results have closed, with permissions on (#closeToolCall). */
  readonly #resultCallIds = new Set<string>();
  readonly #counts: SessionCounts = { lines: 0, events: 0, permissionRequests: 0, runtimeToolCalls: 0, stderrBytes: 0 };
  #stderrTail = Buffer.alloc(0);
  readonly #timers = new Set<NodeJS.Timeout>();

  constructor(options: HostSessionOptions) {
    this.#options = options;
    this.#graceMs = options.graceMs ?? DEFAULT_GRACE_MS;
    this.outcome = new Promise((resolve) => (this.#resolve = resolve));
    this.#launch();
  }

  get pid(): number | undefined {
    return this.#launched?.child.pid;
  }

  get pendingPermissions(): readonly string[] {
    return [...this.#pendingPermissions];
  }

  answerPermission(answer: PermissionAnswerInit): void {
    const message = create(PermissionAnswerSchema, answer);
    this.#checkCanSend();
    if (!this.#pendingPermissions.has(message.id)) {
      if (this.#usedPermissionIds.has(message.id)) {
        throw new HostSessionError(
          "permission_already_answered",
          `permission request ${JSON.stringify(message.id)} was already answered`,
        );
      }
      throw new HostSessionError(
        "unknown_permission_id",
        `the harness has not asked permission ${JSON.stringify(message.id)}`,
      );
    }
    if (message.outcome === PermissionAnswer_Outcome.UNSPECIFIED) message.outcome = PermissionAnswer_Outcome.ANSWERED;
    // Encoded before the request stops being pending: an answer that cannot be written leaves it to be answered again.
    const line = encodeLine(
      RuntimeMessageSchema,
      create(RuntimeMessageSchema, { message: { case: "permissionAnswer", value: message } }),
    );
    this.#pendingPermissions.delete(message.id);
    this.#writeLine(line);
  }

  sendRuntimeToolResult(result: RuntimeToolResultInit): void {
    const message = create(RuntimeToolResultSchema, result);
    this.#checkCanSend();
    if (!this.#pendingToolCalls.has(message.id)) {
      if (this.#usedToolCallIds.has(message.id)) {
        throw new HostSessionError(
          "runtime_tool_call_already_answered",
          `runtime tool call ${JSON.stringify(message.id)} was already answered`,
        );
      }
      throw new HostSessionError(
        "unknown_runtime_tool_call_id",
        `the harness has not made runtime tool call ${JSON.stringify(message.id)}`,
      );
    }
    // Encoded first: a result JSON cannot hold (a number that is not finite) throws with the call still pending.
    const line = encodeLine(
      RuntimeMessageSchema,
      create(RuntimeMessageSchema, { message: { case: "runtimeToolResult", value: message } }),
    );
    this.#pendingToolCalls.delete(message.id);
    this.#writeLine(line);
  }

  cancel(reason?: string): void {
    if (this.#finalized) return;
    if (this.#result === undefined && this.#endReason === undefined) {
      this.#endReason = "cancelled";
      this.#cancelReason = reason;
    }
    this.#stop();
  }

  kill(reason?: string): void {
    if (this.#finalized) return;
    if (this.#result === undefined && this.#endReason === undefined) {
      this.#endReason = "cancelled";
      this.#cancelReason = reason;
    }
    if (this.#launched === undefined) return;
    if (!this.#stopping) {
      this.#stopping = true;
      this.#answerPendingAsEnded();
    }
    if (this.#exit !== undefined) return;
    const launched = this.#launched;
    this.#callLauncher(() => launched.kill());
  }

  #checkCanSend(): void {
    if (this.#finalized || this.#result !== undefined || this.#launched === undefined) {
      throw new HostSessionError(
        "session_ended",
        "the session's result is out or the session ended; nothing more can be sent",
      );
    }
  }

  #launch(): void {
    const options = this.#options;
    const launcher = options.launcher ?? processGroupLauncher();
    try {
      this.#launched = launcher.launch({ command: options.command, cwd: options.cwd, env: options.env });
    } catch (error) {
      this.#fail(
        "spawn_failed",
        `could not start ${JSON.stringify(options.command[0] ?? "")}: ${(error as Error).message}`,
      );
      queueMicrotask(() => this.#finalize());
      return;
    }
    const { child } = this.#launched;
    const splitter = new LineSplitter({
      maxLineBytes: options.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES,
      onLine: (line, unterminated) => this.#onLine(line, unterminated),
      onOversizedLine: (bytes) =>
        this.#fail(
          "line_too_long",
          `a stdout line exceeded the limit of ${options.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES} bytes (${bytes} bytes so far)`,
        ),
    });
    child.on("error", (error: NodeJS.ErrnoException) => {
      if (child.pid !== undefined) return; // a signal failure on a live process, not a start failure
      this.#fail(
        "spawn_failed",
        `could not start ${JSON.stringify(options.command[0] ?? "")}: ${error.code ?? error.message}`,
      );
      child.stdout.destroy();
      child.stderr.destroy();
      this.#finalize();
    });
    // EPIPE when the harness exits before reading everything: the exit tells the story.
    child.stdin.on("error", () => {});
    child.stdout.on("data", (chunk: Buffer) => {
      if (this.#processing) splitter.push(chunk);
    });
    child.stdout.on("end", () => {
      if (this.#processing) splitter.end();
      this.#stdoutEnded = true;
      this.#maybeFinalize();
    });
    child.stdout.on("error", (error: NodeJS.ErrnoException) => {
      // Unread, the harness would run on unheard until its deadline (a kept session's stdout file not opened: EMFILE).
      if (this.#result === undefined)
        this.#fail(
          "output_unreadable",
          `could not read the harness's stdout (${error.message}); if it says EMFILE, the node is out of file descriptors`,
        );
      this.#stdoutEnded = true;
      this.#maybeFinalize();
    });
    child.stderr.on("data", (chunk: Buffer) => this.#onStderr(chunk));
    child.stderr.on("end", () => {
      this.#stderrEnded = true;
      this.#maybeFinalize();
    });
    child.stderr.on("error", () => {
      this.#stderrEnded = true;
      this.#maybeFinalize();
    });
    child.on("exit", (code, signal) => this.#onExit(code, signal));

    if (options.adopt === undefined) this.#writeLine(encodeLine(SessionRequestSchema, options.request));
    const deadline =
      options.deadline ??
      (options.request.limits?.deadline ? timestampDate(options.request.limits.deadline) : undefined);
    if (deadline !== undefined) this.#after(deadline.getTime() - Date.now(), () => this.#onDeadline());
  }

  #write(message: RuntimeMessage): void {
    this.#writeLine(encodeLine(RuntimeMessageSchema, message));
  }

  #writeLine(line: string): void {
    const stdin = this.#launched?.child.stdin;
    if (stdin === undefined || stdin.destroyed || stdin.writableEnded) return;
    stdin.write(line);
  }

  #onStderr(chunk: Buffer): void {
    this.#counts.stderrBytes += chunk.length;
    this.#stderrTail = Buffer.concat([this.#stderrTail, chunk]);
    if (this.#stderrTail.length > STDERR_TAIL_BYTES)
      this.#stderrTail = this.#stderrTail.subarray(this.#stderrTail.length - STDERR_TAIL_BYTES);
    try {
      this.#options.onStderr?.(chunk);
    } catch {
      // Logs are best effort; a failing log sink must not end the session.
    }
  }

  #onLine(raw: string, unterminated = false): void {
    if (!this.#processing) return;
    this.#counts.lines++;
    const line = withoutSessionToken(raw, this.#options.request.llm?.token);
    const decoded = decodeEventLine(line);
    if (!decoded.ok) {
      if (decoded.reason === "invalid_json") {
        // A line cut short reads as garbage; what the author must fix is the exit (or a close) in mid-write.
        // Any other is most often a print, or a child a tool started writing to the stdout it inherited.
        const what = unterminated
          ? "; it is the output's last line and no newline ended it: the harness exited or closed its stdout in the middle of writing it (write each event whole, then flush, before exiting)"
          : "; stdout carries only events, one JSON object a line: write logs to stderr, and give the processes a tool starts a stdout of their own (captured, or stderr), not the harness's";
        this.#fail("invalid_json", `stdout line ${this.#counts.lines} is not JSON: ${describeLine(line)}${what}`);
      } else {
        this.#fail("invalid_event", `stdout line ${this.#counts.lines} is not a valid SessionEvent: ${decoded.detail}`);
      }
      return;
    }
    const event = decoded.message;
    const kind = event.event.case;
    if (kind === undefined) {
      this.#fail(
        "unknown_event_kind",
        `stdout line ${this.#counts.lines} carries no event kind this runtime knows: ${describeLine(line)}`,
      );
      return;
    }
    if (this.#result !== undefined) {
      if (kind === "result")
        this.#fail("duplicate_result", "the harness wrote a second result; exactly one result ends a session");
      else
        this.#fail(
          "event_after_result",
          `the harness wrote a ${kind} event after its result; nothing may follow the result`,
        );
      return;
    }
    if (!this.#handshakeDone) {
      // A harness refusing the protocol version answers with a result alone, STOP_REASON_ERROR (rule 1). Any
      // other first line, a result that reports success among them, is a session that never started.
      if (kind !== "started" && kind !== "result") {
        this.#fail("first_event_not_started", `the first event must be started, got ${kind}`);
        return;
      }
      if (kind === "result" && event.event.value.stopReason !== StopReason.ERROR) {
        const given = event.event.value.stopReason;
        const stopReason = StopReason[given] ? `STOP_REASON_${StopReason[given]}` : String(given);
        this.#fail(
          "first_event_not_started",
          `the first event must be started; a result before it is only a refusal of the request's protocol version, with stop_reason STOP_REASON_ERROR (this one has ${stopReason})`,
        );
        return;
      }
      if (kind === "started") {
        const version = event.event.value.protocolVersion;
        if (version !== ProtocolVersion.PROTOCOL_VERSION_1) {
          this.#fail(
            "unsupported_protocol_version",
            `the harness speaks protocol version ${ProtocolVersion[version] ?? version}; this runtime speaks PROTOCOL_VERSION_1`,
          );
          return;
        }
        this.#started = event.event.value;
      }
      this.#handshakeDone = true;
    } else if (kind === "started") {
      this.#fail("first_event_not_started", "the harness wrote started twice");
      return;
    }

    switch (kind) {
      case "permissionRequest": {
        const { id, callId } = event.event.value;
        if (!this.#claimId(id, this.#usedPermissionIds, "permission request")) return;
        if (!this.#claimCallId(id, callId)) return;
        if (!this.#options.adopt?.answeredPermissions.has(id)) this.#pendingPermissions.add(id);
        this.#counts.permissionRequests++;
        break;
      }
      case "runtimeToolCall": {
        const { id } = event.event.value;
        if (!this.#claimId(id, this.#usedToolCallIds, "runtime tool call")) return;
        if (!this.#options.adopt?.answeredToolCalls.has(id)) this.#pendingToolCalls.add(id);
        this.#counts.runtimeToolCalls++;
        break;
      }
      case "toolResult":
        if (!this.#closeToolCall(event.event.value.callId)) return;
        break;
      case "usage":
        if (!this.#costable([event.event.value], "a usage event")) return;
        break;
      case "result":
        if (!this.#costable(event.event.value.usage, "the result's usage")) return;
        this.#result = event.event.value;
        this.#pendingPermissions.clear();
        this.#pendingToolCalls.clear();
        this.#launched?.child.stdin.end();
        // A harness must exit after its result; give it the grace, then stop it.
        this.#after(this.#graceMs, () => {
          if (this.#exit !== undefined) return;
          this.#setError(
            "did_not_exit",
            `the harness wrote its result but was still running ${this.#graceMs} ms later`,
          );
          this.#stop();
        });
        break;
      default:
        break;
    }
    this.#counts.events++;
    try {
      this.#options.onEvent?.(event);
    } catch (error) {
      this.#fail("event_callback_failed", `onEvent threw while handling a ${kind} event: ${(error as Error).message}`);
      return;
    }
    // Requests that arrive while the session is being stopped are answered at once.
    if (this.#stopping) this.#answerPendingAsEnded();
  }

  #claimId(id: string, used: Set<string>, what: string): boolean {
    if (id === "") {
      this.#fail("invalid_event", `a ${what} has no id`);
      return false;
    }
    if (!this.#wellFormedId(id, `the ${what} id`)) return false;
    if (used.has(id)) {
      this.#fail(
        "duplicate_request_id",
        `the harness reused the ${what} id ${JSON.stringify(id)}; ids are unique in a session`,
      );
      return false;
    }
    used.add(id);
    return true;
  }

  /**
   * A permission request's id and its call id are one namespace (the orchestrator finds a tool result's
   * request by either): a value an earlier request claimed, as either, is a repeat (#claimId has checked
   * the id against earlier ids). One request may use one value for both.
   */
  #claimCallId(id: string, callId: string): boolean {
    if (callId !== "" && !this.#wellFormedId(callId, `the call id of permission request ${quotedRequestId(id)}`))
      return false;
    const idClaim = this.#permissionCallIds.get(id);
    const callClaim =
      callId === "" || callId === id
        ? undefined
        : (this.#permissionCallIds.get(callId) ??
          (this.#usedPermissionIds.has(callId) ? `the id of permission request ${JSON.stringify(callId)}` : undefined));
    const [value, earlier] = idClaim !== undefined ? [id, idClaim] : [callId, callClaim];
    if (earlier !== undefined) {
      this.#fail(
        "duplicate_request_id",
        `the harness reused ${JSON.stringify(value)} in permission request ${JSON.stringify(id)}: it is ${earlier}; a harness asks once per tool call, and ids are unique in a session`,
      );
      return false;
    }
    if (callId !== "") this.#permissionCallIds.set(callId, `the call id of permission request ${JSON.stringify(id)}`);
    return true;
  }

  /**
   * With permissions on, the orchestrator finds the answer that allowed a tool result by its call id, so a
   * second result under the call id of an allowed call would pass as allowed: a harness that ran a second call
   * on one answer (announcing it under the first one's call id) went unseen, and its change was handed out as the
   * job's work. A call has one result; a result with no call id names no call (the audit refuses it).
   */
  #closeToolCall(callId: string): boolean {
    if (!this.#options.request.permissions || callId === "") return true;
    if (this.#resultCallIds.has(callId)) {
      this.#fail(
        "duplicate_request_id",
        `the harness wrote a second tool result for call ${quotedRequestId(callId)}; a tool call has one result, and with permissions on each run of a tool is asked about under a call id of its own`,
      );
      return false;
    }
    this.#resultCallIds.add(callId);
    return true;
  }

  /**
   * Whether every cost the harness reports is one (harness.proto, Usage.cost_usd: finite, 0 or more). JSON's
   * `"NaN"`, `"Infinity"` and negative numbers decode as doubles, and were shown to the job's people as what its
   * model calls cost (a review's hostile harness reported -1,000,000 dollars); the LLM proxy's metering is what
   * budgets count, so this is about what people read.
   */
  #costable(usage: readonly Usage[], what: string): boolean {
    const wrong = usage.find((u) => !Number.isFinite(u.costUsd) || u.costUsd < 0);
    if (wrong === undefined) return true;
    this.#fail(
      "invalid_event",
      `${what} reports a cost of ${String(wrong.costUsd)} US dollars${wrong.model ? ` for ${quotedRequestId(wrong.model)}` : ""}; costUsd is a finite number of 0 or more (leave it 0 when the cost is unknown)`,
    );
    return false;
  }

  /** Fails the session when `id` is not one an id may be (protocol/request-id-rules.ts). */
  #wellFormedId(id: string, what: string): boolean {
    const problem = requestIdProblem(id);
    if (problem === undefined) return true;
    this.#fail("invalid_event", `${what} ${quotedRequestId(id)} has ${problem}; ids are ${REQUEST_ID_RULES}`);
    return false;
  }

  #onDeadline(): void {
    if (this.#finalized || this.#result !== undefined || this.#endReason !== undefined) return;
    this.#endReason = "timed_out";
    this.#setError("deadline_exceeded", "the session's deadline passed before the harness wrote its result");
    this.#stop();
  }

  #onExit(code: number | null, signal: NodeJS.Signals | null): void {
    this.#exit = { code, signal };
    const launched = this.#launched;
    if (launched !== undefined) {
      // Whatever the leader left in its group (a forked grandchild) goes with it.
      try {
        this.#leftoverProcesses = launched.hasLiveProcesses?.() ?? false;
      } catch {
        this.#leftoverProcesses = false;
      }
      this.#callLauncher(() => launched.kill());
    }
    // A process outside the group may still hold stdout or stderr open; do not wait forever.
    this.#after(this.#graceMs, () => {
      if (this.#stdoutEnded && this.#stderrEnded) return;
      if (!this.#stdoutEnded) this.#launched?.child.stdout.destroy();
      if (!this.#stderrEnded) this.#launched?.child.stderr.destroy();
      this.#stdoutEnded = true;
      this.#stderrEnded = true;
      this.#maybeFinalize();
    });
    this.#maybeFinalize();
  }

  /** Records a fatal protocol error and stops the harness. */
  #fail(code: SessionErrorCode, message: string): void {
    this.#setError(code, message);
    this.#processing = false;
    this.#stop();
  }

  /**
   * A failure's message quotes what the harness wrote (a line, a field, an id): it is stored with the job,
   * logged and shown to operators, so each character a terminal or a reader acts on is an escape in it.
   */
  #setError(code: SessionErrorCode, message: string): void {
    if (this.#error === undefined) this.#error = { code, message: escapeRefusedCharacters(message) };
  }

  /** SIGTERM now, SIGKILL after the grace; pending requests are answered first. */
  #stop(): void {
    if (this.#stopping || this.#finalized || this.#launched === undefined) return;
    this.#stopping = true;
    this.#answerPendingAsEnded();
    if (this.#exit !== undefined) return;
    const launched = this.#launched;
    this.#callLauncher(() => launched.terminate());
    this.#after(this.#graceMs, () => {
      if (this.#exit !== undefined) return;
      this.#setError(
        "ignored_sigterm",
        `the harness was still running ${this.#graceMs} ms after SIGTERM and was killed`,
      );
      this.#callLauncher(() => launched.kill());
    });
  }

  #answerPendingAsEnded(): void {
    const timedOut = this.#endReason === "timed_out";
    for (const id of this.#pendingPermissions) {
      this.#write(
        create(RuntimeMessageSchema, {
          message: {
            case: "permissionAnswer",
            value: {
              id,
              allow: false,
              outcome: timedOut ? PermissionAnswer_Outcome.TIMED_OUT : PermissionAnswer_Outcome.CANCELLED,
              reason: timedOut ? "nobody answered before the session's deadline" : "the session was cancelled",
            },
          },
        }),
      );
    }
    this.#pendingPermissions.clear();
    for (const id of this.#pendingToolCalls) {
      this.#write(
        create(RuntimeMessageSchema, {
          message: {
            case: "runtimeToolResult",
            value: {
              id,
              isError: true,
              error: timedOut ? "the session's deadline passed" : "the session was cancelled",
            },
          },
        }),
      );
    }
    this.#pendingToolCalls.clear();
  }

  #callLauncher(signal: () => void | Promise<void>): void {
    try {
      const pending = signal();
      if (pending instanceof Promise) pending.catch(() => {});
    } catch {
      // The process may be gone already; the exit handler reports what matters.
    }
  }

  #after(ms: number, run: () => void): void {
    const delay = Math.max(0, ms);
    const timer = setTimeout(
      () => {
        this.#timers.delete(timer);
        if (delay > MAX_TIMER_MS) this.#after(delay - MAX_TIMER_MS, run);
        else run();
      },
      Math.min(delay, MAX_TIMER_MS),
    );
    this.#timers.add(timer);
  }

  #maybeFinalize(): void {
    if (this.#exit !== undefined && this.#stdoutEnded && this.#stderrEnded) this.#finalize();
  }

  #finalize(): void {
    if (this.#finalized) return;
    this.#finalized = true;
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    this.#pendingPermissions.clear();
    this.#pendingToolCalls.clear();
    if (this.#result === undefined && this.#error === undefined && this.#endReason === undefined) {
      const how = this.#exit?.signal ? `signal ${this.#exit.signal}` : `code ${this.#exit?.code ?? "unknown"}`;
      this.#error = { code: "no_result", message: `the harness exited (${how}) without writing a result` };
    }
    const status: SessionStatus = this.#endReason ?? (this.#error === undefined ? "completed" : "failed");
    const outcome: SessionOutcome = {
      status,
      exitCode: this.#exit?.code ?? null,
      signal: this.#exit?.signal ?? null,
      leftoverProcesses: this.#leftoverProcesses,
      counts: { ...this.#counts },
      stderrTail: this.#stderrTail.toString("utf8"),
      durationMs: performance.now() - this.#startedAt,
    };
    if (this.#result !== undefined) outcome.result = this.#result;
    if (this.#error !== undefined) outcome.error = this.#error;
    if (this.#started !== undefined) outcome.started = this.#started;
    if (this.#cancelReason !== undefined) outcome.cancelReason = this.#cancelReason;
    this.#resolve(outcome);
  }
}

/** What stands for the session's token in what the harness wrote: the mark the sandbox's stderr scrubber leaves. */
const TOKEN_REDACTED = "[redacted]";

/**
 * The line with the session's own LLM token taken out. A harness that prints
 * it (a tool's `env`, a debug line in a result) put it in the job's events,
 * which every viewer of the job reads, while it still spends the job's
 * budget. A token is base64url, which JSON never escapes, so its text is
 * found as is in any line a JSON encoder wrote; one written to hide it is
 * not looked for.
 */
function withoutSessionToken(line: string, token: string | undefined): string {
  return token !== undefined && token.length >= MIN_REDACTED_TOKEN && line.includes(token)
    ? line.replaceAll(token, TOKEN_REDACTED)
    : line;
}

/**
 * A token shorter than this (a test's `t`) is not looked for: it could be a
 * piece of any line's JSON, and taking it out would break the line. The
 * proxy's tokens are over 40 characters.
 */
const MIN_REDACTED_TOKEN = 16;
