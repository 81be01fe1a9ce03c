// The sandbox reads its environment in one place (configFromEnv, on
// @oz0/serving's readers): the variables the README lists become its
// configuration, and a malformed one stops oz0-sandbox at start with exit
// code 2, naming the variable and the form it expects.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { configFromEnv, heartbeatSidecarConfigFromEnv } from "../src/sandbox-config.js";

const dist = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "dist");

void test("the environment's variables become the sandbox's configuration", () => {
  const { auth, sessionTraces, ...rest } = configFromEnv({
    OZ0_PORT: "0",
    OZ0_HOST: "0.0.0.0",
    OZ0_SANDBOX_ROOT: "/var/lib/oz0-sandbox",
    OZ0_MAX_SESSIONS: "4",
    OZ0_SESSION_MAX_PROCESSES: "256",
    OZ0_ISOLATION: "user",
    OZ0_CONTAINMENT: "subreaper",
    OZ0_SESSION_SYSCALL_FILTER: "off",
    OZ0_SESSION_LISTEN_PORTS: "any",
    OZ0_SANDBOX_MIN_FREE_BYTES: "0",
    OZ0_SANDBOX_MIN_FREE_FILES: "5000",
    OZ0_SANDBOX_MIN_FREE_SHARED_FILES: "20000",
    OZ0_SANDBOX_DISK_LIMIT_BYTES: "10737418240",
    OZ0_SANDBOX_DISK_CHECK_MS: "250",
    OZ0_SESSION_MAX_MEMORY_BYTES: "1073741824",
    OZ0_SESSION_MEMORY_CHECK_MS: "500",
    OZ0_SESSION_MAX_OPEN_FILES: "20000",
    OZ0_SESSION_OPEN_FILES_CHECK_MS: "750",
    OZ0_SANDBOX_UID_BASE: "300000",
    OZ0_SANDBOX_UID_COUNT: "1000",
    OZ0_SANDBOX_UID_LOCK_DIR: "/var/run/oz0-uids",
    OZ0_SANDBOX_HIDDEN_PATHS: "/etc/oz0:/srv/keys",
    OZ0_HOME: "/var/lib/oz0",
    OZ0_SANDBOX_READ_ONLY_PATHS: "/opt/runtimes::/usr/local/lib/node",
    OZ0_EVENTS_URL: "http://events:7703",
    OZ0_CANCEL_GRACE_MS: "2000",
    OZ0_SESSION_ORPHAN_MS: "60000",
    OZ0_SESSION_RETENTION_MS: "0",
    OZ0_UNREAD_SESSION_RETENTION_MS: "3600000",
    OZ0_MAX_UNREAD_SESSIONS: "8",
    OZ0_MAX_ENDED_SESSION_LOG_BYTES: "1048576",
    OZ0_LLM_FORWARD_MAX_CONNECTIONS_PER_SESSION: "8",
    OZ0_LLM_FORWARD_MAX_CONNECTIONS: "100",
    OZ0_LLM_FORWARD_IDLE_TIMEOUT_MS: "30000",
    OZ0_MAX_LINE_BYTES: "65536",
    OZ0_MAX_ARTIFACT_BYTES: "1048576",
    OZ0_MAX_MESSAGE_BYTES: "33554432",
    OZ0_MAX_SESSION_EVENTS: "1000",
    OZ0_MAX_SESSION_LOG_BYTES: "8388608",
    OZ0_MAX_SESSION_STDERR_BYTES: "0",
    OZ0_MAX_SESSION_STDERR_WRITTEN_BYTES: "1048576",
    OZ0_MAX_SESSION_STDOUT_BYTES: "2097152",
    OZ0_SESSION_PATH: "/usr/bin:/bin",
    OZ0_ORCHESTRATOR_URL: "http://orchestrator:7700",
    OZ0_NODE_TOKEN: "a-node-token-long-enough",
    OZ0_NODE_ID: "node-1",
    OZ0_ADVERTISE_URL: "http://10.0.0.1:7701",
    OZ0_HEARTBEAT_MS: "1000",
  });
  assert.ok(auth);
  assert.equal(sessionTraces, undefined);
  assert.deepEqual(rest, {
    port: 0,
    host: "0.0.0.0",
    root: "/var/lib/oz0-sandbox",
    maxSessions: 4,
    maxSessionProcesses: 256,
    isolation: "user",
    containment: "subreaper",
    syscallFilter: "off",
    listenPorts: "any",
    minFreeDiskBytes: 0,
    minFreeDiskFiles: 5000,
    minFreeSharedFiles: 20000,
    diskLimitBytes: 10737418240,
    diskCheckMs: 250,
    maxSessionMemoryBytes: 1073741824,
    memoryCheckMs: 500,
    maxSessionOpenFiles: 20000,
    openFilesCheckMs: 750,
    ignoredEventsUrl: true,
    cancelGraceMs: 2_000,
    sessionOrphanMs: 60_000,
    retentionMs: 0,
    unreadRetentionMs: 3_600_000,
    maxUnreadSessions: 8,
    maxEndedSessionLogBytes: 1024 * 1024,
    maxForwardsPerSession: 8,
    maxForwards: 100,
    forwardIdleTimeoutMs: 30_000,
    maxLineBytes: 65_536,
    maxArtifactBytes: 1_048_576,
    maxMessageBytes: 32 * 1024 * 1024,
    maxSessionEvents: 1_000,
    maxSessionLogBytes: 8 * 1024 * 1024,
    maxSessionStderrBytes: 0,
    maxSessionStderrWrittenBytes: 1024 * 1024,
    maxSessionStdoutBytes: 2 * 1024 * 1024,
    sessionUids: { base: 300_000, count: 1_000 },
    sessionUidLockDir: "/var/run/oz0-uids",
    readOnlyPaths: ["/opt/runtimes", "/usr/local/lib/node"],
    hiddenPaths: ["/etc/oz0", "/srv/keys", "/var/lib/oz0"],
    sessionPath: "/usr/bin:/bin",
    orchestratorUrls: ["http://orchestrator:7700"],
    nodeToken: "a-node-token-long-enough",
    nodeId: "node-1",
    advertiseUrl: "http://10.0.0.1:7701",
    heartbeatMs: 1_000,
  });
});

void test("unset variables take the README's defaults", () => {
  const config = configFromEnv({});
  assert.equal(config.port, 7701);
  assert.equal(config.isolation, "auto");
  assert.equal(config.containment, "auto");
  assert.deepEqual(config.sessionUids, { base: 200_000, count: 65_536 });
  assert.deepEqual(config.hiddenPaths, []);
  assert.equal(config.orchestratorUrls, undefined);
  assert.equal(config.maxSessions, undefined);
  assert.equal(config.maxMessageBytes, undefined, "startSandbox takes DEFAULT_MAX_MESSAGE_BYTES");
});

void test("a malformed variable is refused, naming it and the form it expects", () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ OZ0_PORT: "x" }, /^OZ0_PORT must be a port number from 0 \(any free port\) to 65535; got "x"$/],
    [{ OZ0_PORT: "99999" }, /^OZ0_PORT must be a port number/],
    [{ OZ0_MAX_SESSIONS: "0" }, /^OZ0_MAX_SESSIONS must be a whole number of sessions, at least 1; got "0"$/],
    [
      { OZ0_SESSION_MAX_PROCESSES: "-1" },
      /^OZ0_SESSION_MAX_PROCESSES must be a whole number of processes and threads a session \(0: no limit\), at least 0; got "-1"$/,
    ],
    [{ OZ0_MAX_MESSAGE_BYTES: "0" }, /^OZ0_MAX_MESSAGE_BYTES must be a whole number of bytes, from 1 to 4294967295/],
    [{ OZ0_ISOLATION: "docker" }, /^OZ0_ISOLATION must be one of auto, bwrap, user, none; got "docker"$/],
    [{ OZ0_CONTAINMENT: "systemd" }, /^OZ0_CONTAINMENT must be one of auto, .*; got "systemd"$/],
    [{ OZ0_SESSION_SYSCALL_FILTER: "yes" }, /^OZ0_SESSION_SYSCALL_FILTER must be one of auto, on, off; got "yes"$/],
    [
      { OZ0_SESSION_LISTEN_PORTS: "none" },
      /^OZ0_SESSION_LISTEN_PORTS must be one of auto, ephemeral, any; got "none"$/,
    ],
    [
      { OZ0_SANDBOX_UID_BASE: "0" },
      /^OZ0_SANDBOX_UID_BASE must be a whole number of uid \(above 0: uid 0 is root\), from 1 to 4294967294; got "0"$/,
    ],
    [{ OZ0_SANDBOX_UID_COUNT: "0" }, /^OZ0_SANDBOX_UID_COUNT must be a whole number of uids, at least 1; got "0"$/],
    [
      { OZ0_SANDBOX_UID_BASE: "4294967000", OZ0_SANDBOX_UID_COUNT: "1000" },
      /^OZ0_SANDBOX_UID_COUNT must be a number of uids that keeps OZ0_SANDBOX_UID_BASE \(4294967000\) \+ OZ0_SANDBOX_UID_COUNT below 4294967295; got "1000"$/,
    ],
    [
      { OZ0_SANDBOX_HIDDEN_PATHS: "/etc:keys" },
      /^OZ0_SANDBOX_HIDDEN_PATHS must be `:`-separated absolute paths; got "\/etc:keys"$/,
    ],
    [
      { OZ0_CANCEL_GRACE_MS: "10s" },
      /^OZ0_CANCEL_GRACE_MS must be a whole number of milliseconds, at least 0; got "10s"$/,
    ],
    [{ OZ0_MAX_LINE_BYTES: "1MiB" }, /^OZ0_MAX_LINE_BYTES must be a whole number of bytes, at least 0; got "1MiB"$/],
    [
      { OZ0_ORCHESTRATOR_URL: "orchestrator:7700" },
      /^OZ0_ORCHESTRATOR_URL must be comma-separated http:\/\/ or https:\/\/ URLs/,
    ],
    [{ OZ0_HEARTBEAT_MS: "0" }, /^OZ0_HEARTBEAT_MS must be a whole number of milliseconds, at least 1; got "0"$/],
  ];
  for (const [env, message] of cases)
    assert.throws(() => configFromEnv(env), { name: "EnvConfigError", message }, JSON.stringify(env));
  // An empty or relative entry names the working directory, the job's repository, which the model writes.
  for (const value of ["/usr/bin::/bin", ":/usr/bin", "/usr/bin:", "bin:/usr/bin"])
    assert.throws(() => configFromEnv({ OZ0_SESSION_PATH: value }), {
      name: "EnvConfigError",
      message: `OZ0_SESSION_PATH must be \`:\`-separated absolute folders (no empty entry, which like a relative one names the working directory, the job's repository); got ${JSON.stringify(value)}`,
    });
  assert.throws(
    () =>
      heartbeatSidecarConfigFromEnv({
        OZ0_ORCHESTRATOR_URL: "http://orchestrator:7700",
        OZ0_NODE_TOKEN: "a-node-token-long-enough",
        OZ0_HEALTH_PORT: "livez",
      }),
    { name: "EnvConfigError", message: /^OZ0_HEALTH_PORT must be a port number/ },
  );
});

for (const [program, main] of [
  ["oz0-sandbox", "main.js"],
  ["oz0-sandbox-heartbeat", "heartbeat-main.js"],
] as const) {
  void test(`${program} with a malformed variable stops at start with exit code 2 and says what to set`, () => {
    const result = spawnSync(process.execPath, [path.join(dist, main)], {
      env: {
        PATH: process.env.PATH,
        OZ0_ORCHESTRATOR_URL: "http://127.0.0.1:1",
        OZ0_NODE_TOKEN: "a-node-token-long-enough",
        OZ0_HEARTBEAT_MS: "often",
      },
      encoding: "utf8",
      timeout: 60_000,
    });
    assert.equal(result.status, 2, result.stderr);
    assert.equal(
      result.stderr,
      `${program}: OZ0_HEARTBEAT_MS must be a whole number of milliseconds, at least 1; got "often"\n`,
    );
  });
}
