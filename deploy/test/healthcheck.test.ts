// deploy/healthcheck.mjs (the images' HEALTHCHECK) against a real server
// from @oz0/serving, the one every service uses: it exits 0 only when the
// asked-for health service answers SERVING.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { Authenticator, serve, type RunningServer } from "@oz0/serving";
import { deployDir } from "./support/render.js";

const script = path.join(deployDir, "healthcheck.mjs");

function check(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], {
      env: { PATH: process.env.PATH ?? "", ...env },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.on("error", reject);
    child.on("exit", (code) => resolve({ code, stderr }));
  });
}

/** A port nothing listens on: bind one, then close it. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

void describe("healthcheck.mjs against @oz0/serving", () => {
  let server: RunningServer;
  before(async () => {
    server = await serve({ name: "healthcheck-test", port: 0, services: [], auth: new Authenticator({}) });
  });
  after(async () => {
    await server.close({ graceMs: 100 });
  });

  void it("passes readiness (the default) and liveness while the server takes work", async () => {
    assert.deepEqual(await check([], { OZ0_PORT: String(server.port) }), { code: 0, stderr: "" });
    assert.equal((await check(["liveness", String(server.port)])).code, 0);
    assert.equal((await check(["readiness", String(server.port)])).code, 0);
  });

  void it("fails readiness but passes liveness once the server stops taking work", async () => {
    server.health.setReady(false);
    try {
      const readiness = await check(["readiness", String(server.port)]);
      assert.equal(readiness.code, 1);
      assert.match(readiness.stderr, /status 2 \(want SERVING\)/);
      assert.equal((await check(["liveness", String(server.port)])).code, 0);
    } finally {
      server.health.setReady(true);
    }
  });

  void it("fails on an unknown health service, with the server's reason", async () => {
    const result = await check(["no-such-service", String(server.port)]);
    assert.equal(result.code, 1);
    assert.match(result.stderr, /grpc-status 5/);
  });

  void it("fails when nothing listens, and without a port", async () => {
    assert.equal((await check(["liveness", String(await closedPort())])).code, 1);
    const noPort = await check(["liveness"]);
    assert.equal(noPort.code, 1);
    assert.match(noPort.stderr, /no port/);
  });
});
