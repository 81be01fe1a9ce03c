// What a person's edited input may hold: JSON's numbers. 1e400 reads as
// Infinity, which no record of the job can hold: the answer is refused,
// saying why, and the call still waits. (It failed as an internal error.)
// And when it may be given: with an approval. A denial with one recorded it as
// the call's input, "changed by" the person, though nothing ran.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { createLogger } from "@oz0/serving";
import { ApprovalService } from "../src/approvals/approval-service.js";
import { soleOwnership } from "../src/cluster/job-ownership.js";
import { ActiveJobs } from "../src/jobs/active-jobs.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import { PermissionPolicy } from "../src/policy/permission-policy.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { permission } from "./job-store-suite.js";
import { jobRecord } from "./postgres-test-support.js";

void test("an edited input holding a number JSON cannot hold, or given with a denial, is refused, and the call still waits", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-answer-input-"));
  const store = new SqliteJobStore({ file: path.join(dir, "orchestrator.db") });
  const logger = createLogger({ name: "answer-input", level: "error" });
  try {
    await store.createJob(jobRecord("j1", { state: "waiting" }));
    await store.append({ jobId: "j1", events: [], permissions: [permission("j1", "p1")] });
    const approvals = new ApprovalService({
      store,
      feed: new JobFeed(),
      policy: new PermissionPolicy(),
      logger,
      ownership: soleOwnership,
      active: new ActiveJobs({ logger }),
    });
    await assert.rejects(
      approvals.answer({
        jobId: "j1",
        callId: "p1",
        allow: true,
        input: JSON.parse('{"command":"npm test","retries":1e400}') as Record<string, unknown>,
        answeredBy: { id: "alice", groups: [] },
      }),
      {
        code: "invalid_argument",
        message:
          "the edited input's number at /retries is not finite (JSON has no Infinity or NaN; 1e400 reads as Infinity): give a finite number",
      },
    );
    assert.equal((await store.getPermission("j1", "p1"))?.status, "pending");
    await assert.rejects(
      approvals.answer({
        jobId: "j1",
        callId: "p1",
        allow: false,
        reason: "not now",
        input: { command: "rm -rf /" },
        answeredBy: { id: "alice", groups: [] },
      }),
      {
        code: "invalid_argument",
        message: "a denial runs nothing, so it takes no input: deny without one, or approve the edited input",
      },
    );
    assert.equal((await store.getPermission("j1", "p1"))?.status, "pending");
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
