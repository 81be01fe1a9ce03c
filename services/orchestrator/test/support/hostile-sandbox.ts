// A sandbox node that is the attacker's: it runs the harness the
// orchestrator names and passes every line the harness writes on as an
// event, checking nothing (the real sandbox refuses a line that breaks the
// protocol, so only the orchestrator's own checks stand between such a node
// and the job's store). Sessions keep their messages, so a re-attach (an
// orchestrator that restarted) reads them from its sequence number, as from
// the real sandbox. With `ignoreCancel` it also lets its harness run on when
// asked to stop it; with `ignoreCancel: "unanswered"` it never even answers.
// A harness line `{"nodeArtifacts": [{"path", "content"}]}` becomes the
// node's artifacts message, named as the harness likes.
import { spawn, type ChildProcess } from "node:child_process";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import path from "node:path";
import readline from "node:readline";
import { create, fromJsonString, toJsonString, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  RuntimeMessageSchema,
  SessionEventSchema,
  SessionRequestSchema,
  type SessionRequest,
  type SessionResult,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import {
  IsolationMode,
  RunSessionResponseSchema,
  SandboxService,
  SessionStatus,
  type RunSessionRequest,
  type RunSessionResponse,
  type StartSession,
} from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";

interface HostileSession {
  child: ChildProcess;
  /** What the runtime asked the node to run (its session token among it). */
  request: SessionRequest;
  log: RunSessionResponse[];
  ended: boolean;
  cancelled?: string;
  /** Why the runtime asked to stop it, even when that was ignored. */
  cancelRequested?: string;
  /** Streams waiting for the next message. */
  waiting: Set<() => void>;
  /** How many of the runtime's streams of it are open. */
  followers: number;
}

export class HostileSandbox {
  readonly #sessions = new Map<string, HostileSession>();
  readonly #ignoreCancel: boolean | "unanswered";

  constructor(options: { ignoreCancel?: boolean | "unanswered" } = {}) {
    this.#ignoreCancel = options.ignoreCancel ?? false;
  }

  /**
   * The command a session runs. An orchestrator in the test's process runs from its sources, and names
   * the custom steps' runner there (src/graphs/graph-step-runner.js, which is the built file's path): it
   * runs as built, as the real sandbox runs it for the built orchestrator.
   */
  static #built(command: readonly string[]): string[] {
    return command.map((part) =>
      part.endsWith(`${path.sep}src${path.sep}graphs${path.sep}graph-step-runner.js`)
        ? part.replace(`${path.sep}src${path.sep}`, `${path.sep}dist${path.sep}`)
        : part,
    );
  }

  readonly #server = http2.createServer(
    connectNodeAdapter({
      routes: (router) =>
        router.service(SandboxService, {
          runSession: (requests, context) => this.#runSession(requests, context.signal),
          listSessions: () => ({ sessions: [], maxSessions: 100 }),
          cancelSession: async (request, context) => {
            const cancelled = this.#cancel(request.sessionId, request.reason);
            // Held until the caller gives up.
            if (this.#ignoreCancel === "unanswered")
              await new Promise((resolve) => context.signal.addEventListener("abort", resolve));
            return { cancelled };
          },
        }),
    }),
  );

  readonly #connections = new Set<http2.ServerHttp2Session>();

  async listen(): Promise<string> {
    this.#server.on("session", (connection) => {
      this.#connections.add(connection);
      connection.on("close", () => this.#connections.delete(connection));
    });
    await new Promise<void>((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  /** Writes a line to a session's harness, as if the runtime had sent it. */
  write(sessionId: string, line: string): void {
    this.#sessions.get(sessionId)?.child.stdin?.write(`${line}\n`);
  }

  /** The request the runtime started a session with. */
  sessionRequest(sessionId: string): SessionRequest | undefined {
    return this.#sessions.get(sessionId)?.request;
  }

  /** The sessions the runtime started here, in order. */
  sessionIds(): string[] {
    return [...this.#sessions.keys()];
  }

  /** How many of the runtime's streams of the session are open: 0 once it no longer follows it. */
  followers(sessionId: string): number {
    return this.#sessions.get(sessionId)?.followers ?? 0;
  }

  /** Whether the session's harness still runs. */
  running(sessionId: string): boolean {
    const session = this.#sessions.get(sessionId);
    return session !== undefined && !session.ended;
  }

  /** Why the runtime asked to stop a session; undefined while it has not. */
  cancelRequested(sessionId: string): string | undefined {
    return this.#sessions.get(sessionId)?.cancelRequested;
  }

  async close(): Promise<void> {
    for (const session of this.#sessions.values()) {
      session.child.kill("SIGKILL");
      session.ended = true;
      for (const wake of session.waiting) wake();
    }
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    for (const connection of this.#connections) connection.destroy();
    await closed;
  }

  async *#runSession(
    requests: AsyncIterable<RunSessionRequest>,
    signal: AbortSignal,
  ): AsyncGenerator<RunSessionResponse> {
    const incoming = requests[Symbol.asyncIterator]();
    const first = (await incoming.next()).value as RunSessionRequest | undefined;
    let sessionId: string;
    let seq = 0;
    if (first?.message.case === "start") {
      sessionId = this.#start(first.message.value);
    } else if (first?.message.case === "attach") {
      sessionId = first.message.value.sessionId;
      seq = Number(first.message.value.afterSeq);
      if (!this.#sessions.has(sessionId)) throw new ConnectError(`no session ${sessionId}`, Code.NotFound);
    } else {
      throw new ConnectError("a stream starts with start or attach", Code.InvalidArgument);
    }
    const session = this.#sessions.get(sessionId)!;
    // Followed until the call ends, however it ends (the runtime letting the stream go aborts the signal).
    session.followers += 1;
    signal.addEventListener("abort", () => (session.followers -= 1), { once: true });
    // The runtime's answers go to the harness as they come, whatever it asked.
    const answers = async (): Promise<void> => {
      for (let r = await incoming.next(); !r.done; r = await incoming.next())
        if (r.value.message.case === "permissionAnswer" || r.value.message.case === "runtimeToolResult")
          session.child.stdin?.write(
            `${toJsonString(RuntimeMessageSchema, create(RuntimeMessageSchema, { message: r.value.message }))}\n`,
          );
    };
    answers().catch(() => undefined);
    for (;;) {
      while (seq < session.log.length) yield session.log[seq++]!;
      if (session.ended) return;
      await new Promise<void>((resolve) => session.waiting.add(resolve));
    }
  }

  #start(start: StartSession): string {
    const sessionId = start.request!.sessionId;
    const [command, ...args] = HostileSandbox.#built(start.command);
    const child = spawn(command!, args, {
      cwd: start.pluginDir || path.resolve("."),
      // As the real sandbox names it: the step runner of a custom graph step imports its module from there.
      env: { ...process.env, OZ0_PLUGIN_DIR: start.pluginDir },
      stdio: ["pipe", "pipe", "ignore"],
    });
    child.stdin.on("error", () => undefined);
    const session: HostileSession = {
      child,
      request: start.request!,
      log: [],
      ended: false,
      waiting: new Set(),
      followers: 0,
    };
    this.#sessions.set(sessionId, session);
    const push = (message: MessageInitShape<typeof RunSessionResponseSchema>["message"]): void => {
      session.log.push(create(RunSessionResponseSchema, { seq: BigInt(session.log.length + 1), sessionId, message }));
      for (const wake of session.waiting) wake();
      session.waiting.clear();
    };
    push({
      case: "started",
      value: { pid: child.pid ?? 0, isolation: IsolationMode.NONE, startTime: timestampNow() },
    });
    child.stdin.write(`${toJsonString(SessionRequestSchema, start.request!)}\n`);
    let result: SessionResult | undefined;
    const lines = readline.createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      if (line.startsWith('{"nodeArtifacts":')) {
        // Artifacts the node sends as it likes: {"nodeArtifacts": [{"path", "content"}]}, content as text.
        const files = (JSON.parse(line) as { nodeArtifacts: { path: string; content: string }[] }).nodeArtifacts;
        push({
          case: "artifacts",
          value: { files: files.map((f) => ({ path: f.path, content: Buffer.from(f.content) })) },
        });
        return;
      }
      const event = fromJsonString(SessionEventSchema, line, { ignoreUnknownFields: true });
      if (event.event.case === "result") result = event.event.value;
      push({ case: "event", value: event });
    });
    child.on("close", (code, signal) => {
      session.ended = true;
      push({
        case: "exited",
        value: {
          how: signal ? { case: "signal", value: signal } : { case: "exitCode", value: code ?? 0 },
          status: session.cancelled !== undefined ? SessionStatus.CANCELLED : SessionStatus.COMPLETED,
          ...(result ? { result } : {}),
          cancelReason: session.cancelled ?? "",
          endTime: timestampNow(),
        },
      });
    });
    return sessionId;
  }

  #cancel(sessionId: string, reason: string): boolean {
    const session = this.#sessions.get(sessionId);
    if (!session || session.ended) return false;
    session.cancelRequested ??= reason;
    if (this.#ignoreCancel) return true;
    session.cancelled = reason;
    session.child.kill("SIGTERM");
    return true;
  }
}
