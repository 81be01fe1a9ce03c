// The harness side of one session: read the request from stdin, announce the
// harness, emit events, ask permission, call runtime tools, and end with
// exactly one result, also when the runtime cancels with SIGTERM.
import type { Readable, Writable } from "node:stream";
import { create, fromJson, toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import type { JsonObject, JsonValue, MessageInitShape } from "@bufbuild/protobuf";
import {
  PermissionAnswer_Outcome,
  ProtocolVersion,
  RuntimeMessageSchema,
  SessionEventSchema,
  SessionRequestSchema,
  StopReason,
  UsageSchema,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import type {
  CapabilitiesSchema,
  PermissionAnswer,
  RuntimeToolResult,
  SessionRequest,
  Usage,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import { LineSplitter } from "../protocol/line-framing.js";
import { decodeLine, encodeLine } from "../protocol/message-codec.js";
import { exitProcess } from "./exit-process.js";
import { HarnessSessionError } from "./harness-errors.js";
import { modelEndpointFrom } from "./model-endpoint.js";
import type { ModelEndpoint } from "./model-endpoint.js";
import { sessionTracer } from "./session-tracer.js";
import { startSpanExport, type SpanExport } from "./span-export.js";
import { traceContextFrom } from "./trace-context.js";
import type { TraceContext } from "./trace-context.js";
import type { Tracer } from "@opentelemetry/api";

/** Requests carry instructions and skills; allow far more than an event line. */
const DEFAULT_MAX_REQUEST_LINE_BYTES = 64 * 1024 * 1024;

type SessionEventInit = MessageInitShape<typeof SessionEventSchema>;

/** What the harness supports beyond text and a result (sent in `started`). */
export type HarnessCapabilities = Omit<MessageInitShape<typeof CapabilitiesSchema>, "$typeName">;

/** Options of {@link openSession}. */
export interface OpenSessionOptions {
  /** The harness's name, for logs. */
  name: string;
  /** The harness's version, for logs. */
  version: string;
  /** Declared capabilities; the conformance kit tests what is declared. */
  capabilities?: HarnessCapabilities;
  /** Where the runtime's lines come from; default `process.stdin`. */
  input?: Readable;
  /** Where events go; default `process.stdout`. Nothing else may write there. */
  output?: Writable;
  /** Where logs go; default `process.stderr`. */
  log?: Writable;
  /** Environment for `TRACEPARENT`; default `process.env`. */
  env?: NodeJS.ProcessEnv;
  /**
   * Handle SIGTERM (protocol rule 5): abort {@link HarnessSession.signal},
   * write the one `cancelled` result and exit. Default true.
   */
  handleSigterm?: boolean;
  /** Exit the process once the cancelled result is written. Default true; ignored without `handleSigterm`. */
  exitOnCancel?: boolean;
}

/** Options of {@link HarnessSession.text}. */
export interface TextOptions {
  /** Ties deltas of one item together; default a new id per whole item. */
  itemId?: string;
  /** True when `text` is a delta appended to the item. */
  delta?: boolean;
  /** `assistant` (default) or `thinking`. */
  role?: "assistant" | "thinking";
}

/** A tool call the model asked for. */
export interface ToolCallInit {
  callId: string;
  tool: string;
  input?: JsonObject;
  title?: string;
}

/** The result of a tool call. */
export interface ToolResultInit {
  callId: string;
  output?: JsonValue;
  isError?: boolean;
}

/** Token counts of one model call; numbers or bigints. */
export interface UsageInit {
  model: string;
  inputTokens?: number | bigint;
  outputTokens?: number | bigint;
  cacheReadTokens?: number | bigint;
  cacheWriteTokens?: number | bigint;
  reasoningTokens?: number | bigint;
  costUsd?: number;
}

/** The session's result. Unset fields default sensibly. */
export interface ResultInit {
  /** Default STOP_REASON_COMPLETED. */
  stopReason?: StopReason;
  text?: string;
  /** Required (and valid against the request's output_schema) when the request has one. */
  structuredOutput?: JsonObject;
  /** What went wrong, when the stop reason is not COMPLETED. */
  error?: string;
  /** Default {@link HarnessSession.turns}. */
  turns?: number;
  /** Default: the totals of every {@link HarnessSession.usage} call, per model. */
  usage?: UsageInit[];
}

/** What to ask permission for. */
export interface PermissionRequestInit {
  /** The harness's own tool name, e.g. `run_command`. */
  tool: string;
  input?: JsonObject;
  /** Human-readable, e.g. `Run npm test`. */
  title?: string;
  /** The tool call this is for, when announced with {@link HarnessSession.toolCall}. */
  callId?: string;
}

/** The runtime's decision on a permission request. */
export interface PermissionDecision {
  /** Run the call only when true. */
  allow: boolean;
  /** The input to run the call with: the answer's replacement when it has one, else the requested input. */
  input: JsonObject;
  /** Why; tell the model when the call is denied. */
  reason: string;
  /** ANSWERED, CANCELLED or TIMED_OUT (UNSPECIFIED when the request had permissions off and nobody was asked). */
  outcome: PermissionAnswer_Outcome;
  /** False when the request has `permissions` off and the call was allowed without asking. */
  asked: boolean;
}

/** The runtime's answer to a runtime tool call. */
export interface RuntimeToolOutcome {
  /** The tool's output (any JSON value); undefined on error. */
  output: JsonValue | undefined;
  isError: boolean;
  /** What went wrong, when `isError`. */
  error: string;
}

interface Waiter<T> {
  resolve: (value: T) => void;
  reject: (error: Error) => void;
}

/**
 * Reads and validates the session request from stdin and writes `started`.
 * A request this SDK cannot serve (bad JSON, another protocol version, no
 * request at all) is answered with a STOP_REASON_ERROR result and the
 * promise rejects with a {@link HarnessSessionError}.
 */
export async function openSession(options: OpenSessionOptions): Promise<HarnessSession> {
  const session = new HarnessSession(options);
  await session.handshake();
  return session;
}

/** One session, from the harness's side. Create it with {@link openSession}. */
export class HarnessSession {
  /** The session request, as the runtime sent it. */
  request!: SessionRequest;
  /** Where to call models, with the token and headers every call needs. */
  model!: ModelEndpoint;
  /** W3C trace context to continue the session's trace. */
  trace!: TraceContext;
  /** Model turns taken; increment it per model call. Results report it by default. */
  turns = 0;

  readonly #options: OpenSessionOptions;
  readonly #input: Readable;
  readonly #output: Writable;
  readonly #log: Writable;
  readonly #abort = new AbortController();
  readonly #cancelHooks: Array<() => void> = [];
  readonly #permissionWaiters = new Map<string, Waiter<PermissionAnswer>>();
  readonly #toolWaiters = new Map<string, Waiter<RuntimeToolResult>>();
  readonly #usageTotals = new Map<string, Usage>();
  #firstLine: Waiter<string | undefined> | undefined;
  #requestLine: string | undefined;
  #inputEnded = false;
  #resultSent = false;
  #nextId = 1;
  #onSigterm: (() => void) | undefined;
  /** Set when the runtime asks for the harness's spans (the stack records traces). */
  #spans: SpanExport | undefined;

  /** @internal Use {@link openSession}. */
  constructor(options: OpenSessionOptions) {
    this.#options = options;
    this.#input = options.input ?? process.stdin;
    this.#output = options.output ?? process.stdout;
    this.#log = options.log ?? process.stderr;
    // The runtime may be gone; losing an event then is better than crashing.
    this.#output.on("error", () => {});
  }

  /** Aborted when the runtime cancels the session (SIGTERM); pass it to fetch and child processes. */
  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  /** True once the session is cancelled. */
  get cancelled(): boolean {
    return this.#abort.signal.aborted;
  }

  /** True once the result is written. */
  get resultSent(): boolean {
    return this.#resultSent;
  }

  /** @internal Reads the request and writes `started`; called by {@link openSession}. */
  async handshake(): Promise<void> {
    const firstLine = new Promise<string | undefined>((resolve, reject) => (this.#firstLine = { resolve, reject }));
    this.#startReading();
    const line = await firstLine;
    if (line === undefined) {
      this.#refuse("no_request", "stdin ended before a session request arrived");
    }
    const decoded = decodeLine(SessionRequestSchema, line);
    // A newer runtime's version is a name this SDK does not know, so the line does not decode: say which (rule 1).
    const version = decoded.ok ? undefined : requestedVersion(line);
    if (version !== undefined && version !== "PROTOCOL_VERSION_1" && version !== 1) {
      this.#refuse(
        "unsupported_protocol_version",
        `this harness speaks PROTOCOL_VERSION_1; the request has ${String(version)}`,
      );
    }
    if (!decoded.ok) {
      this.#refuse("invalid_request", `the first stdin line is not a valid SessionRequest: ${decoded.detail}`);
    }
    const request = decoded.message;
    if (request.protocolVersion !== ProtocolVersion.PROTOCOL_VERSION_1) {
      this.#refuse(
        "unsupported_protocol_version",
        `this harness speaks PROTOCOL_VERSION_1; the request has ${ProtocolVersion[request.protocolVersion] ?? request.protocolVersion}`,
      );
    }
    this.request = request;
    this.trace = traceContextFrom(request, this.#options.env ?? process.env);
    this.model = modelEndpointFrom(request, { trace: this.trace });
    this.#spans = await startSpanExport({ env: this.#options.env ?? process.env, serviceName: this.#options.name });
    if (this.#options.handleSigterm ?? true) {
      this.#onSigterm = () => this.cancel();
      process.on("SIGTERM", this.#onSigterm);
    }
    this.#emit({
      case: "started",
      value: {
        protocolVersion: ProtocolVersion.PROTOCOL_VERSION_1,
        harnessName: this.#options.name,
        harnessVersion: this.#options.version,
        capabilities: this.#options.capabilities ?? {},
      },
    });
  }

  /** Writes model text: a whole item, or a delta of one (`{ itemId, delta: true }`). */
  text(text: string, options: TextOptions = {}): void {
    this.#emit({
      case: "text",
      value: {
        itemId: options.itemId ?? this.#newId("item"),
        text,
        delta: options.delta ?? false,
        role: options.role ?? "",
      },
    });
  }

  /** Announces a tool call the model asked for (before its permission request). */
  toolCall(call: ToolCallInit): void {
    this.#emit({
      case: "toolCall",
      value: { callId: call.callId, tool: call.tool, input: call.input ?? {}, title: call.title ?? "" },
    });
  }

  /** Reports a tool call's result. */
  toolResult(result: ToolResultInit): void {
    this.#emit({
      case: "toolResult",
      value: {
        callId: result.callId,
        output: fromJson(ValueSchema, result.output ?? null),
        isError: result.isError ?? false,
      },
    });
  }

  /** Reports the tokens of one model call; the totals go into the result by default. */
  usage(init: UsageInit): void {
    const usage = toUsage(init);
    this.#emit({ case: "usage", value: usage });
    const total = this.#usageTotals.get(usage.model) ?? create(UsageSchema, { model: usage.model });
    total.inputTokens += usage.inputTokens;
    total.outputTokens += usage.outputTokens;
    total.cacheReadTokens += usage.cacheReadTokens;
    total.cacheWriteTokens += usage.cacheWriteTokens;
    total.reasoningTokens += usage.reasoningTokens;
    total.costUsd += usage.costUsd;
    this.#usageTotals.set(usage.model, total);
  }

  /**
   * An OpenTelemetry tracer whose spans continue this session's trace: a span
   * started with none active is a child of the sandbox's session span. Spans
   * are exported once the process registers an OpenTelemetry SDK.
   */
  tracer(name: string = this.#options.name, version: string | undefined = this.#options.version): Tracer {
    return sessionTracer({ name, ...(version ? { version } : {}), trace: this.trace });
  }

  /** Sends the spans not yet exported (when the stack records traces); resolves within a bounded time, never rejects. */
  async flushSpans(): Promise<void> {
    await this.#spans?.flush();
  }

  /** Shows the runtime the harness is alive during long work. */
  heartbeat(): void {
    this.#emit({ case: "heartbeat", value: {} });
  }

  /**
   * Writes the one result. Throws {@link HarnessSessionError}
   * (`result_already_sent`) on a second call. Stops reading stdin so the
   * process can exit once its work is done.
   */
  result(init: ResultInit = {}): void {
    this.#checkOpen();
    this.#emit({
      case: "result",
      value: {
        stopReason: init.stopReason ?? StopReason.COMPLETED,
        text: init.text ?? "",
        structuredOutput: init.structuredOutput,
        error: init.error ?? "",
        turns: init.turns ?? this.turns,
        usage: init.usage ? init.usage.map(toUsage) : [...this.#usageTotals.values()],
      },
    });
    this.#resultSent = true;
    this.#close(new HarnessSessionError("result_already_sent", "the session's result is out"));
    // The pending export keeps the process alive until it is sent (bounded), so a harness that just ends loses no span.
    void this.#spans?.flush();
  }

  /**
   * Asks the runtime before running a tool call (protocol rule 6) and waits
   * for the answer. When the request has `permissions` off, allows at once
   * without asking. Rejects with `cancelled` if SIGTERM arrives first.
   */
  async requestPermission(init: PermissionRequestInit): Promise<PermissionDecision> {
    const input = init.input ?? {};
    if (!this.request.permissions) {
      this.#checkOpen();
      return { allow: true, input, reason: "", outcome: PermissionAnswer_Outcome.UNSPECIFIED, asked: false };
    }
    const id = this.#newId("perm");
    const answer = await this.#wait(this.#permissionWaiters, id, () =>
      this.#emit({
        case: "permissionRequest",
        value: { id, tool: init.tool, input, title: init.title ?? "", callId: init.callId ?? "" },
      }),
    );
    return {
      // Fail closed: only an explicit answer can allow (rule 7).
      allow: answer.allow && answer.outcome === PermissionAnswer_Outcome.ANSWERED,
      input: answer.input ?? input,
      reason: answer.reason,
      outcome: answer.outcome,
      asked: true,
    };
  }

  /** Calls a tool the runtime serves (one of `request.runtimeTools`) and waits for its result. */
  async callRuntimeTool(name: string, input: JsonObject = {}): Promise<RuntimeToolOutcome> {
    const id = this.#newId("rt");
    const result = await this.#wait(this.#toolWaiters, id, () =>
      this.#emit({ case: "runtimeToolCall", value: { id, name, input } }),
    );
    return {
      output: result.isError || result.output === undefined ? undefined : toJson(ValueSchema, result.output),
      isError: result.isError,
      error: result.error,
    };
  }

  /** Registers work to run when the session is cancelled (before the cancelled result is written). */
  onCancel(hook: () => void): void {
    if (this.cancelled) hook();
    else this.#cancelHooks.push(hook);
  }

  /**
   * Cancels the session as SIGTERM does: aborts {@link signal}, runs the
   * cancel hooks, rejects pending waits, writes the one `cancelled` result
   * (unless a result is out) and, with `exitOnCancel`, exits.
   */
  cancel(reason = "the session was cancelled"): void {
    if (this.cancelled) return;
    const error = new HarnessSessionError("cancelled", reason);
    this.#abort.abort(error);
    for (const hook of this.#cancelHooks.splice(0)) {
      try {
        hook();
      } catch (hookError) {
        this.log("error", "a cancel hook threw", { error: (hookError as Error).message });
      }
    }
    this.#rejectWaiters(error);
    if (!this.#resultSent) this.result({ stopReason: StopReason.CANCELLED, error: reason });
    this.#close(error);
    if ((this.#options.handleSigterm ?? true) && (this.#options.exitOnCancel ?? true)) {
      // Exit only once the result has reached the pipe, and the spans the collector (bounded).
      this.#output.write("", () => void (this.#spans?.flush() ?? Promise.resolve()).then(() => exitProcess(0)));
    }
  }

  /** Writes one JSON log line to stderr (never stdout, which carries the protocol). */
  log(level: "debug" | "info" | "warn" | "error", message: string, fields: Record<string, unknown> = {}): void {
    this.#log.write(
      JSON.stringify({ time: new Date().toISOString(), level, harness: this.#options.name, message, ...fields }) + "\n",
    );
  }

  #refuse(code: HarnessSessionError["code"], message: string): never {
    this.#emit({ case: "result", value: { stopReason: StopReason.ERROR, error: message } });
    this.#resultSent = true;
    this.#close(new HarnessSessionError(code, message));
    throw new HarnessSessionError(code, message);
  }

  #checkOpen(): void {
    if (this.#resultSent)
      throw new HarnessSessionError("result_already_sent", "the session's result is out; nothing may follow it");
  }

  #emit(event: SessionEventInit["event"]): void {
    this.#checkOpen();
    this.#output.write(encodeLine(SessionEventSchema, create(SessionEventSchema, { event })));
  }

  #newId(prefix: string): string {
    return `${prefix}-${this.#nextId++}`;
  }

  async #wait<T>(waiters: Map<string, Waiter<T>>, id: string, send: () => void): Promise<T> {
    if (this.cancelled) throw this.#abort.signal.reason as Error;
    if (this.#inputEnded)
      throw new HarnessSessionError("runtime_gone", "the runtime closed stdin; no answer can arrive");
    const answer = new Promise<T>((resolve, reject) => waiters.set(id, { resolve, reject }));
    send();
    return answer;
  }

  #startReading(): void {
    const splitter = new LineSplitter({
      maxLineBytes: DEFAULT_MAX_REQUEST_LINE_BYTES,
      onLine: (line) => this.#onLine(line),
      onOversizedLine: (bytes) => this.log("error", "ignored an oversized stdin line", { bytes }),
    });
    this.#input.on("data", (chunk: Buffer | string) =>
      splitter.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk),
    );
    this.#input.on("end", () => {
      splitter.end();
      this.#inputEnded = true;
      this.#firstLine?.resolve(undefined);
      this.#rejectWaiters(
        new HarnessSessionError("runtime_gone", "the runtime closed stdin while an answer was awaited"),
      );
    });
    this.#input.on("error", (error) => this.log("error", "stdin failed", { error: error.message }));
  }

  #onLine(line: string): void {
    if (this.#requestLine === undefined) {
      this.#requestLine = line;
      this.#firstLine?.resolve(line);
      this.#firstLine = undefined;
      return;
    }
    const decoded = decodeLine(RuntimeMessageSchema, line);
    if (!decoded.ok) {
      this.log("warn", "ignored a stdin line that is not a RuntimeMessage", { detail: decoded.detail });
      return;
    }
    const message = decoded.message.message;
    if (message.case === "permissionAnswer") {
      this.#settle(this.#permissionWaiters, message.value.id, message.value);
    } else if (message.case === "runtimeToolResult") {
      this.#settle(this.#toolWaiters, message.value.id, message.value);
    }
    // Other kinds come from a newer runtime; ignoring them is rule 2.
  }

  #settle<T>(waiters: Map<string, Waiter<T>>, id: string, value: T): void {
    const waiter = waiters.get(id);
    if (waiter === undefined) {
      this.log("warn", "ignored an answer to an unknown id", { id });
      return;
    }
    waiters.delete(id);
    waiter.resolve(value);
  }

  #rejectWaiters(error: Error): void {
    for (const waiter of this.#permissionWaiters.values()) waiter.reject(error);
    for (const waiter of this.#toolWaiters.values()) waiter.reject(error);
    this.#permissionWaiters.clear();
    this.#toolWaiters.clear();
  }

  /** After the result: no more waiting, no more reading, no more SIGTERM handling. */
  #close(error: Error): void {
    this.#rejectWaiters(error);
    this.#input.removeAllListeners("data");
    this.#input.pause();
    if (this.#input === process.stdin) process.stdin.destroy();
    if (this.#onSigterm !== undefined && !this.cancelled) {
      process.off("SIGTERM", this.#onSigterm);
      this.#onSigterm = undefined;
    }
  }
}

function toUsage(init: UsageInit): Usage {
  return create(UsageSchema, {
    model: init.model,
    inputTokens: BigInt(init.inputTokens ?? 0),
    outputTokens: BigInt(init.outputTokens ?? 0),
    cacheReadTokens: BigInt(init.cacheReadTokens ?? 0),
    cacheWriteTokens: BigInt(init.cacheWriteTokens ?? 0),
    reasoningTokens: BigInt(init.reasoningTokens ?? 0),
    costUsd: init.costUsd ?? 0,
  });
}

/** The `protocolVersion` of a request line that did not decode, when it has one. */
function requestedVersion(line: string): unknown {
  try {
    const json = JSON.parse(line) as { protocolVersion?: unknown } | null;
    return json !== null && typeof json === "object" ? json.protocolVersion : undefined;
  } catch {
    return undefined;
  }
}
