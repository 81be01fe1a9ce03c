// The real process: SIGTERM stops taking sessions (readiness NOT_SERVING),
// cancels the running ones with the grace, and exits.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";
import { it } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Code, ConnectError } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus } from "@oz0/proto/grpc/health/v1/health_pb";
import { SandboxService, SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { isText, runToEnd, scenarioStart, SessionStream } from "./sandbox-test-kit.js";

const MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "dist", "main.js");

void it("SIGTERM: readiness goes NOT_SERVING, new sessions are refused, running ones are cancelled with the grace, the process exits 0", async () => {
  const root = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-main-"));
  const child = spawn(process.execPath, [MAIN], {
    env: { PATH: process.env.PATH ?? "", OZ0_PORT: "0", OZ0_SANDBOX_ROOT: root, OZ0_ISOLATION: "none", OZ0_CANCEL_GRACE_MS: "3000", OZ0_LOG_LEVEL: "info" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const lines = readline.createInterface({ input: child.stderr });
      lines.on("line", (line) => {
        const entry = JSON.parse(line) as { url?: string };
        if (entry.url !== undefined) resolve(entry.url);
      });
      child.on("exit", () => reject(new Error("the sandbox exited before listening")));
    });
    const transport = createGrpcTransport({ baseUrl: url });
    const client = createClient(SandboxService, transport);
    const health = createClient(Health, transport);
    assert.equal((await health.check({ service: "readiness" })).status, HealthCheckResponse_ServingStatus.SERVING);

    // Needs a moment after SIGTERM to write its cancelled result.
    const stream = new SessionStream(client, { message: { case: "start", value: scenarioStart({ mode: "slow-cancel", delayMs: 1000 }) } });
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
