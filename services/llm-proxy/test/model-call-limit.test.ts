// A session's limit of model calls (MintSessionTokenRequest.max_model_calls,
// the agent's limits.max_steps) held by the proxy on the SQLite store: the
// call past it never reaches the provider, however it is sent, at once or
// after a restart. PostgreSQL's replicas: replicas.test.ts.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import { post, startFixture } from "./proxy-fixture.js";

const MESSAGE = { model: "claude-sonnet-5", max_tokens: 10, messages: [{ role: "user" as const, content: "x" }] };
const CHAT = { model: "gpt-4o", max_tokens: 10, messages: [{ role: "user", content: "x" }] };
const LIMIT_MESSAGE =
  /^the session has made 3 model calls, the most it may make \(3, its agent's limits\.max_steps\); the session must end \(an operator raises it with the agent's limits\.max_steps\)$/;

void describe("a session's limit of model calls", () => {
  void it("refuses the call past the limit before it goes upstream, in the route's shape, not to be retried, metered as refused; a call the proxy retried counts once, a call it refused not at all", async () => {
    const fx = await startFixture({
      turns: [
        { fail: { status: 529 } },
        { text: "after the overload", usage: { input: 10, output: 5 } },
        { text: "chat", usage: { input: 10, output: 5 } },
        { text: "responses", usage: { input: 10, output: 5 } },
        { text: "another session's", usage: { input: 10, output: 5 } },
      ],
    });
    try {
      const e = await fx.session({ budgetUsd: 1, maxModelCalls: 3 });
      const headers = { "x-api-key": e.token, ...e.headers };
      // 1: overloaded once, answered at the proxy's second attempt: one call.
      assert.equal((await post(`${e.anthropicBaseUrl}/v1/messages`, MESSAGE, headers)).status, 200);
      // Refused by the budget ($1.50 worst case against $1): never sent, so not counted.
      const overBudget = await post(`${e.anthropicBaseUrl}/v1/messages`, { ...MESSAGE, max_tokens: 100_000 }, headers);
      assert.equal(JSON.parse(overBudget.text).error.type, "budget_exhausted");
      // 2 and 3, on the other routes: one count for the session, whatever the API.
      const bearer = { authorization: `Bearer ${e.token}`, ...e.headers };
      assert.equal((await post(`${e.openaiBaseUrl}/chat/completions`, CHAT, bearer)).status, 200);
      assert.equal(
        (await post(`${e.openaiBaseUrl}/responses`, { model: "gpt-4o", input: "x", max_output_tokens: 10 }, bearer))
          .status,
        200,
      );
      assert.equal(fx.model.requests.length, 4);

      // 4: refused, as the official SDK reads it, and not retried however many retries it may make.
      const client = new Anthropic({ baseURL: e.anthropicBaseUrl, apiKey: e.token, defaultHeaders: e.headers });
      await assert.rejects(
        client.messages.create(MESSAGE),
        (error: unknown) =>
          error instanceof Anthropic.APIError &&
          error.status === 402 &&
          (error.error as { error?: { type?: string } }).error?.type === "model_calls_exhausted" &&
          LIMIT_MESSAGE.test((error.error as { error: { message: string } }).error.message),
      );
      // The OpenAI routes' shape, and the header that tells every SDK not to retry.
      const chat = await post(`${e.openaiBaseUrl}/chat/completions`, CHAT, bearer);
      assert.equal(chat.status, 402);
      assert.deepEqual(JSON.parse(chat.text).error.code, "model_calls_exhausted");
      assert.match(JSON.parse(chat.text).error.message, LIMIT_MESSAGE);
      assert.equal(chat.headers.get("x-should-retry"), "false");
      assert.equal(fx.model.requests.length, 4, "no refused call reached the provider");

      const calls = await fx.proxy.store.listCalls(e.job);
      assert.deepEqual(
        calls.map((c) => [c.outcome, c.status, c.attempts]),
        [
          ["ok", 200, 2],
          ["budget_refused", 402, 0],
          ["ok", 200, 1],
          ["ok", 200, 1],
          ["model_calls_refused", 402, 0],
          ["model_calls_refused", 402, 0],
        ],
      );
      assert.deepEqual(
        fx.events.filter((c) => c.job === e.job).map((c) => c.outcome),
        ["ok", "budget_refused", "ok", "ok", "model_calls_refused", "model_calls_refused"],
      );
      const usage = await fx.control.getUsage({ job: e.job });
      assert.equal(usage.total?.calls, 6n);
      assert.equal(usage.total?.failedCalls, 3n);

      // A harness operation's scratch session spends its parent's budget but counts its own calls.
      const scratch = await fx.session({ job: e.job, budgetUsd: 1, budgetSession: e.session, maxModelCalls: 3 });
      const scratchHeaders = { "x-api-key": scratch.token, ...scratch.headers };
      assert.equal((await post(`${scratch.anthropicBaseUrl}/v1/messages`, MESSAGE, scratchHeaders)).status, 200);
    } finally {
      await fx.close();
    }
  });

  void it("lets no more than the limit through when the session's calls come at once", async () => {
    const CALLS = 10;
    let arrived = 0;
    let refused = 0;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const decided = (): void => {
      if (arrived + refused === CALLS) release();
    };
    const fx = await startFixture({
      // Every call admitted waits upstream until each call was admitted or refused: they all overlap.
      turns: async () => {
        arrived += 1;
        decided();
        await gate;
        return { text: "admitted", usage: { input: 10, output: 5 } };
      },
    });
    try {
      const e = await fx.session({ maxModelCalls: 3 });
      const headers = { "x-api-key": e.token, ...e.headers };
      const results = await Promise.all(
        Array.from({ length: CALLS }, () =>
          post(`${e.anthropicBaseUrl}/v1/messages`, MESSAGE, headers).then((r) => {
            if (r.status === 402) {
              refused += 1;
              decided();
            }
            return r;
          }),
        ),
      );
      assert.deepEqual(results.map((r) => r.status).sort(), [200, 200, 200, 402, 402, 402, 402, 402, 402, 402]);
      assert.equal(fx.model.requests.length, 3);
    } finally {
      await fx.close();
    }
  });

  void it("keeps a session's count across a restart of the proxy and a new token for the session", async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), "oz0-proxy-model-calls-"));
    const answer = { text: "ok", usage: { input: 10, output: 5 } };
    try {
      const before = await startFixture({ turns: () => answer, config: { dataDir } });
      const e = await before.session({ maxModelCalls: 3 });
      const headers = { "x-api-key": e.token, ...e.headers };
      try {
        for (let i = 0; i < 2; i += 1)
          assert.equal((await post(`${e.anthropicBaseUrl}/v1/messages`, MESSAGE, headers)).status, 200);
      } finally {
        await before.close();
      }

      const after = await startFixture({ turns: () => answer, config: { dataDir } });
      try {
        // The same token, at the proxy that started on the same data: one call left.
        const base = `${after.proxy.url}/anthropic`;
        assert.equal((await post(`${base}/v1/messages`, MESSAGE, headers)).status, 200);
        const past = await post(`${base}/v1/messages`, MESSAGE, headers);
        assert.equal(past.status, 402);
        assert.match(JSON.parse(past.text).error.message, LIMIT_MESSAGE);
        // Revoked and minted again for the same session, the count goes on from its calls on record.
        await after.control.revokeSessionToken({ session: e.session });
        const again = await after.session({ job: e.job, session: e.session, maxModelCalls: 3 });
        const refused = await post(`${again.anthropicBaseUrl}/v1/messages`, MESSAGE, {
          "x-api-key": again.token,
          ...again.headers,
        });
        assert.equal(refused.status, 402);
        assert.equal(JSON.parse(refused.text).error.type, "model_calls_exhausted");
        assert.equal(after.model.requests.length, 1);
      } finally {
        await after.close();
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
