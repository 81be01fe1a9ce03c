// A Claude Code session is no longer an empty stretch of the job's trace: with
// the real binary against the scripted model, the harness exports a `chat`
// span per model call and an `execute_tool` span per tool call (refused ones
// as errors) to the endpoint a sandbox gives it, below the session's span,
// and no content reaches any span.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { removeRun, runHarness } from "./harness-run.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const MARKER = "CONTENT-MARKER-7d21";
const SESSION_SPAN = "b7ad6b7169203331";
const TRACE_ID = "0af7651916cd43dd8448eb211c80319c";

interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  attributes: Record<string, unknown>;
  statusCode: number;
  statusMessage: string;
}

void test("the harness's model calls and tool calls are spans of the session's trace, with no content", async () => {
  const receiver = spawn(process.execPath, [path.join(repoRoot, "tools", "test-infra", "bin", "otlp-receiver.mjs")], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  try {
    let url = "";
    for await (const line of createInterface({ input: receiver.stdout })) {
      url = (JSON.parse(line) as { url: string }).url;
      break;
    }
    const run = await runHarness({
      files: { "notes.txt": `${MARKER}\n` },
      turns: ({ workingDir }) => [
        { toolCalls: [{ name: "Read", input: { file_path: path.join(workingDir, "notes.txt") } }] },
        { toolCalls: [{ name: "Bash", input: { command: `echo ${MARKER}`, description: "Echo" } }] },
        { toolCalls: [{ name: "Bash", input: { command: "exit 3", description: "Fail" } }] },
        { text: `Done: ${MARKER}` },
      ],
      answer: (request) =>
        request.tool === "Bash" && request.input?.command !== "exit 3"
          ? { allow: false, reason: `no ${MARKER}` }
          : { allow: true },
      request: { input: `Task ${MARKER}`, trace: { traceparent: `00-${TRACE_ID}-${SESSION_SPAN}-01` } },
      // What the sandbox gives a session when the stack records traces (its relay, here the receiver itself).
      env: {
        OTEL_SDK_DISABLED: "false",
        OTEL_TRACES_EXPORTER: "otlp",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${url}/v1/traces`,
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/json",
      },
    });
    try {
      assert.equal(run.outcome.status, "completed", `${run.outcome.error?.message ?? ""}\n${run.stderr}`);
      // The harness flushed before it exited: every span is at the receiver already.
      const spans = ((await (await fetch(`${url}/spans`)).json()) as ReceivedSpan[]).filter(
        (s) => s.service === "claude-agent-sdk",
      );
      const names = spans.map((s) => s.name).join(", ");
      const chats = spans.filter((s) => s.name.startsWith("chat "));
      assert.equal(chats.length, run.model.requests.length, `a chat span per model call: ${names}`);
      for (const chat of chats) {
        assert.equal(chat.attributes["gen_ai.operation.name"], "chat");
        assert.ok(Number(chat.attributes["gen_ai.usage.output_tokens"]) > 0, JSON.stringify(chat.attributes));
      }
      const read = spans.find((s) => s.name === "execute_tool Read");
      const bash = spans.filter((s) => s.name === "execute_tool Bash");
      assert.ok(read && bash.length === 2, names);
      assert.equal(read.statusCode, 0, "the allowed Read succeeded");
      // The refused call and the command that exited 3: errors, each with a message that is not its output.
      for (const call of bash) {
        assert.equal(call.statusCode, 2, "a refused or failed Bash call is an error span");
        assert.ok(call.statusMessage, "an error span says why");
      }
      assert.match(String(read.attributes["gen_ai.tool.call.id"]), /^toolu_/);
      for (const span of spans) {
        assert.equal(span.traceId, TRACE_ID, `${span.name} is in the session's trace`);
        assert.equal(span.parentSpanId, SESSION_SPAN, `${span.name} hangs below the session's span`);
        assert.ok(!JSON.stringify(span).includes(MARKER), `${span.name} carries content: ${JSON.stringify(span)}`);
      }
    } finally {
      await removeRun(run);
    }
  } finally {
    receiver.kill("SIGTERM");
  }
});
