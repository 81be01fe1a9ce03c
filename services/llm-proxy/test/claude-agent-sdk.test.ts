import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { query } from "@anthropic-ai/claude-agent-sdk";
import { startFixture } from "./proxy-fixture.js";

/** The Anthropic allowlist, and what the proxy and HTTP set (the key, the body's type and length). */
const PROVIDER_SEES = new Set([
  "anthropic-version",
  "anthropic-beta",
  "accept",
  "user-agent",
  "x-app",
  "x-api-key",
  "content-type",
  "accept-encoding",
  "content-length",
  "host",
  "connection",
]);

void describe("the Claude Code binary through the proxy", () => {
  void it("runs a session with only the base URL, token and headers swapped, metered under the job", async (t) => {
    const work = mkdtempSync(path.join(tmpdir(), "oz0-proxy-claude-work-"));
    const state = mkdtempSync(path.join(tmpdir(), "oz0-proxy-claude-state-"));
    t.after(() => [work, state].forEach((dir) => rmSync(dir, { recursive: true, force: true })));
    const fx = await startFixture({
      turns: [
        {
          toolCalls: [{ name: "Write", input: { file_path: path.join(work, "hello.txt"), content: "hello\n" } }],
          usage: { input: 900, output: 40, cacheWrite: 100 },
        },
        { text: "I wrote the file.", usage: { input: 950, output: 12, cacheRead: 100 } },
      ],
    });
    try {
      const e = await fx.session({ agent: "claude-coder" });
      const messages: { type: string; subtype?: string; result?: string }[] = [];
      for await (const message of query({
        prompt: "Write hello to hello.txt",
        options: {
          cwd: work,
          settingSources: [],
          model: "claude-sonnet-5",
          canUseTool: async (_tool, input) => ({ behavior: "allow", updatedInput: input }),
          env: {
            PATH: process.env.PATH ?? "",
            HOME: state,
            CLAUDE_CONFIG_DIR: state,
            ANTHROPIC_BASE_URL: e.anthropicBaseUrl,
            ANTHROPIC_API_KEY: e.token,
            ANTHROPIC_CUSTOM_HEADERS: Object.entries(e.headers)
              .map(([k, v]) => `${k}: ${v}`)
              .join("\n"),
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
          },
        },
      })) {
        messages.push(message as { type: string; subtype?: string; result?: string });
      }
      const result = messages.at(-1);
      assert.equal(result?.type, "result");
      assert.equal(result?.subtype, "success");
      assert.equal(result?.result, "I wrote the file.");
      const calls = await fx.proxy.store.listCalls(e.job);
      assert.equal(calls.length, 2);
      assert.ok(calls.every((c) => c.agent === "claude-coder" && c.stream && c.outcome === "ok" && !c.estimated));
      assert.deepEqual(
        calls.map((c) => c.usage.input),
        [900, 950],
      );
      assert.equal(readFileSync(path.join(work, "hello.txt"), "utf8"), "hello\n");
      assert.ok(fx.model.requests.every((r) => r.headers["oz0-job"] === undefined));
      // What Claude Code needs reaches the provider through the header allowlist, and nothing else does.
      for (const request of fx.model.requests) {
        assert.deepEqual(
          Object.keys(request.headers).filter((name) => !PROVIDER_SEES.has(name)),
          [],
          "only allowlisted headers",
        );
        assert.match(request.headers["anthropic-beta"] ?? "", /claude-code-/);
        assert.match(request.headers["anthropic-version"] ?? "", /^\d{4}-\d{2}-\d{2}$/);
        assert.match(request.headers["user-agent"] ?? "", /^claude-cli\//);
        assert.equal(request.headers["x-app"], "cli");
        assert.ok(!JSON.stringify(request.headers).includes(e.token), "the session token stays at the proxy");
      }
    } finally {
      await fx.close();
    }
  });
});
