// The sandbox's configuration, and how it is read from the environment.
import os from "node:os";
import path from "node:path";
import { CONTAINMENT_MECHANISMS, type ContainmentSetting } from "@oz0/harness/host";
import {
  authSettingsFromEnv,
  EnvConfigError,
  envInteger,
  envOneOf,
  envMaxMessageBytes,
  envPort,
  envString,
  envUrl,
  envUrlList,
  otlpTracesTarget,
  type AuthSettings,
  type Logger,
  type OtlpTracesTarget,
} from "@oz0/serving";

export type IsolationSetting = "auto" | "bwrap" | "user" | "none";

/** The uids (and gids of the same numbers) sessions run under in the `user` isolation mode. */
export interface SessionUidRange {
  /** The first uid (OZ0_SANDBOX_UID_BASE). Default 200000. */
  base: number;
  /** How many uids from `base` (OZ0_SANDBOX_UID_COUNT). Default 65536. */
  count: number;
}

export const DEFAULT_SESSION_UIDS: SessionUidRange = { base: 200_000, count: 65_536 };

export interface SandboxConfig {
  /** Port to listen on; 0 picks a free one. Default 7701. */
  port?: number;
  /** Address to listen on. Default 127.0.0.1. */
  host?: string;
  /** Where session directories are created (OZ0_SANDBOX_ROOT). Default `<tmpdir>/oz0-sandbox`. */
  root?: string;
  /** Sessions running at once on this node (OZ0_MAX_SESSIONS); more are refused with RESOURCE_EXHAUSTED. Default 16. */
  maxSessions?: number;
  /**
   * How sessions are isolated (OZ0_ISOLATION): `bwrap` (bubblewrap, refuses
   * to start without it), `user` (an unprivileged uid of its own per session;
   * needs root and setpriv, refuses to start without them), `none` (plain
   * process groups of the sandbox's user), or `auto`: bwrap when it works
   * here, else user when it works here, else none. Default auto.
   */
  isolation?: IsolationSetting;
  /**
   * How the `none` isolation mode ends everything a session started, also
   * what left its process group (OZ0_CONTAINMENT): `cgroup` (a cgroup v2 per
   * session), `subreaper` (a child-subreaper wrapper), `environment` (found by
   * the session's OZ0_SESSION_ID: best effort), or `auto`: the first that
   * works here. A named one refuses to start without it. The `bwrap` and
   * `user` modes have their own (the PID namespace, the uid). Default auto.
   */
  containment?: ContainmentSetting;
  /**
   * Below this many free bytes on the sandbox root's filesystem no session starts, and the sessions filling it are
   * stopped (OZ0_SANDBOX_MIN_FREE_BYTES; 0: no guard). Default 1 GiB, or a twentieth of the filesystem when less.
   */
  minFreeDiskBytes?: number;
  /** The same for files, inodes (OZ0_SANDBOX_MIN_FREE_FILES). Default 100,000, or a twentieth of the filesystem's when less. */
  minFreeDiskFiles?: number;
  /**
   * In the `user` mode, below this many free files (inodes) in one of the node's shared tmpfs places (/dev/shm; /tmp
   * and /run/lock where they are one), the session whose uid owns the most entries there is stopped
   * (OZ0_SANDBOX_MIN_FREE_SHARED_FILES; 0: no guard; shared-tmpfs-guard.ts). Default 100,000, or a twentieth of the
   * place's inodes when less. Checked as often as the disk (OZ0_SANDBOX_DISK_CHECK_MS).
   */
  minFreeSharedFiles?: number;
  /**
   * The most the sandbox root may hold, in bytes (OZ0_SANDBOX_DISK_LIMIT_BYTES): a Kubernetes emptyDir's sizeLimit,
   * past which the kubelet evicts the pod with every session. The floor then applies to what it leaves too. Default:
   * none (0), the filesystem's free space the only bound.
   */
  diskLimitBytes?: number;
  /** Between checks of that free space (OZ0_SANDBOX_DISK_CHECK_MS). Default 1000. */
  diskCheckMs?: number;
  /**
   * The most memory a session's processes may take together (OZ0_SESSION_MAX_MEMORY_BYTES): anonymous and shared,
   * swapped out or not, each shared page counted once; above it the session is stopped (session-memory-guard.ts).
   * Default: no limit (the OOM killer still takes sessions' processes first).
   */
  maxSessionMemoryBytes?: number;
  /** Between checks of that (OZ0_SESSION_MEMORY_CHECK_MS). Default 1000. */
  memoryCheckMs?: number;
  /**
   * The most descriptors a session's processes may hold together (OZ0_SESSION_MAX_OPEN_FILES); above it the session is
   * stopped (session-open-files-guard.ts). Default 65,536, less where the node's table of open files is small
   * (defaultMaxOpenFiles); 0: no limit.
   */
  maxSessionOpenFiles?: number;
  /** Between checks of that (OZ0_SESSION_OPEN_FILES_CHECK_MS). Default 1000. */
  openFilesCheckMs?: number;
  /**
   * The seccomp filter of sessions under bubblewrap and in the `user` mode (OZ0_SESSION_SYSCALL_FILTER): `auto` loads
   * it where it works and says why not where it does not; `on` refuses to start without it; `off` runs sessions
   * without it, for agents whose tools make user namespaces themselves (a browser's own sandbox). Default auto.
   */
  syscallFilter?: SyscallFilterSetting;
  /**
   * The ports a `user`-mode session may listen on (OZ0_SESSION_LISTEN_PORTS; session-listen-ports.ts): `auto`
   * allows only a port the kernel picks (bind to port 0) where Landlock's network rules work, and says why not where
   * they do not; `ephemeral` refuses to start without them; `any` lets sessions listen on a port of their choosing,
   * a service's among them while it is down. Default auto.
   */
  listenPorts?: ListenPortsSetting;
  /**
   * How many processes and threads each session may run at once
   * (OZ0_SESSION_MAX_PROCESSES), where the isolation mode lets the kernel
   * count a session's apart: under bubblewrap when the sandbox is not root,
   * and in the `user` mode (session-process-limit.ts). Past it the session's
   * fork or thread creation fails (EAGAIN); other sessions are unaffected
   * (but for one sharing its working directory in the `user` mode).
   * 0 turns it off. Default 1024.
   */
  maxSessionProcesses?: number;
  /** The uid range of the `user` mode (OZ0_SANDBOX_UID_BASE, OZ0_SANDBOX_UID_COUNT). Default 200000, 65536 uids. */
  sessionUids?: SessionUidRange;
  /**
   * The folder of the session uids' locks (OZ0_SANDBOX_UID_LOCK_DIR), which every sandbox sharing the range on a host
   * must share (session-uid-locks.ts). Default /run/oz0-sandbox/session-uids.
   */
  sessionUidLockDir?: string;
  /**
   * Node paths a session under bubblewrap must never see, even when a
   * read-only path (OZ0_SANDBOX_READ_ONLY_PATHS, the plugin directory)
   * contains them: OZ0_SANDBOX_HIDDEN_PATHS (`:`-separated) and OZ0_HOME.
   * The sandbox root and its parent are always hidden besides.
   */
  hiddenPaths?: string[];
  /**
   * OZ0_EVENTS_URL was given: the sandbox published session.started and session.ended before 2026-12-07, and now
   * nothing (the orchestrator publishes them), so the sandbox says it is ignored.
   */
  ignoredEventsUrl?: boolean;
  /** Between SIGTERM and SIGKILL on cancel (OZ0_CANCEL_GRACE_MS). Default 10 000. */
  cancelGraceMs?: number;
  /**
   * Under bubblewrap a session outlives a crash of the sandbox (its keeper
   * holds it) and a sandbox started again on the same root takes it over; one
   * that no sandbox takes over within this time is ended by its keeper
   * (OZ0_SESSION_ORPHAN_MS). Default 15 minutes.
   */
  sessionOrphanMs?: number;
  /** How long a finished session's log stays for late re-attach once a stream has read its end (OZ0_SESSION_RETENTION_MS). Default 10 minutes. */
  retentionMs?: number;
  /**
   * How long a finished session whose end no stream has read yet is kept
   * (OZ0_UNREAD_SESSION_RETENTION_MS): its orchestrator may be down, and
   * re-attaches when it is back. Default 24 hours.
   */
  unreadRetentionMs?: number;
  /** At most this many finished sessions wait for a reader (OZ0_MAX_UNREAD_SESSIONS); the oldest goes first. Default 4 × maxSessions, at least 64. */
  maxUnreadSessions?: number;
  /**
   * Bytes the logs of all finished sessions still kept may hold together, in memory
   * (OZ0_MAX_ENDED_SESSION_LOG_BYTES): past it the oldest read one goes first, then the oldest unread one.
   * Default 512 MiB.
   */
  maxEndedSessionLogBytes?: number;
  /**
   * Connections one session holds at once to its LLM endpoints and the trace
   * relay under bubblewrap (OZ0_LLM_FORWARD_MAX_CONNECTIONS_PER_SESSION);
   * past it a new one is closed at once. Default 64.
   */
  maxForwardsPerSession?: number;
  /**
   * The same, for all sessions together (OZ0_LLM_FORWARD_MAX_CONNECTIONS):
   * each costs the sandbox two descriptors. Default a quarter of the
   * process's descriptor limit, leaving half of the descriptors to the
   * sandbox's own work.
   */
  maxForwards?: number;
  /** A forwarded connection with no bytes either way for this long is closed (OZ0_LLM_FORWARD_IDLE_TIMEOUT_MS). Default 10 minutes. */
  forwardIdleTimeoutMs?: number;
  /** Longest harness stdout line, in bytes (OZ0_MAX_LINE_BYTES). Default 1 MiB. */
  maxLineBytes?: number;
  /** Largest patch, and largest total of named files, returned as artifacts (OZ0_MAX_ARTIFACT_BYTES). Default 8 MiB. */
  maxArtifactBytes?: number;
  /** Largest RunSession message (or other request) taken, in bytes (OZ0_MAX_MESSAGE_BYTES). Default DEFAULT_MAX_MESSAGE_BYTES. */
  maxMessageBytes?: number;
  /** Harness events a session may write; each is kept for re-attach, so past it the session is stopped (OZ0_MAX_SESSION_EVENTS). Default 200 000. */
  maxSessionEvents?: number;
  /**
   * Bytes of harness events a session may write (their encoding); each is kept in memory for re-attach, so past
   * it the session is stopped (OZ0_MAX_SESSION_LOG_BYTES). Default 64 MiB.
   */
  maxSessionLogBytes?: number;
  /**
   * Bytes a session may write to stderr in all (OZ0_MAX_SESSION_STDERR_WRITTEN_BYTES): each is written to the
   * node's disk, so past it the session is stopped (`stderr_too_large`). Default 256 MiB.
   */
  maxSessionStderrWrittenBytes?: number;
  /**
   * Bytes a session may write to stdout in all (OZ0_MAX_SESSION_STDOUT_BYTES): blank lines pass the event caps,
   * and each byte is written to the node's disk, so past it the session is stopped (`stdout_too_large`).
   * Default 512 MiB.
   */
  maxSessionStdoutBytes?: number;
  /** How much of a session's stderr is kept for re-attach, its last bytes (OZ0_MAX_SESSION_STDERR_BYTES); older pieces are dropped to their size. Default 1 MiB. */
  maxSessionStderrBytes?: number;
  /**
   * Extra paths visible read-only inside bubblewrap, beyond the system
   * directories and the plugin directory (OZ0_SANDBOX_READ_ONLY_PATHS,
   * `:`-separated): for example where harness runtimes are installed.
   */
  readOnlyPaths?: string[];
  /** PATH of every session (OZ0_SESSION_PATH). Default `/usr/local/bin:/usr/bin:/bin` plus node's directory. */
  sessionPath?: string;
  /** LANG and LC_ALL of every session. Default C.UTF-8. */
  locale?: string;
  /**
   * The orchestrators to send heartbeats to (OZ0_ORCHESTRATOR_URL, comma-separated;
   * one answering is enough), so they place sessions on this node; none when
   * unset (the orchestrator lists this node in OZ0_SANDBOX_URLS instead).
   */
  orchestratorUrls?: string[];
  /**
   * Who may call: orchestrators by their service credentials (the digest in
   * OZ0_PEER_ORCHESTRATOR_SHA256), the heartbeat sidecar by the node token
   * (ListSessions only). Without it nobody can, but health answers.
   */
  auth?: AuthSettings;
  /** The node token the orchestrators share (OZ0_NODE_TOKEN); required with `orchestratorUrls`. */
  nodeToken?: string;
  /** This node's id, stable across restarts (OZ0_NODE_ID). Default `<hostname>:<port>`. */
  nodeId?: string;
  /** Where orchestrators reach this node (OZ0_ADVERTISE_URL). Default its own URL (`http://<hostname>:<port>` when it listens on every address). */
  advertiseUrl?: string;
  /** Between heartbeats (OZ0_HEARTBEAT_MS). Default 5000. */
  heartbeatMs?: number;
  /**
   * Where the sessions' own spans go: the collector this sandbox exports its
   * traces to (the standard OTEL_EXPORTER_OTLP_* variables, OTLP over HTTP).
   * Sessions post to the sandbox's relay, which adds the collector's headers;
   * none when unset.
   */
  sessionTraces?: OtlpTracesTarget;
  /** The bwrap binary; found on the usual paths when unset. */
  bwrapPath?: string;
  /** The setpriv binary (util-linux); found on the usual paths when unset. */
  setprivPath?: string;
  logger?: Logger;
}

export const DEFAULT_PORT = 7701;
/**
 * 16 MiB: the largest messages a sandbox takes are a session's start (its
 * request, and any files attached by content rather than by node path) and a
 * runtime tool's result (a harness operation's result, for one).
 */
export const DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
export const DEFAULT_HEARTBEAT_MS = 5_000;

const ISOLATION_SETTINGS: readonly IsolationSetting[] = ["auto", "bwrap", "user", "none"];
export type SyscallFilterSetting = "auto" | "on" | "off";
const SYSCALL_FILTER_SETTINGS: readonly SyscallFilterSetting[] = ["auto", "on", "off"];
export type ListenPortsSetting = "auto" | "ephemeral" | "any";
const LISTEN_PORTS_SETTINGS: readonly ListenPortsSetting[] = ["auto", "ephemeral", "any"];
const CONTAINMENT_SETTINGS: readonly ContainmentSetting[] = ["auto", ...CONTAINMENT_MECHANISMS];
/** uid_t is 32 bits and -1 means "unchanged": a session's uid stays below it. */
const UID_LIMIT = 0xffff_ffff;

const ms = (env: NodeJS.ProcessEnv, name: string, min = 0): number | undefined =>
  envInteger(env, name, { min, unit: "milliseconds" });
const bytes = (env: NodeJS.ProcessEnv, name: string): number | undefined =>
  envInteger(env, name, { min: 0, unit: "bytes" });

/**
 * Reads the configuration from the environment (README, "Configuration"); a
 * malformed value throws an EnvConfigError naming the variable and the form it
 * expects.
 */
export function configFromEnv(env: NodeJS.ProcessEnv): SandboxConfig {
  // Root's own ids, and ids past the kernel's, can never be a session's.
  const uidBase =
    envInteger(env, "OZ0_SANDBOX_UID_BASE", { min: 1, max: UID_LIMIT - 1, unit: "uid (above 0: uid 0 is root)" }) ??
    DEFAULT_SESSION_UIDS.base;
  const uidCount = envInteger(env, "OZ0_SANDBOX_UID_COUNT", { min: 1, unit: "uids" }) ?? DEFAULT_SESSION_UIDS.count;
  if (uidBase + uidCount - 1 >= UID_LIMIT)
    throw new EnvConfigError(
      "OZ0_SANDBOX_UID_COUNT",
      `a number of uids that keeps OZ0_SANDBOX_UID_BASE (${uidBase}) + OZ0_SANDBOX_UID_COUNT below ${UID_LIMIT}`,
      String(uidCount),
    );
  const orchestratorUrls = envUrlList(env, "OZ0_ORCHESTRATOR_URL");
  const readOnlyPaths = envString(env, "OZ0_SANDBOX_READ_ONLY_PATHS");
  return {
    port: envPort(env, "OZ0_PORT") ?? DEFAULT_PORT,
    host: envString(env, "OZ0_HOST"),
    root: envString(env, "OZ0_SANDBOX_ROOT"),
    maxSessions: envInteger(env, "OZ0_MAX_SESSIONS", { min: 1, unit: "sessions" }),
    maxSessionProcesses: envInteger(env, "OZ0_SESSION_MAX_PROCESSES", {
      min: 0,
      unit: "processes and threads a session (0: no limit)",
    }),
    isolation: envOneOf(env, "OZ0_ISOLATION", ISOLATION_SETTINGS) ?? "auto",
    containment: envOneOf(env, "OZ0_CONTAINMENT", CONTAINMENT_SETTINGS) ?? "auto",
    syscallFilter: envOneOf(env, "OZ0_SESSION_SYSCALL_FILTER", SYSCALL_FILTER_SETTINGS) ?? "auto",
    listenPorts: envOneOf(env, "OZ0_SESSION_LISTEN_PORTS", LISTEN_PORTS_SETTINGS) ?? "auto",
    minFreeDiskBytes: envInteger(env, "OZ0_SANDBOX_MIN_FREE_BYTES", { min: 0, unit: "bytes" }),
    minFreeDiskFiles: envInteger(env, "OZ0_SANDBOX_MIN_FREE_FILES", { min: 0, unit: "files" }),
    minFreeSharedFiles: envInteger(env, "OZ0_SANDBOX_MIN_FREE_SHARED_FILES", { min: 0, unit: "files" }),
    diskLimitBytes: envInteger(env, "OZ0_SANDBOX_DISK_LIMIT_BYTES", { min: 0, unit: "bytes (0: no limit)" }),
    diskCheckMs: envInteger(env, "OZ0_SANDBOX_DISK_CHECK_MS", { min: 10, unit: "ms" }),
    maxSessionMemoryBytes: envInteger(env, "OZ0_SESSION_MAX_MEMORY_BYTES", {
      min: 0,
      unit: "bytes a session (0: no limit)",
    }),
    memoryCheckMs: envInteger(env, "OZ0_SESSION_MEMORY_CHECK_MS", { min: 10, unit: "ms" }),
    maxSessionOpenFiles: envInteger(env, "OZ0_SESSION_MAX_OPEN_FILES", {
      min: 0,
      unit: "descriptors a session (0: no limit)",
    }),
    openFilesCheckMs: envInteger(env, "OZ0_SESSION_OPEN_FILES_CHECK_MS", { min: 10, unit: "ms" }),
    ...(envString(env, "OZ0_EVENTS_URL") !== undefined ? { ignoredEventsUrl: true } : {}),
    cancelGraceMs: ms(env, "OZ0_CANCEL_GRACE_MS"),
    sessionOrphanMs: ms(env, "OZ0_SESSION_ORPHAN_MS"),
    retentionMs: ms(env, "OZ0_SESSION_RETENTION_MS"),
    unreadRetentionMs: ms(env, "OZ0_UNREAD_SESSION_RETENTION_MS"),
    maxUnreadSessions: envInteger(env, "OZ0_MAX_UNREAD_SESSIONS", { min: 0, unit: "sessions" }),
    maxEndedSessionLogBytes: bytes(env, "OZ0_MAX_ENDED_SESSION_LOG_BYTES"),
    maxForwardsPerSession: envInteger(env, "OZ0_LLM_FORWARD_MAX_CONNECTIONS_PER_SESSION", {
      min: 1,
      unit: "connections",
    }),
    maxForwards: envInteger(env, "OZ0_LLM_FORWARD_MAX_CONNECTIONS", { min: 1, unit: "connections" }),
    forwardIdleTimeoutMs: ms(env, "OZ0_LLM_FORWARD_IDLE_TIMEOUT_MS", 1),
    maxLineBytes: bytes(env, "OZ0_MAX_LINE_BYTES"),
    maxArtifactBytes: bytes(env, "OZ0_MAX_ARTIFACT_BYTES"),
    maxMessageBytes: envMaxMessageBytes(env),
    maxSessionEvents: envInteger(env, "OZ0_MAX_SESSION_EVENTS", { min: 0, unit: "events" }),
    maxSessionLogBytes: bytes(env, "OZ0_MAX_SESSION_LOG_BYTES"),
    maxSessionStderrBytes: bytes(env, "OZ0_MAX_SESSION_STDERR_BYTES"),
    maxSessionStderrWrittenBytes: bytes(env, "OZ0_MAX_SESSION_STDERR_WRITTEN_BYTES"),
    maxSessionStdoutBytes: bytes(env, "OZ0_MAX_SESSION_STDOUT_BYTES"),
    sessionUids: { base: uidBase, count: uidCount },
    sessionUidLockDir: envString(env, "OZ0_SANDBOX_UID_LOCK_DIR"),
    readOnlyPaths: readOnlyPaths?.split(":").filter((p) => p !== ""),
    hiddenPaths: hiddenPaths(env),
    sessionPath: sessionPath(env),
    orchestratorUrls: orchestratorUrls.length > 0 ? orchestratorUrls : undefined,
    nodeToken: envString(env, "OZ0_NODE_TOKEN"),
    nodeId: envString(env, "OZ0_NODE_ID"),
    advertiseUrl: envUrl(env, "OZ0_ADVERTISE_URL"),
    heartbeatMs: ms(env, "OZ0_HEARTBEAT_MS", 1),
    auth: authSettingsFromEnv(env, { acceptNodes: true }),
    sessionTraces: otlpTracesTarget(env),
  };
}

/** OZ0_SANDBOX_HIDDEN_PATHS, absolute, and OZ0_HOME: the stack's data directory, whatever a read-only path may contain. */
/**
 * Every session's PATH: absolute folders alone. An empty entry (a leading, trailing or doubled `:`) or a relative
 * one names the working directory of whatever runs a command, which in a session is the job's repository, which the
 * model writes: an approved `ls` would run a `./ls` an earlier call put there.
 */
function sessionPath(env: NodeJS.ProcessEnv): string | undefined {
  const value = envString(env, "OZ0_SESSION_PATH");
  if (value !== undefined && value.split(":").some((dir) => !path.isAbsolute(dir)))
    throw new EnvConfigError(
      "OZ0_SESSION_PATH",
      "`:`-separated absolute folders (no empty entry, which like a relative one names the working directory, the job's repository)",
      value,
    );
  return value;
}

function hiddenPaths(env: NodeJS.ProcessEnv): string[] {
  const value = envString(env, "OZ0_SANDBOX_HIDDEN_PATHS");
  const listed = (value ?? "").split(":").filter((p) => p !== "");
  if (listed.some((p) => !path.isAbsolute(p)))
    throw new EnvConfigError("OZ0_SANDBOX_HIDDEN_PATHS", "`:`-separated absolute paths", value ?? "");
  const home = envString(env, "OZ0_HOME");
  return home ? [...listed, path.resolve(home)] : listed;
}

/**
 * The heartbeat sidecar (`oz0-sandbox-heartbeat`): it sends a node's
 * heartbeats from a container of its own, so the node token is never in the
 * sandbox's process, where a harness running without isolation could read it.
 */
export interface HeartbeatSidecarConfig {
  /** The sandbox it speaks for (OZ0_SANDBOX_URL). Default `http://127.0.0.1:7701`. */
  sandboxUrl: string;
  /** OZ0_ORCHESTRATOR_URL, comma-separated; required. */
  orchestratorUrls: string[];
  /** OZ0_NODE_TOKEN; required. */
  nodeToken: string;
  /**
   * What it sends the sandbox beside it for ListSessions instead of the node token (OZ0_NODE_TOKEN_FOR_SANDBOX; the
   * sandbox's OZ0_NODE_TOKEN_SHA256 is its digest). The sandbox's memory is beside agent code: the node token there
   * would let a harness that reads it register nodes of its choosing and be sent other jobs' sessions.
   */
  sandboxToken?: string;
  /**
   * The pod's projected service-account token (OZ0_NODE_IDENTITY_TOKEN_FILE), sent with each heartbeat so that
   * orchestrators with node identities let this node register only itself.
   */
  identityTokenFile?: string;
  /** OZ0_NODE_ID. Default `<hostname>:<the sandbox's port>`, as the sandbox itself would send. */
  nodeId?: string;
  /** OZ0_ADVERTISE_URL. Default `http://<hostname>:<the sandbox's port>`. */
  advertiseUrl?: string;
  /** OZ0_HEARTBEAT_MS. Default 5000. */
  heartbeatMs: number;
  /** Where the kubelet's liveness and readiness probes ask, HTTP /livez and /readyz (OZ0_HEALTH_PORT); none when unset. */
  healthPort?: number;
}

/**
 * The orchestrators refuse a node token shorter than this (their
 * MIN_NODE_TOKEN_LENGTH): a node given one is refused here, at start, rather
 * than by every heartbeat.
 */
const MIN_NODE_TOKEN_LENGTH = 16;

/** Throws, saying what to do, when the node token is missing or too short for the orchestrators. */
export function checkNodeToken(token: string | undefined): string {
  if (!token) throw new Error("OZ0_NODE_TOKEN is required: the node token the orchestrators have");
  if (token.length < MIN_NODE_TOKEN_LENGTH) {
    throw new Error(
      `OZ0_NODE_TOKEN has ${token.length} characters; the orchestrators refuse fewer than ${MIN_NODE_TOKEN_LENGTH}. Give every orchestrator and node the same longer token (for example \`openssl rand -base64 32\`)`,
    );
  }
  return token;
}

/** Reads the sidecar's configuration; throws naming the variable to set. */
export function heartbeatSidecarConfigFromEnv(env: NodeJS.ProcessEnv): HeartbeatSidecarConfig {
  const orchestratorUrls = envUrlList(env, "OZ0_ORCHESTRATOR_URL");
  if (orchestratorUrls.length === 0)
    throw new Error(
      "OZ0_ORCHESTRATOR_URL is required: the orchestrator (or its Service) to send this node's heartbeats to",
    );
  const nodeToken = checkNodeToken(envString(env, "OZ0_NODE_TOKEN"));
  const sandboxToken = envString(env, "OZ0_NODE_TOKEN_FOR_SANDBOX");
  if (sandboxToken !== undefined && sandboxToken.length < MIN_NODE_TOKEN_LENGTH)
    throw new Error(
      `OZ0_NODE_TOKEN_FOR_SANDBOX has ${sandboxToken.length} characters; use at least ${MIN_NODE_TOKEN_LENGTH} (for example \`openssl rand -base64 32\`)`,
    );
  if (sandboxToken === nodeToken)
    throw new Error(
      "OZ0_NODE_TOKEN_FOR_SANDBOX is the same as OZ0_NODE_TOKEN; it must be a credential of its own, which only the sandbox accepts (its OZ0_NODE_TOKEN_SHA256)",
    );
  const nodeId = envString(env, "OZ0_NODE_ID");
  const advertiseUrl = envUrl(env, "OZ0_ADVERTISE_URL");
  const healthPort = envPort(env, "OZ0_HEALTH_PORT");
  const identityTokenFile = envString(env, "OZ0_NODE_IDENTITY_TOKEN_FILE");
  return {
    sandboxUrl: envUrl(env, "OZ0_SANDBOX_URL") ?? `http://127.0.0.1:${DEFAULT_PORT}`,
    orchestratorUrls,
    nodeToken,
    ...(sandboxToken ? { sandboxToken } : {}),
    ...(identityTokenFile ? { identityTokenFile } : {}),
    ...(nodeId ? { nodeId } : {}),
    ...(advertiseUrl ? { advertiseUrl } : {}),
    heartbeatMs: ms(env, "OZ0_HEARTBEAT_MS", 1) ?? DEFAULT_HEARTBEAT_MS,
    ...(healthPort !== undefined ? { healthPort } : {}),
  };
}

export function defaultRoot(): string {
  return path.join(os.tmpdir(), "oz0-sandbox");
}
