// @oz0/sandbox: the node agent that runs harness sessions.
import os from "node:os";
import { SandboxService } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import {
  Authenticator,
  createLogger,
  ephemeralRangeStart,
  READINESS,
  registration,
  serve,
  ServingStatus,
} from "@oz0/serving";
import { DEFAULT_READ_ONLY_PATHS, type BubblewrapDetection } from "./bubblewrap-launcher.js";
import { chooseIsolation, type IsolationName } from "./isolation-choice.js";
import { chooseSessionContainment, type ContainmentName } from "./containment-choice.js";
import { detectLandlock } from "./landlock-launcher.js";
import { findSetpriv } from "./parent-death-launcher.js";
import { defaultNodeIdentity, startNodeHeartbeat, type NodeHeartbeat } from "./node-heartbeat.js";
import { defaultSessionPath } from "@oz0/harness/host";
import {
  checkNodeToken,
  defaultRoot,
  DEFAULT_HEARTBEAT_MS,
  DEFAULT_MAX_MESSAGE_BYTES,
  DEFAULT_PORT,
  DEFAULT_SESSION_UIDS,
  type SandboxConfig,
  type SessionUidRange,
} from "./sandbox-config.js";
import { sandboxService } from "./sandbox-service.js";
import { DEFAULT_MAX_STDERR_BYTES, DEFAULT_MAX_STDERR_WRITTEN_BYTES } from "./stderr-capture.js";
import { DEFAULT_MAX_STDOUT_BYTES } from "./stdout-limit.js";
import { prepareRoot, removeStaleSessions } from "./session-directories.js";
import { chooseNamespaceLimits } from "./session-namespace-limits.js";
import { defaultMaxOpenFiles } from "./session-open-files-guard.js";
import { SessionRegistry } from "./session-registry.js";
import { sandboxEntryCommand } from "./sandbox-entry.js";
import {
  DEFAULT_FORWARD_IDLE_TIMEOUT_MS,
  DEFAULT_FORWARDS_PER_SESSION,
  defaultTotalForwards,
} from "./llm-forwarder.js";
import { relaySecret, startTelemetryRelay } from "./telemetry-relay.js";
import { SessionUserPool } from "./session-user-pool.js";
import { systemCommand } from "./system-command.js";
import { chooseSyscallFilter } from "./syscall-filter.js";
import { chooseListenPorts, servicePortsInEphemeralRange } from "./session-listen-ports.js";
import { chooseSessionWrites } from "./session-write-rule.js";
import {
  chooseSessionProcessLimit,
  DEFAULT_SESSION_MAX_PROCESSES,
  ownOpenFilesLimit,
  ownProcessLimit,
  runsAsInitialRoot,
  type ProcessLimitChoice,
} from "./session-process-limit.js";

export { startNodeHeartbeat } from "./node-heartbeat.js";
export type { NodeHeartbeat, NodeHeartbeatOptions, NodeStatus } from "./node-heartbeat.js";
export { configFromEnv, DEFAULT_HEARTBEAT_MS, DEFAULT_PORT, heartbeatSidecarConfigFromEnv } from "./sandbox-config.js";
export type {
  HeartbeatSidecarConfig,
  IsolationSetting,
  ListenPortsSetting,
  SandboxConfig,
  SessionUidRange,
  SyscallFilterSetting,
} from "./sandbox-config.js";
export type { IsolationName } from "./isolation-choice.js";
export type { ContainmentName } from "./containment-choice.js";
export type { ProcessLimitChoice, SessionProcessLimit } from "./session-process-limit.js";
export { startHeartbeatSidecar } from "./heartbeat-sidecar.js";
export type { RunningHeartbeatSidecar } from "./heartbeat-sidecar.js";
export { detectBubblewrap, DEFAULT_READ_ONLY_PATHS, spawnReading } from "./bubblewrap-launcher.js";
export { PROC_READ_ONLY } from "./bubblewrap-mounts.js";
export type { BubblewrapDetection } from "./bubblewrap-launcher.js";
export { detectLandlock, detectListenPortsDomain, listenPortsCommand, walledCommand } from "./landlock-launcher.js";
export { detectUserModeSyscallFilter, sessionSyscallFilter } from "./syscall-filter.js";
export type { Landlock } from "./landlock-launcher.js";
export { buildSessionEnvironment, QUIET_HARNESS_ENV } from "@oz0/harness/host";

/** The health service name that says whether sessions run under bubblewrap (SERVING) or not (NOT_SERVING). */
export const ISOLATION_HEALTH_SERVICE = "isolation";

export interface RunningSandbox {
  /** `http://host:port`. */
  readonly url: string;
  /** How sessions are isolated on this node: bubblewrap, an unprivileged uid per session, or not at all. */
  readonly isolation: IsolationName;
  /** Why no stronger isolation is used (or that OZ0_ISOLATION chose it); empty under bubblewrap. */
  readonly isolationReason: string;
  /** What ends everything a session started, also what left its process group: the PID namespace, the uid, or the `none` mode's mechanism. */
  readonly containment: ContainmentName;
  /** Why bubblewrap is or is not used, as detected at start-up. */
  readonly bubblewrap: BubblewrapDetection;
  /** How many processes a session may run at once, or why nothing limits them (OZ0_SESSION_MAX_PROCESSES). */
  readonly processLimit: ProcessLimitChoice;
  /** The uids sessions run under, each its own (the user mode, and bubblewrap run by root); undefined: the sandbox's own. */
  readonly sessionUids: SessionUidRange | undefined;
  /** What this node sends heartbeats as, when it has an orchestrator to send them to (OZ0_ORCHESTRATOR_URL). */
  readonly node: { id: string; advertiseUrl: string } | undefined;
  /** Stop taking sessions (readiness NOT_SERVING), cancel running ones with the grace, then close. */
  close(): Promise<void>;
}

export async function startSandbox(config: SandboxConfig = {}): Promise<RunningSandbox> {
  const logger = config.logger ?? createLogger({ name: "sandbox" });
  if (config.orchestratorUrls !== undefined && !config.nodeToken) {
    throw new Error(
      "OZ0_ORCHESTRATOR_URL is set but OZ0_NODE_TOKEN is not: set it to the node token the orchestrators have, or the orchestrator refuses this node's heartbeats",
    );
  }
  if (config.orchestratorUrls !== undefined) checkNodeToken(config.nodeToken);
  const root = await prepareRoot(config.root ?? defaultRoot());
  const uids = config.sessionUids ?? DEFAULT_SESSION_UIDS;
  const isolation = await chooseIsolation({
    setting: config.isolation ?? "auto",
    root,
    uids,
    bwrapPath: config.bwrapPath,
    setprivPath: config.setprivPath,
  });
  const { bubblewrap } = isolation;
  const useBwrap = isolation.mode === "bwrap";
  // The user mode's uids, and a root sandbox's bubblewrap sessions' (bubblewrap-launcher.ts).
  const users =
    isolation.mode === "user" || (useBwrap && isolation.sessionUsers.available)
      ? new SessionUserPool({ range: uids, logger, contained: useBwrap, lockDir: config.sessionUidLockDir })
      : undefined;
  const contained = chooseSessionContainment({
    isolation: isolation.mode,
    setting: config.containment ?? "auto",
    root,
  });
  const { containment } = contained;
  const maxSessions = config.maxSessions ?? 16;
  const processes = chooseSessionProcessLimit({
    isolation: isolation.mode,
    max: config.maxSessionProcesses ?? DEFAULT_SESSION_MAX_PROCESSES,
    prlimitPath: systemCommand("prlimit"),
    initialRoot: runsAsInitialRoot(),
    kernel: os.release(),
    own: ownProcessLimit(),
    maxSessions,
    sessionUids: useBwrap && users !== undefined,
  });
  if (processes.warning !== undefined) logger.warn({ sessionProcesses: processes.limit?.max }, processes.warning);
  // The start-up line's `sessionProcesses`: the limit, or "unlimited" with the reason; and `sessionMemory`, the most a
  // session's processes may take, in bytes (session-memory-guard.ts).
  const maxMemory = config.maxSessionMemoryBytes ?? 0;
  // `sessionOpenFiles`: the most descriptors a session's processes may hold (session-open-files-guard.ts), and each of
  // them, where the process limit's prlimit runs and the sandbox's own limit is higher.
  const maxOpenFiles = config.maxSessionOpenFiles ?? defaultMaxOpenFiles(maxSessions);
  if (processes.limit !== undefined && maxOpenFiles > 0 && maxOpenFiles < ownOpenFilesLimit())
    processes.limit.maxOpenFiles = maxOpenFiles;
  const processFields = {
    ...(processes.limit !== undefined
      ? {
          sessionProcesses: processes.limit.max,
          ...(processes.reason !== undefined ? { sessionProcessesReason: processes.reason } : {}),
        }
      : { sessionProcesses: "unlimited", sessionProcessesReason: processes.reason }),
    sessionMemory: maxMemory > 0 ? maxMemory : "unlimited",
    sessionOpenFiles: maxOpenFiles > 0 ? maxOpenFiles : "unlimited",
  };
  // The seccomp filter: bwrap's trial loaded it (or said why not); the `user` mode loads it with perl, as root, before setpriv.
  const filter = chooseSyscallFilter({
    setting: config.syscallFilter ?? "auto",
    mode: isolation.mode,
    bubblewrap,
  });
  const filterFields = filter.fields;
  // The `user` mode's sessions share the node's network: they listen only on ports the kernel picks, where it can say so.
  const listenPorts = chooseListenPorts({
    setting: config.listenPorts ?? "auto",
    mode: isolation.mode,
    syscallFilter: filter.user !== undefined,
  });
  // ...and write only in their own folders and the node's shared places, where the kernel can wall the rest off.
  const writes = chooseSessionWrites({ mode: isolation.mode });
  const domainLandlock = listenPorts.rule ?? writes.rule;
  const walled: ReturnType<typeof detectLandlock> =
    isolation.mode === "none"
      ? detectLandlock()
      : { reason: "not needed: sessions run under bwrap or a uid of their own" };
  const removedContainers = (await containment?.removeLeftovers()) ?? 0;
  // Sessions in user namespaces of the sandbox's user draw on its per-user inotify and fanotify counts together: each
  // gets a share (session-namespace-limits.ts). A root sandbox's have uids of their own.
  const namespaces = useBwrap && users === undefined ? chooseNamespaceLimits({ maxSessions }) : undefined;
  const namespaceFields =
    namespaces === undefined
      ? {}
      : namespaces.limits !== undefined
        ? { sessionNamespaceShares: Object.fromEntries(namespaces.limits.shares) }
        : { sessionNamespaceShares: "none", sessionNamespaceSharesReason: namespaces.reason };
  // The startup line the embedded stack reads: its `isolation` field is bwrap, user or none (with `reason`), always before "sandbox listening".
  // Its `containment` field names what ends everything a session started (pid-namespace, uid, cgroup, subreaper or environment).
  const range = `${uids.base}-${uids.base + uids.count - 1}`;
  // One line names the mode (the embedded stack takes the last line with an `isolation` field as the mode).
  if (useBwrap) {
    logger.info(
      {
        isolation: "bwrap",
        containment: contained.name,
        ...processFields,
        ...filterFields,
        bwrap: bubblewrap.path,
        version: bubblewrap.version,
        // Whose uid the sessions run as: each its own of the range, or the sandbox's (`own`, with the reason).
        ...(users !== undefined
          ? { sessionUids: range }
          : { sessionUids: "own", sessionUidsReason: isolation.sessionUsers.reason }),
        ...namespaceFields,
      },
      "sessions run under bubblewrap",
    );
    const overcommitted = namespaces?.limits !== undefined ? namespaces.overcommitted : [];
    if (overcommitted.length > 0)
      logger.warn(
        {
          sessionNamespaceShares: namespaceFields.sessionNamespaceShares,
          overcommitted: Object.fromEntries(overcommitted.map((c) => [c.sysctl, { node: c.node, needed: c.needed }])),
        },
        `each session's share of the node's per-user limits is their floor, and OZ0_MAX_SESSIONS sessions together may hold more than half of ${overcommitted.map((c) => `${c.sysctl} (${c.node})`).join(", ")}, the half kept for the sandbox's user (in a pod of its own user namespace, the node's root) and the sessions not yet started, which may find none left; raise ${overcommitted.map((c) => `${c.sysctl} to ${c.needed}`).join(", ")} on the node, or lower OZ0_MAX_SESSIONS`,
      );
    if (namespaces?.reason !== undefined)
      logger.warn(
        { ...namespaceFields },
        "sessions share the sandbox user's inotify and fanotify limits of the node: one session taking them all leaves the others unable to watch files; give the sandbox a kernel and a /proc/sys it can lower them in (see the sandbox README's Shared kernel counts)",
      );
    // As root with no uid of their own, sessions are the node's uid 0, capabilities dropped: owners of what root owns.
    if (users === undefined && process.getuid?.() === 0)
      logger.warn(
        { sessionUids: "own", sessionUidsReason: isolation.sessionUsers.reason },
        "sessions run as the node's uid 0 under bubblewrap: they own what root owns among the paths bound in, and nothing limits their processes; give them uids of their own (see the sandbox README's Run by root)",
      );
  } else if (users !== undefined) {
    logger.info(
      {
        isolation: "user",
        containment: contained.name,
        ...processFields,
        ...filterFields,
        ...listenPorts.fields,
        ...writes.fields,
        uids: range,
        reason: isolation.reason,
      },
      "sessions run under unprivileged uids of their own (no network, PID or mount namespaces: see the sandbox README)",
    );
  } else {
    const where = containment?.location ? { containmentLocation: containment.location } : {};
    logger.warn(
      {
        isolation: "none",
        reason: isolation.reason,
        containment: contained.name,
        containmentReason: contained.reason,
        ...where,
        ...processFields,
        landlock: walled.landlock !== undefined,
      },
      `sessions run WITHOUT OS isolation (plain process groups of the sandbox's own user; what a session starts ends with it by ${contained.name}${contained.name === "environment" ? ", best effort: see the sandbox README" : ""})`,
    );
  }
  // The harness runs as the sandbox's own user: a Landlock domain keeps the sandbox's memory and environment,
  // the orchestrator's credential in them, out of its reach (landlock-launcher.ts).
  if (isolation.mode === "none" && walled.landlock === undefined)
    logger.warn(
      { landlock: false, landlockReason: walled.reason },
      "sessions can read the sandbox process's memory and environment where the kernel lets a process read its parent's (Yama's ptrace_scope 0, or as root), and the orchestrator's credential is in them: run untrusted agents under bubblewrap (see the sandbox README)",
    );
  if (isolation.mode !== "none" && filterFields.syscallFilter === "off")
    logger.warn(
      { ...filterFields },
      "sessions run without the seccomp filter: they can make user namespaces of their own and reach the kernel's keyrings, eBPF, userfaultfd and io_uring (see the sandbox README's System calls)",
    );
  if (listenPorts.fields?.sessionListenPorts === "any")
    logger.warn(
      { ...listenPorts.fields },
      "sessions share the node's network and may listen on any port: one listening on a service's port while that service is down (a restart) gets its callers' credentials; give them bubblewrap, or Landlock's network rules (Linux 6.7+; see the sandbox README's The user mode)",
    );
  if (writes.fields?.sessionWrites === "anywhere")
    logger.warn(
      { ...writes.fields },
      "sessions may write to every world-writable folder and file of the node, where what they leave outside the six shared places the sandbox empties outlives them, for the next session of the uid to read; give them bubblewrap, or a kernel with Landlock ABI 2 (Linux 5.19+; see the sandbox README's The user mode)",
    );
  for (const warning of users !== undefined ? isolation.sessionUsers.warnings : [])
    logger.warn({ uids: range }, warning);

  if (config.ignoredEventsUrl)
    logger.warn(
      "OZ0_EVENTS_URL is ignored: the sandbox publishes no events (the orchestrator publishes what a node reports of its sessions, session.started and session.ended, and the events service no longer accepts the sandbox's credential); unset it",
    );
  // The sessions' spans join their jobs' traces through the sandbox (see telemetry-relay.ts).
  const traceRelay =
    config.sessionTraces !== undefined
      ? await startTelemetryRelay({ target: config.sessionTraces, logger, secret: await relaySecret(root) })
      : undefined;
  const registry = new SessionRegistry({
    root,
    // Every session's directories, and the hidden paths (OZ0_HOME among them: the suite's own data).
    attachmentsNeverFrom: [root, ...(config.hiddenPaths ?? [])],
    maxSessions,
    minFreeDiskBytes: config.minFreeDiskBytes,
    minFreeDiskFiles: config.minFreeDiskFiles,
    minFreeSharedFiles: config.minFreeSharedFiles,
    diskLimitBytes: config.diskLimitBytes,
    ...(config.diskCheckMs !== undefined ? { diskCheckMs: config.diskCheckMs } : {}),
    maxSessionMemoryBytes: config.maxSessionMemoryBytes,
    ...(config.memoryCheckMs !== undefined ? { memoryCheckMs: config.memoryCheckMs } : {}),
    maxSessionOpenFiles: maxOpenFiles,
    ...(config.openFilesCheckMs !== undefined ? { openFilesCheckMs: config.openFilesCheckMs } : {}),
    isolation: useBwrap
      ? {
          mode: "bwrap",
          bwrapPath: bubblewrap.path as string,
          syscallFilter: filter.bwrap,
          readOnlyPaths: [...DEFAULT_READ_ONLY_PATHS, ...(config.readOnlyPaths ?? [])],
          hiddenPaths: config.hiddenPaths ?? [],
          entryCommand: sandboxEntryCommand(),
          forwardLimits: {
            perSession: config.maxForwardsPerSession ?? DEFAULT_FORWARDS_PER_SESSION,
            total: config.maxForwards ?? defaultTotalForwards(),
            idleTimeoutMs: config.forwardIdleTimeoutMs ?? DEFAULT_FORWARD_IDLE_TIMEOUT_MS,
          },
          users:
            users !== undefined
              ? { pool: users, setprivPath: isolation.sessionUsers.setprivPath as string }
              : undefined,
          namespaceLimits: namespaces?.limits,
        }
      : users !== undefined
        ? {
            mode: "user",
            setprivPath: isolation.sessionUsers.setprivPath as string,
            users,
            syscallFilter: filter.user,
            domain:
              domainLandlock !== undefined
                ? {
                    landlock: domainLandlock,
                    kernelPortsOnly: listenPorts.rule !== undefined,
                    confinedWrites: writes.rule !== undefined,
                  }
                : undefined,
          }
        : {
            mode: "none",
            setprivPath: findSetpriv(),
            containment: containment!,
            ...(walled.landlock !== undefined ? { landlock: walled.landlock } : {}),
          },
    sessionPath: config.sessionPath ?? defaultSessionPath(),
    processLimit: processes.limit,
    locale: config.locale ?? "C.UTF-8",
    cancelGraceMs: config.cancelGraceMs ?? 10_000,
    sessionOrphanMs: config.sessionOrphanMs ?? 15 * 60_000,
    retentionMs: config.retentionMs ?? 10 * 60_000,
    unreadRetentionMs: config.unreadRetentionMs ?? 24 * 3_600_000,
    maxUnreadSessions: config.maxUnreadSessions ?? Math.max(64, 4 * maxSessions),
    maxEndedLogBytes: config.maxEndedSessionLogBytes ?? 512 * 1024 * 1024,
    maxLineBytes: config.maxLineBytes ?? 1024 * 1024,
    maxArtifactBytes: config.maxArtifactBytes ?? 8 * 1024 * 1024,
    maxLogEvents: config.maxSessionEvents ?? 200_000,
    maxLogBytes: config.maxSessionLogBytes ?? 64 * 1024 * 1024,
    maxStderrBytes: config.maxSessionStderrBytes ?? DEFAULT_MAX_STDERR_BYTES,
    maxStderrWrittenBytes: config.maxSessionStderrWrittenBytes ?? DEFAULT_MAX_STDERR_WRITTEN_BYTES,
    maxStdoutBytes: config.maxSessionStdoutBytes ?? DEFAULT_MAX_STDOUT_BYTES,
    logger,
    ...(traceRelay !== undefined
      ? {
          traceRelay: {
            url: traceRelay.url,
            protocol: config.sessionTraces!.protocol,
            exportPath: traceRelay.exportPath,
          },
        }
      : {}),
  });
  // Sessions a previous run left running under their keepers are taken over; everything else it left is removed.
  const adopted = await registry.adoptSessions();
  // What a killed previous run's sessions still run is killed before their directories are removed, so nothing changes
  // them meanwhile; after the takeover, whose sessions' uids this pool then holds (a session kept by an earlier version's
  // keeper, which held its uid otherwise, is one of them).
  const killedLeftovers = ((await users?.clearLeftovers()) ?? 0) + removedContainers;
  const removedStale = await removeStaleSessions(root, { keep: new Set(adopted) });
  if (removedStale > 0 || killedLeftovers > 0)
    logger.warn(
      { root, removedStale, killedLeftovers },
      "removed the directories (and killed the processes) of sessions a previous run of the sandbox left behind",
    );
  const server = await serve({
    name: "sandbox",
    host: config.host,
    port: config.port ?? DEFAULT_PORT,
    services: [registration(SandboxService, sandboxService(registry))],
    auth: new Authenticator(config.auth ?? {}),
    logger,
    maxMessageBytes: config.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES,
  });
  server.health.setStatus(ISOLATION_HEALTH_SERVICE, useBwrap ? ServingStatus.SERVING : ServingStatus.NOT_SERVING);
  if (listenPorts.fields?.sessionListenPorts === "ephemeral") {
    const rangeStart = ephemeralRangeStart();
    const exposed = servicePortsInEphemeralRange({
      own: server.port,
      peers: config.orchestratorUrls ?? [],
      rangeStart,
    });
    if (exposed.length > 0)
      logger.warn(
        { portsInEphemeralRange: exposed, ephemeralRangeStart: rangeStart },
        "service ports of this node lie in the kernel's ephemeral range: while such a service is down, a user-mode session binding port 0 may be handed its port and be sent its callers' credentials; give the services ports below the range (see the sandbox README's The user mode)",
      );
  }

  let heartbeat: NodeHeartbeat | undefined;
  let node: RunningSandbox["node"];
  if (config.orchestratorUrls !== undefined) {
    const identity = defaultNodeIdentity({ host: config.host, port: server.port, url: server.url });
    node = { id: config.nodeId ?? identity.nodeId, advertiseUrl: config.advertiseUrl ?? identity.advertiseUrl };
    heartbeat = startNodeHeartbeat({
      orchestratorUrls: config.orchestratorUrls,
      nodeToken: config.nodeToken!,
      nodeId: node.id,
      advertiseUrl: node.advertiseUrl,
      status: () => ({ capacity: maxSessions, running: registry.activeCount }),
      intervalMs: config.heartbeatMs ?? DEFAULT_HEARTBEAT_MS,
      logger,
    });
  }

  let closing: Promise<void> | undefined;
  return {
    url: server.url,
    isolation: isolation.mode,
    isolationReason: isolation.reason,
    containment: contained.name,
    processLimit: processes,
    sessionUids: users !== undefined ? uids : undefined,
    bubblewrap,
    node,
    close() {
      closing ??= (async () => {
        server.health.setStatus(READINESS, ServingStatus.NOT_SERVING);
        server.health.setStatus("", ServingStatus.NOT_SERVING);
        // Capacity 0 first, so orchestrators place nothing more here while the running sessions end.
        await heartbeat?.stop({ drain: true });
        await registry.shutdown();
        users?.close();
        await traceRelay?.close();
        containment?.close();
        await server.close();
      })();
      return closing;
    },
  };
}
