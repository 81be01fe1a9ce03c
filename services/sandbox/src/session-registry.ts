// Every session on the node: validates start requests, enforces the limit
// on concurrent sessions (refusing, never queueing), finds sessions for
// attach and cancel, keeps finished ones until their end was read and then for
// the retention period, and cancels everything on shutdown.
import { randomUUID } from "node:crypto";
import { readdirSync, statSync } from "node:fs";
import path from "node:path";
import { clone } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { ProtocolVersion, SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { SessionInfo, StartSession } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import type { Landlock } from "./landlock-launcher.js";
import type { UserModeDomain } from "./session-user-launcher.js";
import type { Containment } from "@oz0/harness/host";
import { ephemeralRangeStart, type Logger } from "@oz0/serving";
import { ForwardBudget, planLlmForwards, SharedLlmListeners, type ForwardLimits } from "./llm-forwarder.js";
import { invalidField, SandboxError } from "./sandbox-errors.js";
import { servicePortsInEphemeralRange } from "./session-listen-ports.js";
import { SandboxSession, type SandboxSessionOptions, type SessionIsolation } from "./sandbox-session.js";
import { initPidFromInfoFile } from "./bubblewrap-launcher.js";
import { endKeptSession, extraFile, keeperAvailable, processStartTime, readKeeperExit } from "./session-keeper.js";
import { KeeperSpawner } from "./keeper-spawner.js";
import { readAnswered, readLogMessages, readSessionRecord, type SessionRecord } from "./session-record.js";
import {
  InternalDirectoryPool,
  relativeInside,
  resolveSessionPaths,
  validateAttachments,
  validateSessionId,
  FORWARD_DIR,
  RECYCLED_DIR,
} from "./session-directories.js";
import type { SessionUserLease, SessionUserPool } from "./session-user-pool.js";
import type { SessionProcessLimit } from "./session-process-limit.js";
import type { UserModeSyscallFilter } from "./syscall-filter.js";
import { GuardReadings } from "./guard-readings.js";
import { SessionDiskGuard } from "./session-disk-guard.js";
import { SessionMemoryGuard } from "./session-memory-guard.js";
import { SharedTmpfsGuard } from "./shared-tmpfs-guard.js";
import type { SessionNamespaceLimits } from "./session-namespace-limits.js";
import type { SessionTraceIdentity } from "./session-trace-export.js";
import { ptyShare, SessionOpenFilesGuard } from "./session-open-files-guard.js";

export interface SessionRegistryOptions {
  root: string;
  /** Paths a `node_path` attachment may never lead into or hold (session-directories.ts: copyAttachments). */
  attachmentsNeverFrom: readonly string[];
  maxSessions: number;
  /** Below this many free bytes on the root's filesystem no session starts, and the ones filling it stop (session-disk-guard.ts); 0: no guard. */
  minFreeDiskBytes: number | undefined;
  /** The same for files (inodes). */
  minFreeDiskFiles?: number | undefined;
  /** In the `user` mode, the floor of free files in the node's shared tmpfs places (shared-tmpfs-guard.ts); 0: no guard. */
  minFreeSharedFiles?: number | undefined;
  /** The most the root may hold (a Kubernetes emptyDir's sizeLimit); undefined or 0: no limit but its filesystem's. */
  diskLimitBytes?: number | undefined;
  /** Between the disk guard's checks; default 1000 ms. */
  diskCheckMs?: number;
  /** The most memory a session may take (session-memory-guard.ts); undefined or 0: no limit. */
  maxSessionMemoryBytes?: number | undefined;
  /** The most descriptors a session's processes may hold together (session-open-files-guard.ts); 0 or undefined: no limit. */
  maxSessionOpenFiles?: number | undefined;
  /** Between checks of that. Default 1000 ms. */
  openFilesCheckMs?: number;
  /** Between the memory guard's checks; default 1000 ms. */
  memoryCheckMs?: number;
  isolation:
    | { mode: "none"; setprivPath?: string; containment: Containment; landlock?: Landlock }
    | {
        mode: "user";
        setprivPath: string;
        users: SessionUserPool;
        syscallFilter?: UserModeSyscallFilter | undefined;
        /** The Landlock domain sessions run in: their listening ports and their writes (session-user-launcher.ts). */
        domain?: UserModeDomain | undefined;
      }
    | {
        mode: "bwrap";
        bwrapPath: string;
        /** The seccomp filter's program bwrap loads for each session (syscall-filter.ts). */
        syscallFilter?: string | undefined;
        readOnlyPaths: readonly string[];
        hiddenPaths: readonly string[];
        entryCommand: readonly string[];
        /** The caps and idle timeout of the LLM forwards (llm-forwarder.ts). */
        forwardLimits: ForwardLimits;
        /** A root sandbox's sessions each run under a uid of their own (bubblewrap-launcher.ts); else as the sandbox's user. */
        users?: { pool: SessionUserPool; setprivPath: string } | undefined;
        /** Each session's shares of the sandbox user's per-user counts, where it runs as that user (session-namespace-limits.ts). */
        namespaceLimits?: SessionNamespaceLimits | undefined;
      };
  sessionPath: string;
  locale: string;
  /** OZ0_SESSION_MAX_PROCESSES where it holds (session-process-limit.ts). */
  processLimit: SessionProcessLimit | undefined;
  cancelGraceMs: number;
  /** How long a session's keeper waits for a sandbox to take it over after its own died, before it ends the session (OZ0_SESSION_ORPHAN_MS). */
  sessionOrphanMs: number;
  /** How long a finished session stays once a stream has read its end. */
  retentionMs: number;
  /**
   * How long a finished session nobody has read the end of stays: its
   * orchestrator may be down, and re-attaches when it is back.
   */
  unreadRetentionMs: number;
  /** At most this many finished sessions wait for a reader; past it the oldest is forgotten. */
  maxUnreadSessions: number;
  /**
   * Bytes all finished sessions' logs kept may hold together: past it the
   * oldest read one is forgotten first, then the oldest unread one.
   */
  maxEndedLogBytes: number;
  maxLineBytes: number;
  maxArtifactBytes: number;
  maxLogEvents: number;
  maxLogBytes: number;
  maxStderrBytes: number;
  maxStderrWrittenBytes: number;
  maxStdoutBytes: number;
  logger: Logger;
  /** The sandbox's relay to the trace collector (telemetry-relay.ts), when it exports traces: sessions send their spans there. */
  traceRelay?: {
    url: string;
    protocol: "http/protobuf" | "http/json";
    exportPath(session: SessionTraceIdentity): string;
  };
}

/** Keepers forked ahead: enough for sessions started a few at once; a burst past it starts the rest directly. */
const SPARE_KEEPERS = 4;
/** Emptied internal directories kept for new sessions: as many as start at once, a few; past it they are removed. */
const SPARE_INTERNAL_DIRS = 8;

export class SessionRegistry {
  readonly #options: SessionRegistryOptions;
  readonly #sessions = new Map<string, SandboxSession>();
  /** Sessions counted against the limit: from validation until their directories are gone. */
  #active = 0;
  #shuttingDown = false;
  /** Finished sessions' removal timers. */
  readonly #retention = new Map<SandboxSession, NodeJS.Timeout>();
  /** Finished sessions no stream has read to the end yet, oldest first. */
  readonly #unread = new Set<SandboxSession>();
  /** Finished sessions kept, oldest first, with their logs' bytes when they ended. */
  readonly #endedBytes = new Map<SandboxSession, number>();
  #endedBytesTotal = 0;

  /** Forks keepers ahead for new sessions, when sessions are kept (keeper-spawner.ts). */
  readonly #spawner: KeeperSpawner | undefined;
  /** Ended kept sessions' internal directories, emptied for the next ones (session-directories.ts). */
  readonly #internalDirs: InternalDirectoryPool | undefined;
  /** The node's forwarded connections under bubblewrap, counted against their caps (llm-forwarder.ts). */
  readonly #forwardBudget: ForwardBudget | undefined;
  /** The LLM origins' shared sockets, for the sessions taken over that a previous version started on them (llm-forwarder.ts). */
  readonly #listeners: SharedLlmListeners | undefined;
  /** The origins of the LLM base URLs sessions came with, each looked at once for a port in the ephemeral range. */
  readonly #llmOriginsSeen = new Set<string>();
  /** The guards' reading of /proc, on a thread of its own (guard-readings.ts). */
  readonly #guardReadings = new GuardReadings();
  /** Keeps room on the sessions' disk (session-disk-guard.ts). */
  readonly #diskGuard: SessionDiskGuard;
  /** Keeps `user`-mode sessions from taking the inodes of the node's shared tmpfs places (shared-tmpfs-guard.ts). */
  readonly #sharedTmpfsGuard: SharedTmpfsGuard | undefined;
  /** Keeps each session within its memory, when it has a limit (session-memory-guard.ts). */
  readonly #memoryGuard: SessionMemoryGuard | undefined;
  /** Keeps each session within its open files, when it has a limit (session-open-files-guard.ts). */
  readonly #openFilesGuard: SessionOpenFilesGuard | undefined;

  constructor(options: SessionRegistryOptions) {
    this.#options = options;
    this.#diskGuard = new SessionDiskGuard({
      readings: this.#guardReadings,
      root: options.root,
      minFreeBytes: options.minFreeDiskBytes,
      minFreeFiles: options.minFreeDiskFiles,
      limitBytes: options.diskLimitBytes,
      ...(options.diskCheckMs !== undefined ? { intervalMs: options.diskCheckMs } : {}),
      sessions: () => this.#sessions.values(),
      logger: options.logger,
    });
    if (options.isolation.mode === "user")
      this.#sharedTmpfsGuard = new SharedTmpfsGuard({
        readings: this.#guardReadings,
        minFreeFiles: options.minFreeSharedFiles,
        ...(options.diskCheckMs !== undefined ? { intervalMs: options.diskCheckMs } : {}),
        sessions: () => this.#sessions.values(),
        logger: options.logger,
      });
    if ((options.maxSessionMemoryBytes ?? 0) > 0)
      this.#memoryGuard = new SessionMemoryGuard({
        readings: this.#guardReadings,
        maxBytes: options.maxSessionMemoryBytes!,
        ...(options.memoryCheckMs !== undefined ? { intervalMs: options.memoryCheckMs } : {}),
        sessions: () => this.#sessions.values(),
        logger: options.logger,
      });
    // The ptys are counted with the open files guard off too (OZ0_SESSION_MAX_OPEN_FILES=0): that limit is no say
    // over the node's one count of pseudo-terminals.
    const ptys = ptyShare(options.maxSessions);
    if ((options.maxSessionOpenFiles ?? 0) > 0 || ptys !== undefined)
      this.#openFilesGuard = new SessionOpenFilesGuard({
        readings: this.#guardReadings,
        maxOpenFiles: options.maxSessionOpenFiles ?? 0,
        ptys,
        ...(options.openFilesCheckMs !== undefined ? { intervalMs: options.openFilesCheckMs } : {}),
        sessions: () => this.#sessions.values(),
        logger: options.logger,
      });
    if (this.#keeps)
      this.#spawner = new KeeperSpawner({
        dir: path.join(options.root, "keepers"),
        spares: Math.min(SPARE_KEEPERS, options.maxSessions),
        logger: options.logger,
      });
    if (options.isolation.mode === "bwrap") {
      this.#forwardBudget = new ForwardBudget(options.isolation.forwardLimits, { logger: options.logger });
      this.#listeners = new SharedLlmListeners({
        dir: path.join(options.root, FORWARD_DIR),
        budget: this.#forwardBudget,
      });
    }
    if (this.#keeps)
      this.#internalDirs = new InternalDirectoryPool({
        dir: path.join(options.root, RECYCLED_DIR),
        max: Math.min(SPARE_INTERNAL_DIRS, options.maxSessions),
      });
  }

  get activeCount(): number {
    return this.#active;
  }

  /** How many sessions run at once at most (OZ0_MAX_SESSIONS). */
  get maxSessions(): number {
    return this.#options.maxSessions;
  }

  /** Validates and starts a session; throws SandboxError when it cannot start. */
  async start(start: StartSession): Promise<SandboxSession> {
    if (this.#shuttingDown)
      throw new SandboxError("unavailable", "this sandbox node is shutting down; start the session on another node");
    const { request, command } = this.#validate(start);
    // Before the checks below and the count they guard, all in one turn: a start waits here for the disk's first check.
    const noRoom = await this.#diskGuard.refusal();
    if (noRoom !== undefined) throw new SandboxError("resource_exhausted", noRoom);
    if (this.#sessions.has(request.sessionId)) {
      throw new SandboxError(
        "already_exists",
        `session ${request.sessionId} already exists on this node; attach to it, or start with another session id`,
      );
    }
    if (this.#active >= this.#options.maxSessions) {
      throw new SandboxError(
        "resource_exhausted",
        `this node already runs ${this.#active} sessions, its limit (OZ0_MAX_SESSIONS=${this.#options.maxSessions}); start the session on another node or retry after one ends`,
      );
    }
    const shared = this.#sharedWorkingDir(start);
    const paths = resolveSessionPaths({
      root: this.#options.root,
      sessionId: request.sessionId,
      workingDir: request.workingDir,
      stateDir: request.stateDir,
      ...(shared !== undefined ? { sharedWorkingDir: shared.workingDir } : {}),
    });
    const isolation = this.#isolationFor(shared, { socketDir: paths.socketDir, request, sharedForwards: false });
    const session = this.#newSession({ start, request, command, paths, isolation });
    this.#active++;
    this.#sessions.set(session.id, session);
    const launched = session.prepareAndLaunch();
    // In the same turn as the check that the owner may be shared: its end waits for this session from now on.
    shared?.shareWith(session, launched);
    try {
      await launched;
    } catch (error) {
      this.#active--;
      this.#sessions.delete(session.id);
      if (error instanceof SandboxError) throw error;
      throw new SandboxError(
        "failed_precondition",
        `the session's directories could not be prepared: ${(error as NodeJS.ErrnoException).code ?? "I/O error"}; check OZ0_SANDBOX_ROOT on the node`,
        { cause: error },
      );
    }
    this.#track(session);
    return session;
  }

  /**
   * Takes over the sessions a previous run of the sandbox left running under
   * their keepers (bubblewrap only; see session-keeper.ts), and those that
   * ended while it was down, so their orchestrators re-attach and read on.
   * Returns their ids: everything else under the root is stale. Call once,
   * before any session starts.
   */
  async adoptSessions(): Promise<string[]> {
    if (!this.#keeps) return [];
    const internal = path.join(this.#options.root, "internal");
    const adopted: string[] = [];
    let names: string[] = [];
    try {
      names = readdirSync(internal);
    } catch {
      return adopted;
    }
    const found: { session: SandboxSession; record: SessionRecord }[] = [];
    for (const name of names) {
      const dir = path.join(internal, name);
      const record = readSessionRecord(dir);
      if (record === undefined || this.#sessions.has(record.request.sessionId)) continue;
      const keeperRuns = processStartTime(record.keeper.pid) === record.keeper.startTime;
      if (!keeperRuns && readKeeperExit(dir) === undefined) continue;
      try {
        const isolation = this.#isolationFor(undefined, {
          socketDir: record.paths.socketDir,
          request: record.request,
          sharedForwards: record.sharedForwards === true,
          // One that ended while no sandbox ran needs no uid: nothing of it runs, and the uid may be another's by now.
          adopted: { uid: keeperRuns ? record.uid : undefined },
        });
        const session = this.#newSession({
          start: record.start,
          request: record.request,
          command: record.command,
          paths: record.paths,
          isolation,
          adopted: { record, log: readLogMessages(dir), answered: readAnswered(dir) },
        });
        this.#active++;
        this.#sessions.set(session.id, session);
        found.push({ session, record });
      } catch (error) {
        await this.#refuseTakeover(record, error);
      }
    }
    // Each session working in another's directory is that one's again before any resumes: an owner whose
    // harness ended while the sandbox was down removes its directory only once they are gone too.
    const resumed = new Map<SandboxSession, { resolve: () => void; reject: (error: unknown) => void }>();
    for (const { session, record } of found) {
      const owner = record.paths.sharesWorkingDir ? this.#sessions.get(record.start.shareWorkingDirOf) : undefined;
      if (owner === undefined || !found.some((f) => f.session === owner)) continue;
      owner.shareWith(session, new Promise<void>((resolve, reject) => resumed.set(session, { resolve, reject })));
    }
    for (const { session, record } of found) {
      try {
        await session.resume();
        resumed.get(session)?.resolve();
        this.#track(session);
        adopted.push(session.id);
      } catch (error) {
        resumed.get(session)?.reject(error);
        await this.#refuseTakeover(record, error);
        // Its uid, when it was taken before the takeover failed, is given back once the session has ended.
        await session.user?.release();
      }
    }
    if (adopted.length > 0)
      this.#options.logger.info(
        { sessions: adopted },
        "took over the sessions the previous run of the sandbox left running",
      );
    return adopted;
  }

  /**
   * A session no sandbox will own ends before its directories are removed (removeStaleSessions): left running, it
   * could change them while root walks them.
   */
  async #refuseTakeover(record: SessionRecord, error: unknown): Promise<void> {
    this.#options.logger.warn(
      { err: error, sessionId: record.request.sessionId },
      "could not take over a session the previous run of the sandbox left running; it is ended and removed",
    );
    if (this.#sessions.delete(record.request.sessionId)) this.#active--;
    await endKeptSession({
      keeper: record.keeper,
      initPid: record.initPid ?? initPidFromInfoFile(extraFile(record.paths.internalDir, 0)),
    });
  }

  /** Whether sessions run under keepers and survive a restart of the sandbox: under bubblewrap, where perl and mkfifo are there. */
  get #keeps(): boolean {
    this.#keepsCache ??= this.#options.isolation.mode === "bwrap" && keeperAvailable();
    return this.#keepsCache;
  }

  #keepsCache: boolean | undefined;

  #newSession(
    options: Pick<SandboxSessionOptions, "start" | "request" | "command" | "paths" | "isolation" | "adopted">,
  ): SandboxSession {
    return new SandboxSession({
      ...options,
      diskBelowFloor: () => this.#diskGuard.belowFloor,
      ...(this.#keeps
        ? {
            keep: {
              orphanMs: this.#options.sessionOrphanMs,
              spares: this.#spawner,
              internalDirs: this.#internalDirs,
            },
          }
        : {}),
      sessionPath: this.#options.sessionPath,
      locale: this.#options.locale,
      processLimit: this.#options.processLimit,
      graceMs: this.#options.cancelGraceMs,
      maxLineBytes: this.#options.maxLineBytes,
      maxArtifactBytes: this.#options.maxArtifactBytes,
      attachmentsNeverFrom: this.#options.attachmentsNeverFrom,
      maxLogEvents: this.#options.maxLogEvents,
      maxLogBytes: this.#options.maxLogBytes,
      maxStderrBytes: this.#options.maxStderrBytes,
      maxStderrWrittenBytes: this.#options.maxStderrWrittenBytes,
      maxStdoutBytes: this.#options.maxStdoutBytes,
      logger: this.#options.logger,
      ...(this.#options.traceRelay !== undefined ? { traceRelay: this.#options.traceRelay } : {}),
      onReleased: () => this.#active--,
    });
  }

  #track(session: SandboxSession): void {
    session.finished.then(
      () => this.#onFinished(session),
      () => this.#onFinished(session),
    );
  }

  #onFinished(session: SandboxSession): void {
    this.#unread.add(session);
    this.#forgetAfter(session, this.#options.unreadRetentionMs);
    const bytes = session.keptBytes;
    this.#endedBytes.set(session, bytes);
    this.#endedBytesTotal += bytes;
    // Each keeps its whole log in memory: a node whose orchestrator never comes back must not fill up.
    for (const oldest of this.#unread) {
      if (this.#unread.size <= this.#options.maxUnreadSessions) break;
      this.#forget(oldest);
      this.#options.logger.warn(
        { session: oldest.id, maxUnreadSessions: this.#options.maxUnreadSessions },
        "forgot a finished session nobody has read the end of: more finished sessions wait for a reader than OZ0_MAX_UNREAD_SESSIONS allows",
      );
    }
    this.#keepEndedLogsWithinBytes(session);
  }

  /**
   * Each session's log is bounded (OZ0_MAX_SESSION_LOG_BYTES), but many ended
   * ones kept at once are not: sessions that each flood their log to the cap
   * and end would hold the node's memory for the retention period. Past the
   * node's budget, the oldest read sessions go first (a late attach is all
   * they still serve), then the oldest unread ones. The one that just ended
   * stays: its orchestrator is most likely reading it now, and alone it is
   * bounded by the session caps. A stream still reading a forgotten
   * session's log reads it to its end; only a later attach is NOT_FOUND.
   */
  #keepEndedLogsWithinBytes(newest: SandboxSession): void {
    const max = this.#options.maxEndedLogBytes;
    if (this.#endedBytesTotal <= max) return;
    const read = [...this.#endedBytes.keys()].filter((s) => !this.#unread.has(s));
    for (const oldest of [...read, ...this.#unread]) {
      if (this.#endedBytesTotal <= max) return;
      if (oldest === newest) continue;
      const wasUnread = this.#unread.has(oldest);
      this.#forget(oldest);
      this.#options.logger.warn(
        { session: oldest.id, maxEndedSessionLogBytes: max, unread: wasUnread },
        wasUnread
          ? "forgot a finished session nobody has read the end of: the finished sessions' logs hold more than OZ0_MAX_ENDED_SESSION_LOG_BYTES"
          : "forgot a finished session before its retention period: the finished sessions' logs hold more than OZ0_MAX_ENDED_SESSION_LOG_BYTES",
      );
    }
  }

  /**
   * A stream has read the session's whole log, its end included: from now on
   * it is kept only for the retention period. Before, it waits for a reader
   * (its orchestrator may be down) up to the unread retention.
   */
  endRead(session: SandboxSession): void {
    if (!this.#unread.delete(session)) return;
    this.#forgetAfter(session, this.#options.retentionMs);
  }

  #forgetAfter(session: SandboxSession, ms: number): void {
    clearTimeout(this.#retention.get(session));
    const timer = setTimeout(() => this.#forget(session), ms);
    timer.unref();
    this.#retention.set(session, timer);
  }

  #forget(session: SandboxSession): void {
    clearTimeout(this.#retention.get(session));
    this.#retention.delete(session);
    this.#unread.delete(session);
    this.#endedBytesTotal -= this.#endedBytes.get(session) ?? 0;
    this.#endedBytes.delete(session);
    if (this.#sessions.get(session.id) === session) this.#sessions.delete(session.id);
  }

  /** What the session's launcher needs; validates the LLM URLs under bubblewrap. Takes no uid yet (the session does, counted against the limit). */
  #isolationFor(
    shared: SandboxSession | undefined,
    options: {
      socketDir: string;
      request: StartSession["request"] & object;
      /** Its LLM sockets are the node's shared ones: a session taken over whose record says so (a previous version started it). */
      sharedForwards: boolean;
      /** A session taken over, with the uid it runs under from its record (undefined: the sandbox's user). */
      adopted?: { uid: number | undefined };
    },
  ): SessionIsolation {
    const isolation = this.#options.isolation;
    if (isolation.mode === "none") return isolation;
    if (isolation.mode === "user") {
      if (isolation.domain?.kernelPortsOnly === true) this.#warnOfLlmPortsInEphemeralRange(options.request);
      return {
        mode: "user",
        setprivPath: isolation.setprivPath,
        acquireUser: userFor(shared, isolation.users),
        syscallFilter: isolation.syscallFilter,
        domain: isolation.domain,
      };
    }
    const listeners = options.sharedForwards ? this.#listeners : undefined;
    const forwards = planLlmForwards({
      socketDir: options.socketDir,
      ...(listeners !== undefined ? { sharedDir: listeners.dir } : {}),
      urls: [
        { field: "start.request.llm.anthropic_base_url", url: options.request.llm?.anthropicBaseUrl ?? "" },
        { field: "start.request.llm.openai_base_url", url: options.request.llm?.openaiBaseUrl ?? "" },
        // The relay is the sandbox's own loopback listener, reached like the LLM proxy.
        { field: "the sandbox's trace relay", url: this.#options.traceRelay?.url ?? "" },
      ],
    });
    const { users, ...bwrap } = isolation;
    let sessionUsers: Extract<SessionIsolation, { mode: "bwrap" }>["users"];
    const adoptedUid = options.adopted?.uid;
    if (adoptedUid !== undefined) {
      // Taken over, it runs under its uid still; a sandbox that no longer runs sessions under uids cannot own it.
      if (users === undefined)
        throw new Error(`the session runs under uid ${adoptedUid}, and this sandbox runs none under uids`);
      sessionUsers = { setprivPath: users.setprivPath, acquireUser: () => users.pool.adopt(adoptedUid) };
    } else if (users !== undefined && options.adopted === undefined && shared?.underOwnUid !== false)
      // A session sharing the directory of one that runs as the sandbox's user (started by an earlier version) runs so too.
      sessionUsers = { setprivPath: users.setprivPath, acquireUser: userFor(shared, users.pool) };
    return {
      ...bwrap,
      sandboxRoot: this.#options.root,
      forwards,
      listeners,
      budget: this.#forwardBudget!,
      users: sessionUsers,
    };
  }

  /**
   * The start-up warning of service ports in the kernel's ephemeral range (index.ts) for the LLM proxy, whose
   * address comes with each session: once for each such origin.
   */
  #warnOfLlmPortsInEphemeralRange(request: StartSession["request"] & object): void {
    const urls = [request.llm?.anthropicBaseUrl, request.llm?.openaiBaseUrl].filter(
      (url): url is string => url !== undefined && url !== "" && !this.#llmOriginsSeen.has(originOf(url)),
    );
    if (urls.length === 0) return;
    for (const url of urls) this.#llmOriginsSeen.add(originOf(url));
    const rangeStart = ephemeralRangeStart();
    const exposed = servicePortsInEphemeralRange({ peers: urls, rangeStart });
    if (exposed.length > 0)
      this.#options.logger.warn(
        { portsInEphemeralRange: exposed, ephemeralRangeStart: rangeStart },
        "the LLM proxy's port lies in the kernel's ephemeral range: while it is down, a user-mode session binding port 0 may be handed its port and be sent its callers' session tokens; give it a port below the range (see the sandbox README's The user mode)",
      );
  }

  /** The live session whose working directory start.share_working_dir_of names, checked: it runs on this node right now. */
  #sharedWorkingDir(start: StartSession): SandboxSession | undefined {
    const owner = start.shareWorkingDirOf;
    if (owner === "") return undefined;
    validateSessionId(owner, "start.share_working_dir_of");
    if (start.request?.workingDir)
      throw invalidField("start.request.working_dir", "must be empty when share_working_dir_of is set");
    if (start.attachments.length > 0)
      throw invalidField(
        "start.attachments",
        "must be empty when share_working_dir_of is set; attach files to the session that owns the directory",
      );
    const session = this.#sessions.get(owner);
    if (session === undefined || !session.running) {
      throw new SandboxError(
        "failed_precondition",
        `start.share_working_dir_of: session ${owner} is not running on this node; a working directory can only be shared while its session runs`,
      );
    }
    if (!session.sharable)
      throw new SandboxError(
        "failed_precondition",
        `start.share_working_dir_of: session ${owner} is still starting or already ending; a working directory can only be shared while its harness runs (retry once it has started)`,
      );
    return session;
  }

  #validate(start: StartSession): { request: StartSession["request"] & object; command: string[] } {
    if (start.request === undefined)
      throw invalidField("start.request", "is required: the oz0.harness.v1.SessionRequest to give the harness");
    const request = clone(SessionRequestSchema, start.request);
    if (request.protocolVersion === ProtocolVersion.PROTOCOL_VERSION_UNSPECIFIED)
      request.protocolVersion = ProtocolVersion.PROTOCOL_VERSION_1;
    if (request.protocolVersion !== ProtocolVersion.PROTOCOL_VERSION_1) {
      throw invalidField("start.request.protocol_version", "this node speaks PROTOCOL_VERSION_1 only");
    }
    if (request.sessionId === "") request.sessionId = randomUUID();
    else validateSessionId(request.sessionId, "start.request.session_id");
    if (start.command.length === 0)
      throw invalidField("start.command", "is empty; give the harness command from the plugin manifest");
    start.command.forEach((part, index) => {
      if (part === "") throw invalidField(`start.command[${index}]`, "is empty");
      if (part.includes("\0")) throw invalidField(`start.command[${index}]`, "contains a NUL byte");
    });
    if (start.pluginDir !== "") {
      if (!path.isAbsolute(start.pluginDir))
        throw invalidField("start.plugin_dir", "must be an absolute path on the node");
      let isDirectory = false;
      try {
        isDirectory = statSync(start.pluginDir).isDirectory();
      } catch {
        isDirectory = false;
      }
      if (!isDirectory)
        throw invalidField("start.plugin_dir", "is not a directory on this node; install the plugin on the node first");
    }
    const command = [...start.command];
    const first = command[0] ?? "";
    if (!path.isAbsolute(first) && first.includes("/")) {
      if (start.pluginDir === "")
        throw invalidField("start.command[0]", "is a relative path but no plugin_dir was given to resolve it against");
      command[0] = path.resolve(start.pluginDir, first);
    }
    const deadline = request.limits?.deadline;
    if (deadline !== undefined && timestampDate(deadline).getTime() <= Date.now()) {
      throw invalidField("start.request.limits.deadline", "is in the past; give a future time or leave it unset");
    }
    validateAttachments(start.attachments);
    start.artifactPaths.forEach((p, index) => relativeInside(p, `start.artifact_paths[${index}]`));
    return { request, command };
  }

  get(sessionId: string): SandboxSession {
    const session = this.#sessions.get(sessionId);
    if (session === undefined) {
      throw new SandboxError(
        "not_found",
        `no session ${sessionId} on this node (never started here, or ended longer ago than the retention period)`,
      );
    }
    return session;
  }

  list(): SessionInfo[] {
    return [...this.#sessions.values()].map((session) => session.info());
  }

  cancel(sessionId: string, reason: string): boolean {
    return this.get(sessionId).cancel(reason || "cancelled by a client");
  }

  /** Refuses new sessions, cancels the running ones with the grace, and waits for them to end. */
  async shutdown(): Promise<void> {
    this.#shuttingDown = true;
    this.#diskGuard.close();
    this.#memoryGuard?.close();
    this.#sharedTmpfsGuard?.close();
    this.#openFilesGuard?.close();
    const running = [...this.#sessions.values()];
    for (const session of running) session.cancel("the sandbox node is shutting down");
    await Promise.all(running.map((session) => session.finished));
    await this.#guardReadings.close();
    await this.#spawner?.close();
    await this.#listeners?.close();
    for (const timer of this.#retention.values()) clearTimeout(timer);
    this.#retention.clear();
    this.#unread.clear();
    this.#endedBytes.clear();
    this.#endedBytesTotal = 0;
  }
}

/**
 * How a new session takes its uid: a session working in another's directory runs under that one's (only it can work
 * in a directory private to that uid), any other takes one of the pool's.
 */
function userFor(shared: SandboxSession | undefined, pool: SessionUserPool): () => Promise<SessionUserLease> {
  if (shared === undefined) return () => pool.acquire();
  const owner = shared.user;
  if (owner === undefined)
    throw new SandboxError(
      "failed_precondition",
      `start.share_working_dir_of: session ${shared.id} is still starting; retry once it has started`,
    );
  const lease = owner.share();
  return () => Promise.resolve(lease);
}

/** A URL's origin; the URL itself when it is none (refused where it is used). */
function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}
