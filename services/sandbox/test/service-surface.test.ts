// What tools and other services see: reflection for buf curl, health, and
// lifecycle events published to the events service.
import { testCredentials } from "@oz0/serving/testing";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { rawAttributes } from "@oz0/events-client";
import { EventsService, type RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { Authenticator, registration, serve, stackTokenFor, type RunningServer } from "@oz0/serving";
import { runToEnd, scenarioStart, startTestSandbox, type TestSandbox } from "./sandbox-test-kit.js";

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
  let events: RunningServer;
  const received: RawEvent[] = [];
  let wake: (() => void) | undefined;
  before(async () => {
    events = await serve({
      name: "fake-events",
      port: 0,
      // The real events service's rule: Publish from the suite's services only, so the sandbox must present its own.
      auth: new Authenticator(testCredentials.settingsFor("events")),
      services: [
        registration(EventsService, {
          publish(request) {
            received.push(...request.events);
            wake?.();
            return { accepted: request.events.length };
          },
        }),
      ],
    });
    t = await startTestSandbox({ isolation: "none", eventsUrl: events.url });
  });
  after(async () => {
    await t.close();
    await events.close();
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

  void it("publishes session.started and session.ended to the events service", async () => {
    const stream = await runToEnd(
      t.client,
      scenarioStart({ mode: "complete" }, {}, { agent: { name: "coder", version: 3 } }),
    );
    const mine = (): RawEvent[] => received.filter((e) => e.sessionId === stream.sessionId);
    while (mine().length < 2) await new Promise<void>((resolve) => (wake = resolve));
    assert.deepEqual(
      mine().map((e) => [e.type, e.status, e.source, e.jobId, e.agentName, e.agentVersion]),
      [
        ["session.started", "running", "sandbox", "job-1", "coder", "3"],
        ["session.ended", "completed", "sandbox", "job-1", "coder", "3"],
      ],
    );
    // The stop reason by name, as every other event says it, never the proto's number.
    assert.equal(rawAttributes(mine()[1]!).stop_reason, "completed");
  });
});
