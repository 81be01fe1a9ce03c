// Static placement (OZ0_SANDBOX_URLS): the configured nodes in turn, a stored
// job's node found again by its URL, and a clear error for a node no longer
// configured. Registry placement runs against real nodes in sandbox-nodes.test.ts.
import assert from "node:assert/strict";
import { it } from "node:test";
import { OrchestratorError } from "../src/orchestrator-error.js";
import { StaticPlacement } from "../src/sandbox-placement.js";
import { SandboxClient } from "../src/sandbox-client.js";

void it("static placement takes the configured nodes in turn and never loses a session", async () => {
  const runners = ["http://10.0.0.1:7701", "http://10.0.0.2:7701"].map((url) => new SandboxClient({ url }));
  const placement = new StaticPlacement({ runners });
  const placed = [];
  for (let i = 0; i < 5; i++) placed.push((await placement.place({ jobId: `job-${i}`, sessionId: `ses-${i}` }))?.url);
  assert.deepEqual(placed, ["http://10.0.0.1:7701", "http://10.0.0.2:7701", "http://10.0.0.1:7701", "http://10.0.0.2:7701", "http://10.0.0.1:7701"]);
  assert.equal(placement.runnerFor("http://10.0.0.2:7701"), runners[1]);
  assert.throws(
    () => placement.runnerFor("http://10.0.0.3:7701"),
    (e: unknown) => e instanceof OrchestratorError && e.code === "unavailable" && /sandbox http:\/\/10\.0\.0\.3:7701 is not configured any more; add it to OZ0_SANDBOX_URLS/.test(e.message),
  );
  await placement.release("ses-0");
  assert.deepEqual(await placement.lostSessions(), []);
  assert.throws(() => new StaticPlacement({ runners: [] }), (e: unknown) => e instanceof OrchestratorError && e.code === "invalid_argument" && /OZ0_SANDBOX_URLS/.test(e.message));
});
