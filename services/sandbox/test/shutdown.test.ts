// The real process: SIGTERM stops taking sessions (readiness NOT_SERVING),
// cancels the running ones with the grace, and exits.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { it } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Code, ConnectError } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus } from "@oz0/proto/grpc/health/v1/health_pb";
import { SandboxService, SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { isText, runToEnd, scenarioStart, SessionStream, spawnSandboxMain } from "./sandbox-test-kit.js";
import { testCredentials } from "@oz0/serving/testing";

/** Alive and not a zombie (a killed orphan stays a zombie until some init reaps it). */
function processAlive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

function descendantsOf(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const line of execFileSync("ps", ["-e", "-o", "pid=,ppid="], { encoding: "utf8" }).trim().split("\n")) {
    const [pid, ppid] = line.trim().split(/\s+/).map(Number);
    if (pid !== undefined && ppid !== undefined) children.set(ppid, [...(children.get(ppid) ?? []), pid]);
  }
  const out: number[] = [];
  const walk = (pid: number): void => {
    for (const child of children.get(pid) ?? []) {
      out.push(child);
      walk(child);
    }
  };
  walk(root);
  return out;
}

const userModeSkip = process.getuid?.() !== 0 ? "the user isolation mode needs root" : false;

for (const isolation of ["none", "user", "bwrap"] as const) {
  // Under bubblewrap a session's keeper holds it for a sandbox started again (sandbox-restart.test.ts); one that
  // no sandbox takes over within OZ0_SESSION_ORPHAN_MS ends all the same.
  const what = isolation === "bwrap" ? "once no sandbox took them over within the orphan time" : "with it";
  void it(
    `a sandbox killed with SIGKILL takes its harnesses ${what} (isolation ${isolation})`,
    { skip: isolation === "user" ? userModeSkip : false },
    async () => {
      const root = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-kill-"));
      const child = spawnSandboxMain({
        OZ0_SANDBOX_ROOT: root,
        OZ0_ISOLATION: isolation,
        OZ0_LOG_LEVEL: "info",
        OZ0_SESSION_ORPHAN_MS: "1500",
      });
      const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
      try {
        const url = await listeningUrl(child);
        const client = createClient(
          SandboxService,
          createGrpcTransport({ baseUrl: url, interceptors: [testCredentials.caller] }),
        );
        const stream = new SessionStream(client, {
          message: { case: "start", value: scenarioStart({ mode: "wait" }) },
        });
        await stream.waitFor(isText("ready"), "ready");
        const harnessProcesses = descendantsOf(child.pid ?? -1);
        assert(harnessProcesses.length > 0);
        child.kill("SIGKILL");
        await exited;
        if (isolation === "bwrap") {
          await new Promise((resolve) => setTimeout(resolve, 500));
          assert.ok(
            harnessProcesses.some(processAlive),
            "the keeper holds the session for a while, for a sandbox started again",
          );
        }
        // The kernel delivers the parent-death signal as the sandbox dies (the keeper its SIGKILL after the orphan time); give it the moment it needs.
        for (let i = 0; i < 200 && harnessProcesses.some(processAlive); i++)
          await new Promise((resolve) => setTimeout(resolve, 50));
        assert.deepEqual(harnessProcesses.filter(processAlive), []);
        stream.drop();
        await stream.finished;
      } finally {
        child.kill("SIGKILL");
        rmSync(root, { recursive: true, force: true });
      }
    },
  );
}

function listeningUrl(child: ReturnType<typeof spawnSandboxMain>): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    if (child.stderr === null) return reject(new Error("no stderr"));
    const lines = readline.createInterface({ input: child.stderr });
    lines.on("line", (line) => {
      const entry = JSON.parse(line) as { url?: string };
      if (entry.url !== undefined) resolve(entry.url);
    });
    child.on("exit", () => reject(new Error("the sandbox exited before listening")));
  });
}

void it("SIGTERM: readiness goes NOT_SERVING, new sessions are refused, running ones are cancelled with the grace, the process exits 0", async () => {
  const root = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-main-"));
  const child = spawnSandboxMain({
    OZ0_SANDBOX_ROOT: root,
    OZ0_ISOLATION: "none",
    OZ0_CANCEL_GRACE_MS: "3000",
    OZ0_LOG_LEVEL: "info",
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  try {
    const url = await listeningUrl(child);
    const transport = createGrpcTransport({ baseUrl: url, interceptors: [testCredentials.caller] });
    const client = createClient(SandboxService, transport);
    const health = createClient(Health, transport);
    assert.equal((await health.check({ service: "readiness" })).status, HealthCheckResponse_ServingStatus.SERVING);

    // Needs a moment after SIGTERM to write its cancelled result.
    const stream = new SessionStream(client, {
      message: { case: "start", value: scenarioStart({ mode: "slow-cancel", delayMs: 1000 }) },
    });
    await stream.waitFor(isText("ready"), "ready");
    child.kill("SIGTERM");
    while ((await health.check({ service: "readiness" })).status !== HealthCheckResponse_ServingStatus.NOT_SERVING) {
      await new Promise((resolve) => setImmediate(resolve));
    }
    const refused = await runToEnd(client, scenarioStart({ mode: "complete" }));
    const error = ConnectError.from(refused.error);
    assert.equal(error.code, Code.Unavailable, error.rawMessage);
    assert.match(error.rawMessage, /shutting down/);

    await stream.finished;
    const end = stream.exited();
    assert.equal(end.status, SessionStatus.CANCELLED);
    assert.equal(end.result?.text, "cancelled after cleanup");
    assert.equal(end.cancelReason, "the sandbox node is shutting down");
    assert.equal(await exited, 0);
  } finally {
    child.kill("SIGKILL");
    rmSync(root, { recursive: true, force: true });
  }
});
