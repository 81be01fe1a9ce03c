// A proxy killed mid-call: the call in flight is metered once, as interrupted,
// when the proxy starts again on the same store, and its budget hold is free.
// The real process (src/main.ts), SIGKILLed, against an upstream that never
// finishes its stream; and SIGKILLed under load, its writes group-committed:
// every call the upstream saw is metered once, none twice, and the budget is
// never overspent.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { LlmProxyService } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { testCredentials } from "@oz0/serving/testing";
import { SqliteProxyStore } from "../src/sqlite-proxy-store.js";

const main = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "src", "main.ts");

function startMain(env: Record<string, string>): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", main], {
    env: {
      PATH: process.env.PATH,
      OZ0_PORT: "0",
      OZ0_LOG_LEVEL: "info",
      ...testCredentials.envFor("llm-proxy"),
      ...env,
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  return new Promise((resolve, reject) => {
    child.stderr!.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
      const match = /"url":"(http:\/\/[^"]+)"/.exec(stderr);
      if (match) resolve({ child, url: match[1]! });
    });
    child.once("exit", (code) => reject(new Error(`main exited with ${code}: ${stderr}`)));
  });
}

/** An Anthropic upstream: whole answers complete; a stream sends its start and one delta, then never ends. */
async function startUpstream(): Promise<{ url: string; streaming: Promise<void>; close(): Promise<void> }> {
  let streamStarted!: () => void;
  const streaming = new Promise<void>((resolve) => (streamStarted = resolve));
  const hanging = new Set<http.ServerResponse>();
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      const request = JSON.parse(body) as { stream?: boolean; model: string };
      if (!request.stream) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({
            id: "msg_1",
            type: "message",
            role: "assistant",
            model: request.model,
            content: [{ type: "text", text: "done" }],
            stop_reason: "end_turn",
            usage: { input_tokens: 10, output_tokens: 20 },
          }),
        );
        return;
      }
      hanging.add(res);
      res.writeHead(200, { "content-type": "text/event-stream" });
      const event = (type: string, data: unknown): string =>
        `event: ${type}\ndata: ${JSON.stringify({ type, ...(data as object) })}\n\n`;
      res.write(
        event("message_start", {
          message: {
            id: "msg_2",
            type: "message",
            role: "assistant",
            model: request.model,
            content: [],
            usage: { input_tokens: 10, output_tokens: 1 },
          },
        }) +
          event("content_block_start", { index: 0, content_block: { type: "text", text: "" } }) +
          event("content_block_delta", { index: 0, delta: { type: "text_delta", text: "thinking about it" } }),
      );
      streamStarted();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    streaming,
    close: () => {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

void describe("a proxy killed mid-call", () => {
  const dir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-crash-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  void it("meters the call in flight once, as interrupted, at its next start, frees its budget hold, and meters a completed call once", async () => {
    const upstream = await startUpstream();
    const children: ChildProcess[] = [];
    try {
      writeFileSync(
        path.join(dir, "providers.json"),
        JSON.stringify({
          providers: [{ name: "fake", baseUrl: upstream.url, prices: { "*": { input: 3, output: 15 } } }],
        }),
      );
      const env = { OZ0_LLM_PROXY_DATA: path.join(dir, "data"), OZ0_PROVIDERS_FILE: path.join(dir, "providers.json") };
      const first = await startMain(env);
      children.push(first.child);
      const control = (url: string) =>
        createClient(LlmProxyService, createGrpcTransport({ baseUrl: url, interceptors: [testCredentials.caller] }));
      const session = await control(first.url).mintSessionToken({
        job: "job-crash",
        agent: "coder",
        session: "s-crash",
        budgetUsd: 1,
      });
      const messages = (url: string, body: Record<string, unknown>): Promise<Response> =>
        fetch(`${url}/fake/v1/messages`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": session.token, ...session.headers },
          body: JSON.stringify({ model: "claude-sonnet-5", messages: [{ role: "user", content: "hi" }], ...body }),
        });
      // Its worst case is $0.99 of the $1 budget: it fits only when nothing else holds any.
      const wholeBudget = { max_tokens: 66_000 };

      const completed = await messages(first.url, { max_tokens: 100 });
      assert.equal(completed.status, 200);
      const completedId = completed.headers.get("oz0-operation-id");
      await completed.json();

      const streamed = await messages(first.url, { ...wholeBudget, stream: true });
      assert.equal(streamed.status, 200);
      const interruptedId = streamed.headers.get("oz0-operation-id");
      await upstream.streaming;
      const reader = streamed.body!.getReader();
      assert.match(new TextDecoder().decode((await reader.read()).value), /message_start/);
      // While the stream runs it holds most of the budget.
      assert.equal((await messages(first.url, wholeBudget)).status, 402);
      // Completed calls are metered in batches a moment after they answer: the refused one is on record
      // before the kill, so what the restart reconciles is the call in flight alone.
      for (;;) {
        const before = await control(first.url).getUsage({ job: "job-crash" });
        if (before.total?.calls === 2n) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }

      const killed = new Promise((resolve) => first.child.once("exit", resolve));
      first.child.kill("SIGKILL");
      await killed;
      await reader.read().catch(() => undefined);

      const second = await startMain(env);
      children.push(second.child);
      const usage = await control(second.url).getUsage({ job: "job-crash" });
      assert.equal(usage.total?.calls, 3n, "the completed call, the refused one and the interrupted one, each once");
      assert.equal(usage.total?.failedCalls, 2n);
      assert.equal(usage.total?.estimated, true);
      // A second proxy on the directory while this one runs would take its slot file for a dead one's: refused.
      await assert.rejects(
        startMain(env),
        new RegExp(`in use by another llm-proxy process \\(pid ${second.child.pid}\\); stop it first`),
      );

      // The hold is gone: a call needing the whole budget goes through.
      const after = await messages(second.url, wholeBudget);
      assert.equal(after.status, 200, await after.clone().text());
      await after.json();

      const stopped = new Promise((resolve) => second.child.once("exit", resolve));
      second.child.kill("SIGTERM");
      await stopped;
      // The store read directly once that proxy stopped: it holds its data directory while it runs.
      const store = new SqliteProxyStore({ dataDir: env.OZ0_LLM_PROXY_DATA });
      try {
        const calls = await store.listCalls("job-crash");
        assert.deepEqual(
          calls
            .filter((c) => c.operationId === interruptedId)
            .map((c) => [c.outcome, c.attempts, c.costUsd, c.estimated, c.usage.output]),
          [["interrupted", 1, 0, true, 0]],
        );
        assert.deepEqual(
          calls.filter((c) => c.operationId === completedId).map((c) => c.outcome),
          ["ok"],
          "the completed call once, not also as interrupted",
        );
        assert.deepEqual(
          calls.map((c) => c.outcome).sort(),
          ["budget_refused", "interrupted", "ok", "ok"],
          "and the call after",
        );
        assert.deepEqual(
          (await store.listAttempts("job-crash")).filter((a) => a.operationId === interruptedId).map((a) => a.outcome),
          ["interrupted"],
        );
      } finally {
        await store.close();
      }

      // A third start finds nothing more to reconcile: still one interrupted call.
      const third = await startMain(env);
      children.push(third.child);
      const again = await control(third.url).getUsage({ job: "job-crash" });
      assert.equal(again.total?.calls, 4n);
      assert.equal(again.total?.failedCalls, 2n);
    } finally {
      for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await upstream.close();
    }
  });

  void it("under load, SIGKILLed: every call an upstream answered is metered once (ok, or interrupted), every answer a client got is on record, and the budget is never overspent", async () => {
    let upstreamCalls = 0;
    const upstream = http.createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        upstreamCalls += 1;
        // A moment of thought, so calls are in flight when the proxy dies.
        setTimeout(() => {
          res.writeHead(200, { "content-type": "application/json" });
          res.end(
            JSON.stringify({
              id: "msg",
              type: "message",
              role: "assistant",
              content: [{ type: "text", text: "ok" }],
              stop_reason: "end_turn",
              usage: { input_tokens: 10, output_tokens: 20 },
            }),
          );
        }, upstreamCalls % 3);
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const loadDir = path.join(dir, "load");
    const children: ChildProcess[] = [];
    try {
      const providers = path.join(dir, "load-providers.json");
      const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
      writeFileSync(
        providers,
        JSON.stringify({
          providers: [{ name: "fake", baseUrl: upstreamUrl, prices: { "*": { input: 3, output: 15 } } }],
        }),
      );
      const env = { OZ0_LLM_PROXY_DATA: loadDir, OZ0_PROVIDERS_FILE: providers };
      const control = (url: string) =>
        createClient(LlmProxyService, createGrpcTransport({ baseUrl: url, interceptors: [testCredentials.caller] }));
      const first = await startMain(env);
      children.push(first.child);
      // $0.0003 a call, and each holds $0.0015 while it runs: about 300 calls, then 402s.
      const budgetUsd = 0.1;
      const session = await control(first.url).mintSessionToken({
        job: "job-load",
        agent: "coder",
        session: "s-load",
        budgetUsd,
      });
      const answered = new Set<string>();
      let refused = 0;
      /** Sixteen clients calling until `stop` says so, or until the proxy is gone (fetch rejects). */
      const load = (url: string, stop: () => boolean): Promise<void[]> =>
        Promise.all(
          Array.from({ length: 16 }, async () => {
            while (!stop()) {
              let response: Response;
              try {
                response = await fetch(`${url}/fake/v1/messages`, {
                  method: "POST",
                  headers: { "content-type": "application/json", "x-api-key": session.token, ...session.headers },
                  body: JSON.stringify({
                    model: "claude-sonnet-5",
                    max_tokens: 100,
                    messages: [{ role: "user", content: "hi" }],
                  }),
                });
                const text = await response.text();
                if (response.status === 402) {
                  refused += 1;
                  return;
                }
                assert.equal(response.status, 200, text);
              } catch (error) {
                if (error instanceof assert.AssertionError) throw error;
                return; // the proxy was killed under this call
              }
              answered.add(response.headers.get("oz0-operation-id")!);
            }
          }),
        );

      const firstLoad = load(first.url, () => false);
      while (answered.size < 150) await new Promise((resolve) => setTimeout(resolve, 5));
      const killed = new Promise((resolve) => first.child.once("exit", resolve));
      first.child.kill("SIGKILL");
      await killed;
      await firstLoad;

      // The next start reconciles what the dead one left in flight; calls go on until the budget is spent.
      const second = await startMain(env);
      children.push(second.child);
      await load(second.url, () => false);
      assert.ok(refused > 0, "the budget ran out");
      const stopped = new Promise((resolve) => second.child.once("exit", resolve));
      second.child.kill("SIGTERM");
      await stopped;

      const store = new SqliteProxyStore({ dataDir: loadDir });
      try {
        const calls = await store.listCalls("job-load");
        const byOutcome = (outcome: string): number => calls.filter((c) => c.outcome === outcome).length;
        assert.equal(new Set(calls.map((c) => c.operationId)).size, calls.length, "no call is recorded twice");
        const recorded = new Map(calls.map((c) => [c.operationId, c.outcome]));
        for (const id of answered) assert.equal(recorded.get(id), "ok", `the answered call ${id} is on record`);
        // Each call went upstream once (no retries): an upstream call is metered as ok, or as interrupted
        // when the proxy died before its answer was recorded; interrupted ones that never reached it are
        // at most the calls in flight at the kill.
        const sentUpstream = calls.filter((c) => c.outcome === "ok" || c.outcome === "interrupted").length;
        assert.ok(
          byOutcome("ok") <= upstreamCalls,
          `${byOutcome("ok")} ok calls, but the upstream saw ${upstreamCalls}`,
        );
        assert.ok(
          sentUpstream >= upstreamCalls,
          `every upstream call is metered: ${upstreamCalls} sent, ${sentUpstream} recorded`,
        );
        assert.ok(
          byOutcome("interrupted") <= 16,
          `${byOutcome("interrupted")} interrupted, more than the 16 calls in flight`,
        );
        const attempts = await store.listAttempts("job-load");
        assert.equal(
          new Set(attempts.map((a) => `${a.operationId}:${a.attempt}`)).size,
          attempts.length,
          "no attempt is recorded twice",
        );
        assert.equal(attempts.length, sentUpstream, "one attempt per call sent");
        const charged = calls.reduce((sum, c) => sum + c.costUsd, 0);
        assert.ok(charged <= budgetUsd, `charged $${charged} of a $${budgetUsd} budget`);
        // Refused once what is left is less than a call's worst case (about $0.0017) while up to 15 others hold theirs.
        assert.ok(charged > budgetUsd - 16 * 0.002, `the budget was used up to its last calls ($${charged})`);
      } finally {
        await store.close();
      }
    } finally {
      for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      upstream.closeAllConnections();
      await new Promise((resolve) => upstream.close(resolve));
    }
  });
});
