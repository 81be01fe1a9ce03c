// A harness's stderr reaches the session's client as `stderr` pieces of the
// log: in order, each once across re-attaches, with the session token
// scrubbed, and bounded to the last OZ0_MAX_SESSION_STDERR_BYTES of each
// session (what was dropped is counted).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { SessionStatus, type RunSessionResponse } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { runToEnd, scenarioStart, SessionStream, startTestSandbox, type TestSandbox } from "./sandbox-test-kit.js";

/** A session token as the LLM proxy mints them: a prefix and 43 random characters. */
const TOKEN = `oz0st_${randomBytes(32).toString("base64url")}`;

function pieces(messages: RunSessionResponse[]): { seq: number; text: string; dropped: number }[] {
  return messages.flatMap((m) =>
    m.message.case === "stderr"
      ? [{ seq: Number(m.seq), text: m.message.value.text, dropped: Number(m.message.value.droppedBytes) }]
      : [],
  );
}

const stderrText = (messages: RunSessionResponse[]): string =>
  pieces(messages)
    .map((p) => p.text)
    .join("");

/** Every 8-character window of the token found in `text`, read through white space. */
function leaks(text: string): string[] {
  const squeezed = text.replace(/\s/g, "");
  const found: string[] = [];
  for (let i = 0; i + 8 <= TOKEN.length; i++)
    if (squeezed.includes(TOKEN.slice(i, i + 8))) found.push(TOKEN.slice(i, i + 8));
  return found;
}

void describe("harness stderr", () => {
  let t: TestSandbox;
  let small: TestSandbox;
  before(async () => {
    t = await startTestSandbox({ isolation: "none", retentionMs: 60_000 });
    small = await startTestSandbox({ isolation: "none", retentionMs: 60_000, maxSessionStderrBytes: 4096 });
  });
  after(async () => {
    await t.close();
    await small.close();
  });

  void it("arrives as stderr pieces before artifacts and exited, with the session token scrubbed there and in stderr_tail", async () => {
    const done = await runToEnd(
      t.client,
      scenarioStart({ mode: "stderr", lines: 3, key: true, pauseMs: 300 }, {}, { llm: { token: TOKEN } }),
    );
    const exited = done.exited();
    assert.equal(exited.status, SessionStatus.FAILED);
    assert.equal(exited.errorCode, "no_result");
    const text = stderrText(done.received);
    assert.match(text, /^line 0\nline 1\nline 2\nANTHROPIC_API_KEY=\[redacted\]\nspaced out: \[redacted\]\n$/);
    assert.deepEqual(leaks(text), []);
    assert.deepEqual(leaks(exited.stderrTail), []);
    assert.match(exited.stderrTail, /line 2\nANTHROPIC_API_KEY=\[redacted\]/);
    const artifactsSeq = Number(done.received.find((m) => m.message.case === "artifacts")?.seq);
    assert.ok(
      pieces(done.received).every((p) => p.seq < artifactsSeq),
      "every piece comes before the artifacts",
    );
    // The whole log, read again from 0, holds the same pieces.
    const replay = new SessionStream(t.client, {
      message: { case: "attach", value: { sessionId: done.sessionId, afterSeq: 0n } },
    });
    await replay.finished;
    assert.deepEqual(pieces(replay.received), pieces(done.received));
  });

  void it("gives a re-attach every piece after its seq, none twice", async () => {
    const first = new SessionStream(t.client, {
      message: { case: "start", value: scenarioStart({ mode: "stderr", lines: 2, ask: true, code: 3 }) },
    });
    await first.waitFor(
      (m) => m.message.case === "event" && m.message.value.event.case === "permissionRequest",
      "the permission request",
    );
    // The lines written before the request are logged within the flush interval.
    await first.waitFor(
      (m) => m.message.case === "stderr" && m.message.value.text.includes("line 1"),
      "the first lines",
    );
    first.drop();
    await first.finished;
    const lastSeen = Number(first.received.at(-1)?.seq ?? 0);
    const second = new SessionStream(t.client, {
      message: { case: "attach", value: { sessionId: first.sessionId, afterSeq: BigInt(lastSeen) } },
    });
    second.send({ message: { case: "permissionAnswer", value: { id: "p1", allow: true } } });
    await second.finished;
    const seqs = [...first.received, ...second.received].map((m) => Number(m.seq));
    assert.deepEqual(
      seqs,
      seqs.map((_, i) => i + 1),
    );
    assert.equal(stderrText(first.received) + stderrText(second.received), "line 0\nline 1\nafter the answer\n");
    assert.equal(second.exited().how.value, 3);
  });

  void it("keeps only the last OZ0_MAX_SESSION_STDERR_BYTES of a session, and says how much it dropped", async () => {
    // 200 lines of 1 KiB and a little: far past the 4 KiB kept.
    const written = Array.from({ length: 200 }, (_, i) => `line ${i} ${"x".repeat(1024)}\n`).join("");
    const live = await runToEnd(small.client, scenarioStart({ mode: "stderr", lines: 200, width: 1024 }));
    const late = new SessionStream(small.client, {
      message: { case: "attach", value: { sessionId: live.sessionId, afterSeq: 0n } },
    });
    await late.finished;
    const bytes = (messages: RunSessionResponse[]): { kept: number; dropped: number } => ({
      kept: Buffer.byteLength(stderrText(messages)),
      dropped: pieces(messages).reduce((sum, p) => sum + p.dropped, 0),
    });
    // The live stream got each piece as it was logged (a piece larger than the allowance keeps its end).
    const seenLive = bytes(live.received);
    assert.equal(
      seenLive.kept + seenLive.dropped,
      Buffer.byteLength(written),
      "live: what came and what was dropped add up to what was written",
    );
    assert.ok(written.endsWith(stderrText(live.received).slice(-4096)));
    // A later attach gets what the log still holds: the last 4 KiB at most, and the size of the rest.
    const kept = stderrText(late.received);
    const seenLate = bytes(late.received);
    assert.ok(seenLate.kept <= 4096, `a late attach got ${seenLate.kept} bytes`);
    assert.ok(seenLate.kept > 0 && written.endsWith(kept), "a late attach got the last bytes");
    assert.equal(
      seenLate.kept + seenLate.dropped,
      Buffer.byteLength(written),
      "late: what was kept and what was dropped add up to what was written",
    );
    assert.match(live.exited().stderrTail, /line 199 x+\n$/);
  });
});

for (const isolation of ["none", "bwrap"] as const) {
  void it(`stops a session (${isolation}) that writes more than OZ0_MAX_SESSION_STDERR_WRITTEN_BYTES to stderr, and reads no more of it`, async () => {
    const capped = await startTestSandbox({
      isolation,
      maxSessionStderrWrittenBytes: 1024 * 1024,
      retentionMs: 60_000,
    });
    try {
      const flood = await runToEnd(
        capped.client,
        scenarioStart({ mode: "flood", stream: "stderr", bytes: 64 * 1024 * 1024 }),
      );
      const exited = flood.exited();
      assert.equal(exited.errorCode, "stderr_too_large", exited.errorMessage);
      assert.match(
        exited.errorMessage,
        /^the harness wrote more than 1048576 bytes to stderr \(OZ0_MAX_SESSION_STDERR_WRITTEN_BYTES\); the rest was not read and the session was stopped$/,
      );
      const logged = pieces(flood.received).reduce((sum, p) => sum + Buffer.byteLength(p.text) + p.dropped, 0);
      assert.ok(logged <= 1024 * 1024, `${logged} bytes of stderr were logged`);
    } finally {
      await capped.close();
    }
  });
}

// A harness that floods the node's disk and ignores SIGTERM is killed at once: with a grace of ten
// minutes, a SIGTERM and its grace would hold this test to its timeout.
for (const [isolation, stream] of [
  ["none", "stderr"],
  ["bwrap", "stderr"],
  ["none", "stdout"],
] as const) {
  void it(
    `kills a session (${isolation}) flooding ${stream} that ignores SIGTERM at once, without its grace`,
    { timeout: 120_000 },
    async () => {
      const capped = await startTestSandbox({
        isolation,
        maxSessionStderrWrittenBytes: 1024 * 1024,
        maxSessionStdoutBytes: 1024 * 1024,
        cancelGraceMs: 600_000,
        retentionMs: 60_000,
      });
      try {
        const flood = await runToEnd(
          capped.client,
          scenarioStart({ mode: "flood", stream, bytes: 64 * 1024 * 1024, ignoreSigterm: true }),
        );
        const exited = flood.exited();
        assert.equal(exited.errorCode, `${stream}_too_large`, exited.errorMessage);
      } finally {
        await capped.close();
      }
    },
  );
}
