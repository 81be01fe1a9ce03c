// Static placement (OZ0_SANDBOX_URLS): the configured nodes by session, a stored
// job's node found again by its URL, and a clear error for a node no longer
// configured. Registry placement runs against real nodes in sandbox-nodes.test.ts.
import assert from "node:assert/strict";
import { it } from "node:test";
import { OrchestratorError } from "../src/orchestrator-error.js";
import { StaticPlacement } from "../src/sessions/sandbox-placement.js";
import { SandboxClient } from "../src/sessions/sandbox-client.js";

void it("static placement spreads sessions over the configured nodes, the same node for the same session, and never loses one", async () => {
  const runners = ["http://10.0.0.1:7701", "http://10.0.0.2:7701"].map((url) => new SandboxClient({ url }));
  const placement = new StaticPlacement({ runners });
  const counts = new Map<string, number>();
  for (let i = 0; i < 200; i++) {
    const url = (await placement.place({ jobId: `job-${i}`, sessionId: `ses-${i}` }))!.url;
    counts.set(url, (counts.get(url) ?? 0) + 1);
    // Placed again (a custom step after a restart): the node it started on.
    assert.equal((await placement.place({ jobId: "another-job", sessionId: `ses-${i}` }))!.url, url);
  }
  assert.deepEqual([...counts.keys()].sort(), ["http://10.0.0.1:7701", "http://10.0.0.2:7701"]);
  assert.ok(Math.min(...counts.values()) > 60, `both nodes get a fair share: ${JSON.stringify([...counts])}`);
  assert.equal(placement.runnerFor("http://10.0.0.2:7701"), runners[1]);
  assert.throws(
    () => placement.runnerFor("http://10.0.0.3:7701"),
    (e: unknown) =>
      e instanceof OrchestratorError &&
      e.code === "unavailable" &&
      /sandbox http:\/\/10\.0\.0\.3:7701 is not configured any more; add it to OZ0_SANDBOX_URLS/.test(e.message),
  );
  await placement.release("ses-0");
  assert.deepEqual(await placement.lostSessions(), []);
  assert.throws(
    () => new StaticPlacement({ runners: [] }),
    (e: unknown) =>
      e instanceof OrchestratorError && e.code === "invalid_argument" && /OZ0_SANDBOX_URLS/.test(e.message),
  );
});

void it("a local stack's job whose sandbox went with an earlier run says so, and not to set OZ0_SANDBOX_URLS", () => {
  const placement = new StaticPlacement({
    runners: [new SandboxClient({ url: "http://127.0.0.1:40001" })],
    localStack: true,
  });
  assert.throws(
    () => placement.runnerFor("http://127.0.0.1:39999"),
    (e: unknown) =>
      e instanceof OrchestratorError &&
      e.code === "unavailable" &&
      /started by an earlier run of this local stack .* its sandbox http:\/\/127\.0\.0\.1:39999 went with it: the job cannot continue/.test(
        e.message,
      ) &&
      !/OZ0_SANDBOX_URLS/.test(e.message),
  );
});

void it("static placement sends a session a node refused for want of room to the next node, round the list", async () => {
  const urls = ["http://10.0.0.1:7701", "http://10.0.0.2:7701", "http://10.0.0.3:7701"];
  const placement = new StaticPlacement({ runners: urls.map((url) => new SandboxClient({ url })) });
  const first = (await placement.place({ jobId: "job-full", sessionId: "ses-full" }))!.url;
  const seen = [first];
  for (let refusedBy = first; seen.length < 4;) {
    refusedBy = (await placement.place({ jobId: "job-full", sessionId: "ses-full", refusedBy }))!.url;
    seen.push(refusedBy);
  }
  const at = urls.indexOf(first);
  assert.deepEqual(
    seen,
    [0, 1, 2, 3].map((i) => urls[(at + i) % urls.length]),
    "every node in turn, then the first again",
  );
  // A node no longer configured refused it: the session's own node, as without a refusal.
  assert.equal(
    (await placement.place({ jobId: "job-full", sessionId: "ses-full", refusedBy: "http://10.0.0.9:7701" }))!.url,
    first,
  );
});
