// The boundary between agent code and the control plane, tried from inside
// a session as an attacker would: under the `user` mode (an unprivileged uid
// per session) and under bubblewrap, a session's harness cannot read the
// stack's data directory (a planted provider key, the key-encryption key, a
// credentials file, all root's and 0600), another session's working
// directory, the sandbox's environment (a planted key in it) or PID 1's.
// Under bubblewrap it reaches no service port either; under `user` it does
// (the README says so). The session still runs and its patch comes back.
//
// The sandbox runs as a real process (dist/main.js), so its environment in
// /proc is what a service's would be; the test reads it itself first, to
// prove the key is there to be found.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { SandboxService, SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { testCredentials } from "@oz0/serving/testing";
import { detectBubblewrap } from "../src/bubblewrap-launcher.js";
import { findSetpriv } from "../src/parent-death-launcher.js";
import { isText, runToEnd, scenarioStart, SessionStream } from "./sandbox-test-kit.js";

const MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "dist", "main.js");
const NEEDLE = `oz0boundary${process.pid}x`;
const PLANTED_KEY = `sk-ant-api03-${NEEDLE}`;

interface ProbeReport {
  uid: number;
  gid: number;
  groups: number[];
  workingDir: { uid: number; mode: number };
  privateFiles: Record<string, string>;
  reads: Record<string, string>;
  lists: Record<string, string | string[]>;
  writes: Record<string, string>;
  signals: Record<string, string>;
  connects: Record<string, string>;
  escaped?: number;
}

/** Alive and not a zombie (a killed orphan stays a zombie until some init reaps it). */
function processAlive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

/** Starts dist/main.js; resolves with its URL and the startup line that names its isolation. */
function startSandboxProcess(
  env: Record<string, string>,
): Promise<{ child: ChildProcess; url: string; isolationLine: Record<string, unknown> }> {
  const child = spawn(process.execPath, [MAIN], { env, stdio: ["ignore", "ignore", "pipe"] });
  return new Promise((resolve, reject) => {
    let isolationLine: Record<string, unknown> | undefined;
    const lines = readline.createInterface({ input: child.stderr! });
    const seen: string[] = [];
    lines.on("line", (line) => {
      seen.push(line);
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line) as Record<string, unknown>;
      } catch {
        return;
      }
      if (typeof entry.isolation === "string" && isolationLine === undefined) isolationLine = entry;
      if (typeof entry.url === "string" && typeof entry.msg === "string" && entry.msg.includes("listening")) {
        if (isolationLine === undefined) reject(new Error(`no isolation line before listening: ${seen.join("\n")}`));
        else resolve({ child, url: entry.url, isolationLine });
      }
    });
    child.once("exit", (code, signal) =>
      reject(new Error(`the sandbox exited while starting (${signal ?? code}): ${seen.join("\n")}`)),
    );
  });
}

const isRoot = process.getuid?.() === 0;
const bubblewrap = await detectBubblewrap();
const skips = {
  user: !isRoot ? "needs root" : findSetpriv() === undefined ? "needs setpriv (util-linux)" : false,
  bwrap: bubblewrap.available ? false : `bubblewrap does not work here: ${bubblewrap.reason ?? ""}`,
} as const;

for (const mode of ["user", "bwrap"] as const) {
  void describe(`the session boundary (isolation ${mode})`, { skip: skips[mode] }, () => {
    // outer/          an installation folder bound read-only under bubblewrap (OZ0_SANDBOX_READ_ONLY_PATHS)
    //   home/         the stack's data directory (OZ0_HOME), 0711 so the user mode can reach the root
    //     sandbox/    OZ0_SANDBOX_ROOT
    //     kek, provider-key, llm-proxy/kek, credentials/owner.json   root's, 0600 (directories 0700)
    //   elsewhere/token   named in OZ0_SANDBOX_HIDDEN_PATHS
    let outer: string;
    let home: string;
    let root: string;
    let planted: string[];
    let sandbox: { child: ChildProcess; url: string; isolationLine: Record<string, unknown> };
    let client: Client<typeof SandboxService>;

    before(async () => {
      outer = mkdtempSync(path.join(os.tmpdir(), "oz0-boundary-"));
      chmodSync(outer, 0o711);
      home = path.join(outer, "home");
      root = path.join(home, "sandbox");
      mkdirSync(home, { mode: 0o711 });
      chmodSync(home, 0o711);
      for (const dir of ["llm-proxy", "credentials"]) mkdirSync(path.join(home, dir), { mode: 0o700 });
      mkdirSync(path.join(outer, "elsewhere"), { mode: 0o755 });
      planted = [
        path.join(home, "kek"),
        path.join(home, "provider-key"),
        path.join(home, "llm-proxy", "kek"),
        path.join(home, "credentials", "owner.json"),
        path.join(outer, "elsewhere", "token"),
      ];
      for (const file of planted) writeFileSync(file, `${PLANTED_KEY}\n`, { mode: 0o600 });
      sandbox = await startSandboxProcess({
        PATH: process.env.PATH ?? "/usr/bin:/bin",
        ...testCredentials.envFor("sandbox"),
        OZ0_PORT: "0",
        OZ0_SANDBOX_ROOT: root,
        OZ0_ISOLATION: mode,
        OZ0_LOG_LEVEL: "info",
        OZ0_CANCEL_GRACE_MS: "2000",
        OZ0_SANDBOX_READ_ONLY_PATHS: outer,
        OZ0_SANDBOX_HIDDEN_PATHS: path.join(outer, "elsewhere", "token"),
        // A provider key in the sandbox's own environment, as a careless deployment would have it.
        ANTHROPIC_API_KEY: PLANTED_KEY,
      });
      client = createClient(
        SandboxService,
        createGrpcTransport({ baseUrl: sandbox.url, interceptors: [testCredentials.caller] }),
      );
    });

    after(async () => {
      sandbox?.child.kill("SIGTERM");
      if (sandbox !== undefined && sandbox.child.exitCode === null)
        await new Promise((resolve) => sandbox.child.once("exit", resolve));
      if (outer !== undefined) rmSync(outer, { recursive: true, force: true });
    });

    void it("names its isolation in the startup line the embedded stack reads", () => {
      assert.equal(sandbox.isolationLine.isolation, mode);
    });

    void it("lets a session read no key, no credential, no other session and no other process's environment, and still returns its patch", async () => {
      const sandboxPid = sandbox.child.pid!;
      // The key really is in the sandbox's environment: root finds it there.
      assert(readFileSync(`/proc/${sandboxPid}/environ`, "utf8").includes(NEEDLE));

      // Another session, with a secret of its own in its working directory.
      const victim = new SessionStream(client, {
        message: {
          case: "start",
          value: scenarioStart(
            { mode: "wait" },
            {
              attachments: [
                {
                  path: "secret.txt",
                  source: { case: "content", value: new TextEncoder().encode(`${PLANTED_KEY}\n`) },
                },
              ],
            },
            { sessionId: "victim" },
          ),
        },
      });
      await victim.waitFor(isText("ready"), "the victim ready");
      const victimStarted = victim.received.find((m) => m.message.case === "started")?.message;
      assert(victimStarted?.case === "started");
      const victimDir = victimStarted.value.workingDir;

      const port = Number(new URL(sandbox.url).port);
      const attacker = await runToEnd(
        client,
        scenarioStart(
          {
            mode: "probe",
            read: [
              ...planted,
              path.join(victimDir, "secret.txt"),
              `/proc/${sandboxPid}/environ`,
              `/proc/${victimStarted.value.pid}/environ`,
              "/proc/1/environ",
            ],
            list: [home, path.join(root, "sessions"), path.join(root, "internal")],
            write: [path.join(root, "sessions", "intruder"), path.join(home, "intruder")],
            signal: [sandboxPid, victimStarted.value.pid],
            connect: [port],
            escape: mode === "user",
          },
          { artifactPaths: ["probe.txt"] },
          { sessionId: "attacker" },
        ),
      );
      const exited = attacker.exited();
      assert.equal(exited.status, SessionStatus.COMPLETED, `${exited.errorMessage} ${exited.stderrTail}`);
      const report = JSON.parse(attacker.texts()[0] ?? "{}") as ProbeReport;

      // Nothing it could read holds the key, wherever it looked.
      assert.doesNotMatch(JSON.stringify(report), new RegExp(NEEDLE));
      const hiddenFile = path.join(outer, "elsewhere", "token");
      for (const file of [
        ...planted,
        path.join(victimDir, "secret.txt"),
        `/proc/${sandboxPid}/environ`,
        `/proc/${victimStarted.value.pid}/environ`,
      ]) {
        // Under bubblewrap a hidden directory is an empty one, and a hidden file the node's /dev/null, which cannot be opened there (nodev).
        const expected = mode === "user" || file === hiddenFile ? "ERROR EACCES" : "ERROR ENOENT";
        assert.equal(report.reads[file], expected, file);
      }
      // Its own directories are writable (HOME and TMPDIR are in its state directory).
      assert.deepEqual(report.privateFiles, { home: "ok", tmpdir: "ok" });
      const artifacts = attacker.received.find((m) => m.message.case === "artifacts")?.message;
      assert(artifacts?.case === "artifacts");
      assert.match(artifacts.value.patch, /probe\.txt/);
      assert.match(artifacts.value.patch, /written by the probe/);
      assert.deepEqual(
        artifacts.value.files.map((f) => f.path),
        ["probe.txt"],
      );

      if (mode === "user") {
        // Its own uid and gid, no groups, nothing of root's.
        assert(report.uid >= 200_000 && report.uid < 200_000 + 65_536, String(report.uid));
        assert.equal(report.gid, report.uid);
        assert(!report.groups.includes(0), JSON.stringify(report.groups));
        assert.equal(report.workingDir.uid, report.uid);
        assert.equal(report.workingDir.mode, 0o700);
        assert.notEqual(statSync(victimDir).uid, report.uid, "two sessions never share a uid");
        assert.equal(report.reads["/proc/1/environ"], "ERROR EACCES");
        for (const dir of [home, path.join(root, "sessions"), path.join(root, "internal")])
          assert.equal(report.lists[dir], "ERROR EACCES", dir);
        for (const file of [path.join(root, "sessions", "intruder"), path.join(home, "intruder")])
          assert.equal(report.writes[file], "ERROR EACCES", file);
        assert.deepEqual(report.signals, { [sandboxPid]: "ERROR EPERM", [victimStarted.value.pid]: "ERROR EPERM" });
        // Not protected in this mode: loopback ports (the services authenticate every call instead).
        assert.deepEqual(report.connects, { [port]: "connected" });
        // What it left running in a session of its own died with its session.
        assert(report.escaped !== undefined);
        for (let i = 0; i < 200 && processAlive(report.escaped); i++)
          await new Promise((resolve) => setTimeout(resolve, 25));
        assert.equal(processAlive(report.escaped), false, "the escaped process outlived its session");
      } else {
        // The stack's data directory is empty inside but for the way to the session's own directories; other sessions do not exist there.
        assert.deepEqual(report.lists[home], ["sandbox"]);
        assert.deepEqual(report.lists[path.join(root, "sessions")], ["attacker"]);
        assert.equal(report.lists[path.join(root, "internal")], "ERROR ENOENT");
        assert.deepEqual(report.signals, { [sandboxPid]: "ERROR ESRCH", [victimStarted.value.pid]: "ERROR ESRCH" });
        assert.match(report.connects[port] ?? "", /^error ECONNREFUSED$/);
      }

      victim.send({ message: { case: "cancel", value: { reason: "the test is over" } } });
      await victim.finished;
      assert.equal(victim.exited().status, SessionStatus.CANCELLED);
      // Both sessions' directories are gone, the handed-over ones included.
      assert.deepEqual(readdirSync(path.join(root, "sessions")), []);
      assert.equal(existsSync(victimDir), false);
    });
  });
}
