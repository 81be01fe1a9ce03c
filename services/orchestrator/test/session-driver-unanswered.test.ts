// A node that keeps sending heartbeats but never answers a session's stream
// (registered at an address where nothing listens) no longer keeps its job
// waiting for ever, its model token alive: following gives up after
// SessionDriverOptions.unansweredNodeMs.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { SessionDriver } from "../src/sessions/session-driver.js";
import type { SandboxPlacement } from "../src/sessions/sandbox-placement.js";
import type { SessionChannel, SessionRunner } from "../src/sessions/session-runner.js";

/** A runner whose every stream fails at once, as a connect to a port where nothing listens does. */
function unansweredRunner(): SessionRunner & { reattached: number; channel(): SessionChannel } {
  const runner = {
    url: "http://127.0.0.1:1",
    reattached: 0,
    channel(): SessionChannel {
      return {
        answeredAt: undefined,
        answerPermission: () => Promise.resolve(),
        answerRuntimeTool: () => Promise.resolve(),
        close: () => undefined,
        // eslint-disable-next-line require-yield -- it fails before its first message
        async *[Symbol.asyncIterator]() {
          throw new ConnectError("connect ECONNREFUSED 127.0.0.1:1", Code.Unavailable);
        },
      };
    },
    start: () => runner.channel(),
    reattach: () => {
      runner.reattached++;
      return runner.channel();
    },
    cancel: () => Promise.resolve(),
  };
  return runner;
}

/** Nodes that send heartbeats: this one never goes silent. */
function heartbeatingPlacement(runner: SessionRunner): SandboxPlacement {
  return {
    tracksNodes: true,
    place: () => Promise.resolve(runner),
    runnerForSession: () => Promise.resolve(runner),
    release: () => Promise.resolve(),
    lostSessions: () => Promise.resolve([]),
    lostSession: () => Promise.resolve(undefined),
  };
}

void test("a node that sends heartbeats but never answers the stream ends following after unansweredNodeMs", async () => {
  const runner = unansweredRunner();
  const driver = new SessionDriver({
    placement: heartbeatingPlacement(runner),
    reattachAttempts: 2,
    unansweredNodeMs: 300,
  });
  const end = await driver.follow({
    jobId: "job_unanswered",
    sessionId: "ses_unanswered",
    state: { sandbox: runner, channel: runner.channel(), sandboxSeq: 0 },
    stopped: () => false,
    handle: () => Promise.resolve(),
  });
  assert.equal(end.kind, "broken");
  assert.match(
    end.kind === "broken" ? end.error.message : "",
    /^the sandbox node at http:\/\/127\.0\.0\.1:1 sends heartbeats but has not answered this session's stream for \d+ s \(.*ECONNREFUSED/,
  );
  assert.ok(runner.reattached >= 2, `re-attached ${runner.reattached} times first`);
});
