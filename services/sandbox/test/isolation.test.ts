// What a session can see and reach, in every isolation mode.
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { HealthCheckResponse_ServingStatus, Health } from "@oz0/proto/grpc/health/v1/health_pb";
import { IsolationMode, SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { findSetpriv } from "../src/parent-death-launcher.js";
import { sessionSyscallFilter } from "../src/syscall-filter.js";
import { chooseListenPorts, servicePortsInEphemeralRange } from "../src/session-listen-ports.js";
import { detectListenPortsDomain, detectWriteRuleDomain } from "../src/landlock-launcher.js";
import { chooseSessionWrites } from "../src/session-write-rule.js";
import {
  FIXTURES,
  isText,
  recordingLogger,
  runToEnd,
  scenarioStart,
  SessionStream,
  startTestSandbox,
  type TestSandbox,
} from "./sandbox-test-kit.js";
import { testCredentials } from "@oz0/serving/testing";

// Looks like a provider key; planted where a careless sandbox would leak it.
const NEEDLE = `oz0planted${process.pid}x`;
const PLANTED_KEY = `sk-ant-api03-${NEEDLE}`;

// The user mode needs root (and setpriv): elsewhere there is nothing to run it with.
const userModeSkip =
  process.getuid?.() !== 0
    ? "the user isolation mode needs root"
    : findSetpriv() === undefined
      ? "the user isolation mode needs setpriv"
      : false;
/**
 * A port below the kernel's ephemeral range that a server listened on and let go: a service of the node, stopped for
 * a restart (the services' ports are below the range: the defaults, and those `oz0 dev` chooses).
 */
async function stoppedServicePort(): Promise<number> {
  const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
  for (;;) {
    const port = 10_000 + Math.floor(Math.random() * (low - 10_001));
    const server = net.createServer();
    const listening = await new Promise<boolean>((resolve) => {
      server.once("error", () => resolve(false));
      server.listen(port, "127.0.0.1", () => resolve(true));
    });
    if (!listening) continue;
    await new Promise((resolve) => server.close(resolve));
    return port;
  }
}

/**
 * [number, ...arguments] of the probe's system calls: CLONE_NEWUSER and CLONE_FILES for unshare, CLONE_THREAD alone for clone; AF_INET, SOCK_STREAM and IPPROTO_MPTCP
 * (alone, and with bits above the int the kernel reads), AF_SMC, and IPPROTO_SMC for socket; for System V IPC
 * IPC_PRIVATE, a size or a count, IPC_CREAT | 0600 (0o1600).
 */
const SYSCALL_NUMBERS: Partial<Record<NodeJS.Architecture, Record<string, number[]>>> = {
  x64: {
    unshareUser: [272, 0x10000000],
    unshareFiles: [272, 0x400],
    cloneThreadOwnFiles: [56, 0x10000],
    socketMptcp: [41, 2, 1, 262],
    socketMptcpHighBits: [41, 2, 1, 0x100000106],
    socketSmcFamily: [41, 43, 1, 0],
    socketSmcProtocol: [41, 2, 1, 256],
    setns: [308, 0],
    keyctl: [250, 0],
    bpf: [321, 0],
    perfEventOpen: [298, 0],
    userfaultfd: [323, 0],
    ioUringSetup: [425, 1],
    clone3: [435, 0],
    shmgetAtLimit: [29, 0, 65536, 0o1600],
    shmgetAboveLimit: [29, 0, 65537, 0o1600],
    semgetAtLimit: [64, 0, 32, 0o1600],
    semgetAboveLimit: [64, 0, 33, 0o1600],
    msgget: [68, 0, 0o1600],
    mqOpen: [240, 0, 0o100],
    setxattr: [188, 0, 0, 0, 0, 0],
    fremovexattr: [199, 0, 0],
    setxattrat: [463, 0, 0, 0, 0, 0],
  },
  arm64: {
    unshareUser: [97, 0x10000000],
    unshareFiles: [97, 0x400],
    cloneThreadOwnFiles: [220, 0x10000],
    socketMptcp: [198, 2, 1, 262],
    socketMptcpHighBits: [198, 2, 1, 0x100000106],
    socketSmcFamily: [198, 43, 1, 0],
    socketSmcProtocol: [198, 2, 1, 256],
    setns: [268, 0],
    keyctl: [219, 0],
    bpf: [280, 0],
    perfEventOpen: [241, 0],
    userfaultfd: [282, 0],
    ioUringSetup: [425, 1],
    clone3: [435, 0],
    shmgetAtLimit: [194, 0, 65536, 0o1600],
    shmgetAboveLimit: [194, 0, 65537, 0o1600],
    semgetAtLimit: [190, 0, 32, 0o1600],
    semgetAboveLimit: [190, 0, 33, 0o1600],
    msgget: [186, 0, 0o1600],
    mqOpen: [180, 0, 0o100],
    setxattr: [5, 0, 0, 0, 0, 0],
    fremovexattr: [16, 0, 0],
  },
};

const STARTED_ISOLATION = { none: IsolationMode.NONE, user: IsolationMode.USER, bwrap: IsolationMode.BWRAP } as const;

for (const mode of ["none", "user", "bwrap"] as const) {
  void describe(`isolation ${mode}`, { skip: mode === "user" ? userModeSkip : false }, () => {
    let t: TestSandbox;
    let secretDir: string;
    let secretFile: string;
    const saved = {
      ANTHROPIC_API_KEY: process.env.ANTHROPIC_API_KEY,
      OZ0_INTERNAL_TOKEN: process.env.OZ0_INTERNAL_TOKEN,
    };
    before(async () => {
      // In the sandbox service's own environment and in a file outside every allowed path.
      process.env.ANTHROPIC_API_KEY = PLANTED_KEY;
      process.env.OZ0_INTERNAL_TOKEN = PLANTED_KEY;
      secretDir = mkdtempSync(path.join(os.tmpdir(), "oz0-secret-"));
      secretFile = path.join(secretDir, "provider-key.txt");
      writeFileSync(secretFile, PLANTED_KEY);
      t = await startTestSandbox({ isolation: mode });
    });
    after(async () => {
      await t.close();
      rmSync(secretDir, { recursive: true, force: true });
      // Only there if isolation failed to make them read-only (and the test said so).
      for (const leftover of ["/usr/oz0-write-test", path.join(FIXTURES, "oz0-write-test")])
        rmSync(leftover, { force: true });
      for (const [name, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    });

    void it("reports the isolation mode in started and in health", async () => {
      assert.equal(t.sandbox.isolation, mode);
      const health = createClient(
        Health,
        createGrpcTransport({ baseUrl: t.sandbox.url, interceptors: [testCredentials.caller] }),
      );
      const status = await health.check({ service: "isolation" });
      assert.equal(
        status.status,
        mode === "bwrap" ? HealthCheckResponse_ServingStatus.SERVING : HealthCheckResponse_ServingStatus.NOT_SERVING,
      );
      const stream = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
      const started = stream.received[0]?.message;
      assert(started?.case === "started");
      assert.equal(started.value.isolation, STARTED_ISOLATION[mode]);
    });

    void it("gives the harness only the allowlisted environment, without the planted key", async () => {
      const stream = await runToEnd(
        t.client,
        scenarioStart(
          {
            mode: "env",
            needle: mode === "bwrap" ? NEEDLE : undefined,
            read: [secretFile],
            write:
              mode === "bwrap"
                ? ["hello.txt", "/usr/oz0-write-test", path.join(FIXTURES, "oz0-write-test")]
                : ["hello.txt"],
          },
          {},
          {
            llm: {
              anthropicBaseUrl: "http://127.0.0.1:9/anthropic",
              token: "session-token-1",
              headers: { "Oz0-Job": "job-1", "Oz0-Agent": "coder" },
            },
            trace: { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" },
          },
        ),
      );
      assert.equal(stream.exited().status, SessionStatus.COMPLETED, stream.exited().errorMessage);
      const dump = JSON.parse(stream.texts()[0] ?? "{}") as {
        env: Record<string, string>;
        search: { hits: string[]; scanned: number };
        reads: Record<string, string>;
        writes: Record<string, string>;
        capEff: string;
        capBnd: string;
        uids: number[];
        oomScoreAdj: string;
        oomLowered: string;
        nice: number;
        niceLowered: string;
      };
      assert.equal(dump.writes["hello.txt"], "ok", "the working directory is writable");
      // Under a uid of its own where the sandbox is root (the user mode; bubblewrap too): never uid 0 of the node.
      const range = t.sandbox.sessionUids;
      assert.equal(range !== undefined, process.getuid?.() === 0 && mode !== "none");
      if (range !== undefined) {
        const [uid] = dump.uids;
        assert(uid !== undefined && uid >= range.base && uid < range.base + range.count, `uids ${dump.uids.join(" ")}`);
        assert.deepEqual(dump.uids, [uid, uid, uid, uid]);
        assert.equal(dump.capBnd, "0000000000000000", "no capability can be gained back");
      }
      // The OOM killer takes a session's processes first, never the sandbox; the scheduler gives the sandbox ten
      // times a session process's weight. Only a root sandbox's `none` session holds CAP_SYS_NICE, to undo it.
      assert.equal(dump.oomScoreAdj, "1000");
      assert.equal(dump.nice, 10);
      assert.equal(dump.niceLowered, mode === "none" && process.getuid?.() === 0 ? "ok" : "ERROR EACCES");
      assert.doesNotMatch(JSON.stringify(dump.env), new RegExp(NEEDLE));
      assert.equal(dump.env.OZ0_INTERNAL_TOKEN, undefined);
      assert.equal(dump.env.ANTHROPIC_API_KEY, "session-token-1");
      assert.equal(dump.env.ANTHROPIC_CUSTOM_HEADERS, "Oz0-Agent: coder\nOz0-Job: job-1");
      assert.equal(dump.env.TRACEPARENT, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
      assert.equal(dump.env.DISABLE_TELEMETRY, "1");
      assert.equal(dump.env.CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, "1");
      assert.match(dump.env.HOME ?? "", /state\/home$/);
      const allowed = new Set(Object.keys(dump.env).filter((name) => !/^(PWD|SHLVL|_|OLDPWD)$/.test(name)));
      for (const name of allowed)
        assert.match(
          name,
          /^(PATH|HOME|USER|LANG|LC_ALL|TMPDIR|XDG_\w+|CLAUDE_\w+|OZ0_\w+|ANTHROPIC_\w+|OPENAI_\w+|TRACEPARENT|TRACESTATE|DISABLE_\w+|DO_NOT_TRACK|NO_UPDATE_NOTIFIER|NPM_CONFIG_UPDATE_NOTIFIER|GEMINI_TELEMETRY_ENABLED|OTEL_SDK_DISABLED|NEXT_TELEMETRY_DISABLED|DOTNET_CLI_TELEMETRY_OPTOUT|HOMEBREW_NO_ANALYTICS|CHECKPOINT_DISABLE|PIP_DISABLE_PIP_VERSION_CHECK)$/,
        );
      if (mode === "bwrap") {
        // Nothing it can read holds the key: not the file, not any process's environment.
        assert.equal(dump.reads[secretFile], "ERROR ENOENT");
        assert.deepEqual(dump.search.hits, []);
        assert(dump.search.scanned > 100, `the search looked at ${dump.search.scanned} files`);
        assert.equal(dump.env.ANTHROPIC_BASE_URL, "http://127.0.0.1:41000/anthropic");
        // System and plugin directories are read-only; no capability is left.
        assert.equal(dump.writes["/usr/oz0-write-test"], "ERROR EROFS");
        assert.equal(dump.writes[path.join(FIXTURES, "oz0-write-test")], "ERROR EROFS");
        assert.equal(dump.capEff, "0000000000000000");
      } else {
        assert.equal(dump.env.ANTHROPIC_BASE_URL, "http://127.0.0.1:9/anthropic");
        if (mode === "user") {
          // Under a uid of its own, a file private to the sandbox's user is out of reach, and no capability is left.
          assert.equal(dump.reads[secretFile], "ERROR EACCES");
          assert.equal(dump.capEff, "0000000000000000");
          // The score cannot be lowered: /proc is not among the places its domain lets it write (session-write-rule.ts;
          // without that, only a score written with CAP_SYS_RESOURCE would be a floor).
          assert.equal(dump.oomLowered, "ERROR EACCES");
        }
      }
    });

    void it("keeps the session's token out of every process's command line, which any user of the node reads", async () => {
      // bwrap was handed the environment as --setenv arguments: /proc/<pid>/cmdline is world-readable, so a
      // user-mode session of another sandbox on the node took a bubblewrap session's token from it (attacker review).
      const token = `session-token-argv-${process.pid}-${Date.now()}`;
      const stream = new SessionStream(t.client, {
        message: {
          case: "start",
          value: scenarioStart(
            { mode: "wait" },
            {},
            { llm: { anthropicBaseUrl: "http://127.0.0.1:9/anthropic", token, headers: { "Oz0-Job": "job-argv" } } },
          ),
        },
      });
      await stream.waitFor(isText("ready"), "ready");
      const holders: string[] = [];
      for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
        let cmdline = "";
        try {
          cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
        } catch {
          continue; // gone meanwhile
        }
        if (cmdline.includes(token) || cmdline.includes("job-argv")) holders.push(`${pid}: ${cmdline.split("\0")[0]}`);
      }
      stream.send({ message: { case: "cancel", value: {} } });
      await stream.finished;
      // Its directories go after its end: the next test counts them.
      for (let waited = 0; readdirSync(path.join(t.root, "sessions")).length > 0 && waited < 10_000; waited += 50)
        await new Promise((resolve) => setTimeout(resolve, 50));
      assert.deepEqual(holders, []);
    });

    void it("reports a harness command that does not exist as spawn_failed", async () => {
      const stream = await runToEnd(t.client, scenarioStart({}, { command: ["no-such-harness-command"] }));
      assert.equal(stream.exited().errorCode, "spawn_failed", stream.exited().errorMessage);
      assert.equal(
        stream.received.some((m) => m.message.case === "started"),
        false,
      );
    });

    void it("leaves no directory behind when a start fails while copying its attachments", async () => {
      const stream = await runToEnd(
        t.client,
        scenarioStart(
          { mode: "complete" },
          { attachments: [{ path: "a.txt", source: { case: "nodePath", value: "/no/such/attachment" } }] },
        ),
      );
      assert.match(String(stream.error), /start\.attachments\[0\]\.node_path/);
      assert.deepEqual(readdirSync(path.join(t.root, "sessions")), []);
      assert.deepEqual(readdirSync(path.join(t.root, "internal")), []);
    });

    for (const withLlm of [false, true]) {
      void it(`lets a harness that traps SIGTERM write its cancelled result within the grace${withLlm ? " (with the LLM forwarder in front)" : ""}`, async () => {
        const llm = withLlm ? { anthropicBaseUrl: "http://127.0.0.1:9", token: "t" } : undefined;
        const stream = new SessionStream(t.client, {
          message: { case: "start", value: scenarioStart({ mode: "slow-cancel", delayMs: 700 }, {}, { llm }) },
        });
        await stream.waitFor(isText("ready"), "ready");
        stream.send({ message: { case: "cancel", value: { reason: "user pressed stop" } } });
        await stream.finished;
        const exited = stream.exited();
        assert.equal(exited.status, SessionStatus.CANCELLED);
        assert.equal(exited.result?.stopReason, StopReason.CANCELLED);
        assert.equal(exited.result?.text, "cancelled after cleanup");
        assert.equal(exited.errorCode, "");
        assert.equal(exited.cancelReason, "user pressed stop");
      });
    }

    if (mode === "bwrap") {
      void it("cannot connect to a loopback port of the node", async () => {
        const server = net.createServer((socket) => {
          socket.on("error", () => {}); // the harness hangs up at once: a reset is expected
          socket.end("hello");
        });
        await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
        const port = (server.address() as net.AddressInfo).port;
        try {
          const stream = await runToEnd(t.client, scenarioStart({ mode: "connect", port }));
          assert.equal(stream.exited().result?.text, "error ECONNREFUSED");
        } finally {
          server.close();
        }
      });

      void it("reaches the LLM endpoint, and only it, through the forwarder", async () => {
        const seen: { url: string; key: string }[] = [];
        const llm = http.createServer((req, res) => {
          seen.push({ url: req.url ?? "", key: String(req.headers["x-api-key"]) });
          res.end("pong");
        });
        await new Promise<void>((resolve) => llm.listen(0, "127.0.0.1", resolve));
        const port = (llm.address() as net.AddressInfo).port;
        try {
          const stream = await runToEnd(
            t.client,
            scenarioStart(
              { mode: "llm" },
              {},
              { llm: { anthropicBaseUrl: `http://127.0.0.1:${port}/anthropic`, token: "tok-2" } },
            ),
          );
          assert.equal(stream.exited().result?.text, "200 pong");
          assert.deepEqual(seen, [{ url: "/anthropic/v1/messages", key: "tok-2" }]);
        } finally {
          llm.close();
        }
      });

      void it("reaches the LLM endpoint from a sandbox root too deep for a Unix socket's path", async (ctx) => {
        const outer = mkdtempSync(path.join(os.tmpdir(), "oz0-deep-root-"));
        ctx.after(() => rmSync(outer, { recursive: true, force: true }));
        // The forwarder's socket, <root>/internal/<session>/run/llm-0.sock, is past the 107 bytes Linux binds.
        const deep = await startTestSandbox({ isolation: "bwrap", root: path.join(outer, "d".repeat(80)) });
        ctx.after(() => deep.close());
        const llm = http.createServer((_req, res) => res.end("pong"));
        await new Promise<void>((resolve) => llm.listen(0, "127.0.0.1", resolve));
        ctx.after(() => llm.close());
        const port = (llm.address() as net.AddressInfo).port;
        const stream = await runToEnd(
          deep.client,
          scenarioStart(
            { mode: "llm" },
            {},
            { llm: { anthropicBaseUrl: `http://127.0.0.1:${port}/anthropic`, token: "tok-3" } },
          ),
        );
        assert.equal(stream.exited().result?.text, "200 pong", String(stream.error));
      });

      void it("cannot write or mark the folder of its forwarder's sockets", async () => {
        const stream = await runToEnd(
          t.client,
          scenarioStart(
            { mode: "probe", list: ["/run/oz0"], write: ["/run/oz0/planted"] },
            {},
            { llm: { anthropicBaseUrl: "http://127.0.0.1:9/anthropic", token: "t" } },
          ),
        );
        const exited = stream.exited();
        assert.equal(exited.status, SessionStatus.COMPLETED, `${exited.errorMessage} ${exited.stderrTail}`);
        const report = JSON.parse(stream.texts()[0] ?? "{}") as {
          lists: Record<string, unknown>;
          writes: Record<string, string>;
        };
        // Under a uid of its own the folder is passable, not listable (root's, 0711); as the sandbox's user, its own.
        assert.deepEqual(
          report.lists["/run/oz0"],
          t.sandbox.sessionUids !== undefined ? "ERROR EACCES" : ["llm-0.sock"],
        );
        assert.deepEqual(report.writes, { "/run/oz0/planted": "ERROR EROFS" });
      });
    } else {
      void it(`still connects to loopback ${mode === "user" ? "under a uid of its own (no network namespace)" : "without isolation (the mode isolates nothing)"}`, async () => {
        const server = net.createServer((socket) => {
          socket.on("error", () => {}); // the harness hangs up at once: a reset is expected
          socket.end("hello");
        });
        await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
        const port = (server.address() as net.AddressInfo).port;
        try {
          const stream = await runToEnd(t.client, scenarioStart({ mode: "connect", port }));
          assert.equal(stream.exited().result?.text, "connected");
        } finally {
          server.close();
        }
      });
    }

    // Sharing the node's network, a user-mode session could listen on a service's port while the service is down
    // (a restart) and be sent its callers' credentials. It may listen only where the kernel picks the port.
    if (mode === "user")
      void it("cannot listen on a stopped service's port, only on a port the kernel picks (Landlock)", async () => {
        const found = detectListenPortsDomain();
        assert.ok(found.landlock, `this kernel should have Landlock's network rules: ${found.reason}`);
        const stopped = await stoppedServicePort();
        const stream = await runToEnd(
          t.client,
          scenarioStart({
            mode: "probe",
            listen: [
              { host: "127.0.0.1", port: stopped },
              { host: "0.0.0.0", port: stopped },
              { host: "::1", port: stopped },
              { host: "::", port: stopped + 1 },
              { host: "127.0.0.1", port: 0 },
              { host: "::1", port: 0 },
            ],
          }),
        );
        assert.equal(stream.exited().status, SessionStatus.COMPLETED, stream.exited().errorMessage);
        const report = JSON.parse(stream.texts()[0] ?? "{}") as { listens: Record<string, string> };
        assert.deepEqual(report.listens, {
          [`127.0.0.1 ${stopped}`]: "ERROR EACCES",
          [`0.0.0.0 ${stopped}`]: "ERROR EACCES",
          [`::1 ${stopped}`]: "ERROR EACCES",
          [`:: ${stopped + 1}`]: "ERROR EACCES",
          "127.0.0.1 0": "listening",
          "::1 0": "listening",
        });
      });

    // A user-mode session shares the node's file system: a world-writable folder or file outside the shared places the
    // sandbox empties would keep what it wrote there for the uid's next session (uids are reused). It writes only in
    // its own folders, the shared places and the devices in /dev.
    if (mode === "user")
      void it("writes only in its own folders, the node's shared places and /dev's devices (Landlock)", async () => {
        // Outside /tmp and the other shared places, as a node's stray 1777 folder and 0666 file would be.
        const strayDir = mkdtempSync("/var/lib/oz0-world-writable-");
        const strayFile = path.join(strayDir, "open-to-all.log");
        writeFileSync(strayFile, "");
        chmodSync(strayFile, 0o666);
        chmodSync(strayDir, 0o1777);
        // A regular file in /dev, as Kubernetes' /dev/termination-log (0666): not a device, and it outlives the session.
        const devFile = `/dev/oz0-termination-log-${process.pid}`;
        writeFileSync(devFile, "");
        chmodSync(devFile, 0o666);
        const shared = [`/tmp/oz0-probe-${process.pid}`, `/dev/shm/oz0-probe-${process.pid}`];
        try {
          const stream = await runToEnd(
            t.client,
            scenarioStart({
              mode: "probe",
              write: [path.join(strayDir, "left-behind"), strayFile, devFile, ...shared, "/dev/null"],
              moves: [["made-here", "sub/moved-here"]],
            }),
          );
          assert.equal(stream.exited().status, SessionStatus.COMPLETED, stream.exited().errorMessage);
          const report = JSON.parse(stream.texts()[0] ?? "{}") as {
            writes: Record<string, string>;
            moves: Record<string, string>;
            privateFiles: Record<string, string>;
          };
          assert.deepEqual(report.writes, {
            [path.join(strayDir, "left-behind")]: "ERROR EACCES",
            [strayFile]: "ERROR EACCES",
            [devFile]: "ERROR EACCES",
            [shared[0]!]: "ok",
            [shared[1]!]: "ok",
            "/dev/null": "ok",
          });
          // Its own folders: written, and a file moved between two folders of its working directory (git does so).
          assert.deepEqual(report.privateFiles, { home: "ok", tmpdir: "ok" });
          assert.deepEqual(report.moves, { "made-here sub/moved-here": "ok" });
          assert.deepEqual(readdirSync(strayDir), ["open-to-all.log"]);
          assert.equal(readFileSync(strayFile, "utf8"), "");
          assert.equal(readFileSync(devFile, "utf8"), "");
        } finally {
          rmSync(strayDir, { recursive: true, force: true });
          rmSync(devFile, { force: true });
          for (const file of shared) rmSync(file, { force: true });
        }
      });

    // A sysctl's file is writable by its owner, uid 0 of the node: a session running as that uid (bubblewrap started
    // by a root sandbox) could otherwise set kernel.core_pattern, a program the kernel runs as root at the next crash.
    // The probe writes "x", which no integer setting takes (EINVAL), should this ever fail open.
    if (mode !== "none")
      void it("cannot change the kernel's settings (sysctls)", async () => {
        const setting = "/proc/sys/kernel/printk_ratelimit";
        const stream = await runToEnd(t.client, scenarioStart({ mode: "probe", write: [setting] }));
        assert.equal(stream.exited().status, SessionStatus.COMPLETED, stream.exited().errorMessage);
        const report = JSON.parse(stream.texts()[0] ?? "{}") as { writes: Record<string, string> };
        assert.equal(report.writes[setting], mode === "bwrap" ? "ERROR EROFS" : "ERROR EACCES");
      });

    // The kernel's surface a session needs none of, refused by the seccomp filter (syscall-filter.ts): a user
    // namespace of its own (where it would hold every capability over what it makes), the keyrings, eBPF,
    // userfaultfd, io_uring, System V message queues and shared memory segments or semaphore sets past a small size;
    // clone3 answers ENOSYS, on which libraries fall back to clone, which is checked.
    // Unfiltered (isolation none), this kernel lets the same uid make a user namespace and answers the others
    // otherwise (EFAULT and the like): the probe's arguments are ones only the filter refuses outright.
    if (mode !== "none")
      void it("cannot make a user namespace, nor reach the keyrings, eBPF, userfaultfd, io_uring, large System V IPC, message queues or extended attributes (seccomp)", async () => {
        const numbers = SYSCALL_NUMBERS[process.arch];
        assert.ok(numbers, `no system call numbers for ${process.arch} in this test`);
        const stream = await runToEnd(t.client, scenarioStart({ mode: "probe", syscalls: numbers }));
        assert.equal(stream.exited().status, SessionStatus.COMPLETED, stream.exited().errorMessage);
        const report = JSON.parse(stream.texts()[0] ?? "{}") as { syscalls: Record<string, string> };
        assert.deepEqual(report.syscalls, {
          unshareUser: "EPERM",
          // A descriptor table of a thread's own, which the open files guard would not count. CLONE_THREAD
          // without CLONE_SIGHAND is EINVAL to the kernel, so the probe makes no thread should the filter let it by.
          unshareFiles: "EPERM",
          cloneThreadOwnFiles: "EPERM",
          // Multipath TCP, whose binds Landlock's port rule does not check (the user mode's listening ports).
          socketMptcp: "EPROTONOSUPPORT",
          socketMptcpHighBits: "EPROTONOSUPPORT",
          // SMC, unchecked by Landlock too; EPERM, where a kernel without it answers EAFNOSUPPORT or EPROTONOSUPPORT.
          socketSmcFamily: "EPERM",
          socketSmcProtocol: "EPERM",
          setns: "EPERM",
          keyctl: "EPERM",
          bpf: "EPERM",
          perfEventOpen: "EPERM",
          userfaultfd: "EPERM",
          ioUringSetup: "EPERM",
          clone3: "ENOSYS",
          // System V IPC within what a program needs to coordinate; past it, memory no process is charged for.
          shmgetAtLimit: "ok",
          shmgetAboveLimit: "EINVAL",
          semgetAtLimit: "ok",
          semgetAboveLimit: "EINVAL",
          msgget: "EPERM",
          // POSIX message queues live in the IPC namespace, out of every sweep's reach (the user mode's the node's).
          mqOpen: "ENOSYS",
          // Extended attributes, which Landlock's write rule does not cover: as a file system without them (ENOTSUP
          // is EOPNOTSUPP's other name). Unfiltered, the null path is EFAULT. Linux 6.13's setxattrat is refused in
          // the x86_64 program alone (syscall-filter/generate.py says why).
          setxattr: "ENOTSUP",
          fremovexattr: "ENOTSUP",
          ...(process.arch === "x64" ? { setxattrat: "ENOTSUP" } : {}),
        });
      });

    // The sandbox (this process) holds the orchestrator's credential as it arrived on the last RunSession. With
    // isolation none the harness runs as its user, and where the kernel lets a process read another's memory
    // (here: no Yama, and as root) only a Landlock domain of the harness's own keeps it out. Landlock guards
    // memory (ptrace's attach checks), not the environment: with none, /proc/<pid>/environ stays readable, and
    // the sandbox's README says what it holds.
    void it(`cannot read the sandbox process's memory${mode === "none" ? "" : " or environment"}`, async () => {
      const sandbox = String(process.pid);
      const stream = await runToEnd(
        t.client,
        scenarioStart({ mode: "probe", read: [`/proc/${sandbox}/environ`], readMemory: [sandbox] }),
      );
      assert.equal(stream.exited().status, SessionStatus.COMPLETED, stream.exited().errorMessage);
      const report = JSON.parse(stream.texts()[0] ?? "{}") as {
        reads: Record<string, string>;
        memories: Record<string, string>;
      };
      const refused = /^ERROR (EACCES|EPERM|ENOENT)$/;
      assert.match(report.memories[sandbox] ?? "", refused, JSON.stringify(report.memories));
      if (mode !== "none") assert.match(report.reads[`/proc/${sandbox}/environ`] ?? "", refused);
    });
  });
}

void describe("isolation setting", () => {
  // The embedded stack takes the last start-up line with an `isolation` field as the mode (a second line once made a
  // root sandbox's bubblewrap read as `user`, and an unprivileged one's as `none`, with oz0's "WITHOUT isolation").
  void it("OZ0_SESSION_SYSCALL_FILTER=on refuses to start where sessions would run without the filter", async () => {
    const { startSandbox } = await import("../src/index.js");
    const root = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-filter-on-"));
    try {
      await assert.rejects(
        startSandbox({
          auth: testCredentials.settingsFor("sandbox"),
          port: 0,
          root,
          isolation: "none",
          syscallFilter: "on",
          logger: recordingLogger().logger,
        }),
        /^Error: OZ0_SESSION_SYSCALL_FILTER=on, but sessions would run without the seccomp filter: sessions run without OS isolation; /,
      );
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  void it("OZ0_SESSION_LISTEN_PORTS=ephemeral refuses to start where sessions could listen on any port", async () => {
    const detect = (): ReturnType<typeof detectListenPortsDomain> => ({ reason: "the kernel's Landlock is ABI 3" });
    const common = { mode: "user", syscallFilter: true, detect } as const;
    assert.throws(
      () => chooseListenPorts({ ...common, setting: "ephemeral" }),
      /^Error: OZ0_SESSION_LISTEN_PORTS=ephemeral, but sessions could listen on any port: the kernel's Landlock is ABI 3; /,
    );
    assert.deepEqual(chooseListenPorts({ ...common, setting: "auto" }), {
      fields: { sessionListenPorts: "any", sessionListenPortsReason: "the kernel's Landlock is ABI 3" },
    });
    // Landlock without the seccomp filter keeps TCP sockets off the ports, but not Multipath TCP ones.
    const landlock = { perlPath: "/usr/bin/perl", syscalls: { prctl: 157, close: 3, capset: 126 } };
    const works = (): ReturnType<typeof detectListenPortsDomain> => ({ landlock });
    assert.deepEqual(chooseListenPorts({ ...common, setting: "auto", detect: works }), {
      rule: landlock,
      fields: { sessionListenPorts: "ephemeral" },
    });
    assert.deepEqual(chooseListenPorts({ ...common, setting: "auto", detect: works, syscallFilter: false }), {
      rule: landlock,
      fields: {
        sessionListenPorts: "any",
        sessionListenPortsReason:
          "the seccomp filter is off, and Multipath TCP sockets, which Landlock does not check, listen where they like",
      },
    });
    assert.throws(
      () => chooseListenPorts({ ...common, setting: "ephemeral", detect: works, syscallFilter: false }),
      /^Error: OZ0_SESSION_LISTEN_PORTS=ephemeral, but sessions could listen on any port: the seccomp filter is off/,
    );
    assert.throws(
      () => chooseListenPorts({ ...common, setting: "ephemeral", mode: "none" }),
      /^Error: OZ0_SESSION_LISTEN_PORTS=ephemeral, but sessions run without OS isolation/,
    );
    // A network of its own: nothing to choose.
    assert.deepEqual(chooseListenPorts({ ...common, setting: "ephemeral", mode: "bwrap" }), {});
  });

  void it("walls a user-mode session's writes where the kernel can, and says why not where it cannot", () => {
    const landlock = { perlPath: "/usr/bin/perl", syscalls: { prctl: 157, close: 3, capset: 126 } };
    const works = (): ReturnType<typeof detectWriteRuleDomain> => ({ landlock });
    const old = (): ReturnType<typeof detectWriteRuleDomain> => ({ reason: "the kernel's Landlock is ABI 1" });
    assert.deepEqual(chooseSessionWrites({ mode: "user", detect: works }), {
      rule: landlock,
      fields: { sessionWrites: "confined" },
    });
    assert.deepEqual(chooseSessionWrites({ mode: "user", detect: old }), {
      fields: { sessionWrites: "anywhere", sessionWritesReason: "the kernel's Landlock is ABI 1" },
    });
    // Bubblewrap binds only the session's folders writable; the none mode writes as the sandbox's user.
    assert.deepEqual(chooseSessionWrites({ mode: "bwrap", detect: works }), {});
    assert.deepEqual(chooseSessionWrites({ mode: "none", detect: works }), {});
    // This kernel can: what the user mode's tests above rely on.
    assert.equal(detectWriteRuleDomain().reason, undefined);
  });

  void it("names the service ports on loopback a user-mode session could be handed", () => {
    const peers = [
      "http://127.0.0.1:7703",
      "http://127.0.0.1:45000/",
      "http://[::1]:50000",
      "http://localhost:40000",
      "http://events.oz0.svc:45000",
      undefined,
    ];
    assert.deepEqual(servicePortsInEphemeralRange({ own: 7701, peers, rangeStart: 32_768 }), [
      { service: "http://127.0.0.1:45000", port: 45_000 },
      { service: "http://[::1]:50000", port: 50_000 },
      { service: "http://localhost:40000", port: 40_000 },
    ]);
    assert.deepEqual(servicePortsInEphemeralRange({ own: 40_001, peers: [], rangeStart: 32_768 }), [
      { service: "sandbox", port: 40_001 },
    ]);
  });

  // The LLM proxy's address comes with each session: a user-mode session could be handed its port too.
  void it(
    "warns once of an LLM proxy on loopback whose port lies in the ephemeral range, when sessions name it",
    { skip: userModeSkip },
    async () => {
      const { logger, lines } = recordingLogger();
      const t = await startTestSandbox({ isolation: "user", logger });
      try {
        const llm = { openaiBaseUrl: "http://127.0.0.1:45000/v1", anthropicBaseUrl: "http://127.0.0.1:7703" };
        for (let i = 0; i < 2; i++) {
          const stream = await runToEnd(t.client, scenarioStart({ mode: "complete" }, {}, { llm }));
          assert.equal(stream.exited().status, SessionStatus.COMPLETED, stream.exited().errorMessage);
        }
        const warned = lines.filter(
          (line) => line.level === "warn" && /LLM proxy's port lies in the kernel's ephemeral range/.test(line.msg),
        );
        assert.deepEqual(
          warned.map((line) => line.fields.portsInEphemeralRange),
          [[{ service: "http://127.0.0.1:45000", port: 45_000 }]],
          "once, naming the port in the range and not the one below it",
        );
      } finally {
        await t.close();
      }
    },
  );

  void it("names the mode in one start-up line, with the seccomp filter its sessions run under", async () => {
    const { startSandbox } = await import("../src/index.js");
    const program = sessionSyscallFilter().program;
    assert.ok(program !== undefined, `no filter program for ${process.arch}`);
    const cases: {
      isolation: "bwrap" | "user" | "none";
      setprivPath?: string;
      syscallFilter?: "on" | "off";
      listenPorts?: "any";
    }[] = [
      { isolation: "bwrap" },
      { isolation: "bwrap", syscallFilter: "off" },
      { isolation: "bwrap", syscallFilter: "on" },
      // Sessions as the sandbox's own user (no setpriv to drop with): a warning besides, naming no mode.
      { isolation: "bwrap", setprivPath: "/no/such/setpriv" },
      ...(userModeSkip === false
        ? [{ isolation: "user" as const }, { isolation: "user" as const, listenPorts: "any" as const }]
        : []),
      { isolation: "none" },
    ];
    for (const setting of cases) {
      const root = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-startup-"));
      const { logger, lines } = recordingLogger();
      const sandbox = await startSandbox({
        auth: testCredentials.settingsFor("sandbox"),
        port: 0,
        root,
        logger,
        ...setting,
      });
      try {
        const named = lines.filter((line) => "isolation" in line.fields);
        assert.deepEqual(
          named.map((line) => line.fields.isolation),
          [setting.isolation],
          JSON.stringify(setting),
        );
        assert.equal(
          named[0]?.fields.syscallFilter,
          setting.isolation === "none" ? undefined : setting.syscallFilter === "off" ? "off" : path.basename(program),
          JSON.stringify(setting),
        );
        // The ports a user-mode session may listen on, and a warning when it may take a service's.
        assert.equal(
          named[0]?.fields.sessionListenPorts,
          setting.isolation !== "user" ? undefined : (setting.listenPorts ?? "ephemeral"),
          JSON.stringify(setting),
        );
        assert.equal(
          lines.some((line) => line.level === "warn" && line.fields.sessionListenPorts === "any"),
          setting.listenPorts === "any",
          JSON.stringify(setting),
        );
        // Where a user-mode session may write: walled off, whatever the ports' setting.
        assert.equal(
          named[0]?.fields.sessionWrites,
          setting.isolation === "user" ? "confined" : undefined,
          JSON.stringify(setting),
        );
        // Its own port is the kernel's choice (port 0), in the ephemeral range: a session could be handed it.
        const exposed = lines.find((line) => line.level === "warn" && "portsInEphemeralRange" in line.fields);
        assert.deepEqual(
          exposed?.fields.portsInEphemeralRange,
          setting.isolation === "user" && setting.listenPorts === undefined
            ? [{ service: "sandbox", port: Number(new URL(sandbox.url).port) }]
            : undefined,
          JSON.stringify(setting),
        );
      } finally {
        await sandbox.close();
        rmSync(root, { recursive: true, force: true });
      }
    }
  });

  void it("OZ0_ISOLATION=bwrap and =user refuse to start without what they need; auto falls back to user, then to none, and says why", async () => {
    const { startSandbox } = await import("../src/index.js");
    const root = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-nobwrap-"));
    const common = { auth: testCredentials.settingsFor("sandbox"), port: 0, root, bwrapPath: "/no/such/bwrap" };
    try {
      await assert.rejects(
        startSandbox({ ...common, isolation: "bwrap" }),
        /OZ0_ISOLATION=bwrap requires bubblewrap.*bwrap not found/,
      );
      await assert.rejects(
        startSandbox({ ...common, isolation: "user", setprivPath: "/no/such/setpriv" }),
        /OZ0_ISOLATION=user requires .*(setpriv not found|not root)/,
      );
      // Without bubblewrap: a uid per session where that works (as root, with setpriv), else none.
      const fallback = await startSandbox({ ...common, isolation: "auto" });
      try {
        assert.equal(fallback.isolation, userModeSkip === false ? "user" : "none");
        assert.match(fallback.isolationReason, /bwrap not found/);
        assert.match(fallback.bubblewrap.reason ?? "", /not found/);
        const health = createClient(
          Health,
          createGrpcTransport({ baseUrl: fallback.url, interceptors: [testCredentials.caller] }),
        );
        assert.equal(
          (await health.check({ service: "isolation" })).status,
          HealthCheckResponse_ServingStatus.NOT_SERVING,
        );
      } finally {
        await fallback.close();
      }
      const none = await startSandbox({ ...common, isolation: "auto", setprivPath: "/no/such/setpriv" });
      try {
        assert.equal(none.isolation, "none");
        assert.match(none.isolationReason, /bwrap not found.*(setpriv not found|not root)/);
      } finally {
        await none.close();
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  void it(
    "does not run sessions under uids of their own when those could not reach the sandbox root, and names the directory in the way",
    { skip: userModeSkip },
    async () => {
      const { startSandbox } = await import("../src/index.js");
      // mkdtemp makes it 0700: no other user passes it.
      const closed = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-closed-"));
      const common = {
        auth: testCredentials.settingsFor("sandbox"),
        port: 0,
        root: path.join(closed, "sandbox"),
        bwrapPath: "/no/such/bwrap",
      };
      try {
        const expected = new RegExp(`${closed} \\(mode 0700\\) does not let other users through`);
        await assert.rejects(startSandbox({ ...common, isolation: "user" }), expected);
        const fallback = await startSandbox({ ...common, isolation: "auto" });
        try {
          assert.equal(fallback.isolation, "none");
          assert.match(fallback.isolationReason, expected);
        } finally {
          await fallback.close();
        }
      } finally {
        rmSync(closed, { recursive: true, force: true });
      }
    },
  );
});
