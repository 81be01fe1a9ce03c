// Containment: what a harness started ends with its session, also a process
// that left the process group, under every mechanism that works here.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import {
  chooseContainment,
  CONTAINMENT_MECHANISMS,
  containmentUnavailable,
  describeProcess,
  processGroupLauncher,
  startHostSession,
} from "@oz0/harness/host";
import type { Containment, SessionContainer } from "@oz0/harness/host";

const harness = fileURLToPath(new URL("./fixtures/host/protocol-harness.mjs", import.meta.url));
const containedHost = fileURLToPath(new URL("./fixtures/host/contained-host.mjs", import.meta.url));

/** Gone, or a zombie waiting for init (a killed orphan). */
const processGone = (pid: number): boolean => describeProcess(pid) === undefined;

function run(container: SessionContainer, sessionId: string, args: string[]) {
  return startHostSession({
    command: [process.execPath, harness, ...args],
    cwd: process.cwd(),
    // The best-effort mechanism finds a process only by what it inherited: there the escapee keeps it.
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", OZ0_SESSION_ID: sessionId, ESCAPE_WITH_ENVIRONMENT: "1" },
    request: create(SessionRequestSchema, { protocolVersion: 1, sessionId }),
    graceMs: 5000,
    launcher: container.launcher(processGroupLauncher()),
  });
}

for (const mechanism of CONTAINMENT_MECHANISMS) {
  void describe(`containment by ${mechanism}`, { skip: containmentUnavailable(mechanism) ?? false }, () => {
    let containment: Containment;
    let dir: string;
    before(() => {
      containment = chooseContainment({ setting: mechanism, name: `oz0-harness-test-${process.pid}` });
      dir = mkdtempSync(path.join(tmpdir(), "oz0-containment-"));
    });
    after(() => {
      containment.close();
      rmSync(dir, { recursive: true, force: true });
    });

    void it("kills a grandchild that left the process group once the harness exited, and names it", async () => {
      const sessionId = `escapes-${mechanism}`;
      const container = containment.container({ sessionId, reportFile: path.join(dir, `${sessionId}.tsv`) });
      const session = run(container, sessionId, ["escapes"]);
      const outcome = await session.outcome;
      assert.equal(outcome.status, "completed", outcome.error?.message);
      assert.equal(outcome.exitCode, 0);
      assert.equal(outcome.leftoverProcesses, true);
      const grandchild = Number(outcome.result?.text);
      const left = await container.end();
      assert.deepEqual(
        left.map((p) => p.pid),
        [grandchild],
      );
      assert.notEqual(left[0]?.pgid, session.pid, "it left the harness's process group");
      assert.ok(processGone(grandchild), `grandchild ${grandchild} outlived its session`);
    });

    void it("ends a session cancelled while it runs, what it started included", async () => {
      const sessionId = `cancelled-${mechanism}`;
      const container = containment.container({ sessionId, reportFile: path.join(dir, `${sessionId}.tsv`) });
      let grandchild = 0;
      let listed: number[] | undefined;
      const session = startHostSession({
        command: [process.execPath, harness, "escapes-and-waits"],
        cwd: process.cwd(),
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", OZ0_SESSION_ID: sessionId, ESCAPE_WITH_ENVIRONMENT: "1" },
        request: create(SessionRequestSchema, { protocolVersion: 1, sessionId }),
        graceMs: 5000,
        launcher: container.launcher(processGroupLauncher()),
        onEvent: (event) => {
          if (event.event.case !== "text") return;
          grandchild = Number(event.event.value.text);
          listed = container.processIds?.();
          session.cancel("the test is done with it");
        },
      });
      const outcome = await session.outcome;
      assert.equal(outcome.status, "cancelled");
      assert.equal(outcome.signal, "SIGTERM", "the harness's own end, as the host sees it");
      // Listed while it ran, where the mechanism finds processes beyond the harness's tree (the sandbox's disk guard
      // reads the files they hold); the subreaper's orphans all stay below its wrapper, which lists none.
      if (mechanism === "subreaper") assert.equal(container.processIds, undefined);
      else assert.deepEqual(new Set(listed), new Set([session.pid, grandchild]));
      await container.end();
      assert.ok(grandchild > 0 && processGone(grandchild), `grandchild ${grandchild} outlived its session`);
    });

    void it("passes the harness's exit code and signal through unchanged", async () => {
      const coded = containment.container({ sessionId: `code-${mechanism}` });
      const byCode = await run(coded, `code-${mechanism}`, ["escapes", "3"]).outcome;
      await coded.end();
      assert.deepEqual([byCode.exitCode, byCode.signal], [3, null]);
      const signalled = containment.container({ sessionId: `signal-${mechanism}` });
      const bySignal = await run(signalled, `signal-${mechanism}`, ["exit-signal"]).outcome;
      await signalled.end();
      assert.deepEqual([bySignal.exitCode, bySignal.signal], [null, "SIGKILL"]);
    });

    void it("reports a command that does not exist as spawn_failed", async () => {
      const container = containment.container({ sessionId: `missing-${mechanism}` });
      const outcome = await startHostSession({
        command: ["/no/such/harness"],
        cwd: process.cwd(),
        env: { PATH: "/usr/bin:/bin" },
        request: create(SessionRequestSchema, { protocolVersion: 1 }),
        launcher: container.launcher(processGroupLauncher()),
      }).outcome;
      assert.deepEqual(await container.end(), []);
      assert.equal(outcome.error?.code, "spawn_failed");
    });

    if (mechanism !== "environment") {
      void it(`ends what a host killed with SIGKILL left (${mechanism === "subreaper" ? "the wrapper's parent-death signal" : "the next start-up removes the leftovers"})`, async () => {
        const name = `oz0-harness-test-host-${process.pid}`;
        const host = spawn(process.execPath, [containedHost, mechanism, name], {
          stdio: ["ignore", "pipe", "inherit"],
        });
        const exited = new Promise<void>((resolve) => host.once("exit", () => resolve()));
        const grandchild = await new Promise<number>((resolve) =>
          readline.createInterface({ input: host.stdout }).once("line", (line) => resolve(Number(line))),
        );
        assert.ok(grandchild > 0 && !processGone(grandchild));
        host.kill("SIGKILL");
        await exited;
        if (mechanism === "cgroup") {
          const next = chooseContainment({ setting: mechanism, name });
          assert.equal(await next.removeLeftovers(), 1);
          next.close();
          assert.ok(processGone(grandchild), `grandchild ${grandchild} survived the leftovers' removal`);
        } else {
          // The wrapper learns of its parent's death from the kernel, asynchronously: wait for it to act.
          while (!processGone(grandchild)) await new Promise((resolve) => setTimeout(resolve, 20));
        }
      });
    }
  });
}
