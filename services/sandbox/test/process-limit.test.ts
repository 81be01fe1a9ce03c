// A fork bomb in one session must not take the node's process table: each
// session may run OZ0_SESSION_MAX_PROCESSES processes and threads at once,
// counted apart from every other session's, where the isolation mode gives
// the kernel a user to count them by.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { chownSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { SandboxService, type RunSessionResponse } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { testCredentials } from "@oz0/serving/testing";
import { findSetpriv } from "../src/parent-death-launcher.js";
import { chooseSessionProcessLimit, runsAsInitialRoot } from "../src/session-process-limit.js";
import { runToEnd, scenarioStart, SessionStream, startTestSandbox, type TestSandbox } from "./sandbox-test-kit.js";

const MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "dist", "main.js");
const LIMIT = 40;
/** An unprivileged user for a sandbox that must not be root (nobody). */
const UNPRIVILEGED = 65534;

const asRoot = process.getuid?.() === 0;
const rootWithSetpriv = !asRoot
  ? "running the sandbox as the user mode does, or as another user, needs root"
  : findSetpriv() === undefined
    ? "needs setpriv"
    : false;

function textOf(message: RunSessionResponse): string | undefined {
  return message.message.case === "event" && message.message.value.event.case === "text"
    ? message.message.value.event.value.text
    : undefined;
}

/** What the harness's forker said: how many processes it had at once, of how many it wanted. */
async function processesStarted(stream: SessionStream): Promise<{ started: number; wanted: number; line: string }> {
  const said = await stream.waitFor((m) => textOf(m)?.startsWith("started ") === true, "the forker's count");
  const line = textOf(said)!;
  const [, started, wanted] = /^started (\d+) of (\d+)/.exec(line)!;
  return { started: Number(started), wanted: Number(wanted), line };
}

/**
 * One session holds as many processes as it can get (far more than the
 * limit, if nothing stopped it); meanwhile another session starts all it
 * wants, and a session after both runs as usual.
 */
async function assertLimitedApart(client: Client<typeof SandboxService>): Promise<void> {
  const bomb = new SessionStream(client, {
    message: { case: "start", value: scenarioStart({ mode: "processes", count: 500, hold: true }) },
  });
  const held = await processesStarted(bomb);
  // The harness (node, its threads) and the forker count too: fewer than the limit are left for the children.
  assert.ok(held.started < LIMIT, `a session held ${held.line}, past its limit of ${LIMIT}`);
  assert.ok(held.started > 0, held.line);
  assert.match(held.line, /Resource temporarily unavailable/);

  const neighbour = await runToEnd(client, scenarioStart({ mode: "processes", count: 20 }));
  assert.ok(
    neighbour.texts().includes("started 20 of 20"),
    `a session beside one at its limit could not start its processes: ${neighbour.texts().join("; ")}`,
  );

  bomb.send({ message: { case: "cancel", value: { reason: "the test is done" } } });
  await bomb.finished;
  const later = await runToEnd(client, scenarioStart({ mode: "complete" }));
  assert.equal(later.exited().result?.text !== undefined, true, "the next session did not run to its end");
}

void describe("which isolation modes can limit a session's processes", () => {
  const common = { max: LIMIT, prlimitPath: "/usr/bin/prlimit" };
  void it("limits them under bubblewrap as an unprivileged user, and in the user mode", () => {
    assert.equal(chooseSessionProcessLimit({ ...common, isolation: "bwrap", initialRoot: false }).limit?.max, LIMIT);
    assert.equal(chooseSessionProcessLimit({ ...common, isolation: "user", initialRoot: true }).limit?.max, LIMIT);
  });
  void it("says why nothing limits them elsewhere", () => {
    assert.match(
      chooseSessionProcessLimit({ ...common, isolation: "bwrap", initialRoot: true }).reason ?? "",
      /runs as root.*unprivileged user/,
    );
    assert.match(
      chooseSessionProcessLimit({ ...common, isolation: "none", initialRoot: false }).reason ?? "",
      /sandbox's own user/,
    );
    assert.match(
      chooseSessionProcessLimit({ ...common, max: 0, isolation: "bwrap", initialRoot: false }).reason ?? "",
      /OZ0_SESSION_MAX_PROCESSES=0/,
    );
    assert.match(
      chooseSessionProcessLimit({ ...common, prlimitPath: undefined, isolation: "user", initialRoot: true }).reason ??
        "",
      /prlimit \(util-linux\) not found/,
    );
  });
});

void describe("a session's processes in the user mode", { skip: rootWithSetpriv }, () => {
  let t: TestSandbox;
  before(async () => {
    t = await startTestSandbox({ isolation: "user", maxSessionProcesses: LIMIT });
  });
  after(() => t.close());

  void it("stop at the limit, counted apart from another session's", async () => {
    assert.equal(t.sandbox.processLimit.limit?.max, LIMIT);
    await assertLimitedApart(t.client);
  });
});

void describe("a session's processes under bubblewrap", () => {
  if (asRoot) {
    void it("are not limited when the sandbox runs as root, and the sandbox says so", async () => {
      assert.equal(runsAsInitialRoot(), true);
      const t = await startTestSandbox({ isolation: "bwrap", maxSessionProcesses: LIMIT });
      try {
        assert.equal(t.sandbox.processLimit.limit, undefined);
        assert.match(t.sandbox.processLimit.reason ?? "", /runs as root/);
      } finally {
        await t.close();
      }
    });

    // As the Kubernetes manifests run it: the sandbox as an unprivileged user.
    void describe("with the sandbox running as an unprivileged user", { skip: rootWithSetpriv }, () => {
      let root: string;
      let sandbox: ChildProcess;
      let client: Client<typeof SandboxService>;
      const lines: string[] = [];
      before(async () => {
        root = mkdtempSync(path.join(os.tmpdir(), "oz0-process-limit-"));
        chownSync(root, UNPRIVILEGED, UNPRIVILEGED);
        sandbox = spawn(
          findSetpriv()!,
          [
            `--reuid=${UNPRIVILEGED}`,
            `--regid=${UNPRIVILEGED}`,
            "--clear-groups",
            "--pdeathsig",
            "SIGKILL",
            "--",
            process.execPath,
            MAIN,
          ],
          {
            env: {
              PATH: process.env.PATH ?? "/usr/bin:/bin",
              OZ0_PORT: "0",
              OZ0_SANDBOX_ROOT: root,
              OZ0_ISOLATION: "bwrap",
              OZ0_SESSION_MAX_PROCESSES: String(LIMIT),
              OZ0_CANCEL_GRACE_MS: "2000",
              ...testCredentials.envFor("sandbox"),
            },
            stdio: ["ignore", "ignore", "pipe"],
          },
        );
        let url: string | undefined;
        for await (const line of createInterface({ input: sandbox.stderr! })) {
          lines.push(line);
          if (line.includes("sandbox listening")) {
            url = (JSON.parse(line) as { url: string }).url;
            break;
          }
        }
        sandbox.stderr!.resume();
        assert.ok(url, `the sandbox exited before listening:\n${lines.join("\n")}`);
        client = createClient(
          SandboxService,
          createGrpcTransport({ baseUrl: url, interceptors: [testCredentials.caller] }),
        );
      });
      after(async () => {
        if (sandbox.exitCode === null) {
          const exited = new Promise((resolve) => sandbox.once("exit", resolve));
          sandbox.kill("SIGTERM");
          await exited;
        }
        rmSync(root, { recursive: true, force: true });
      });

      void it("stop at the limit, counted apart from another session's", async () => {
        const startup = lines.map((line) => JSON.parse(line) as Record<string, unknown>).find((l) => l.isolation);
        assert.equal(startup?.sessionProcesses, LIMIT, `the start-up line: ${JSON.stringify(startup)}`);
        await assertLimitedApart(client);
      });
    });
  } else {
    void it("stop at the limit, counted apart from another session's", async () => {
      const t = await startTestSandbox({ isolation: "bwrap", maxSessionProcesses: LIMIT });
      try {
        assert.equal(t.sandbox.processLimit.limit?.max, LIMIT);
        await assertLimitedApart(t.client);
      } finally {
        await t.close();
      }
    });
  }
});
