// Under bubblewrap each session reaches its LLM endpoints through sockets of
// its own, which the sandbox caps: a session holding connections past its
// share is refused more, while another session's model call and a new
// session's start still work; all sessions together stay under the overall
// cap, which keeps descriptors for the sandbox's own work; and a connection
// idle past the timeout is closed. Before, one shared socket per origin took
// every connection of every session (a session holding ten thousand took
// the sandbox's descriptors, and other sessions could not even start).
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import { after, before, describe, it } from "node:test";
import { ForwardBudget, REFUSAL_LOG_INTERVAL_MS } from "../src/llm-forwarder.js";
import {
  recordingLogger,
  runToEnd,
  scenarioStart,
  SessionStream,
  startTestSandbox,
  type TestSandbox,
} from "./sandbox-test-kit.js";

/** What a `hold-forwards` session reports: how many of its connections the origin answered, how many were closed unanswered. */
interface Held {
  answered: number;
  closed: number;
}

void describe("the LLM forwards' caps", () => {
  // Answers each request's first bytes and holds the connection, as a model streaming a long answer would.
  const held = new Set<net.Socket>();
  const origin = net.createServer((socket) => {
    held.add(socket);
    socket.on("error", () => {});
    socket.on("close", () => held.delete(socket));
    socket.once("data", () => socket.write("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"));
  });
  // What the model calls of other sessions reach.
  const model = http.createServer((_req, res) => res.end("pong"));
  let originUrl: string;
  let modelUrl: string;
  before(async () => {
    await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
    await new Promise<void>((resolve) => model.listen(0, "127.0.0.1", resolve));
    originUrl = `http://127.0.0.1:${(origin.address() as net.AddressInfo).port}`;
    modelUrl = `http://127.0.0.1:${(model.address() as net.AddressInfo).port}/anthropic`;
  });
  after(() => {
    for (const socket of held) socket.destroy();
    origin.close();
    model.close();
  });

  /** Starts a session holding `count` connections to the origin; resolves once it reports what it got. */
  async function holdForwards(t: TestSandbox, sessionId: string, count: number): Promise<[SessionStream, Held]> {
    const stream = new SessionStream(t.client, {
      message: {
        case: "start",
        value: scenarioStart(
          { mode: "hold-forwards", count },
          {},
          { sessionId, llm: { anthropicBaseUrl: originUrl, token: `tok-${sessionId}` } },
        ),
      },
    });
    const report = await stream.waitFor(
      (m) => m.message.case === "event" && m.message.value.event.case === "text",
      "the held connections' count",
    );
    const event = report.message.case === "event" ? report.message.value.event : undefined;
    return [stream, JSON.parse(event?.case === "text" ? event.value.text : "{}") as Held];
  }

  async function cancel(stream: SessionStream): Promise<void> {
    stream.send({ message: { case: "cancel", value: { reason: "the test is over" } } });
    await stream.finished;
  }

  void it("refuses a session's connections past its cap, and another session still starts and reaches its model", async (ctx) => {
    const { logger, lines } = recordingLogger();
    const t = await startTestSandbox({ isolation: "bwrap", maxForwardsPerSession: 4, logger });
    ctx.after(() => t.close());
    const [greedy, got] = await holdForwards(t, "ses_greedy", 10);
    assert.deepEqual(got, { answered: 4, closed: 6 }, "four forwarded, the rest closed by the sandbox");
    // The operator is told, once for the six (the harness sees only closed connections).
    const told = lines.filter((l) => /OZ0_LLM_FORWARD_MAX_CONNECTIONS/.test(l.msg));
    assert.deepEqual(
      told.map((l) => [l.level, l.fields]),
      [["warn", { sessionId: "ses_greedy", open: 4, cap: 4, refusedSinceLastLine: 1 }]],
    );
    assert.match(told[0]!.msg, /OZ0_LLM_FORWARD_MAX_CONNECTIONS_PER_SESSION/);
    const other = await runToEnd(
      t.client,
      scenarioStart({ mode: "llm" }, {}, { sessionId: "ses_other", llm: { anthropicBaseUrl: modelUrl, token: "t" } }),
    );
    assert.equal(other.exited().result?.text, "200 pong", `${other.exited().errorMessage} ${String(other.error)}`);
    await cancel(greedy);
  });

  void it("holds all sessions together under the overall cap", async (ctx) => {
    const t = await startTestSandbox({ isolation: "bwrap", maxForwardsPerSession: 4, maxForwards: 6 });
    ctx.after(() => t.close());
    const [first, firstGot] = await holdForwards(t, "ses_first", 10);
    assert.deepEqual(firstGot, { answered: 4, closed: 6 });
    const [second, secondGot] = await holdForwards(t, "ses_second", 10);
    assert.deepEqual(secondGot, { answered: 2, closed: 8 }, "only what the first left of the six");
    await Promise.all([cancel(first), cancel(second)]);
  });

  void it("closes a forwarded connection that stays idle past the timeout", async (ctx) => {
    const t = await startTestSandbox({ isolation: "bwrap", forwardIdleTimeoutMs: 100 });
    ctx.after(() => t.close());
    const stream = await runToEnd(
      t.client,
      scenarioStart(
        { mode: "idle-forward", giveUpMs: 60_000 },
        {},
        { sessionId: "ses_idle", llm: { anthropicBaseUrl: originUrl, token: "t" } },
      ),
    );
    assert.equal(stream.exited().result?.text, "closed by the sandbox", String(stream.error));
  });

  void it("logs a group's refusals at most once a minute, with how many came since, and names the cap that refused", () => {
    const { logger, lines } = recordingLogger();
    let now = 1_000_000;
    const budget = new ForwardBudget({ perSession: 2, total: 3, idleTimeoutMs: 60_000 }, { logger, now: () => now });
    const a = budget.group(2, { sessionId: "ses_a" });
    const b = budget.group(2, { sessionId: "ses_b" });
    assert.deepEqual([a.admit(), a.admit(), a.admit(), a.admit()], [true, true, false, false]);
    now += REFUSAL_LOG_INTERVAL_MS - 1;
    assert.equal(a.admit(), false);
    now += 1;
    assert.equal(a.admit(), false);
    // The node's cap: ses_b is refused with one of its own while under its own cap.
    assert.deepEqual([b.admit(), b.admit()], [true, false]);
    assert.deepEqual(
      lines.map((l) => l.fields),
      [
        { sessionId: "ses_a", open: 2, cap: 2, refusedSinceLastLine: 1 },
        { sessionId: "ses_a", open: 2, cap: 2, refusedSinceLastLine: 3 },
        { sessionId: "ses_b", open: 3, cap: 3, refusedSinceLastLine: 1 },
      ],
    );
    assert.match(lines[0]!.msg, /OZ0_LLM_FORWARD_MAX_CONNECTIONS_PER_SESSION/);
    assert.match(
      lines[2]!.msg,
      /the node's forwarded LLM connections are at their cap \(OZ0_LLM_FORWARD_MAX_CONNECTIONS\)/,
    );
    a.release();
    assert.equal(b.admit(), true, "room again once one ends");
  });
});
