// What tools see: reflection for buf curl, and a call answered.
import assert from "node:assert/strict";
import { testCredentials } from "@oz0/serving/testing";
import { execFile } from "node:child_process";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { stackTokenFor } from "@oz0/serving";
import { startTestSandbox, type TestSandbox } from "./sandbox-test-kit.js";

const BUF = path.join(
  path.dirname(fileURLToPath(import.meta.url)),
  "..",
  "..",
  "..",
  "node_modules",
  "@bufbuild",
  "buf",
  "bin",
  "buf",
);

function bufCurl(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(BUF, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", ...args], (error, stdout, stderr) => {
      if (error !== null) reject(new Error(`buf curl failed: ${stderr}`));
      else resolve(stdout);
    });
  });
}

void describe("service surface", () => {
  let t: TestSandbox;
  before(async () => {
    t = await startTestSandbox({ isolation: "none" });
  });
  after(async () => {
    await t.close();
  });

  void it("lists its methods over reflection with buf curl, and answers a call", async () => {
    // Reflection needs a principal, and ListSessions the orchestrator's credential for sandboxes (or the node token).
    const forSandbox = stackTokenFor(testCredentials.services, "orchestrator", "sandbox");
    const bearer = ["-H", `authorization: Bearer ${forSandbox}`, "--reflect-header", "*"];
    await assert.rejects(bufCurl(["--list-methods", t.sandbox.url]));
    const methods = (await bufCurl([...bearer, "--list-methods", t.sandbox.url])).split("\n");
    for (const method of ["RunSession", "ListSessions", "CancelSession"])
      assert(methods.includes(`oz0.sandbox.v1.SandboxService/${method}`), methods.join(","));
    const listed = JSON.parse(
      await bufCurl([...bearer, "-d", "{}", `${t.sandbox.url}/oz0.sandbox.v1.SandboxService/ListSessions`]),
    ) as object;
    // No sessions yet; the node's limit (OZ0_MAX_SESSIONS, 16 by default).
    assert.deepEqual(listed, { maxSessions: 16 });
  });
});
