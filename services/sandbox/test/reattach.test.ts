// Sessions outlive their streams: a dropped client re-attaches with the last
// seq it saw and gets everything after it, once and in order.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import {
  isText,
  runToEnd,
  scenarioStart,
  SessionStream,
  startTestSandbox,
  type TestSandbox,
} from "./sandbox-test-kit.js";

async function until(check: () => Promise<boolean>): Promise<void> {
  while (!(await check())) await new Promise((resolve) => setTimeout(resolve, 20));
}

const isPermissionRequest = (m: { message: { case?: string; value?: unknown } }): boolean =>
  m.message.case === "event" && (m.message.value as { event: { case?: string } }).event.case === "permissionRequest";

void describe("re-attach", () => {
  let t: TestSandbox;
  before(async () => {
    t = await startTestSandbox({ isolation: "none", retentionMs: 60_000 });
  });
  after(async () => {
    await t.close();
  });

  void it("keeps a session with a pending permission running after the stream drops, and replays after the last seq", async () => {
    const first = new SessionStream(t.client, {
      message: { case: "start", value: scenarioStart({ mode: "permission", after: 20 }, {}, { permissions: true }) },
    });
    await first.waitFor(isPermissionRequest, "the permission request");
    const sessionId = first.sessionId;
    first.drop();
    await first.finished;
    const seen = first.received.map((m) => Number(m.seq));
    const lastSeen = seen.at(-1) ?? 0;

    // Still running, still waiting for the answer.
    const listed = (await t.client.listSessions({})).sessions.find((s) => s.sessionId === sessionId);
    assert.equal(listed?.status, SessionStatus.RUNNING);
    assert.deepEqual(listed?.pendingPermissionIds, ["p1"]);

    const second = new SessionStream(t.client, {
      message: { case: "attach", value: { sessionId, afterSeq: BigInt(lastSeen) } },
    });
    second.send({ message: { case: "permissionAnswer", value: { id: "p1", allow: false, reason: "no" } } });
    await second.finished;
    assert.equal(second.error, undefined);
    const all = [...seen, ...second.received.map((m) => Number(m.seq))];
    assert.deepEqual(
      all,
      all.map((_, i) => i + 1),
      "no seq lost or repeated across the two streams",
    );
    assert.equal(second.exited().result?.text, "denied");
    assert.equal(second.texts().length, 21);
  });

  void it("lets a late attach read a finished session's end, and a full replay from 0", async () => {
    const done = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
    const total = done.received.length;
    const late = new SessionStream(t.client, {
      message: { case: "attach", value: { sessionId: done.sessionId, afterSeq: BigInt(total - 2) } },
    });
    await late.finished;
    assert.deepEqual(
      late.received.map((m) => m.message.case),
      ["artifacts", "exited"],
    );
    const replay = new SessionStream(t.client, {
      message: { case: "attach", value: { sessionId: done.sessionId, afterSeq: 0n } },
    });
    await replay.finished;
    assert.deepEqual(
      replay.received.map((m) => m.seq),
      done.received.map((m) => m.seq),
    );
  });

  void it("refuses an attach past the last seq, and to an unknown session", async () => {
    const done = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
    const ahead = new SessionStream(t.client, {
      message: { case: "attach", value: { sessionId: done.sessionId, afterSeq: 1000n } },
    });
    await ahead.finished;
    assert.equal(ConnectError.from(ahead.error).code, Code.InvalidArgument);
    const unknown = new SessionStream(t.client, {
      message: { case: "attach", value: { sessionId: "never-was", afterSeq: 0n } },
    });
    await unknown.finished;
    assert.equal(ConnectError.from(unknown.error).code, Code.NotFound);
  });

  void it("serves two attached streams at once, each with the whole log", async () => {
    const first = new SessionStream(t.client, { message: { case: "start", value: scenarioStart({ mode: "wait" }) } });
    await first.waitFor(isText("ready"), "ready");
    const second = new SessionStream(t.client, {
      message: { case: "attach", value: { sessionId: first.sessionId, afterSeq: 0n } },
    });
    await second.waitFor(isText("ready"), "ready");
    second.send({ message: { case: "cancel", value: { reason: "from the second stream" } } });
    await Promise.all([first.finished, second.finished]);
    assert.deepEqual(
      first.received.map((m) => m.seq),
      second.received.map((m) => m.seq),
    );
    assert.equal(first.exited().cancelReason, "from the second stream");
  });
});

void describe("retention and limits", () => {
  let t: TestSandbox;
  before(async () => {
    t = await startTestSandbox({ isolation: "none", retentionMs: 0, unreadRetentionMs: 60_000, maxSessions: 2 });
  });
  after(async () => {
    await t.close();
  });

  void it("refuses a session beyond OZ0_MAX_SESSIONS with RESOURCE_EXHAUSTED, and takes one again once a slot frees", async () => {
    const a = new SessionStream(t.client, { message: { case: "start", value: scenarioStart({ mode: "wait" }) } });
    const b = new SessionStream(t.client, { message: { case: "start", value: scenarioStart({ mode: "wait" }) } });
    await a.waitFor(isText("ready"), "ready");
    await b.waitFor(isText("ready"), "ready");
    const c = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
    const error = ConnectError.from(c.error);
    assert.equal(error.code, Code.ResourceExhausted);
    assert.match(error.rawMessage, /OZ0_MAX_SESSIONS=2/);
    a.send({ message: { case: "cancel", value: {} } });
    await a.finished;
    const d = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
    assert.equal(d.exited().status, SessionStatus.COMPLETED);
    b.send({ message: { case: "cancel", value: {} } });
    await b.finished;
  });

  void it("keeps a finished session nobody has read the end of, and forgets it once a re-attach has", async () => {
    // Its client crashed (an orchestrator down) before the session ended.
    const orphan = new SessionStream(t.client, { message: { case: "start", value: scenarioStart({ mode: "wait" }) } });
    await orphan.waitFor(isText("ready"), "ready");
    const sessionId = orphan.sessionId;
    orphan.drop();
    await orphan.finished;
    assert.equal((await t.client.cancelSession({ sessionId, reason: "ended while nobody watched" })).cancelled, true);
    // Ended (or, were it dropped at once, gone: then the attach below fails).
    await until(async () => {
      const listed = (await t.client.listSessions({})).sessions.find((s) => s.sessionId === sessionId);
      return listed === undefined || listed.endTime !== undefined;
    });
    // retentionMs 0, yet it stays: nobody has read its end.
    await new Promise((resolve) => setTimeout(resolve, 100));
    const back = new SessionStream(t.client, { message: { case: "attach", value: { sessionId, afterSeq: 0n } } });
    await back.finished;
    assert.equal(back.error, undefined, "the late re-attach gets the whole log");
    assert.equal(back.exited().status, SessionStatus.CANCELLED);
    // Read now: gone once the retention period (0) has passed.
    await until(async () => !(await t.client.listSessions({})).sessions.some((s) => s.sessionId === sessionId));
  });

  void it("keeps at most OZ0_MAX_UNREAD_SESSIONS finished sessions waiting for a reader, forgetting the oldest first", async () => {
    const capped = await startTestSandbox({
      isolation: "none",
      retentionMs: 0,
      unreadRetentionMs: 60_000,
      maxUnreadSessions: 2,
    });
    try {
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        const orphan = new SessionStream(capped.client, {
          message: { case: "start", value: scenarioStart({ mode: "wait" }) },
        });
        await orphan.waitFor(isText("ready"), "ready");
        ids.push(orphan.sessionId);
        orphan.drop();
        await orphan.finished;
        await capped.client.cancelSession({ sessionId: orphan.sessionId, reason: "ended while nobody watched" });
        await until(async () => {
          const listed = (await capped.client.listSessions({})).sessions.find((s) => s.sessionId === orphan.sessionId);
          return listed === undefined || listed.endTime !== undefined;
        });
      }
      const kept = (await capped.client.listSessions({})).sessions.map((s) => s.sessionId);
      assert.deepEqual(
        ids.map((id) => kept.includes(id)),
        [false, true, true],
        "the oldest unread one went first",
      );
    } finally {
      await capped.close();
    }
  });

  void it("keeps the finished sessions' logs within OZ0_MAX_ENDED_SESSION_LOG_BYTES, forgetting read ones before unread ones", async () => {
    // Each session logs about 100 KiB of events; the node keeps 300 KiB of finished logs.
    const capped = await startTestSandbox({
      isolation: "none",
      retentionMs: 60_000,
      unreadRetentionMs: 60_000,
      maxEndedSessionLogBytes: 300 * 1024,
    });
    const chatty = (holdMs?: number) => scenarioStart({ mode: "chatty", events: 100, chunkBytes: 1000, holdMs });
    try {
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push((await runToEnd(capped.client, chatty())).sessionId);
      for (let i = 0; i < 3; i++) {
        // Left as soon as it started, its harness silent until long after: no stream is there when its end is
        // logged, so it stays unread. (Left at its artifacts, the stream was still there, most of the time, to be
        // handed its end, which makes it read: the test then passed whichever way the node forgot them.)
        const unread = new SessionStream(capped.client, { message: { case: "start", value: chatty(500) } });
        await unread.waitFor((m) => m.sessionId !== "", "the session's first message");
        ids.push(unread.sessionId);
        unread.drop();
        await until(async () => {
          const listed = (await capped.client.listSessions({})).sessions.find((s) => s.sessionId === unread.sessionId);
          return listed?.endTime !== undefined;
        });
      }
      const kept = (await capped.client.listSessions({})).sessions.map((s) => s.sessionId);
      assert.deepEqual(
        ids.map((id) => kept.includes(id)),
        [false, false, false, false, true, true],
        "the read ones went first, then the oldest unread one",
      );
      // A forgotten one is NOT_FOUND; a kept unread one still gives its whole log.
      const late = new SessionStream(capped.client, {
        message: { case: "attach", value: { sessionId: ids[3]!, afterSeq: 0n } },
      });
      await late.finished;
      assert.equal(ConnectError.from(late.error).code, Code.NotFound);
      const back = new SessionStream(capped.client, {
        message: { case: "attach", value: { sessionId: ids[5]!, afterSeq: 0n } },
      });
      await back.finished;
      assert.equal(back.exited().status, SessionStatus.COMPLETED);
    } finally {
      await capped.close();
    }
  });

  void it("forgets a finished session after the retention period", async () => {
    const done = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
    // retentionMs 0: dropped as soon as its timer runs.
    while ((await t.client.listSessions({})).sessions.some((s) => s.sessionId === done.sessionId)) {
      await new Promise((resolve) => setImmediate(resolve));
    }
    const late = new SessionStream(t.client, {
      message: { case: "attach", value: { sessionId: done.sessionId, afterSeq: 0n } },
    });
    await late.finished;
    assert.equal(ConnectError.from(late.error).code, Code.NotFound);
  });
});
