// What one session can make the proxy hold at once: a real proxy on loopback
// in front of the scripted model, whose answers to calls marked HOLD wait
// until the test lets them go, so calls stay in flight with their bodies held.
// Budgets here: 250 000 bytes a session, 450 000 for the process, of which
// requests may take 337 500 (a quarter is kept for answers); requests of
// 100 000 bytes, so two of a session's calls fit and a third does not, and
// three calls of any sessions fit and a fourth does not.
import assert from "node:assert/strict";
import http from "node:http";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import { startFixture, type ProxyFixture, type SessionEndpoint } from "./proxy-fixture.js";

const SESSION_LIMIT = 250_000;
const PROCESS_LIMIT = 450_000;
const BODY = 100_000;
const REQUEST_ROOM = PROCESS_LIMIT - PROCESS_LIMIT / 4;

/** Holds the scripted model's answers to calls whose conversation says HOLD until `release`. */
class Gate {
  arrived = 0;
  #waiting: (() => void)[] = [];
  #watchers: { count: number; resolve: () => void }[] = [];

  readonly turn = (request: ScriptedRequest): ScriptedTurn | Promise<ScriptedTurn> => {
    const conversation = JSON.stringify(request.body?.messages ?? request.body?.input ?? "");
    if (!conversation.includes("HOLD")) return { text: "ok" };
    // HOLDBIG: an answer as large as a request.
    const text = conversation.includes("HOLDBIG") ? "y".repeat(BODY) : "ok";
    return new Promise((resolve) => {
      this.#waiting.push(() => resolve({ text }));
      this.arrived += 1;
      for (const watcher of this.#watchers.filter((w) => this.arrived >= w.count)) watcher.resolve();
    });
  };

  /** Resolves once `count` held calls in all have reached the model. */
  reached(count: number): Promise<void> {
    if (this.arrived >= count) return Promise.resolve();
    return new Promise((resolve) => this.#watchers.push({ count, resolve }));
  }

  release(): void {
    for (const answer of this.#waiting.splice(0)) answer();
  }
}

/** Resolves once `predicate` holds, looking again every few milliseconds (a wait for an event, not a deadline). */
async function until(predicate: () => boolean): Promise<void> {
  while (!predicate()) await new Promise((resolve) => setTimeout(resolve, 5));
}

/** An Anthropic Messages body of exactly `bytes` bytes; `hold` makes the scripted model wait. */
function messagesBody(bytes: number, options: { hold?: boolean; stream?: boolean } = {}): string {
  const shell = (text: string) =>
    JSON.stringify({
      model: "claude-test",
      max_tokens: 16,
      ...(options.stream ? { stream: true } : {}),
      messages: [{ role: "user", content: `${options.hold ? "HOLD" : "PASS"}${text}` }],
    });
  return shell("x".repeat(bytes - shell("").length));
}

/** An OpenAI Chat Completions body of exactly `bytes` bytes; `big` (with `hold`) asks for an answer as large. */
function chatBody(bytes: number, options: { hold?: boolean; big?: boolean } = {}): string {
  const shell = (text: string) =>
    JSON.stringify({
      model: "gpt-test",
      messages: [{ role: "user", content: `${options.hold ? (options.big ? "HOLDBIG" : "HOLD") : "PASS"}${text}` }],
    });
  return shell("x".repeat(bytes - shell("").length));
}

interface Answer {
  status: number;
  text: string;
  headers: Headers;
}

function headersOf(endpoint: SessionEndpoint): Record<string, string> {
  return { "content-type": "application/json", "x-api-key": endpoint.token, ...endpoint.headers };
}

async function call(
  endpoint: SessionEndpoint,
  body: string | ReadableStream<Uint8Array>,
  options: { wire?: "anthropic" | "openai"; signal?: AbortSignal } = {},
): Promise<Answer> {
  const url =
    options.wire === "openai"
      ? `${endpoint.openaiBaseUrl}/chat/completions`
      : `${endpoint.anthropicBaseUrl}/v1/messages`;
  const init: RequestInit & { duplex?: "half" } = { method: "POST", headers: headersOf(endpoint), body };
  if (body instanceof ReadableStream) init.duplex = "half";
  if (options.signal) init.signal = options.signal;
  const response = await fetch(url, init);
  return { status: response.status, text: await response.text(), headers: response.headers };
}

/**
 * A request of `session` that declares 200 000 bytes, sends the first 1 000 and waits (its body never
 * ends), returned once the proxy holds its reservation: the session's next call of 100 000 bytes is then
 * refused 429 (alone either fits). The stall comes on a new connection, the probes on one already open, so
 * a probe sent at once overtakes it in the proxy and the stall is refused itself: each probe waits a while
 * longer than the last (a wait for the stall to be taken in, not a deadline), and a refused stall is sent again.
 */
async function stalledRequest(session: SessionEndpoint): Promise<http.ClientRequest> {
  for (let probes = 0, waitMs = 10; ;) {
    let answered = false;
    const request = http.request(`${session.anthropicBaseUrl}/v1/messages`, {
      method: "POST",
      headers: { ...headersOf(session), "content-length": String(2 * BODY) },
    });
    request.on("response", (response) => {
      answered = true;
      response.resume();
    });
    request.on("error", () => undefined); // destroyed by the test
    await new Promise((resolve) => request.write(messagesBody(2 * BODY).slice(0, 1000), resolve));
    for (;;) {
      assert.ok(++probes < 100, "the stalled request's reservation never showed");
      await new Promise((resolve) => setTimeout(resolve, (waitMs *= 1.5)));
      const probe = await call(session, messagesBody(BODY));
      if (answered) break;
      if (probe.status === 429) return request;
      assert.equal(probe.status, 200, probe.text);
    }
    request.destroy();
  }
}

function anthropicError(answer: Answer): { type: string; message: string } {
  const body = JSON.parse(answer.text) as { type: string; error: { type: string; message: string } };
  assert.equal(body.type, "error");
  return body.error;
}

void describe("the proxy's budgets of bytes in flight", () => {
  const gate = new Gate();
  let fx: ProxyFixture;
  before(async () => {
    fx = await startFixture({
      turns: gate.turn,
      config: { maxSessionBytesInFlight: SESSION_LIMIT, maxBytesInFlight: PROCESS_LIMIT },
    });
  });
  after(async () => {
    // Calls a failed test left held would keep the scripted model from closing.
    gate.release();
    await fx.close();
  });

  void it("refuses a session's calls past its budget 429 before reading them, while another session's call goes through", async () => {
    const a = await fx.session();
    const b = await fx.session();
    const requestsBefore = fx.model.requests.length;
    const arrivedBefore = gate.arrived;
    const calls = Array.from({ length: 6 }, () => call(a, messagesBody(BODY, { hold: true })));
    // Two fit (200 000 bytes); the other four are answered at once, without waiting for the two.
    await gate.reached(arrivedBefore + 2);
    const settled: Answer[] = [];
    // Settled as they are answered (no polling: a loop left waiting would keep a failed run alive).
    const fourAnswered = new Promise<string>((resolve) => {
      for (const pending of calls)
        void pending.then((answer) => {
          if (settled.push(answer) === 4) resolve("four answered");
        });
    });
    const first = await Promise.race([
      fourAnswered,
      gate.reached(arrivedBefore + 3).then(() => "a third call reached the model"),
    ]);
    assert.equal(first, "four answered");
    for (const refused of settled) {
      assert.equal(refused.status, 429, refused.text);
      assert.equal(refused.headers.get("retry-after"), "1");
      assert.equal(refused.headers.get("x-should-retry"), "true", "the SDKs retry it");
      const error = anthropicError(refused);
      assert.equal(error.type, "rate_limit_error");
      assert.match(error.message, new RegExp(`this session's calls .*\\(${SESSION_LIMIT} bytes\\)`));
      assert.match(error.message, /OZ0_MAX_SESSION_BYTES_IN_FLIGHT/);
    }
    // Another session is not held back by this one's budget.
    const other = await call(b, messagesBody(BODY));
    assert.equal(other.status, 200, other.text);

    gate.release();
    const answers = await Promise.all(calls);
    assert.deepEqual(answers.map((answer) => answer.status).sort(), [200, 200, 429, 429, 429, 429]);
    assert.equal(fx.model.requests.length, requestsBefore + 3, "refused calls never reached the provider");
    // Refused calls are not model calls: not metered, no budget spent (as a body over the size limit).
    const usage = await fx.control.getUsage({ job: a.job });
    assert.equal(usage.total?.calls, 2n);
    // Four refusals of one session: the first is logged at once, the rest summed up later (refused-calls-log.test.ts).
    const logged = fx.logs.filter(
      (line) => line.includes("MODEL_REQUEST_OVER_BYTES_IN_FLIGHT") && line.includes(a.session),
    );
    assert.equal(logged.length, 1);
    assert.ok(!logged.some((line) => line.includes("xxxxxxxx")), "no byte of a body is logged");
  });

  void it("gives the bytes back when calls end, answered or left by their client", async () => {
    const a = await fx.session();
    /** Two calls of `a` are held: a third is refused, not sent on. */
    const assertFull = async (arrived: number): Promise<void> => {
      const third = await Promise.race([
        call(a, messagesBody(BODY, { hold: true })).then((answer) => answer.status),
        gate.reached(arrived + 1).then(() => "reached the model"),
      ]);
      assert.equal(third, 429);
    };
    // A client that leaves a stream waiting for its answer: the proxy stops it and lets go of its body.
    const leaving = new AbortController();
    const eventsBefore = fx.events.length;
    let arrived = gate.arrived;
    const left = [1, 2].map(() =>
      call(a, messagesBody(BODY, { hold: true, stream: true }), { signal: leaving.signal }).catch(
        (error: unknown) => error,
      ),
    );
    await gate.reached((arrived += 2));
    await assertFull(arrived);
    leaving.abort();
    await Promise.all(left);
    await until(() => fx.events.filter((e) => e.session === a.session).length === 2);
    assert.ok(fx.events.slice(eventsBefore).every((e) => e.outcome === "client_aborted"));

    /** Two calls of the same size are taken at once, fill the budget, and are answered. */
    const twoAnswered = async (): Promise<void> => {
      const answered = [1, 2].map(() => call(a, messagesBody(BODY, { hold: true })));
      await gate.reached((arrived += 2));
      await assertFull(arrived);
      gate.release();
      assert.deepEqual(
        (await Promise.all(answered)).map((answer) => answer.status),
        [200, 200],
      );
    };
    // The budget is whole again once the streams' clients left; and again once those two were answered.
    await twoAnswered();
    await twoAnswered();
  });

  void it("refuses any call 503 once all sessions' requests hold what requests may take, in the route's error shape", async () => {
    const [a, b, c] = [await fx.session(), await fx.session(), await fx.session()];
    const arrived = gate.arrived;
    // 300 000 bytes held by two sessions, each within its own budget.
    const held = [a, a, b].map((session) => call(session, chatBody(BODY, { hold: true }), { wire: "openai" }));
    await gate.reached(arrived + 3);
    const refused = await call(c, chatBody(BODY), { wire: "openai" });
    assert.equal(refused.status, 503, refused.text);
    assert.equal(refused.headers.get("retry-after"), "1");
    const { error } = JSON.parse(refused.text) as { error: { type: string; message: string } };
    assert.equal(error.type, "overloaded_error");
    assert.match(
      error.message,
      new RegExp(
        `all sessions' calls .* past what requests may take \\(${REQUEST_ROOM} bytes; ${PROCESS_LIMIT / 4} more are kept for answers\\)`,
      ),
    );
    assert.match(error.message, /OZ0_MAX_BYTES_IN_FLIGHT/);
    // A smaller call still fits beside them.
    const small = await call(c, chatBody(BODY / 4), { wire: "openai" });
    assert.equal(small.status, 200, small.text);
    gate.release();
    assert.deepEqual(
      (await Promise.all(held)).map((answer) => answer.status),
      [200, 200, 200],
    );
  });

  void it("a paid answer finds room when requests hold all they may: the new request is refused, not the answer", async () => {
    // Calls waiting on the provider hold their request bodies (as slow uploads would). Had requests been
    // free to fill the whole budget, a fourth would have been taken, and then the answer the provider had
    // already billed, dropped.
    const [a, b, c] = [await fx.session(), await fx.session(), await fx.session()];
    const arrived = gate.arrived;
    const held = [
      call(a, chatBody(BODY, { hold: true }), { wire: "openai" }),
      call(a, chatBody(BODY, { hold: true }), { wire: "openai" }),
      call(b, chatBody(BODY, { hold: true, big: true }), { wire: "openai" }),
    ];
    await gate.reached(arrived + 3);
    const fourth = await Promise.race([
      call(c, chatBody(BODY, { hold: true }), { wire: "openai" }).then((answer) => answer.status),
      gate.reached(arrived + 4).then(() => "reached the model"),
    ]);
    assert.equal(fourth, 503, "the new request is refused before it costs anything");
    gate.release();
    const answers = await Promise.all(held);
    assert.deepEqual(
      answers.map((answer) => answer.status),
      [200, 200, 200],
      answers.map((answer) => answer.text.slice(0, 300)).join("\n"),
    );
    const big = JSON.parse(answers[2]!.text) as { choices: { message: { content: string } }[] };
    assert.equal(big.choices[0]!.message.content.length, BODY, "the large answer came whole");
  });

  void it("a session that declares bodies it does not send holds back only its own calls, not other sessions'", async () => {
    // Two sessions each declare 200 000 bytes, send 1 000 and wait: 400 000 declared, within the process's
    // 450 000 only if declared sizes counted there. They count in the declaring session's budget only, so a
    // third session's 100 000-byte call goes through, while each stalling session's own next call is refused.
    const [h1, h2, c] = [await fx.session(), await fx.session(), await fx.session()];
    const stalled = [await stalledRequest(h1), await stalledRequest(h2)];
    const third = await call(c, messagesBody(BODY));
    assert.equal(third.status, 200, third.text);
    for (const request of stalled) request.destroy();
    // Their reservations are given back once the proxy sees them go.
    for (let status = 0, probes = 0; status !== 200;) {
      assert.ok(++probes < 1000, "the stalled requests' reservations were never given back");
      status = (await call(h1, messagesBody(BODY))).status;
      if (status !== 200) assert.equal(status, 429);
    }
  });

  void it("counts a chunked body as it arrives and refuses it at the chunk that crosses the budget", async () => {
    const a = await fx.session();
    const arrived = gate.arrived;
    const holding = call(a, messagesBody(BODY, { hold: true }));
    await gate.reached(arrived + 1);
    // A body without a Content-Length, far larger than what is left of the session's budget:
    // chunk after chunk until the answer comes (or 20 MB, what the proxy would read without a budget).
    const whole = messagesBody(20_000_000);
    const piece = 16 * 1024;
    let sent = 0;
    let answered = false;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        await new Promise((resolve) => setImmediate(resolve));
        if (answered || sent >= whole.length) {
          controller.close();
          return;
        }
        controller.enqueue(Buffer.from(whole.slice(sent, sent + piece)));
        sent += piece;
      },
    });
    const refused = await call(a, body);
    answered = true;
    assert.equal(refused.status, 429, refused.text.slice(0, 300));
    assert.match(anthropicError(refused).message, /OZ0_MAX_SESSION_BYTES_IN_FLIGHT/);
    assert.ok(sent < whole.length, "answered before the body ended");
    gate.release();
    assert.equal((await holding).status, 200);
  });

  void it("refuses 413, not 429, a body larger than the session's budget itself: waiting never helps", async () => {
    const a = await fx.session();
    const answer = await call(a, messagesBody(SESSION_LIMIT + 1));
    assert.equal(answer.status, 413, answer.text);
    assert.equal(answer.headers.get("x-should-retry"), "false");
    const error = anthropicError(answer);
    assert.match(error.message, /can never fit/);
    assert.match(error.message, /OZ0_MAX_SESSION_BYTES_IN_FLIGHT/);
  });
});

void describe("answers the proxy holds whole count against the same budgets", () => {
  let fx: ProxyFixture;
  before(async () => {
    fx = await startFixture({
      // A whole answer larger than a session may hold.
      turns: () => ({ text: "y".repeat(SESSION_LIMIT) }),
      config: { maxSessionBytesInFlight: SESSION_LIMIT, maxBytesInFlight: PROCESS_LIMIT },
    });
  });
  after(() => fx.close());

  void it("drops a whole answer that would cross the budget, answers 502 naming the setting, and meters the call", async () => {
    const a = await fx.session();
    const answer = await call(a, messagesBody(1000));
    assert.equal(answer.status, 502, answer.text.slice(0, 300));
    const error = anthropicError(answer);
    assert.equal(error.type, "api_error");
    assert.match(error.message, /the provider's answer .*OZ0_MAX_SESSION_BYTES_IN_FLIGHT.*dropped/);
    assert.equal(fx.model.requests.length, 1, "not retried: the provider billed it");
    const usage = await fx.control.getUsage({ job: a.job });
    assert.equal(usage.total?.calls, 1n);
    assert.equal(usage.total?.failedCalls, 1n);
    assert.equal(usage.total?.estimated, true);
  });
});

/** An Anthropic stream whose one text delta is 2 MB, written 32 KB at a time, then the stream's end. */
async function answerInPieces(res: http.ServerResponse): Promise<void> {
  res.writeHead(200, { "content-type": "text/event-stream" });
  const write = (text: string) => new Promise<void>((resolve) => res.write(text, () => resolve()));
  await write(
    `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { id: "msg_big", type: "message", role: "assistant", model: "claude-test", content: [], usage: { input_tokens: 1, output_tokens: 1 } } })}\n\n`,
  );
  await write(
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
  );
  await write(
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"',
  );
  for (let i = 0; i < 64 && !res.destroyed; i += 1) await write("z".repeat(32 * 1024));
  if (res.destroyed) return;
  await write('"}}\n\n');
  res.end(
    'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\nevent: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n',
  );
}

/**
 * A proxy (the budgets above) whose one provider, `anthropic`, is `answer`: a raw HTTP server handed each
 * request's path and whole body, for answers the scripted model does not give.
 */
async function proxyBeforeProvider(
  answer: (res: http.ServerResponse, request: { url: string; body: string }) => void,
): Promise<{ fx: ProxyFixture; close: () => Promise<void> }> {
  const upstream = http.createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => (body += chunk));
    req.on("end", () => answer(res, { url: req.url ?? "", body }));
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  const fx = await startFixture({
    turns: () => ({ text: "unused" }),
    config: {
      maxSessionBytesInFlight: SESSION_LIMIT,
      maxBytesInFlight: PROCESS_LIMIT,
      providers: [
        {
          name: "anthropic",
          baseUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
          keySecret: "ANTHROPIC_API_KEY",
          prices: { "*": { input: 3, output: 15 } },
        },
      ],
    },
  });
  return {
    fx,
    close: async () => {
      await fx.close();
      upstream.closeAllConnections();
      await new Promise((resolve) => upstream.close(resolve));
    },
  };
}

void describe("an HTTP/2 client that resets its stream mid-answer", () => {
  // The proxy's port takes HTTP/2 without negotiation, and a harness can speak it through the sandbox's
  // forwarder. This provider starts a streamed answer for a conversation that says HOLD and then waits;
  // anything else gets a whole answer at once.
  let fx: ProxyFixture;
  let close: () => Promise<void>;
  before(async () => {
    ({ fx, close } = await proxyBeforeProvider((res, { body }) => {
      if (!body.includes("HOLD")) {
        res.writeHead(200, { "content-type": "application/json" }).end(
          JSON.stringify({
            id: "msg_ok",
            type: "message",
            role: "assistant",
            model: "claude-test",
            content: [{ type: "text", text: "ok" }],
            stop_reason: "end_turn",
            usage: { input_tokens: 1, output_tokens: 1 },
          }),
        );
        return;
      }
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(
        `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { id: "msg_held", type: "message", role: "assistant", model: "claude-test", content: [], usage: { input_tokens: 1, output_tokens: 1 } } })}\n\n`,
      );
      // Left open: the proxy goes away first, when its client does.
    }));
  });
  after(() => close());

  void it("gives the call's bytes back: the session's budget is whole again", async () => {
    const a = await fx.session();
    const url = new URL(a.anthropicBaseUrl);
    const client = http2.connect(url.origin);
    try {
      // Two streamed calls of 100 000 bytes each, reset by the client once their answers have begun.
      const streams = [1, 2].map(() => {
        const stream = client.request({ ":method": "POST", ":path": `${url.pathname}/v1/messages`, ...headersOf(a) });
        stream.on("error", () => undefined); // reset by the test
        const firstBytes = new Promise((resolve) => stream.once("data", resolve));
        stream.end(messagesBody(BODY, { hold: true, stream: true }));
        return { stream, firstBytes };
      });
      await Promise.all(streams.map((s) => s.firstBytes));
      for (const { stream } of streams) stream.close(http2.constants.NGHTTP2_CANCEL);
      // A call of 200 000 bytes fits only once both gave their 200 000 back (250 000 a session).
      for (let status = 0, probes = 0, waitMs = 5; status !== 200;) {
        assert.ok(++probes < 30, "the reset calls' bytes were never given back");
        await new Promise((resolve) => setTimeout(resolve, (waitMs *= 1.2)));
        const probe = await call(a, messagesBody(2 * BODY));
        status = probe.status;
        if (status !== 200) assert.equal(status, 429, probe.text);
      }
    } finally {
      client.close();
    }
  });
});

void describe("what a provider sends counts against the budgets as it arrives", () => {
  const requests: string[] = [];
  let fx: ProxyFixture;
  let close: () => Promise<void>;
  before(async () => {
    ({ fx, close } = await proxyBeforeProvider((res, { url, body }) => {
      requests.push(url);
      const large = JSON.stringify({ padding: "z".repeat(2_000_000) });
      if (url.includes("count_tokens")) res.writeHead(200, { "content-type": "application/json" }).end(large);
      else if (body.includes("ERRBIG")) res.writeHead(500, { "content-type": "application/json" }).end(large);
      else void answerInPieces(res);
    }));
  });
  after(() => close());

  void it("cuts a stream at an event that would cross the budget, with an error event naming the setting", async () => {
    const a = await fx.session();
    const answer = await call(a, messagesBody(1000, { stream: true }));
    assert.equal(answer.status, 200);
    assert.match(answer.text, /event: message_start/);
    assert.ok(!answer.text.includes("zzzz"), "the event that did not fit is not sent");
    assert.match(answer.text, /event: error\ndata: .*OZ0_MAX_SESSION_BYTES_IN_FLIGHT.*cut off here/);
    assert.ok(!answer.text.includes("message_stop"));
  });

  void it("drops an error body over the budget with a 502 naming the setting, and does not retry it", async () => {
    const a = await fx.session();
    const before = requests.length;
    const answer = await call(a, messagesBody(1000).replace("PASS", "ERRBIG"));
    assert.equal(answer.status, 502, answer.text.slice(0, 300));
    assert.match(anthropicError(answer).message, /the provider's answer .*OZ0_MAX_SESSION_BYTES_IN_FLIGHT/);
    assert.equal(requests.length, before + 1, "one attempt: the budget, not the provider, refused it");
  });

  void it("drops a count_tokens answer over the budget with a 502 naming the setting", async () => {
    const a = await fx.session();
    const response = await fetch(`${a.anthropicBaseUrl}/v1/messages/count_tokens`, {
      method: "POST",
      headers: headersOf(a),
      body: JSON.stringify({ model: "claude-test", messages: [{ role: "user", content: "hi" }] }),
    });
    const text = await response.text();
    assert.equal(response.status, 502, text.slice(0, 300));
    assert.match(text, /the provider's answer .*OZ0_MAX_SESSION_BYTES_IN_FLIGHT/);
  });
});

void describe("an answer its client does not read", () => {
  const BIG = 40_000_000;
  let fx: ProxyFixture;
  before(async () => {
    fx = await startFixture({
      turns: (request) => ({
        text: JSON.stringify(request.body?.messages ?? "").includes("BIG") ? "y".repeat(BIG) : "ok",
      }),
      // Room for the 40 MB answer and its request, not for 10 MB more.
      config: { maxSessionBytesInFlight: 48_000_000, maxBytesInFlight: 200_000_000 },
    });
  });
  after(() => fx.close());

  void it("stays counted until it has left the proxy: a client that never reads cannot pile answers up", async () => {
    const a = await fx.session();
    // The answer's headers come; its body is not read (the kernel takes a few MB of it, the proxy keeps the rest).
    const url = new URL(`${a.anthropicBaseUrl}/v1/messages`);
    const body = JSON.stringify({ model: "claude-test", max_tokens: 16, messages: [{ role: "user", content: "BIG" }] });
    const unread = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const request = http.request(url, { method: "POST", agent: false, headers: headersOf(a) }, resolve);
      request.on("error", reject);
      request.end(body);
    });
    assert.equal(unread.statusCode, 200);
    unread.pause();
    const refused = await call(a, messagesBody(10_000_000));
    // A failed run must not leave the unread answer's connection open.
    if (refused.status !== 429) unread.destroy();
    assert.equal(refused.status, 429, refused.text.slice(0, 300));
    assert.match(anthropicError(refused).message, /OZ0_MAX_SESSION_BYTES_IN_FLIGHT/);
    // Once the client has taken it, the bytes are given back.
    let received = 0;
    unread.on("data", (chunk: Buffer) => (received += chunk.length));
    unread.resume();
    await new Promise((resolve) => unread.on("end", resolve));
    assert.ok(received > BIG);
    const accepted = await call(a, messagesBody(10_000_000));
    assert.equal(accepted.status, 200, accepted.text.slice(0, 300));
  });
});
