// The oz0.sandbox.v1.SandboxService handlers: thin, mapping messages to the
// session registry and domain errors to Connect codes.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  RunSessionResponseSchema,
  type RunSessionRequest,
  type RunSessionResponse,
  type SandboxService,
} from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { preEncoded } from "./event-log.js";
import { SandboxError, type SandboxErrorCode } from "./sandbox-errors.js";
import { CommandRejectedError, type SandboxSession } from "./sandbox-session.js";
import type { SessionRegistry } from "./session-registry.js";

const CODES: Record<SandboxErrorCode, Code> = {
  invalid_argument: Code.InvalidArgument,
  resource_exhausted: Code.ResourceExhausted,
  not_found: Code.NotFound,
  already_exists: Code.AlreadyExists,
  unavailable: Code.Unavailable,
  failed_precondition: Code.FailedPrecondition,
};

function toConnectError(error: unknown): unknown {
  if (error instanceof SandboxError)
    return new ConnectError(error.message, CODES[error.code], undefined, undefined, error);
  return error;
}

async function mapErrors<T>(run: () => Promise<T> | T): Promise<T> {
  try {
    return await run();
  } catch (error) {
    throw toConnectError(error);
  }
}

export function sandboxService(registry: SessionRegistry): Partial<ServiceImpl<typeof SandboxService>> {
  return {
    async *runSession(requests, context) {
      const iterator = requests[Symbol.asyncIterator]();
      const first = await iterator.next();
      if (first.done === true)
        throw new ConnectError(
          "the stream ended before its first message; send start or attach first",
          Code.InvalidArgument,
        );
      const { session, afterSeq } = await mapErrors(() => openSession(registry, first.value));
      yield* follow(session, afterSeq, iterator, context, () => registry.endRead(session));
    },

    listSessions() {
      return { sessions: registry.list(), maxSessions: registry.maxSessions };
    },

    cancelSession(request) {
      return mapErrors(() => {
        if (request.sessionId === "") throw new SandboxError("invalid_argument", "session_id: is required");
        return { cancelled: registry.cancel(request.sessionId, request.reason) };
      });
    },
  };
}

async function openSession(
  registry: SessionRegistry,
  request: RunSessionRequest,
): Promise<{ session: SandboxSession; afterSeq: number }> {
  const message = request.message;
  switch (message.case) {
    case "start":
      return { session: await registry.start(message.value), afterSeq: 0 };
    case "attach": {
      if (message.value.sessionId === "") throw new SandboxError("invalid_argument", "attach.session_id: is required");
      const session = registry.get(message.value.sessionId);
      const afterSeq = message.value.afterSeq;
      if (afterSeq > BigInt(session.log.lastSeq)) {
        throw new SandboxError(
          "invalid_argument",
          `attach.after_seq: ${afterSeq} is past the last seq of session ${session.id} (${session.log.lastSeq}); attach with the last seq you received`,
        );
      }
      return { session, afterSeq: Number(afterSeq) };
    }
    default:
      throw new SandboxError(
        "invalid_argument",
        `the first message must be start or attach, got ${message.case ?? "an empty message"}`,
      );
  }
}

/**
 * Streams the session's log after `afterSeq` and, meanwhile, applies the
 * client's later messages. Rejected commands are answered on this stream
 * only (seq 0). Leaving (client gone, or `exited` sent) never touches the
 * session itself.
 */
async function* follow(
  session: SandboxSession,
  afterSeq: number,
  requests: AsyncIterator<RunSessionRequest>,
  context: HandlerContext,
  /** Called once every message of a finished session, its end included, was handed to this stream. */
  onEndRead: () => void,
): AsyncGenerator<RunSessionResponse> {
  // Binary codecs send each message as the log encoded it once (event-log.ts, preEncoded); JSON ones encode it themselves.
  const binary = !/json/i.test(context.requestHeader.get("content-type") ?? "");
  const stop = new AbortController();
  const onAbort = (): void => stop.abort();
  context.signal.addEventListener("abort", onAbort, { once: true });
  const rejections: RunSessionResponse[] = [];
  let wakeForRejection: (() => void) | undefined;
  const reject = (code: string, message: string): void => {
    rejections.push(
      create(RunSessionResponseSchema, {
        seq: 0n,
        sessionId: session.id,
        message: { case: "rejected", value: { code, message } },
      }),
    );
    wakeForRejection?.();
  };
  const reader = (async () => {
    for (;;) {
      const next = await requests.next();
      if (next.done === true || stop.signal.aborted) return;
      applyCommand(session, next.value, reject);
    }
  })();
  // The client may go away mid-read; that only ends this stream.
  reader.catch(() => undefined);

  const log = session.log.follow(afterSeq, stop.signal);
  try {
    let pending = log.next();
    // Made again only once a rejection woke it, not for every message.
    let rejection: Promise<"rejection"> | undefined;
    for (;;) {
      const queued = rejections.shift();
      if (queued !== undefined) {
        yield queued;
        continue;
      }
      rejection ??= new Promise<"rejection">((resolve) => (wakeForRejection = () => resolve("rejection")));
      const winner = await Promise.race([pending, rejection]);
      if (winner === "rejection") {
        rejection = undefined;
        wakeForRejection = undefined;
        continue;
      }
      if (winner.done === true) {
        if (!stop.signal.aborted) onEndRead();
        return;
      }
      yield binary ? preEncoded(winner.value, session.log.encoded(winner.value)) : winner.value;
      pending = log.next();
    }
  } finally {
    stop.abort();
    context.signal.removeEventListener("abort", onAbort);
    await log.return(undefined);
  }
}

function applyCommand(
  session: SandboxSession,
  request: RunSessionRequest,
  reject: (code: string, message: string) => void,
): void {
  const message = request.message;
  try {
    switch (message.case) {
      case "permissionAnswer":
        session.answerPermission(message.value);
        return;
      case "runtimeToolResult":
        session.sendRuntimeToolResult(message.value);
        return;
      case "cancel":
        if (!session.cancel(message.value.reason || "cancelled by the client"))
          reject("session_ended", `session ${session.id} has already ended`);
        return;
      default:
        reject(
          "invalid_command",
          `after the first message send permission_answer, runtime_tool_result or cancel, not ${message.case ?? "an empty message"}`,
        );
    }
  } catch (error) {
    if (error instanceof CommandRejectedError) reject(error.code, error.message);
    else reject("internal", "the command could not be applied; the node's log has the details");
  }
}
