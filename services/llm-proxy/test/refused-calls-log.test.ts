// A session can send refused calls as fast as it likes: the proxy's log gets
// its first at once and the rest summed up, at most a line a minute a session.
import assert from "node:assert/strict";
import { describe, it, mock } from "node:test";
import { capturingLogger } from "@oz0/serving/testing";
import { RefusedCallsLog } from "../src/refused-calls-log.js";

const overBudget = (session: string, scope: string) => ({
  code: "MODEL_REQUEST_OVER_BYTES_IN_FLIGHT" as const,
  session,
  reason: `the ${scope}'s budget`,
  fields: { scope, job: `job-of-${session}` },
  message: "a model call was refused: the bytes calls hold at once would pass a budget",
});

void describe("the proxy's log of refused calls", () => {
  void it("a session's flood is its first line at once and one summary a minute, by code and reason", () => {
    mock.timers.enable({ apis: ["setTimeout"] });
    try {
      const { lines, logger } = capturingLogger();
      const log = new RefusedCallsLog({ logger, intervalMs: 60_000 });
      log.refused(overBudget("ses-a", "session"));
      for (let i = 0; i < 500; i++) log.refused(overBudget("ses-a", i % 2 ? "session" : "process"));
      log.refused({
        ...overBudget("ses-a", "session"),
        code: "MODEL_REQUEST_TOO_LARGE",
        reason: "over the size limit",
      });
      // Another session is not drowned by the first: its own first line comes at once.
      log.refused(overBudget("ses-b", "process"));
      assert.deepEqual(
        lines.map((l) => [l.code, l.session]),
        [
          ["MODEL_REQUEST_OVER_BYTES_IN_FLIGHT", "ses-a"],
          ["MODEL_REQUEST_OVER_BYTES_IN_FLIGHT", "ses-b"],
        ],
      );
      assert.equal(lines[0]!.job, "job-of-ses-a");
      mock.timers.tick(60_000);
      const summary = lines.find((l) => l.code === "MODEL_CALLS_REFUSED");
      assert.deepEqual(summary?.reasons, {
        "MODEL_REQUEST_OVER_BYTES_IN_FLIGHT: the process's budget": 250,
        "MODEL_REQUEST_OVER_BYTES_IN_FLIGHT: the session's budget": 250,
        "MODEL_REQUEST_TOO_LARGE: over the size limit": 1,
      });
      assert.equal(summary?.calls, 501);
      assert.equal(lines.length, 3, "ses-b sent nothing more: no summary of it");
      mock.timers.tick(120_000);
      // A quiet minute: the next is logged at once again.
      log.refused(overBudget("ses-a", "session"));
      assert.equal(lines.length, 4);
      assert.equal(lines[3]!.code, "MODEL_REQUEST_OVER_BYTES_IN_FLIGHT");
      log.close();
    } finally {
      mock.timers.reset();
    }
  });

  void it("closing writes what was counted", () => {
    const { lines, logger } = capturingLogger();
    const log = new RefusedCallsLog({ logger });
    for (let i = 0; i < 3; i++) log.refused(overBudget("ses-c", "process"));
    log.close();
    assert.deepEqual(
      lines.map((l) => [l.code, l.calls]),
      [
        ["MODEL_REQUEST_OVER_BYTES_IN_FLIGHT", undefined],
        ["MODEL_CALLS_REFUSED", 2],
      ],
    );
  });
});
