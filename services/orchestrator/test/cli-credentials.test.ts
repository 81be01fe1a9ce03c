// Which credential the CLI sends where (cli/connection.ts): this machine's
// owner credential opens its stacks as a person with every role, so it goes
// to an OZ0_URL on this machine only; a URL on another host gets OZ0_TOKEN or
// the login's token for it, and otherwise nothing (operator review: a
// mistyped or hostile OZ0_URL received the owner credential).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { credentialForUrl } from "../src/cli/connection.js";
import { ensureOwnerCredential } from "../src/dev/local-credentials.js";
import { packageDir } from "./support/test-stack.js";

const owner = () => "oz0_owner";

void test("the owner credential goes to loopback URLs only; a token or a login for the URL wins", () => {
  const sent = (url: string, extra: { token?: string; login?: { url: string; token: string } } = {}) =>
    credentialForUrl({ url, token: extra.token, login: extra.login, ownerCredential: owner });
  for (const local of ["http://127.0.0.1:7700", "http://127.8.9.10:1", "http://localhost:7700", "http://[::1]:7700"])
    assert.equal(sent(local), "oz0_owner", local);
  for (const remote of [
    "https://oz0.example.com",
    "http://10.0.0.5:7700",
    "http://127.0.0.1.evil.example:7700",
    "http://localhost.evil.example",
  ])
    assert.equal(sent(remote), undefined, remote);
  assert.equal(sent("https://oz0.example.com", { token: "t" }), "t");
  const login = { url: "https://oz0.example.com", token: "login-token" };
  assert.equal(sent("https://oz0.example.com", { login }), "login-token");
  assert.equal(sent("https://other.example.com", { login }), undefined, "a login is for its own URL");
});

void test("a command sends this machine's owner credential to a loopback OZ0_URL, and refuses to go elsewhere with no credential, saying how to give one", async (t) => {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-cli-credentials-"));
  t.after(() => rmSync(home, { recursive: true, force: true }));
  const seen: (string | undefined)[] = [];
  // Answers every call Unauthenticated (gRPC status 16), having noted its credential.
  const server = http2.createServer((req, res) => {
    seen.push(req.headers.authorization);
    res.writeHead(200, { "content-type": "application/grpc" });
    res.addTrailers({ "grpc-status": "16", "grpc-message": "not this one" });
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => server.close());
  const port = (server.address() as AddressInfo).port;
  // Run apart from this process, whose event loop serves the listener meanwhile.
  const cli = (url: string): Promise<{ status: number | null; stderr: string }> =>
    new Promise((resolve) => {
      const child = spawn(process.execPath, [path.join(packageDir, "dist/cli/main.js"), "jobs", "list"], {
        env: { ...process.env, OZ0_HOME: home, OZ0_URL: url, OZ0_TOKEN: "", OZ0_LOG_LEVEL: "warn" },
        stdio: ["ignore", "ignore", "pipe"],
      });
      let stderr = "";
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      child.on("close", (status) => resolve({ status, stderr }));
    });
  // The credential a local stack made on first use; a loopback URL gets it.
  const credential = ensureOwnerCredential(home);
  await cli(`http://127.0.0.1:${port}`);
  assert.equal(seen.at(-1), `Bearer ${credential}`);
  // Another host: nothing is sent, and the command says what to do.
  const calls = seen.length;
  const remote = await cli("http://oz0.invalid:7700");
  assert.equal(seen.length, calls, "nothing reached the listener meanwhile");
  assert.equal(remote.status, 2, remote.stderr);
  assert.match(
    remote.stderr,
    /http:\/\/oz0\.invalid:7700 \(OZ0_URL\) is not on this machine, so this machine's owner credential is not sent to it, and no other is set: set OZ0_TOKEN, or `oz0 login --url http:\/\/oz0\.invalid:7700`/,
  );
  const bad = await cli("127.0.0.1:7700");
  assert.equal(bad.status, 2, bad.stderr);
  assert.match(
    bad.stderr,
    /OZ0_URL must be an orchestrator's URL such as http:\/\/127\.0\.0\.1:7700 .*; got "127\.0\.0\.1:7700"/,
  );
});
