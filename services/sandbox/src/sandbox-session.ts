// One harness session on the node, from directories to removal: prepares
// its files, runs the harness through the host side of @oz0/harness with
// the right launcher, logs every message with its seq, enforces the turn
// limit, collects the artifacts and cleans up.
import { rmSync } from "node:fs";
import path from "node:path";
import { clone, create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate, timestampNow, type Timestamp } from "@bufbuild/protobuf/wkt";
import type {
  PermissionAnswer,
  RuntimeToolResult,
  SessionEvent,
  SessionRequest,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import { SessionRequestSchema, StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import {
  IsolationMode,
  SessionExitedSchema,
  SessionInfoSchema,
  SessionStatus,
  type SessionInfo,
  type RunSessionResponse,
  type StartSession,
} from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import {
  HostSessionError,
  processGroupLauncher,
  startHostSession,
  type Containment,
  type HarnessLauncher,
  type HostSession,
  type LaunchedHarness,
  type SessionContainer,
  type SessionOutcome,
} from "@oz0/harness/host";
import type { Logger } from "@oz0/serving";
import { collectArtifacts, snapshotInitialState } from "./artifact-collector.js";
import { bubblewrapLauncher, initPidFromInfoFile } from "./bubblewrap-launcher.js";
import type { IsolationName } from "./isolation-choice.js";
import { MAX_LINE_NESTING, nestingLimitLauncher } from "./line-nesting.js";
import { landlockLauncher, type Landlock } from "./landlock-launcher.js";
import type { SessionProcesses } from "./process-list.js";
import { parentDeathLauncher } from "./parent-death-launcher.js";
import {
  startLlmForwarding,
  type ForwardBudget,
  type LlmForward,
  type LlmForwarding,
  type SharedLlmListeners,
} from "./llm-forwarder.js";
import { SessionEventLog } from "./event-log.js";
import { SandboxError } from "./sandbox-errors.js";
import { StderrCapture } from "./stderr-capture.js";
import { stdoutLimitLauncher } from "./stdout-limit.js";
import {
  copyAttachments,
  createSessionDirectories,
  handOverSessionDirectories,
  removeSessionDirectories,
  type InternalDirectoryPool,
  type SessionPaths,
} from "./session-directories.js";
import {
  buildSessionEnvironment,
  stateSubdirectories,
  UNTRUSTED_EVENT_CODES,
  type SessionErrorCode,
} from "@oz0/harness/host";
import { yieldingLauncher } from "./session-precedence.js";
import { sessionUserLauncher, type UserModeDomain } from "./session-user-launcher.js";
import type { SessionUserLease } from "./session-user-pool.js";
import type { SessionUser } from "./session-user-processes.js";
import type { SessionNamespaceLimits } from "./session-namespace-limits.js";
import { appendAnswered, SessionLogFile, writeSessionRecord, type SessionRecord } from "./session-record.js";
import { adoptKeeper, extraFile, keeperSpawn, processStartTime, type SpareKeepers } from "./session-keeper.js";
import { startSessionSpan, type SessionSpan } from "./tracing.js";
import type { SessionProcessLimit } from "./session-process-limit.js";
import type { UserModeSyscallFilter } from "./syscall-filter.js";
import type { SessionTraceIdentity } from "./session-trace-export.js";

/** How the session's harness is isolated, decided by the registry. */
export type SessionIsolation =
  /** Everything the harness starts runs in a container of `containment`, ended with the session. */
  | { mode: "none"; setprivPath?: string; containment: Containment; landlock?: Landlock }
  /** The session's uid is taken when it prepares its directories (a new one, or the one of the session whose working directory it shares). */
  | {
      mode: "user";
      setprivPath: string;
      acquireUser: () => Promise<SessionUserLease>;
      syscallFilter?: UserModeSyscallFilter | undefined;
      domain?: UserModeDomain | undefined;
    }
  | {
      mode: "bwrap";
      bwrapPath: string;
      /** The seccomp filter's program bwrap loads (syscall-filter.ts). */
      syscallFilter?: string | undefined;
      readOnlyPaths: readonly string[];
      hiddenPaths: readonly string[];
      sandboxRoot: string;
      entryCommand: readonly string[];
      forwards: LlmForward[];
      /** The node's listeners, when the forwards are planned on them (a session a previous version started); else the session listens on its own sockets. */
      listeners: SharedLlmListeners | undefined;
      /** The node's count of forwarded connections, which the session's own sockets are capped in. */
      budget: ForwardBudget;
      /**
       * A sandbox running as root runs each session under a uid of its own (bubblewrap-launcher.ts), taken when it
       * prepares its directories or takes the session over; undefined: sessions run as the sandbox's own user.
       */
      users?: { setprivPath: string; acquireUser: () => Promise<SessionUserLease> } | undefined;
      /** Its shares of the sandbox user's per-user counts, when it runs as that user (session-namespace-limits.ts). */
      namespaceLimits?: SessionNamespaceLimits | undefined;
    };

/**
 * The proto's IsolationMode has no value for the `user` mode yet, so
 * `started` and ListSessions report it as unspecified (never as NONE, which
 * it is not); lifecycle events and logs name it.
 */
/** In place of the artifacts of a session whose harness's events could not be trusted under permissions. */
export const ARTIFACTS_WITHHELD =
  "withheld: the harness broke the protocol in what it said (the session's error says how) while each of its tool calls was to be asked about, so what it changed cannot be vouched for and is not collected";

/** In place of the artifacts of a session whose collection was stopped: git's copy of its working directory was filling the disk. */
export const ARTIFACTS_FILLED_DISK =
  "artifacts were not collected: the node's disk went below its floor (OZ0_SANDBOX_MIN_FREE_BYTES, _FILES) while they were, and collecting them copies the working directory";

/** How often collecting artifacts looks at what the disk guard last found (a boolean it keeps: no reading of its own). */
const DISK_WATCH_DURING_COLLECTION_MS = 50;

const ISOLATION_MODES: Record<IsolationName, IsolationMode> = {
  bwrap: IsolationMode.BWRAP,
  user: IsolationMode.USER,
  none: IsolationMode.NONE,
};

export interface SandboxSessionOptions {
  start: StartSession;
  /** Paths a `node_path` attachment may never lead into or hold: the sandbox's root, the hidden paths. */
  attachmentsNeverFrom: readonly string[];
  /** The validated request, with session id set. */
  request: SessionRequest;
  command: string[];
  paths: SessionPaths;
  isolation: SessionIsolation;
  /** Whether the node's disk is below its floor (session-disk-guard.ts): an ending session then keeps no snapshot of its work. */
  diskBelowFloor?: () => boolean;
  sessionPath: string;
  locale: string;
  /** The limit on the session's processes, where the isolation mode lets the kernel count them apart. */
  processLimit: SessionProcessLimit | undefined;
  graceMs: number;
  maxLineBytes: number;
  maxArtifactBytes: number;
  /** Harness events kept per session; past it the session is stopped. */
  maxLogEvents: number;
  /** Bytes of harness events (their encoding) kept per session; past it the session is stopped. */
  maxLogBytes: number;
  /** How much of the harness's stderr the log keeps (the last bytes of it). */
  maxStderrBytes: number;
  /** The most a session may write to stderr in all (OZ0_MAX_SESSION_STDERR_WRITTEN_BYTES); past it it is stopped. */
  maxStderrWrittenBytes: number;
  /** The most a session may write to stdout in all (OZ0_MAX_SESSION_STDOUT_BYTES); past it it is stopped. */
  maxStdoutBytes: number;
  logger: Logger;
  /** The sandbox's relay to the trace collector: the harness exports its spans there (inside the sandbox, through its forward), encoded as the collector takes them. */
  traceRelay?: {
    url: string;
    protocol: "http/protobuf" | "http/json";
    exportPath(session: SessionTraceIdentity): string;
  };
  /**
   * Run the harness under a keeper (session-keeper.ts) and keep the session's
   * record and log in its internal directory, so a restarted sandbox takes it
   * over. Under bubblewrap only: there the keeper is all the harness needs.
   */
  keep?: { orphanMs: number; spares?: SpareKeepers | undefined; internalDirs?: InternalDirectoryPool | undefined };
  /** A session a previous run of the sandbox started, taken over: {@link SandboxSession.resume} instead of prepareAndLaunch. */
  adopted?: {
    record: SessionRecord;
    log: RunSessionResponse[];
    answered: { answeredPermissions: ReadonlySet<string>; answeredToolCalls: ReadonlySet<string> };
  };
  /** The session's directories are gone and it no longer counts against the node's limit; called once, before `exited` is logged. */
  onReleased?: (session: SandboxSession) => void;
}

/** A client command the session could not apply; the session is unaffected. */
export class CommandRejectedError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = "CommandRejectedError";
    this.code = code;
  }
}

export class SandboxSession {
  readonly id: string;
  readonly jobId: string;
  readonly log: SessionEventLog;
  readonly startTime: Timestamp;
  readonly isolation: IsolationMode;
  readonly isolationName: IsolationName;
  endTime: ReturnType<typeof timestampNow> | undefined;
  status: SessionStatus = SessionStatus.RUNNING;
  /** Resolves once `exited` is logged and the directories are removed. Never rejects. */
  readonly finished: Promise<void>;
  readonly #options: SandboxSessionOptions;
  #host: HostSession | undefined;
  /** The session's uid in the `user` mode, or under bubblewrap run by root, once taken. */
  #user: SessionUserLease | undefined;
  /** What ends the `none` mode's processes, also those that left the process group. */
  #container: SessionContainer | undefined;
  #forwarding: LlmForwarding | undefined;
  #baseline: "snapshot" | "empty" | "none" = "none";
  #usageEvents = 0;
  /** Harness events logged (stderr pieces do not count against OZ0_MAX_SESSION_EVENTS). */
  #events = 0;
  /** Their encoded bytes (OZ0_MAX_SESSION_LOG_BYTES). */
  #eventBytes = 0;
  /** The bytes of the artifacts logged: the patch and the named files. */
  #artifactBytes = 0;
  readonly #stderr: StderrCapture;
  /** A limit the sandbox itself enforced (turns, log size, line nesting): it fails the session whatever the harness did. */
  #limitBroken: { code: string; message: string } | undefined;
  /** Harness events a taken-over session's replay gives again: already in the log, not logged twice. */
  #replayedEvents = 0;
  /** The session's log on disk while it is kept. */
  readonly #logFile: SessionLogFile | undefined;
  /** The session's record while it is kept (the keeper's pid and bwrap's init are added to it). */
  #record: SessionRecord | undefined;
  #cancelRequested: string | undefined;
  /** Sessions working in this one's directory (start.share_working_dir_of), each with when it is gone. */
  readonly #sharers = new Map<SandboxSession, Promise<void>>();
  /** The session is ending: no other session may start in its working directory any more. */
  #ending = false;
  #resolveFinished!: () => void;
  readonly #span: SessionSpan;

  constructor(options: SandboxSessionOptions) {
    this.#options = options;
    this.id = options.request.sessionId;
    this.jobId = options.request.jobId;
    this.startTime =
      options.adopted !== undefined ? timestampFromDate(new Date(options.adopted.record.startTime)) : timestampNow();
    const logFile = options.keep !== undefined ? new SessionLogFile(options.paths.internalDir) : undefined;
    this.#logFile = logFile;
    let persistFailed = false;
    this.log = new SessionEventLog(this.id, {
      ...(options.adopted !== undefined ? { restored: options.adopted.log } : {}),
      ...(logFile !== undefined
        ? {
            onAppend: (entry: RunSessionResponse) => {
              try {
                logFile.append(this.log.encoded(entry));
              } catch (error) {
                if (!persistFailed)
                  options.logger.warn(
                    { err: error, sessionId: this.id },
                    "cannot keep the session's log on disk; a restart of the sandbox would lose the session",
                  );
                persistFailed = true;
              }
            },
          }
        : {}),
    });
    this.#stderr = new StderrCapture({
      log: this.log,
      secret: options.request.llm?.token,
      maxBytes: options.maxStderrBytes,
      // For whoever runs the node at debug level; scrubbed like the log.
      onPiece: (text) => options.logger.debug({ sessionId: this.id, stderr: text }, "harness stderr"),
      maxWritten: options.maxStderrWrittenBytes,
      onTooMuch: () =>
        this.#breakLimit(
          "stderr_too_large",
          `the harness wrote more than ${options.maxStderrWrittenBytes} bytes to stderr (OZ0_MAX_SESSION_STDERR_WRITTEN_BYTES); the rest was not read and the session was stopped`,
          { kill: true },
        ),
    });
    this.isolationName = options.isolation.mode;
    this.isolation = ISOLATION_MODES[options.isolation.mode];
    this.finished = new Promise((resolve) => (this.#resolveFinished = resolve));
    this.#span = startSessionSpan(options.request, { isolation: options.isolation.mode });
  }

  /** The request as the client sent it (session id filled in). */
  get request(): SessionRequest {
    return this.#options.request;
  }

  get pid(): number {
    return this.#host?.pid ?? 0;
  }

  /** The session's working directory on the node. */
  get workingDir(): string {
    return this.#options.paths.workingDir;
  }

  /** The directories it writes to on the node: its working and state directories, and its internal one, with its harness's output (session-disk-guard.ts). */
  get directories(): readonly string[] {
    const { paths } = this.#options;
    return [paths.workingDir, paths.stateDir, paths.internalDir];
  }

  /**
   * How its processes are found, for the files they hold deleted (held-deleted-files.ts) and the memory they take
   * (session-memory-guard.ts): by its uid in the `user` mode, where a process may leave the harness's tree; as its
   * container lists them in the `none` mode (its cgroup); elsewhere below its first process (under bubblewrap the
   * keeper or bwrap, whose PID namespace keeps every process of the session below it; the `subreaper` wrapper).
   */
  get processes(): SessionProcesses | undefined {
    if (this.#options.isolation.mode === "user" && this.#user !== undefined) return { uid: this.#user.uid };
    const container = this.#container;
    if (container?.processIds !== undefined) return { list: () => container.processIds?.() ?? [] };
    const pid = this.#host?.pid;
    return pid !== undefined ? { below: pid } : undefined;
  }

  /** Stops it at once, as a flood of output is: it took more memory than a session may (session-memory-guard.ts). */
  stopForMemory(message: string): void {
    this.#breakLimit("memory_limit", message, { kill: true });
  }

  /** Stops it at once, as a flood of output is: it held more open files than a session may (session-open-files-guard.ts). */
  stopForOpenFiles(message: string): void {
    this.#breakLimit("open_files_limit", message, { kill: true });
  }

  /** Stops it at once, as a flood of output is: it was filling the node's disk (session-disk-guard.ts). */
  stopForDisk(message: string): void {
    this.#breakLimit("disk_full", message, { kill: true });
  }

  /** Whether the session runs under a uid of its own (the `user` mode, bubblewrap run by root), taken or to be. */
  get underOwnUid(): boolean {
    const { isolation } = this.#options;
    return isolation.mode === "user" || (isolation.mode === "bwrap" && isolation.users !== undefined);
  }

  /** The uid the session runs under (the `user` mode), for a session that shares its working directory. */
  get user(): SessionUserLease | undefined {
    return this.#user;
  }

  get running(): boolean {
    return this.status === SessionStatus.RUNNING;
  }

  /** What the session's log holds in memory, roughly: its events' encodings, the stderr kept and the artifacts. */
  get keptBytes(): number {
    return this.#eventBytes + this.#stderr.keptBytes + this.#artifactBytes;
  }

  /** Whether another session may start in this one's working directory now: its harness runs, and it is not ending. */
  get sharable(): boolean {
    return this.running && this.#host !== undefined && !this.#ending;
  }

  /**
   * `session` works in this one's directory from now on; `launched` settles once it started (or could not).
   * This session's end waits until it is gone (endSharers).
   */
  shareWith(session: SandboxSession, launched: Promise<void>): void {
    this.#sharers.set(
      session,
      launched.then(
        () => session.finished,
        () => undefined,
      ),
    );
  }

  /**
   * Ends the sessions working in this one's directory, and waits until they are gone: the sandbox (root) reads
   * the directory and removes it next, by path, and a process of theirs still running there could swap a
   * directory for a link between the two, so that the removal walks and empties another session's directory,
   * or any on the node. The `user` mode's killAll ends them too (they run under this session's uid); under
   * bubblewrap nothing else would. A session gone runs nothing: its namespace went with it.
   */
  async #endSharers(): Promise<void> {
    this.#ending = true;
    for (const sharer of this.#sharers.keys())
      sharer.cancel(`the session whose working directory it shares (${this.id}) ended`);
    await Promise.all(this.#sharers.values());
  }

  /**
   * Creates the directories, copies attachments in, records the initial
   * state and starts the harness. Throws (having cleaned up) when the
   * session cannot start at all; the harness's own failures end up in the log.
   */
  async prepareAndLaunch(): Promise<void> {
    const { paths, start, isolation, logger } = this.#options;
    try {
      if (isolation.mode === "user") this.#user = await isolation.acquireUser();
      if (isolation.mode === "bwrap" && isolation.users !== undefined) this.#user = await isolation.users.acquireUser();
      await createSessionDirectories(paths, stateSubdirectories(paths.stateDir), {
        internalDirs: this.#options.keep?.internalDirs,
      });
      if (isolation.mode === "none") this.#container = containerFor(isolation.containment, this.id, paths.internalDir);
      await copyAttachments(paths.workingDir, start.attachments, this.#options.attachmentsNeverFrom);
      // A shared directory belongs to its owner: its changes are the owner's patch, not this session's.
      try {
        // An empty start needs no snapshot: the patch is then everything present at the end.
        if (paths.sharesWorkingDir) this.#baseline = "none";
        else if (start.attachments.length === 0) this.#baseline = "empty";
        else {
          await snapshotInitialState({ gitDir: paths.gitDir, workingDir: paths.workingDir });
          this.#baseline = "snapshot";
        }
      } catch (error) {
        logger.warn(
          { err: error, sessionId: this.id },
          "cannot record the working directory's initial state; the session will have no patch",
        );
      }
      // Only now: the attachments and the snapshot are the sandbox's, made before any process of the uid runs.
      if (this.#user !== undefined)
        await handOverSessionDirectories(paths, this.#user, {
          stateSubdirectories: stateSubdirectories(paths.stateDir),
          emptyWorkingDir: start.attachments.length === 0,
        });
      if (isolation.mode === "bwrap" && isolation.forwards.length > 0)
        this.#forwarding = await forwardingFor(isolation, this.id, this.#user);
    } catch (error) {
      await this.#cleanup();
      throw error;
    }
    if (this.#cancelRequested !== undefined) {
      // Cancelled while the directories were being prepared: never start the harness.
      this.#finishWithoutHarness("cancelled", this.#cancelRequested);
      return;
    }
    this.#launch();
  }

  #launch(): void {
    const { paths, start, isolation, request } = this.#options;
    const llm = request.llm;
    const innerUrl = (url: string): string => this.#forwarding?.innerUrl(url) ?? url;
    const harnessRequest = clone(SessionRequestSchema, request);
    harnessRequest.workingDir = paths.workingDir;
    harnessRequest.stateDir = paths.stateDir;
    // The harness (and its TRACEPARENT) continues this node's session span.
    if (this.#span.harnessTrace) harnessRequest.trace = this.#span.harnessTrace;
    if (harnessRequest.llm !== undefined) {
      harnessRequest.llm.anthropicBaseUrl = innerUrl(harnessRequest.llm.anthropicBaseUrl);
      harnessRequest.llm.openaiBaseUrl = innerUrl(harnessRequest.llm.openaiBaseUrl);
    }
    const env = buildSessionEnvironment({
      request: harnessRequest,
      workingDir: paths.workingDir,
      stateDir: paths.stateDir,
      pluginDir: start.pluginDir,
      path: this.#options.sessionPath,
      locale: this.#options.locale,
      anthropicBaseUrl: innerUrl(llm?.anthropicBaseUrl ?? ""),
      openaiBaseUrl: innerUrl(llm?.openaiBaseUrl ?? ""),
      ...(this.#options.traceRelay !== undefined
        ? {
            otlpTraces: {
              endpoint: `${innerUrl(this.#options.traceRelay.url)}${this.#options.traceRelay.exportPath({
                sessionId: this.id,
                jobId: harnessRequest.jobId,
                // The trace the harness continues: only its spans are relayed.
                traceId: /^[0-9a-f]{2}-([0-9a-f]{32})-/.exec(harnessRequest.trace?.traceparent ?? "")?.[1] ?? "",
              })}`,
              protocol: this.#options.traceRelay.protocol,
            },
          }
        : {}),
    });
    let launcher: HarnessLauncher | undefined;
    if (isolation.mode === "none") {
      const grouped =
        isolation.setprivPath !== undefined
          ? parentDeathLauncher({ setprivPath: isolation.setprivPath })
          : processGroupLauncher();
      // Inside a Landlock domain the harness cannot read the sandbox's memory or environment (landlock-launcher.ts).
      const inner =
        isolation.landlock !== undefined ? landlockLauncher({ inner: grouped, landlock: isolation.landlock }) : grouped;
      launcher = this.#container?.launcher(inner) ?? inner;
    }
    const user = this.#user;
    if (isolation.mode === "user" && user !== undefined) {
      launcher = sessionUserLauncher({
        setprivPath: isolation.setprivPath,
        user,
        pluginDir: start.pluginDir,
        ...(paths.sharesWorkingDir ? {} : { killAll: () => user.killAll() }),
        processLimit: this.#options.processLimit,
        syscallFilter: isolation.syscallFilter,
        domain: isolation.domain,
        paths,
      });
    }
    const keep = this.#options.keep;
    if (isolation.mode === "bwrap") {
      launcher = bubblewrapLauncher({
        bwrapPath: isolation.bwrapPath,
        readOnlyPaths: isolation.readOnlyPaths,
        hiddenPaths: isolation.hiddenPaths,
        sandboxRoot: isolation.sandboxRoot,
        pluginDir: start.pluginDir,
        writablePaths: [paths.workingDir, paths.stateDir],
        processLimit: this.#options.processLimit,
        syscallFilter: isolation.syscallFilter,
        namespaceLimits: isolation.namespaceLimits,
        onNamespaceLimitsFailed: (error) =>
          this.#options.logger.error(
            { err: error, sessionId: this.id },
            "could not lower the session's inotify and fanotify limits in its user namespace: the session was stopped before it ran",
          ),
        user:
          isolation.users !== undefined && user !== undefined
            ? { ...userIds(user), setprivPath: isolation.users.setprivPath }
            : undefined,
        entry:
          isolation.forwards.length > 0 ? { command: isolation.entryCommand, forwards: isolation.forwards } : undefined,
        ...(keep !== undefined
          ? {
              spawn: keeperSpawn({
                dir: paths.internalDir,
                orphanMs: keep.orphanMs,
                spares: keep.spares,
                // The session may outlive this sandbox: its keeper holds the uid meanwhile (session-user-pool.ts); the
                // owner's keeper holds it for a session sharing its working directory, which ends first.
                hold:
                  user !== undefined && !paths.sharesWorkingDir
                    ? { uid: user.uid, file: user.keptLockFile }
                    : undefined,
              }),
            }
          : {}),
      });
    }
    // Under its keeper the harness gets its OOM score and nice value from the keeper, before its exec.
    const started = launcher ?? processGroupLauncher();
    const host = this.#startHost({
      launcher: keep !== undefined ? started : yieldingLauncher(started),
      env,
      request: harnessRequest,
    });
    if (host.pid !== undefined) {
      if (keep !== undefined) {
        const startTime = processStartTime(host.pid);
        if (startTime !== undefined) this.#keepRecord({ pid: host.pid, startTime });
      }
      this.log.append({
        case: "started",
        value: {
          pid: host.pid,
          isolation: this.isolation,
          workingDir: paths.workingDir,
          stateDir: paths.stateDir,
          startTime: this.startTime,
        },
      });
    }
  }

  /**
   * Takes over a session a previous run of the sandbox started (its harness
   * ran on under its keeper): the LLM forwards are listened on again, the
   * harness's stdout is read again from its start to rebuild the protocol's
   * state (its events, already in the log, are not logged twice), and
   * stderr goes on where the log left it.
   */
  async resume(): Promise<void> {
    const { adopted, isolation, paths } = this.#options;
    if (adopted === undefined || isolation.mode !== "bwrap")
      throw new Error("only a session taken over under bubblewrap can be resumed");
    const { record } = adopted;
    this.#record = record;
    this.#baseline = record.baseline;
    if (isolation.users !== undefined) this.#user = await isolation.users.acquireUser();
    if (isolation.forwards.length > 0) {
      // The dead sandbox's sockets are still bound to their paths; the harness reaches the new ones there.
      if (isolation.listeners === undefined)
        for (const forward of isolation.forwards) rmSync(forward.socketPath, { force: true });
      this.#forwarding = await forwardingFor(isolation, this.id, this.#user);
    }
    let stderrBytes = 0;
    for (const entry of adopted.log) {
      if (entry.message.case === "event") {
        this.#replayedEvents++;
        // Taken over, the session's log cap counts what the dead sandbox logged too.
        this.#eventBytes += this.log.encoded(entry).byteLength;
      }
      if (entry.message.case === "stderr")
        stderrBytes += Buffer.byteLength(entry.message.value.text) + Number(entry.message.value.droppedBytes);
    }
    this.#events = this.#replayedEvents;
    const child = adoptKeeper({
      dir: paths.internalDir,
      pid: record.keeper.pid,
      startTime: record.keeper.startTime,
      from: { stdout: 0, stderr: stderrBytes },
    });
    // bwrap's init, from the keeper's info file (read when needed: bwrap may not have written it yet); records
    // written before the keeper kept that file carry the pid themselves.
    const initPidNow = (): number | undefined => record.initPid ?? initPidFromInfoFile(extraFile(paths.internalDir, 0));
    const signal = (pid: number, name: NodeJS.Signals): void => {
      try {
        process.kill(pid, name);
      } catch {
        // Gone already.
      }
    };
    const launched: LaunchedHarness = {
      child: child as unknown as LaunchedHarness["child"],
      terminate: () => {
        const initPid = initPidNow();
        signal(initPid !== undefined ? -initPid : -record.keeper.pid, "SIGTERM");
      },
      kill: () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const initPid = initPidNow();
        if (initPid !== undefined) signal(initPid, "SIGKILL");
        // The keeper's end ends bwrap (--die-with-parent), and with it the namespace.
        signal(record.keeper.pid, "SIGKILL");
      },
      hasLiveProcesses: () => false,
    };
    this.#startHost({
      launcher: { launch: () => launched },
      env: {},
      request: record.request,
      adopt: adopted.answered,
    });
  }

  #startHost(options: {
    launcher: HarnessLauncher;
    env: Record<string, string>;
    request: SessionRequest;
    adopt?: NonNullable<SandboxSessionOptions["adopted"]>["answered"];
  }): HostSession {
    const host = startHostSession({
      command: this.#options.command,
      cwd: this.#options.paths.workingDir,
      env: options.env,
      request: options.request,
      graceMs: this.#options.graceMs,
      maxLineBytes: this.#options.maxLineBytes,
      launcher: nestingLimitLauncher({
        inner: stdoutLimitLauncher({
          inner: options.launcher,
          maxBytes: this.#options.maxStdoutBytes,
          onTooMuch: () =>
            this.#breakLimit(
              "stdout_too_large",
              `the harness wrote more than ${this.#options.maxStdoutBytes} bytes to stdout (OZ0_MAX_SESSION_STDOUT_BYTES); the rest was not read and the session was stopped`,
              { kill: true },
            ),
        }),
        limit: MAX_LINE_NESTING,
        onTooDeep: ({ line, limit }) =>
          this.#breakLimit(
            "invalid_event",
            `stdout line ${line} is not a valid SessionEvent: it nests objects and arrays deeper than ${limit} levels, the protocol's limit (harness.proto, rule 8); the line was refused and the session stopped`,
          ),
      }),
      onEvent: (event) => this.#onEvent(event),
      // Free-form harness logs: logged as `stderr` pieces, scrubbed and bounded.
      onStderr: (chunk) => this.#stderr.push(chunk),
      ...(options.adopt !== undefined ? { adopt: options.adopt } : {}),
    });
    this.#host = host;
    host.outcome.then(
      (outcome) => this.#finish(outcome),
      (error: unknown) => {
        // The host promises never to reject; if it does, the session still ends.
        this.#options.logger.error({ err: error, sessionId: this.id }, "the host session failed unexpectedly");
        this.#finishWithoutHarness("failed", "the sandbox lost track of the harness; see the node's log");
      },
    );
    return host;
  }

  /**
   * Writes the session's record (kept sessions only), once its keeper runs.
   * bwrap's init pid is not in it: the keeper's info file (fd3) has it.
   */
  #keepRecord(keeper: SessionRecord["keeper"]): void {
    const { request, start, command, paths } = this.#options;
    this.#record = {
      start,
      request,
      command,
      paths,
      keeper,
      baseline: this.#baseline,
      startTime: timestampDate(this.startTime).toISOString(),
      ...(this.#options.isolation.mode === "bwrap" && this.#options.isolation.listeners !== undefined
        ? { sharedForwards: true }
        : {}),
      ...(this.#options.isolation.mode === "bwrap" && this.#user !== undefined ? { uid: this.#user.uid } : {}),
    };
    try {
      writeSessionRecord(this.#record);
    } catch (error) {
      this.#options.logger.warn(
        { err: error, sessionId: this.id },
        "cannot keep the session's record on disk; a restart of the sandbox would lose the session",
      );
    }
  }

  #onEvent(event: SessionEvent): void {
    if (this.#replayedEvents > 0) {
      // A taken-over session's stdout read again: this event is in the log already.
      this.#replayedEvents--;
      if (event.event.case === "usage") this.#usageEvents++;
      return;
    }
    // The log is memory: a harness that floods it is stopped, and what it
    // writes past the cap is not kept (the session fails, saying so). In
    // events and in bytes: lines of up to OZ0_MAX_LINE_BYTES each, the
    // event cap alone let one session hold hundreds of gigabytes, and run
    // the sandbox, and every session on the node, out of memory.
    const { maxLogEvents, maxLogBytes } = this.#options;
    if (this.#events >= maxLogEvents || this.#eventBytes >= maxLogBytes) {
      this.#breakLimit(
        this.#events >= maxLogEvents ? "too_many_events" : "log_too_large",
        this.#events >= maxLogEvents
          ? `the harness wrote more than ${maxLogEvents} events (OZ0_MAX_SESSION_EVENTS); later events were dropped and the session was stopped`
          : `the harness wrote more than ${maxLogBytes} bytes of events (OZ0_MAX_SESSION_LOG_BYTES); later events were dropped and the session was stopped`,
      );
      if (event.event.case !== "result") return;
    }
    const entry = this.log.append({ case: "event", value: event });
    this.#events++;
    // Encoded once for the log file and the streams that follow it live (event-log.ts keeps it).
    this.#eventBytes += this.log.encoded(entry).byteLength;
    if (event.event.case === "usage") {
      // One usage event per model call: past the turn limit the runtime stops
      // the session itself rather than trusting the harness to.
      this.#usageEvents++;
      const maxTurns = this.#options.request.limits?.maxTurns ?? 0;
      if (maxTurns > 0 && this.#usageEvents > maxTurns) {
        this.#breakLimit(
          "max_turns_exceeded",
          `the harness made more model calls than the turn limit (${maxTurns}) and was stopped`,
        );
      }
    }
  }

  /**
   * The session's artifacts, as its log's `artifacts` entry; an error in their place when they cannot be collected,
   * or must not be: `errorCode`, the session's first problem, says its harness's events could not be trusted while
   * its tool calls were asked about one by one.
   */
  async #appendArtifacts(errorCode: string | undefined): Promise<void> {
    const { paths } = this.#options;
    // A second run of a tool under an allowed call's id (attacker review) made a change no answer allowed; the job
    // failed, but its changes.patch handed the change out. No call of such a session can be vouched for.
    if (this.#options.request.permissions && UNTRUSTED_EVENT_CODES.has(errorCode as SessionErrorCode)) {
      this.log.append({ case: "artifacts", value: { error: ARTIFACTS_WITHHELD } });
      return;
    }
    // Collecting stages the whole working directory in a git repository beside it: a copy a full disk has no room for.
    if (this.#limitBroken?.code === "disk_full" || this.#options.diskBelowFloor?.() === true) {
      this.log.append({
        case: "artifacts",
        value: {
          error:
            "artifacts were not collected: the node's disk is below its floor (OZ0_SANDBOX_MIN_FREE_BYTES, _FILES), and collecting them copies the working directory",
        },
      });
      return;
    }
    // The copy is the sandbox's own writing, after the harness ended, which no guard stops: a session that stopped
    // writing just above the floor doubled what it held as it ended, past the floor or the root's limit (a Kubernetes
    // emptyDir's, past which the kubelet evicts the pod and every session with it; attacker review). So git is killed
    // once the guard finds the disk below a floor meanwhile, and the copy goes with the session's folders.
    const fillingDisk = new AbortController();
    const watch = setInterval(() => {
      if (this.#options.diskBelowFloor?.() === true) fillingDisk.abort();
    }, DISK_WATCH_DURING_COLLECTION_MS);
    try {
      const artifacts = await collectArtifacts({
        gitDir: paths.gitDir,
        workingDir: paths.workingDir,
        artifactPaths: this.#options.start.artifactPaths,
        maxBytes: this.#options.maxArtifactBytes,
        baseline: this.#baseline,
        signal: fillingDisk.signal,
      });
      if (fillingDisk.signal.aborted) {
        this.log.append({ case: "artifacts", value: { error: ARTIFACTS_FILLED_DISK } });
        return;
      }
      this.log.append({ case: "artifacts", value: artifacts });
      this.#artifactBytes =
        Buffer.byteLength(artifacts.patch ?? "") +
        (artifacts.files ?? []).reduce((sum, file) => sum + (file.content?.byteLength ?? 0), 0);
    } catch (collectError) {
      if (fillingDisk.signal.aborted) {
        this.log.append({ case: "artifacts", value: { error: ARTIFACTS_FILLED_DISK } });
        return;
      }
      this.#options.logger.warn({ err: collectError, sessionId: this.id }, "collecting artifacts failed");
      this.log.append({
        case: "artifacts",
        value: { error: `collecting artifacts failed: ${(collectError as Error).message}` },
      });
    } finally {
      clearInterval(watch);
    }
  }

  /**
   * Stops a session that broke a limit of the node. `kill`: at once, with no
   * grace, for a flood of output (a harness that ignored SIGTERM went on
   * writing to the node's disk for the whole grace).
   */
  #breakLimit(code: string, message: string, options: { kill?: boolean } = {}): void {
    if (this.#limitBroken !== undefined) return;
    this.#limitBroken = { code, message };
    if (options.kill) this.#host?.kill(message);
    else this.#host?.cancel(message);
  }

  answerPermission(answer: PermissionAnswer): void {
    this.#command(() => this.#host?.answerPermission(answer));
    this.#keepAnswered("permission", answer.id);
  }

  sendRuntimeToolResult(result: RuntimeToolResult): void {
    this.#command(() => this.#host?.sendRuntimeToolResult(result));
    this.#keepAnswered("tool", result.id);
  }

  /** After the harness has it: a restarted sandbox must not count the request as waiting. */
  #keepAnswered(kind: "permission" | "tool", id: string): void {
    if (this.#options.keep === undefined) return;
    try {
      appendAnswered(this.#options.paths.internalDir, kind, id);
    } catch (error) {
      this.#options.logger.warn(
        { err: error, sessionId: this.id },
        "cannot record an answer on disk; after a restart of the sandbox the orchestrator sends it again",
      );
    }
  }

  #command(run: () => void): void {
    if (!this.running || this.#host === undefined)
      throw new CommandRejectedError("session_ended", `session ${this.id} has ended; nothing more can be sent to it`);
    try {
      run();
    } catch (error) {
      if (error instanceof HostSessionError) throw new CommandRejectedError(error.code, error.message);
      throw error;
    }
  }

  /** SIGTERM, SIGKILL after the grace. Returns false when the session had already ended. */
  cancel(reason: string): boolean {
    if (!this.running) return false;
    if (this.#host === undefined) this.#cancelRequested ??= reason;
    else this.#host.cancel(reason);
    return true;
  }

  get pendingPermissionIds(): readonly string[] {
    return this.#host?.pendingPermissions ?? [];
  }

  info(): SessionInfo {
    return create(SessionInfoSchema, {
      sessionId: this.id,
      jobId: this.jobId,
      status: this.status,
      pid: this.pid,
      isolation: this.isolation,
      lastSeq: BigInt(this.log.lastSeq),
      pendingPermissionIds: [...this.pendingPermissionIds],
      startTime: this.startTime,
      endTime: this.endTime,
    });
  }

  #finish(outcome: SessionOutcome): void {
    const broken = this.#limitBroken ?? failingExitAfterResult(outcome);
    const status =
      broken !== undefined
        ? SessionStatus.FAILED
        : {
            completed: SessionStatus.COMPLETED,
            failed: SessionStatus.FAILED,
            cancelled: SessionStatus.CANCELLED,
            timed_out: SessionStatus.TIMED_OUT,
          }[outcome.status];
    const error = broken ?? outcome.error;
    const finish = async (): Promise<void> => {
      const { paths } = this.#options;
      // The host drained stderr before its outcome: all of it goes before `artifacts`.
      this.#stderr.finish();
      await this.#endSharers();
      // The sandbox (root) reads the working directory next: nothing of the
      // uid may still run there to swap a file for a link to a node file
      // meanwhile. Sessions sharing the directory go too; it is removed next. Under bubblewrap the session's
      // PID namespace went with its harness, and everything of its uid with it.
      if (this.#user !== undefined && this.#options.isolation.mode === "user" && !paths.sharesWorkingDir)
        await this.#user.killAll();
      // Everything the harness started ends with it, whatever process group or session it moved to.
      await this.#container?.end();
      await this.#appendArtifacts(error?.code);
      await this.#release();
      this.#end(status, {
        how:
          outcome.signal !== null
            ? { case: "signal", value: outcome.signal }
            : { case: "exitCode", value: outcome.exitCode ?? -1 },
        errorCode: error?.code ?? "",
        errorMessage: error?.message ?? "",
        result: outcome.result,
        leftoverProcesses: outcome.leftoverProcesses,
        stderrTail: this.#stderr.tail,
        cancelReason: outcome.cancelReason ?? "",
      });
    };
    finish().then(
      () => this.#resolveFinished(),
      (finishError: unknown) => {
        this.#options.logger.error({ err: finishError, sessionId: this.id }, "ending the session failed");
        this.#finishWithoutHarness("failed", "the sandbox failed while ending the session; see the node's log");
      },
    );
  }

  #finishWithoutHarness(kind: "cancelled" | "failed", message: string): void {
    this.#release().then(
      () => this.#endWithoutHarness(kind, message),
      () => this.#endWithoutHarness(kind, message),
    );
  }

  #endWithoutHarness(kind: "cancelled" | "failed", message: string): void {
    this.#end(kind === "cancelled" ? SessionStatus.CANCELLED : SessionStatus.FAILED, {
      errorCode: kind === "cancelled" ? "" : "internal",
      errorMessage: kind === "cancelled" ? "" : message,
      cancelReason: kind === "cancelled" ? message : "",
    });
    this.#resolveFinished();
  }

  #end(status: SessionStatus, exited: MessageInitShape<typeof SessionExitedSchema>): void {
    if (this.log.ended) return;
    this.#stderr.finish();
    this.endTime = timestampNow();
    this.status = status;
    this.log.append(
      { case: "exited", value: create(SessionExitedSchema, { ...exited, status, endTime: this.endTime }) },
      { last: true },
    );
    this.#span.end({
      status: SessionStatus[status] ?? String(status),
      failed: status === SessionStatus.FAILED || status === SessionStatus.TIMED_OUT,
    });
  }

  #released = false;

  /** Removes the session's files and frees its slot, once. */
  async #release(): Promise<void> {
    if (this.#released) return;
    this.#released = true;
    await this.#cleanup();
    this.#options.onReleased?.(this);
  }

  async #cleanup(): Promise<void> {
    // Past here the folder goes: the session is over, nothing is left to take over.
    this.#logFile?.close();
    try {
      await this.#forwarding?.close();
    } catch {
      // Sockets already gone.
    }
    // Once the harness ran, its uid owns what is in its directories and may still run (a session sharing them): removed as the uid.
    // Before, everything there is root's and nothing of the uid runs. Under bubblewrap nothing of the session runs by
    // now (its PID namespace is gone, and the sessions sharing its directory with it), so root removes it.
    const removeAs = this.#options.isolation.mode === "user" && this.#host !== undefined ? this.#user : undefined;
    try {
      await removeSessionDirectories(this.#options.paths, {
        ...(removeAs !== undefined ? { user: removeAs } : {}),
        internalDirs: this.#options.keep?.internalDirs,
        // This run bound its socket folder read-only and gave its harness pipes; a session taken over from an earlier
        // version may have had the folder writable, and the keeper's files as its stdio.
        sealed: this.#options.isolation.mode === "bwrap" && this.#options.adopted === undefined,
        stateSubdirectories: stateSubdirectories(this.#options.paths.stateDir),
      });
    } catch (error) {
      this.#options.logger.warn(
        { err: error, sessionId: this.id },
        "could not remove all of the session's directories",
      );
    }
    await this.#user?.release();
    await this.#container?.end();
  }
}

/** The session's LLM forwarding: its own sockets, or the node's shared listeners (a session a previous version started). */
function forwardingFor(
  isolation: Extract<SessionIsolation, { mode: "bwrap" }>,
  sessionId: string,
  user: SessionUser | undefined,
): Promise<LlmForwarding> {
  const { listeners, forwards, budget } = isolation;
  return (
    listeners?.open(forwards) ??
    startLlmForwarding({ forwards, budget, sessionId, ...(user !== undefined ? { owner: userIds(user) } : {}) })
  );
}

/** A lease's ids alone, for what keeps them past the lease's release. */
function userIds(user: SessionUser): SessionUser {
  return { uid: user.uid, gid: user.gid };
}

/** The session's container; one that cannot be made refuses the session rather than run it uncontained. */
function containerFor(containment: Containment, sessionId: string, internalDir: string): SessionContainer {
  try {
    // The subreaper wrapper's list of what it killed goes in the sandbox's own directory for the session.
    return containment.container({ sessionId, reportFile: path.join(internalDir, "leftover-processes.tsv") });
  } catch (error) {
    throw new SandboxError(
      "unavailable",
      `the session cannot be contained (${(error as Error).message}); see the sandbox's start-up line and its README's Isolation`,
      { cause: error },
    );
  }
}

/**
 * A harness that wrote a completed result and then exited non-zero (or was
 * ended by a signal it did not get from us) contradicts its own result: the
 * conformance kit fails it, and so does the runtime (harness.proto, rule 3),
 * rather than pass on a result whose process says it failed. Results of any
 * other stop reason already fail the job; their exit code agrees with them.
 */
function failingExitAfterResult(outcome: SessionOutcome): { code: string; message: string } | undefined {
  if (outcome.status !== "completed" || outcome.result?.stopReason !== StopReason.COMPLETED) return undefined;
  if (outcome.signal !== null) {
    return {
      code: "nonzero_exit_after_result",
      message: `the harness was ended by ${outcome.signal} after writing a completed result; a harness exits with code 0 once its result is out`,
    };
  }
  if (outcome.exitCode !== 0) {
    return {
      code: "nonzero_exit_after_result",
      message: `the harness exited with code ${outcome.exitCode ?? "unknown"} after writing a completed result; a harness exits with code 0 once its result is out`,
    };
  }
  return undefined;
}
