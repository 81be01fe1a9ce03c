// SummarizeUsage: every job's calls that started in a window, per agent, at
// the proxy itself; a window it cannot sum is refused, saying why.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { post, startFixture } from "./proxy-fixture.js";

void describe("SummarizeUsage", () => {
  void it("sums the calls of every job in the window per agent, and refuses a window missing an end or backwards", async () => {
    const fx = await startFixture({ turns: () => ({ text: "ok", usage: { input: 10, output: 10 } }) });
    try {
      const since = new Date();
      for (const agent of ["coder", "coder", "critic"]) {
        const e = await fx.session({ agent });
        const answered = await post(
          `${e.anthropicBaseUrl}/v1/messages`,
          { model: "claude-sonnet-5", max_tokens: 10, messages: [{ role: "user", content: "x" }] },
          { "x-api-key": e.token, ...e.headers },
        );
        assert.equal(answered.status, 200, answered.text);
      }
      const until = new Date(Date.now() + 1000);
      const summary = await fx.control.summarizeUsage({
        since: timestampFromDate(since),
        until: timestampFromDate(until),
      });
      assert.deepEqual(
        summary.agents.map((a) => [a.agent, a.usage?.calls, a.usage?.inputTokens]),
        [
          ["coder", 2n, 20n],
          ["critic", 1n, 10n],
        ],
      );
      assert.equal(summary.total?.calls, 3n);
      const refused = async (request: Parameters<typeof fx.control.summarizeUsage>[0], message: RegExp) =>
        assert.rejects(
          fx.control.summarizeUsage(request),
          (e: unknown) =>
            ConnectError.from(e).code === Code.InvalidArgument && message.test(ConnectError.from(e).rawMessage),
        );
      await refused({ since: timestampFromDate(since) }, /needs since and until/);
      await refused(
        { since: timestampFromDate(until), until: timestampFromDate(since) },
        /since \(.*\) must come before its until/,
      );
    } finally {
      await fx.close();
    }
  });
});
