import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import type { ScriptedRequest } from "@oz0/harness/testing";
import { PRICE, post, startFixture } from "./proxy-fixture.js";

/** Streams a Messages call, adding its text deltas to `received.text` as they come (kept when the stream fails). */
async function readStreamText(client: Anthropic, maxTokens: number, received: { text: string }): Promise<void> {
  const stream = await client.messages.create({
    model: "claude-sonnet-5",
    max_tokens: maxTokens,
    stream: true,
    messages: [{ role: "user", content: "x" }],
  });
  for await (const event of stream) {
    if (event.type === "content_block_delta" && event.delta.type === "text_delta") received.text += event.delta.text;
  }
}

void describe("budgets", () => {
  void it("a model named after an object's own members (constructor, __proto__, toString) is priced by the table alone: the budget holds and the store keeps committing", async () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), "oz0-proxy-prototype-"));
    const fx = await startFixture({
      turns: () => ({ text: "ok", usage: { input: 10, output: 10 } }),
      config: { dataDir },
    });
    try {
      const e = await fx.session({ budgetUsd: 0.05 });
      const headers = { "x-api-key": e.token, ...e.headers };
      const url = `${e.anthropicBaseUrl}/v1/messages`;
      const body = { max_tokens: 10, messages: [{ role: "user", content: "x" }] };
      // Looked up as a plain property, each found Object.prototype's member: a "price" whose every cost was NaN,
      // so no later call was refused, and the NaN record stopped every group commit of the store.
      for (const model of ["constructor", "__proto__", "toString", "hasOwnProperty"])
        assert.equal((await post(url, { ...body, model }, headers)).status, 200, model);
      const calls = await fx.proxy.store.listCalls(e.job);
      assert.equal(calls.length, 4);
      for (const call of calls) assert.ok(Number.isFinite(call.costUsd) && call.costUsd > 0, JSON.stringify(call));
      // The table's "*" price charged them; the budget still refuses a call it cannot hold.
      const large = await post(url, { ...body, model: "constructor", max_tokens: 100_000 }, headers);
      assert.equal(large.status, 402, large.text);
      assert.match(JSON.parse(large.text).error.message, /could cost up to \$1\.5\d+ but only \$0\.04\d+/);
      // Read by the job's operator too: it says where the budget is set.
      assert.match(
        JSON.parse(large.text).error.message,
        /an operator raises it with the agent's harness\.max_budget_usd \(or, for an agent that sets none, the orchestrator's OZ0_DEFAULT_MAX_BUDGET_USD\)$/,
      );
      await fx.control.revokeSessionToken({ token: e.token });
      assert.equal((await post(url, { ...body, model: "claude-sonnet-5" }, headers)).status, 401);
    } finally {
      await fx.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  void it("admits only one of two concurrent calls that together would exceed the budget", async () => {
    // max_tokens 1000 at $15/M output is a $0.015 worst case each; the budget holds one, not two.
    let releaseFirst!: () => void;
    const firstHeld = new Promise<void>((resolve) => (releaseFirst = resolve));
    const fx = await startFixture({
      turns: async (request: ScriptedRequest) => {
        // Hold the admitted call upstream until the other has been answered, so they truly overlap.
        await firstHeld;
        return { text: `answer ${request.turn}`, usage: { input: 10, output: 10 } };
      },
    });
    try {
      const e = await fx.session({ budgetUsd: 0.02 });
      const headers = { "x-api-key": e.token, ...e.headers };
      const body = { model: "claude-sonnet-5", max_tokens: 1000, messages: [{ role: "user", content: "x" }] };
      const first = post(`${e.anthropicBaseUrl}/v1/messages`, body, headers);
      const second = post(`${e.anthropicBaseUrl}/v1/messages`, body, headers);
      const refused = await Promise.race([first, second]);
      releaseFirst();
      const results = await Promise.all([first, second]);
      assert.equal(refused.status, 402);
      assert.deepEqual(results.map((r) => r.status).sort(), [200, 402]);
      const error = JSON.parse(refused.text).error;
      assert.equal(error.type, "budget_exhausted");
      assert.match(error.message, /budget/);
      assert.equal(fx.model.requests.length, 1, "the refused call never reached the provider");
      const calls = await fx.proxy.store.listCalls(e.job);
      assert.deepEqual(calls.map((c) => c.outcome).sort(), ["budget_refused", "ok"]);
      // One usage event a call, the refused one too (sent once its answer is written).
      assert.deepEqual(fx.events.map((c) => c.outcome).sort(), ["budget_refused", "ok"]);
    } finally {
      await fx.close();
    }
  });

  void it("cuts a stream off where it crosses the budget, then refuses further calls", async () => {
    const long = "word ".repeat(2000);
    const fx = await startFixture({ turns: [{ text: long, usage: { input: 10, output: 2500 } }, { text: "never" }] });
    try {
      // Input ~ $0.00003; each 16-character delta ~4 tokens ~ $0.00006: the budget is crossed mid-stream.
      const e = await fx.session({ budgetUsd: 0.003 });
      const client = new Anthropic({
        baseURL: e.anthropicBaseUrl,
        apiKey: e.token,
        defaultHeaders: e.headers,
        maxRetries: 0,
      });
      const received = { text: "" };
      await assert.rejects(
        () => readStreamText(client, 4000, received),
        (error: unknown) => error instanceof Error && /budget/.test(error.message),
      );
      assert.ok(received.text.length > 0 && received.text.length < long.length);
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.outcome, "budget_cut");
      assert.ok(call!.costUsd <= 0.003 + (16 / 4) * (PRICE.output / 1e6), "spent at most one event past the budget");
      const again = await post(
        `${e.anthropicBaseUrl}/v1/messages`,
        { model: "claude-sonnet-5", max_tokens: 10, messages: [{ role: "user", content: "x" }] },
        { "x-api-key": e.token, ...e.headers },
      );
      assert.equal(again.status, 402);
      assert.equal(JSON.parse(again.text).error.type, "budget_exhausted");
      assert.equal(fx.model.requests.length, 1);
    } finally {
      await fx.close();
    }
  });

  void it("does not cut a stream whose hold covers its max_tokens, however far its estimate runs past it", async () => {
    // 4,000 characters are 1,000 tokens at four characters a token; the provider reports the 400 it
    // counted (code indented with spaces is far fewer tokens than characters/4), within max_tokens 500.
    const indented = `${" ".repeat(12)}return x;\n`.repeat(200).slice(0, 4000);
    const fx = await startFixture({ turns: [{ text: indented, usage: { input: 10, output: 400 } }] });
    try {
      const e = await fx.session({ budgetUsd: 1 });
      const client = new Anthropic({ baseURL: e.anthropicBaseUrl, apiKey: e.token, defaultHeaders: e.headers });
      const received = { text: "" };
      await readStreamText(client, 500, received);
      assert.equal(received.text, indented);
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.outcome, "ok");
      assert.equal(call!.usage.output, 400, "charged what the provider reported");
    } finally {
      await fx.close();
    }
  });

  void it("cuts a stream whose reported input runs past its hold, though its output is bounded", async () => {
    // A request of a few bytes whose input the provider counts at 200,000 tokens (a document by URL):
    // what message_start reports is spent, not an estimate.
    const fx = await startFixture({ turns: [{ text: "word ".repeat(400), usage: { input: 200_000, output: 10 } }] });
    try {
      const e = await fx.session({ budgetUsd: 1 });
      const client = new Anthropic({ baseURL: e.anthropicBaseUrl, apiKey: e.token, defaultHeaders: e.headers });
      const received = { text: "" };
      await assert.rejects(
        () => readStreamText(client, 100, received),
        (error: unknown) => error instanceof Error && /budget/.test(error.message),
      );
      assert.equal(received.text, "", "cut at message_start, before any text");
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.outcome, "budget_cut");
    } finally {
      await fx.close();
    }
  });

  void it("holds what every choice may cost, at the larger of a chat request's two limits", async () => {
    // $15/M output: 1,000 tokens is $0.015, inside a $0.02 budget; 20 choices of them, or a limit of
    // 20,000 named beside a limit of 1 (compatible servers differ on which wins), are $0.30.
    const fx = await startFixture({ turns: [{ text: "never" }, { text: "never" }, { text: "fits" }] });
    try {
      const e = await fx.session({ budgetUsd: 0.02 });
      const headers = { authorization: `Bearer ${e.token}`, ...e.headers };
      const ask = (limits: Record<string, number>) =>
        post(
          `${e.openaiBaseUrl}/chat/completions`,
          { model: "gpt-4.1", messages: [{ role: "user", content: "x" }], ...limits },
          headers,
        );
      const overBudget: Record<string, number>[] = [
        { max_tokens: 1000, n: 20 },
        { max_tokens: 1, max_completion_tokens: 20_000 },
      ];
      for (const limits of overBudget) {
        const refused = await ask(limits);
        assert.equal(refused.status, 402, JSON.stringify(limits));
        assert.match(JSON.parse(refused.text).error.message, /could cost up to \$0\.30/);
      }
      assert.equal(fx.model.requests.length, 0, "neither reached the provider");
      assert.equal((await ask({ max_tokens: 1000 })).status, 200, "the control: one choice of 1,000 tokens fits");
    } finally {
      await fx.close();
    }
  });

  void it("holds a token of input for every request byte: text that tokenizes a token a byte cannot spend past the budget", async () => {
    // 4,000 bytes of punctuation, at the dearest input price ($3.75/M, cache writes) a token a byte: $0.015, past a
    // $0.01 budget. Held as a token every two bytes ($0.0075) it was let through.
    const fx = await startFixture({ turns: [{ text: "never" }, { text: "fits" }] });
    try {
      const e = await fx.session({ budgetUsd: 0.01 });
      const headers = { authorization: `Bearer ${e.token}`, ...e.headers };
      const ask = (content: string) =>
        post(
          `${e.openaiBaseUrl}/chat/completions`,
          { model: "gpt-4.1", messages: [{ role: "user", content }], max_tokens: 10 },
          headers,
        );
      const refused = await ask(".,;:!?".repeat(667));
      assert.equal(refused.status, 402, refused.text);
      assert.match(JSON.parse(refused.text).error.message, /could cost up to \$0\.015\d but only \$0\.0100/);
      assert.equal(fx.model.requests.length, 0, "it never reached the provider");
      assert.equal((await ask(".,;:!?".repeat(300))).status, 200, "the control: half as much fits");
    } finally {
      await fx.close();
    }
  });

  void it("holds the default bound for every choice of a chat request that names no limit", async () => {
    // No max_tokens: 32,000 output tokens (the default bound) at $15/M is $0.48 a choice; 20 choices are $9.60.
    const fx = await startFixture({ turns: [{ text: "fits" }] });
    try {
      const e = await fx.session({ budgetUsd: 1 });
      const headers = { authorization: `Bearer ${e.token}`, ...e.headers };
      const ask = (extra: Record<string, number>) =>
        post(
          `${e.openaiBaseUrl}/chat/completions`,
          { model: "gpt-4.1", messages: [{ role: "user", content: "x" }], ...extra },
          headers,
        );
      const refused = await ask({ n: 20 });
      assert.equal(refused.status, 402, refused.text);
      assert.match(JSON.parse(refused.text).error.message, /could cost up to \$9\.60/);
      assert.equal(fx.model.requests.length, 0, "it never reached the provider");
      assert.equal((await ask({})).status, 200, "the control: one choice of the default bound fits");
    } finally {
      await fx.close();
    }
  });

  void it("holds the model's maxOutput from the price table for a call that names no limit: a model that writes past the default bound cannot spend past the budget", async () => {
    // gpt-5 writes up to 128,000 output tokens (reasoning included), $1.28 at $10/M; the default bound of 32,000
    // held $0.32, so a whole answer of 100,000 tokens passed a $0.50 budget and was charged $1.00.
    const prices = { "gpt-5": { input: 1.25, output: 10, maxOutput: 128_000 }, "*": PRICE };
    const fx = await startFixture({
      turns: [{ text: "a long answer", usage: { input: 10, output: 100_000 } }, { text: "fits" }],
      prices,
    });
    try {
      const e = await fx.session({ budgetUsd: 0.5 });
      const headers = { authorization: `Bearer ${e.token}`, ...e.headers };
      const ask = (extra: Record<string, unknown>) =>
        post(`${e.openaiBaseUrl}/chat/completions`, { messages: [{ role: "user", content: "x" }], ...extra }, headers);
      const refused = await ask({ model: "gpt-5" });
      assert.equal(refused.status, 402, refused.text);
      assert.match(JSON.parse(refused.text).error.message, /could cost up to \$1\.28/);
      assert.equal(fx.model.requests.length, 0, "it never reached the provider");
      const budget = await fx.proxy.store.budgetSnapshot(e.session);
      assert.ok(budget!.spentUsd <= budget!.limitUsd, `spent $${budget!.spentUsd} of $${budget!.limitUsd}`);
      // A model without maxOutput holds the default bound (32,000 at $15/M, $0.48), which fits.
      assert.equal((await ask({ model: "gpt-4.1" })).status, 200, "the control: the default bound fits");
    } finally {
      await fx.close();
    }
  });

  void it("bounds a stream holding less than its limit to the output its hold pays for: tokens billed but never streamed cannot pass the budget", async () => {
    // A reasoning model bills reasoning it never streams, reported only with the usage at the stream's end.
    // The model here honours the limit it is sent, as a provider does, and reasons all of it.
    const billed = (limit: unknown) => (typeof limit === "number" ? Math.min(limit, 50_000) : 50_000);
    const fx = await startFixture({
      turns: (request: ScriptedRequest) => {
        const limit = request.body.max_completion_tokens ?? request.body.max_output_tokens ?? request.body.max_tokens;
        return { text: "ok", usage: { input: 10, output: billed(limit), reasoning: billed(limit) - 1 } };
      },
    });
    try {
      for (const route of ["chat/completions", "responses", "messages"] as const) {
        const e = await fx.session({ budgetUsd: 0.01 });
        const headers = { authorization: `Bearer ${e.token}`, "x-api-key": e.token, ...e.headers };
        const url = route === "messages" ? `${e.anthropicBaseUrl}/v1/messages` : `${e.openaiBaseUrl}/${route}`;
        const limit = {
          "chat/completions": "max_completion_tokens",
          responses: "max_output_tokens",
          messages: "max_tokens",
        }[route];
        const body =
          route === "responses"
            ? { model: "gpt-5", input: "x", stream: true, [limit]: 100_000 }
            : { model: "gpt-5", messages: [{ role: "user", content: "x" }], stream: true, [limit]: 100_000 };
        const answer = await post(url, body, headers);
        assert.equal(answer.status, 200, answer.text);
        const sent = fx.model.requests.at(-1)!.body as Record<string, number>;
        assert.ok(
          sent[limit]! < 700 && sent[limit]! >= 16,
          `${route}: the provider was asked for at most ${sent[limit]} tokens`,
        );
        const budget = await fx.proxy.store.budgetSnapshot(e.session);
        assert.ok(budget!.spentUsd <= budget!.limitUsd, `${route}: spent $${budget!.spentUsd} of $${budget!.limitUsd}`);
        assert.equal(budget!.reservedUsd, 0);
      }
    } finally {
      await fx.close();
    }
  });

  void it("bounds an Anthropic stream's extended thinking under its bounded max_tokens, and refuses one its hold cannot give the least thinking", async () => {
    const fx = await startFixture({ turns: () => ({ text: "ok", usage: { input: 10, output: 900 } }) });
    try {
      const ask = async (budgetUsd: number) => {
        const e = await fx.session({ budgetUsd });
        return post(
          `${e.anthropicBaseUrl}/v1/messages`,
          {
            model: "gpt-5",
            messages: [{ role: "user", content: "x" }],
            stream: true,
            max_tokens: 100_000,
            thinking: { type: "enabled", budget_tokens: 50_000 },
          },
          { "x-api-key": e.token, ...e.headers },
        );
      };
      const answer = await ask(0.05);
      assert.equal(answer.status, 200, answer.text);
      const sent = fx.model.requests.at(-1)!.body as { max_tokens: number; thinking: { budget_tokens: number } };
      // Anthropic refuses a thinking budget not below max_tokens, and one under 1,024.
      assert.ok(sent.max_tokens < 100_000, `max_tokens ${sent.max_tokens}`);
      assert.ok(
        sent.thinking.budget_tokens < sent.max_tokens && sent.thinking.budget_tokens >= 1_024,
        `budget_tokens ${sent.thinking.budget_tokens} under max_tokens ${sent.max_tokens}`,
      );
      const requests = fx.model.requests.length;
      const refused = await ask(0.01);
      assert.equal(refused.status, 402, refused.text);
      assert.match(
        JSON.parse(refused.text).error.message,
        /^this stream's input and 1025 tokens of output \(its extended thinking's least\) could cost up to \$[\d.]+ but only \$0\.0100 of the session's \$0\.0100 budget is left/,
      );
      assert.equal(fx.model.requests.length, requests, "it never reached the provider");
    } finally {
      await fx.close();
    }
  });

  void it("refuses a stream whose hold does not pay for its input and a few tokens of output", async () => {
    const fx = await startFixture({ turns: [{ text: "never" }] });
    try {
      // 2,000 bytes of input at $3.75/M a byte are $0.0075, past a $0.005 budget.
      const e = await fx.session({ budgetUsd: 0.005 });
      const refused = await post(
        `${e.openaiBaseUrl}/chat/completions`,
        { model: "gpt-5", messages: [{ role: "user", content: "x".repeat(2_000) }], stream: true },
        { authorization: `Bearer ${e.token}`, ...e.headers },
      );
      assert.equal(refused.status, 402, refused.text);
      assert.match(
        JSON.parse(refused.text).error.message,
        /^this stream's input and 16 tokens of output could cost up to \$0\.00\d+ but only \$0\.0050 of the session's \$0\.0050 budget is left/,
      );
      assert.equal(fx.model.requests.length, 0, "it never reached the provider");
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.outcome, "budget_refused");
      assert.equal((await fx.proxy.store.budgetSnapshot(e.session))!.reservedUsd, 0, "its hold is given back");
    } finally {
      await fx.close();
    }
  });

  void it("refuses a request whose limits it cannot read as the provider may: a limit or n that is not a whole number, or named twice", async () => {
    // A compatible server that reads JSON leniently (pydantic's default) takes "20" for 20 choices and "100000" for
    // a limit of 100,000; one that keeps a repeated name's first copy takes the limit the proxy did not read.
    const fx = await startFixture({ turns: [{ text: "fits" }, { text: "fits" }] });
    try {
      const e = await fx.session({ budgetUsd: 0.02 });
      const headers = { authorization: `Bearer ${e.token}`, "content-type": "application/json", ...e.headers };
      const ask = async (fields: string) => {
        const r = await fetch(`${e.openaiBaseUrl}/chat/completions`, {
          method: "POST",
          headers,
          body: `{"model":"gpt-4.1","messages":[{"role":"user","content":"x"}],${fields}}`,
        });
        return { status: r.status, text: await r.text() };
      };
      const refused: [string, RegExp][] = [
        ['"max_tokens":1000,"n":"20"', /n must be a whole number above 0 \(or null\); got "20"/],
        ['"max_tokens":"100000"', /max_tokens must be a whole number above 0 \(or null\); got "100000"/],
        ['"max_completion_tokens":-1', /max_completion_tokens must be a whole number above 0/],
        ['"max_tokens":20000,"max_tokens":1', /names max_tokens more than once; name it once/],
        ['"max_tokens":1000,"n":20,"n":1', /names n more than once/],
        ['"max_tokens":1000,"stream":"false"', /stream must be true or false \(or null\); got "false"/],
      ];
      for (const [fields, message] of refused) {
        const r = await ask(fields);
        assert.equal(r.status, 400, `${fields}: ${r.text}`);
        assert.match(JSON.parse(r.text).error.message, message, fields);
      }
      assert.equal(fx.model.requests.length, 0, "none reached the provider");
      assert.equal((await ask('"max_tokens":1000,"n":1')).status, 200, "the control: one choice of 1,000 tokens");
      assert.equal((await ask('"max_tokens":1000,"n":null,"stream":null')).status, 200, "null is no value");
    } finally {
      await fx.close();
    }
  });

  void it("refuses a budgeted call to a model without a price (fails closed)", async () => {
    const fx = await startFixture({
      turns: [{ text: "never" }],
      config: {
        providers: [
          {
            name: "anthropic",
            baseUrl: "http://127.0.0.1:9",
            keySecret: "ANTHROPIC_API_KEY",
            prices: { "claude-opus": { input: 1, output: 1 } },
          },
        ],
      },
    });
    try {
      const e = await fx.session({ budgetUsd: 1 });
      const r = await post(
        `${e.anthropicBaseUrl}/v1/messages`,
        { model: "unpriced-model", max_tokens: 10, messages: [] },
        { "x-api-key": e.token, ...e.headers },
      );
      assert.equal(r.status, 400);
      assert.match(JSON.parse(r.text).error.message, /no price/);
    } finally {
      await fx.close();
    }
  });

  void it("a scratch session's token spends its parent's budget account: together they never pass it, across a restart", async (t) => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-llm-proxy-shared-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    // $0.003 in and $0.015 out a call: $0.018 of a $0.02 budget.
    const fx = await startFixture({
      turns: () => ({ text: "ok", usage: { input: 1000, output: 1000 } }),
      config: { dataDir: dir },
    });
    const body = (maxTokens: number) => ({ model: "m", max_tokens: maxTokens, messages: [] });
    const call = (base: string, e: { token: string; headers: Record<string, string> }, maxTokens: number) =>
      post(`${base}/anthropic/v1/messages`, body(maxTokens), { "x-api-key": e.token, ...e.headers });
    let parent: Awaited<ReturnType<typeof fx.session>>;
    try {
      parent = await fx.session({ budgetUsd: 0.02 });
      const scratch = await fx.session({ job: parent.job, budgetUsd: 0.02, budgetSession: parent.session });
      const own = await fx.session({ job: parent.job, budgetUsd: 0.02 });
      assert.equal((await call(fx.proxy.url, scratch, 100)).status, 200);
      const refused = await call(fx.proxy.url, parent, 1000);
      assert.equal(refused.status, 402, refused.text);
      assert.match(JSON.parse(refused.text).error.message, /only \$0\.0020 of the session's \$0\.0200 budget is left/);
      // A session that names no budget session keeps its own account.
      assert.equal((await call(fx.proxy.url, own, 100)).status, 200);
      // Metering stays by session: the scratch session's call is its own, the parent's refusal the parent's.
      const calls = await fx.proxy.store.listCalls(parent.job);
      assert.deepEqual(
        calls.map((c) => `${c.session} ${c.status}`).sort(),
        [`${own.session} 200`, `${parent.session} 402`, `${scratch.session} 200`].sort(),
      );
      // A budget session is named like a session.
      await assert.rejects(
        fx.session({ job: parent.job, budgetUsd: 0.02, budgetSession: "two words" }),
        /budget_session must be 1 to 256 printable ASCII characters/,
      );
    } finally {
      await fx.close();
    }
    // Restarted on the same data, the parent's account starts from what every session spending from it was charged.
    const again = await startFixture({ turns: () => ({ text: "ok" }), config: { dataDir: dir } });
    try {
      assert.equal((await call(again.proxy.url, parent, 1000)).status, 402);
    } finally {
      await again.close();
    }
  });

  void it("keeps the spent budget across a proxy restart", async (t) => {
    const { mkdtempSync, rmSync } = await import("node:fs");
    const dir = mkdtempSync(`${(await import("node:os")).tmpdir()}/oz0-llm-proxy-`);
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const fx = await startFixture({
      turns: () => ({ text: "ok", usage: { input: 1000, output: 1000 } }),
      config: { dataDir: dir },
    });
    let token: string;
    let headers: Record<string, string>;
    let base: string;
    try {
      const e = await fx.session({ budgetUsd: 0.02 });
      token = e.token;
      headers = e.headers;
      base = e.anthropicBaseUrl;
      const r = await post(
        `${base}/v1/messages`,
        { model: "m", max_tokens: 100, messages: [] },
        { "x-api-key": token, ...headers },
      );
      assert.equal(r.status, 200);
    } finally {
      await fx.close();
    }
    // $0.018 of $0.02 spent: a restarted proxy on the same data must remember it.
    const again = await startFixture({ turns: () => ({ text: "ok" }), config: { dataDir: dir } });
    try {
      const r = await post(
        `${again.proxy.url}/anthropic/v1/messages`,
        { model: "m", max_tokens: 1000, messages: [] },
        { "x-api-key": token, ...headers },
      );
      assert.equal(r.status, 402);
    } finally {
      await again.close();
    }
  });
});

void describe("budgets of streams whose text is not content", () => {
  /** A chat stream of `pieces` deltas of `field`, each a chunk as OpenAI writes it, then its usage. */
  function chatStream(field: string, pieces: number, piece: string, completionTokens: number): string {
    const chunk = (choices: unknown[], usage?: unknown) =>
      `data: ${JSON.stringify({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "gpt-4.1", choices, ...(usage ? { usage } : {}) })}\n\n`;
    let out = chunk([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }]);
    for (let i = 0; i < pieces; i += 1) out += chunk([{ index: 0, delta: { [field]: piece }, finish_reason: null }]);
    out += chunk([{ index: 0, delta: {}, finish_reason: "stop" }]);
    out += chunk([], { prompt_tokens: 10, completion_tokens: completionTokens, total_tokens: 10 + completionTokens });
    return `${out}data: [DONE]\n\n`;
  }

  // content is the control: cut on the old code too.
  for (const field of ["content", "reasoning", "refusal"]) {
    void it(`cuts a chat stream of ${field} deltas where it crosses the budget`, async () => {
      // 400 deltas of 40 characters, 4,000 tokens at four characters a token: $0.06 of output at $15/M, reported
      // only at the end. Held at the $0.01 the session has, the stream must be cut about a sixth of the way in.
      const piece = "z".repeat(40);
      const body = chatStream(field, 400, piece, 4_000);
      const provider = http.createServer((req, res) => {
        req.resume();
        req.on("end", () => {
          res.writeHead(200, { "content-type": "text/event-stream" });
          res.end(body);
        });
      });
      await new Promise<void>((resolve) => provider.listen(0, "127.0.0.1", resolve));
      const url = `http://127.0.0.1:${(provider.address() as AddressInfo).port}`;
      const fx = await startFixture({
        turns: [],
        config: {
          providers: [
            { name: "openai", baseUrl: url, keySecret: "OPENAI_API_KEY", auth: "bearer", prices: { "*": PRICE } },
          ],
        },
      });
      try {
        const e = await fx.session({ budgetUsd: 0.01 });
        const r = await fetch(`${e.openaiBaseUrl}/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${e.token}`, "content-type": "application/json", ...e.headers },
          body: JSON.stringify({
            model: "gpt-4.1",
            stream: true,
            max_completion_tokens: 8_000,
            messages: [{ role: "user", content: "x" }],
          }),
        });
        const text = await r.text();
        assert.match(text, /budget_exhausted/);
        const received = text.split(piece).length - 1;
        assert.ok(received < 100, `${received} of 400 deltas went out before the cut`);
        const [call] = await fx.proxy.store.listCalls(e.job);
        assert.equal(call!.outcome, "budget_cut");
        assert.ok(call!.costUsd <= 0.01 + (40 / 4) * (PRICE.output / 1e6), `charged ${call!.costUsd}`);
      } finally {
        await fx.close();
        await new Promise((resolve) => provider.close(resolve));
      }
    });
  }
});
