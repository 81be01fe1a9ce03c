// SessionRunner over one sandbox node's oz0.sandbox.v1.SandboxService.
import path from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { PermissionAnswer, RuntimeToolResult } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { UNTRUSTED_EVENT_CODES } from "@oz0/harness/host";
import {
  IsolationMode,
  RunSessionRequestSchema,
  RunSessionResponseSchema,
  SandboxService,
  SessionStatus,
  type RunSessionRequest,
  type RunSessionResponse,
} from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { bearerInterceptor, traceContextClientInterceptor } from "@oz0/serving";
import { MessageQueue } from "./message-queue.js";
import {
  SandboxAnswerTooLargeError,
  SandboxFullError,
  SandboxRefusedError,
  SessionNotFoundError,
  type SandboxMessage,
  type SessionChannel,
  type SessionRunner,
  type StartSessionOptions,
} from "./session-runner.js";

const encoder = new TextEncoder();

/**
 * The sandbox's error codes for a harness that broke the protocol
 * (harness.proto's rules; the sandbox README lists every code). Other
 * codes of a failed session are the node's own limits or its own trouble.
 */
const PROTOCOL_ERROR_CODES = new Set<string>([
  // What the harness said that could not be read or trusted, then how it ended.
  ...UNTRUSTED_EVENT_CODES,
  "no_result",
  "did_not_exit",
  "ignored_sigterm",
  "nonzero_exit_after_result",
]);

/** The isolation mode's name, as the sandbox's settings spell it (`OZ0_ISOLATION`). */
const ISOLATION_NAMES: Partial<Record<IsolationMode, string>> = {
  [IsolationMode.NONE]: "none",
  [IsolationMode.BWRAP]: "bwrap",
  [IsolationMode.USER]: "user",
};

/** How a session ended from the node's side, as session.ended's status says it. */
const STATUS_NAMES: Partial<Record<SessionStatus, string>> = {
  [SessionStatus.COMPLETED]: "completed",
  [SessionStatus.FAILED]: "failed",
  [SessionStatus.CANCELLED]: "cancelled",
  [SessionStatus.TIMED_OUT]: "timed_out",
};

/**
 * `sessionId`: the session this stream follows, as the orchestrator named it (or, where it left that to the node, as
 * the node's `started` named it): a message's own session id is the node's word, and stderr is stored per session,
 * so a node that named a new one on each piece stored a job's stderr without bound (attacker review).
 */
function toMessage(response: RunSessionResponse, sessionId: string): SandboxMessage | undefined {
  const seq = Number(response.seq);
  const m = response.message;
  switch (m.case) {
    case "started": {
      const isolation = ISOLATION_NAMES[m.value.isolation];
      return { seq, kind: "started", sessionId: response.sessionId, ...(isolation ? { isolation } : {}) };
    }
    case "event":
      return { seq, kind: "event", event: m.value };
    case "stderr":
      return {
        seq,
        kind: "stderr",
        sessionId,
        text: m.value.text,
        droppedBytes: Number(m.value.droppedBytes),
      };
    case "artifacts": {
      const artifacts = [];
      if (m.value.patch)
        artifacts.push({ name: "changes.patch", mediaType: "text/x-diff", content: encoder.encode(m.value.patch) });
      for (const file of m.value.files)
        artifacts.push({ name: file.path, mediaType: "application/octet-stream", content: file.content });
      return { seq, kind: "artifacts", artifacts, ...(m.value.error ? { error: m.value.error } : {}) };
    }
    case "exited": {
      const e = m.value;
      const failed = e.status === SessionStatus.FAILED || e.status === SessionStatus.TIMED_OUT;
      const error = failed ? `${e.errorCode || "failed"}: ${e.errorMessage || "the session failed"}` : "";
      // A timed-out session is the runtime's doing, not the harness's: its result (if any) says so itself.
      const failure =
        e.status === SessionStatus.FAILED
          ? `${PROTOCOL_ERROR_CODES.has(e.errorCode) ? "the harness broke the protocol" : "the session failed"}: ${error}`
          : undefined;
      const killed = e.status === SessionStatus.CANCELLED && e.errorCode === "ignored_sigterm";
      return {
        seq,
        kind: "exited",
        exitCode: e.how.case === "exitCode" ? e.how.value : 0,
        signal: e.how.case === "signal" ? e.how.value : "",
        error,
        status: STATUS_NAMES[e.status] ?? "unknown",
        errorCode: e.errorCode,
        ...(failure !== undefined ? { failure } : {}),
        ...(killed ? { killedAfterStop: `${e.errorCode}: ${e.errorMessage}` } : {}),
        ...(e.result ? { result: e.result } : {}),
        stderrTail: e.stderrTail,
      };
    }
    default:
      return undefined; // `rejected` answers this stream only; the session is unaffected
  }
}

/**
 * What a node's answer weighs as decoded, for the session's byte budget (session-driver.ts). Artifacts are weighed by
 * what they hold rather than encoded again, which would copy up to SANDBOX_READ_MAX_BYTES once more to measure it.
 */
function answerBytes(response: RunSessionResponse): number {
  const m = response.message;
  if (m.case !== "artifacts")
    return Math.max(MESSAGE_STORED_BYTES, toBinary(RunSessionResponseSchema, response).byteLength);
  let bytes = MESSAGE_STORED_BYTES + Buffer.byteLength(m.value.patch) + Buffer.byteLength(m.value.error);
  for (const file of m.value.files)
    bytes += MESSAGE_STORED_BYTES + Buffer.byteLength(file.path) + file.content.byteLength;
  return bytes;
}

/**
 * The least a message (and each artifact file) counts for against the byte budget: what storing one costs, a row
 * of the job's events with its indexes, or a file. Counted as received, a node's empty tool calls of 7 bytes were
 * stored 42 times over (the job's event and the tool.called lifecycle event each), past the budget (attacker review).
 */
const MESSAGE_STORED_BYTES = 512;

class SandboxChannel implements SessionChannel {
  readonly #requests = new MessageQueue<RunSessionRequest>();
  readonly #abort = new AbortController();
  readonly #responses: AsyncIterator<RunSessionResponse>;
  /**
   * The call starts at once, and an unreachable node rejects it before
   * anyone iterates (the job runner reads the store first): the first
   * response is asked for now, with the rejection kept for the iteration,
   * so it never surfaces as an unhandled rejection that ends the process.
   */
  readonly #first: Promise<IteratorResult<RunSessionResponse>>;
  #sessionId: string;

  readonly #url: string;
  #answeredAt: number | undefined;

  constructor(client: Client<typeof SandboxService>, first: RunSessionRequest, sessionId: string, url: string) {
    this.#sessionId = sessionId;
    this.#url = url;
    this.#requests.push(first);
    const responses = client.runSession(this.#requests, {
      signal: this.#abort.signal,
      onHeader: () => (this.#answeredAt = Date.now()),
    });
    this.#responses = responses[Symbol.asyncIterator]();
    this.#first = this.#responses.next();
    this.#first.catch(() => undefined);
  }

  get answeredAt(): number | undefined {
    return this.#answeredAt;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<SandboxMessage> {
    // Answers that are no message of the session (`rejected`) still cost reading: weighed with the next one.
    let unweighed = 0;
    try {
      for (let next = await this.#first; !next.done; next = await this.#responses.next()) {
        if (this.#sessionId === "" && next.value.message.case === "started") this.#sessionId = next.value.sessionId;
        const message = toMessage(next.value, this.#sessionId);
        unweighed += answerBytes(next.value);
        if (!message) continue;
        message.bytes = unweighed;
        unweighed = 0;
        yield message;
      }
    } catch (error) {
      if (this.#abort.signal.aborted) return;
      const err = ConnectError.from(error);
      if (err.code === Code.NotFound) throw new SessionNotFoundError(this.#sessionId);
      // Connect's own limit on what it reads, not the node's refusal of a session it has no room for.
      if (err.code === Code.ResourceExhausted && err.rawMessage.includes("readMaxBytes"))
        throw new SandboxAnswerTooLargeError(this.#url, err.rawMessage);
      if (err.code === Code.ResourceExhausted) throw new SandboxFullError(this.#url, err.rawMessage);
      if (err.code === Code.Unauthenticated || err.code === Code.PermissionDenied)
        throw new SandboxRefusedError(this.#url, err.rawMessage);
      throw err;
    } finally {
      this.#requests.end();
      // Stopped early (the caller broke off): end the call as for-await would.
      await this.#responses.return?.().catch(() => undefined);
    }
  }

  async answerPermission(answer: PermissionAnswer): Promise<void> {
    if (this.#requests.ended) throw new Error("the session stream is closed");
    this.#requests.push(create(RunSessionRequestSchema, { message: { case: "permissionAnswer", value: answer } }));
  }

  async answerRuntimeTool(result: RuntimeToolResult): Promise<void> {
    if (this.#requests.ended) throw new Error("the session stream is closed");
    this.#requests.push(create(RunSessionRequestSchema, { message: { case: "runtimeToolResult", value: result } }));
  }

  close(): void {
    this.#requests.end();
    this.#abort.abort();
  }
}

/** How long a node has to answer a CancelSession. */
const CANCEL_TIMEOUT_MS = 10_000;

/**
 * The largest message a node's answer may hold, decompressed: twice the sandbox's default OZ0_MAX_ARTIFACT_BYTES
 * (a patch and named files of 8 MiB each, in one artifacts message), with room. Connect's default is 4 GiB: a
 * node, or whatever a heartbeat registered, answered with 760 KiB of gzip that inflated to 800 MB, and the
 * orchestrator took it in whole, past its pod's memory limit (attacker review).
 */
export const SANDBOX_READ_MAX_BYTES = 32 * 1024 * 1024;

export class SandboxClient implements SessionRunner {
  readonly url: string;
  readonly #client: Client<typeof SandboxService>;

  /** `token`: the orchestrator's credential for sandboxes (OZ0_SERVICE_TOKEN_FOR_SANDBOX, else OZ0_SERVICE_TOKEN); a sandbox takes sessions from nobody else. */
  constructor(options: { url: string; token?: string | undefined; readMaxBytes?: number }) {
    this.url = options.url;
    this.#client = createClient(
      SandboxService,
      // The session span is active when a session starts: the sandbox continues it.
      createGrpcTransport({
        baseUrl: options.url,
        interceptors: [traceContextClientInterceptor, bearerInterceptor(options.token)],
        readMaxBytes: options.readMaxBytes ?? SANDBOX_READ_MAX_BYTES,
      }),
    );
  }

  start(options: StartSessionOptions): SessionChannel {
    const first = create(RunSessionRequestSchema, {
      message: {
        case: "start",
        value: {
          request: options.request,
          command: options.command,
          pluginDir: options.pluginDir,
          attachments: options.attachments.map((nodePath) => ({
            path: path.basename(nodePath),
            source: { case: "nodePath" as const, value: nodePath },
          })),
          shareWorkingDirOf: options.shareWorkingDirOf ?? "",
        },
      },
    });
    return new SandboxChannel(this.#client, first, options.request.sessionId, this.url);
  }

  reattach(options: { sessionId: string; afterSeq: number }): SessionChannel {
    const first = create(RunSessionRequestSchema, {
      message: { case: "attach", value: { sessionId: options.sessionId, afterSeq: BigInt(options.afterSeq) } },
    });
    return new SandboxChannel(this.#client, first, options.sessionId, this.url);
  }

  async cancel(options: { sessionId: string; reason: string }): Promise<void> {
    try {
      // A node that never answers holds neither the caller (a CancelJob, the orchestrator's shutdown) nor the job:
      // the job ends without it anyway (jobs/session-stops.ts).
      await this.#client.cancelSession(
        { sessionId: options.sessionId, reason: options.reason },
        { timeoutMs: CANCEL_TIMEOUT_MS },
      );
    } catch (error) {
      if (ConnectError.from(error).code === Code.NotFound) throw new SessionNotFoundError(options.sessionId);
      throw error;
    }
  }
}
