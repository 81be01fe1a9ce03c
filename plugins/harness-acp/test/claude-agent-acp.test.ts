// claude-agent-acp (the Claude Agent SDK behind ACP) as the agent, with the
// real Claude Code binary calling the scripted model through the real LLM
// proxy. The binary is heavy: two sessions in all.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { startLlmProxy } from "@oz0/llm-proxy";
import type { LlmProxy } from "@oz0/llm-proxy";
import type { HostSession } from "@oz0/harness/host";
import { LlmProxyService, SecretService } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { HEADERS, PLANTED_SECRET, ofCase, removeRun, runHarness } from "./harness-run.js";
import { testCredentials } from "@oz0/serving/testing";

/** The tenant's key: only the proxy holds it, and only the scripted model sees it. */
const CUSTODY_KEY = "sk-ant-api03-CUSTODY-key-held-by-the-proxy-only-5555";

void test("claude-agent-acp through the LLM proxy: an approved Bash runs, a denied one does not, headers and token on every call", async () => {
  let proxy: LlmProxy | undefined;
  const run = await runHarness({
    harnessOptions: { agent: "claude", tools: ["Bash"] },
    request: { instructions: "You are terse." },
    llm: async (model) => {
      proxy = await startLlmProxy({
        auth: testCredentials.settingsFor("llm-proxy"),
        providers: [
          {
            name: "anthropic",
            baseUrl: model.url,
            keySecret: "ANTHROPIC_API_KEY",
            prices: { "*": { input: 3, output: 15 } },
          },
        ],
        kek: Buffer.alloc(32, 9),
      });
      const transport = createGrpcTransport({ baseUrl: proxy.url, interceptors: [testCredentials.caller] });
      await createClient(SecretService, transport).setSecret({ name: "ANTHROPIC_API_KEY", value: CUSTODY_KEY });
      const minted = await createClient(LlmProxyService, transport).mintSessionToken({
        job: HEADERS["Oz0-Job"],
        agent: HEADERS["Oz0-Agent"],
        session: "session-acp-1",
      });
      return { anthropicBaseUrl: minted.anthropicBaseUrl, token: minted.token, headers: { ...minted.headers } };
    },
    turns: () => [
      {
        text: "Running it.",
        toolCalls: [{ name: "Bash", input: { command: "echo approved > yes.txt", description: "Write yes.txt" } }],
      },
      {
        text: "Now the other one.",
        toolCalls: [{ name: "Bash", input: { command: "echo denied > no.txt", description: "Write no.txt" } }],
      },
      { text: "Done." },
    ],
    answer: (request) =>
      String(request.input?.["command"]).includes("no.txt")
        ? { allow: false, reason: "Policy: no.txt is off limits" }
        : { allow: true },
  });
  try {
    const usage = proxy
      ? await createClient(
          LlmProxyService,
          createGrpcTransport({ baseUrl: proxy.url, interceptors: [testCredentials.caller] }),
        ).getUsage({ job: HEADERS["Oz0-Job"] })
      : undefined;
    assert.equal(
      run.outcome.result?.stopReason,
      StopReason.COMPLETED,
      `${run.outcome.result?.error}\n${run.stderr.slice(-3000)}`,
    );
    assert.equal(run.outcome.result?.text, "Done.");
    assert.equal(await readFile(path.join(run.workingDir, "yes.txt"), "utf8"), "approved\n");
    assert.equal(existsSync(path.join(run.workingDir, "no.txt")), false);
    assert.deepEqual(
      ofCase(run.events, "permissionRequest").map((p) => [p.tool, p.input?.["command"], p.title]),
      [
        ["Bash", "echo approved > yes.txt", "echo approved > yes.txt"],
        ["Bash", "echo denied > no.txt", "echo denied > no.txt"],
      ],
    );
    assert.deepEqual(
      ofCase(run.events, "toolResult").map((r) => r.isError),
      [false, true],
    );
    // The denial reaches the model as an error tool result. claude-agent-acp
    // words it itself: ACP's permission answer has no field for our reason.
    const afterDenial = JSON.stringify(run.model.requests.filter((r) => !r.sideCall)[2]?.body);
    assert.match(afterDenial, /"is_error":true/);
    assert.match(afterDenial, /User refused permission to run tool/);
    // Every call: through the proxy, metered under the job and agent, with the tenant's key upstream only.
    const turns = run.model.requests.filter((r) => !r.sideCall);
    assert.equal(turns.length, 3);
    for (const request of run.model.requests) {
      assert.equal(request.headers["x-api-key"], CUSTODY_KEY);
      assert.equal(request.body?.model, "claude-sonnet-4-5");
      assert.equal(JSON.stringify(request).includes(PLANTED_SECRET), false);
    }
    assert.deepEqual(
      usage?.agents.map((a) => a.agent),
      [HEADERS["Oz0-Agent"]],
    );
    assert.equal(usage?.total?.calls, BigInt(run.model.requests.length));
    // Claude Code was told the instructions as its system prompt, and only Bash.
    assert.match(JSON.stringify(turns[0]?.body.system), /You are terse\./);
    assert.deepEqual(
      turns[0]?.body.tools.map((t: { name: string }) => t.name),
      ["Bash"],
    );
    assert.ok((run.outcome.result?.usage[0]?.inputTokens ?? 0n) > 0n);
  } finally {
    await proxy?.close();
    await removeRun(run);
  }
});

void test("claude-agent-acp cancelled mid-turn: session/cancel, its cancelled stop, one cancelled result, nothing left running", async () => {
  let release: () => void = () => {};
  const hang = new Promise<void>((resolve) => (release = resolve));
  let host: HostSession | undefined;
  const run = await runHarness({
    harnessOptions: { agent: "claude" },
    // The agent is now waiting on its model: cancel it there.
    turns: () => async () => {
      host?.cancel("the job was cancelled");
      await hang;
      return { text: "too late" };
    },
    onEvent: (_event, session) => {
      host = session;
    },
  });
  release();
  try {
    assert.equal(run.outcome.status, "cancelled");
    assert.equal(run.outcome.result?.stopReason, StopReason.CANCELLED, run.stderr.slice(-3000));
    assert.equal(ofCase(run.events, "result").length, 1);
    assert.equal(run.outcome.leftoverProcesses, false);
    assert.equal(run.outcome.signal, null, "the harness exited by itself within the grace");
    // The agent itself ended the turn with `cancelled` after session/cancel (the grace did not run out).
    assert.match(run.stderr, /"message":"the prompt turn ended","stopReason":"cancelled","cancelled":true/);
  } finally {
    await removeRun(run);
  }
});
