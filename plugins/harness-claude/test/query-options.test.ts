// The session request as query() options, without starting Claude Code.
import { test } from "node:test";
import assert from "node:assert/strict";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { buildQueryOptions, customHeaders, parseHarnessOptions, SessionRequestError } from "../src/index.js";

type RequestFields = Exclude<MessageInitShape<typeof SessionRequestSchema>, { $typeName: string }>;

const request = (fields: RequestFields = {}) =>
  create(SessionRequestSchema, {
    protocolVersion: 1,
    jobId: "job-1",
    agent: { name: "coder", version: 2 },
    model: { primary: "anthropic/claude-sonnet-5-5", fallbacks: ["anthropic/claude-haiku-5"] },
    instructions: "Be careful.",
    input: "Fix it.",
    workingDir: "/s/work",
    stateDir: "/s/state",
    limits: { maxTurns: 30 },
    llm: { anthropicBaseUrl: "http://proxy:7702", token: "tok", headers: { "Oz0-Job": "job-1", "Oz0-Agent": "coder" } },
    ...fields,
  });

const extra = {};

void test("the environment is built from scratch: no inherited credential, the proxy as the API, quiet Claude Code", () => {
  const options = buildQueryOptions({
    request: request(),
    harness: parseHarnessOptions({}),
    inheritedEnv: {
      PATH: "/usr/bin",
      LANG: "C.UTF-8",
      ANTHROPIC_API_KEY: "sk-ant-planted",
      AWS_SECRET_ACCESS_KEY: "x",
      OZ0_LLM_TOKEN: "tok",
      HOME: "/root",
    },
    extra,
  });
  assert.deepEqual(options.env, {
    PATH: "/usr/bin",
    LANG: "C.UTF-8",
    HOME: "/s/state/home",
    CLAUDE_CONFIG_DIR: "/s/state/claude",
    CLAUDE_CODE_TMPDIR: "/s/state/tmp",
    ANTHROPIC_BASE_URL: "http://proxy:7702",
    ANTHROPIC_API_KEY: "tok",
    ANTHROPIC_CUSTOM_HEADERS: "Oz0-Job: job-1\nOz0-Agent: coder",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_AUTOUPDATER: "1",
    DISABLE_TELEMETRY: "1",
    CLAUDE_CODE_ENABLE_TELEMETRY: "0",
    DISABLE_ERROR_REPORTING: "1",
    CLAUDE_CODE_DISABLE_AUTO_MEMORY: "1",
    DISABLE_BUG_COMMAND: "1",
    CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY: "1",
    CLAUDE_CODE_MAX_RETRIES: "4",
    CLAUDE_AGENT_SDK_CLIENT_APP: "oz0-harness-claude",
  });
});

void test("model, prompt, limits and permissions map to the SDK's options", () => {
  const options = buildQueryOptions({
    request: request(),
    harness: parseHarnessOptions({ tools: ["Read", "Bash"], permission_mode: "acceptEdits", max_budget_usd: 2 }),
    inheritedEnv: {},
    extra,
  });
  assert.equal(options.cwd, "/s/work");
  assert.equal(options.model, "claude-sonnet-5-5");
  assert.equal(options.fallbackModel, "claude-haiku-5");
  assert.deepEqual(options.systemPrompt, { type: "preset", preset: "claude_code", append: "Be careful." });
  assert.deepEqual(options.tools, ["Read", "Bash"]);
  assert.equal(options.permissionMode, "acceptEdits");
  assert.equal(options.maxTurns, 30);
  assert.equal(options.maxBudgetUsd, 2);
  assert.deepEqual(options.settingSources, []);
  assert.equal(options.persistSession, false);
  assert.equal(options.includePartialMessages, true);
  assert.equal(options.allowDangerouslySkipPermissions, undefined);

  const replaced = buildQueryOptions({
    request: request(),
    harness: parseHarnessOptions({ system_prompt: "replace", permission_mode: "bypassPermissions" }),
    inheritedEnv: {},
    extra,
  });
  assert.equal(replaced.systemPrompt, "Be careful.");
  assert.equal(replaced.allowDangerouslySkipPermissions, true);
});

void test("requests Claude Code cannot serve are refused with what is wrong", () => {
  const refuse = (fields: RequestFields, options: Record<string, string> = {}) =>
    assert.throws(
      () =>
        buildQueryOptions({ request: request(fields), harness: parseHarnessOptions(options), inheritedEnv: {}, extra }),
      SessionRequestError,
    );
  refuse({ model: { primary: "openai/gpt-5" } });
  refuse({ llm: { token: "tok" } });
  refuse({ llm: { anthropicBaseUrl: "http://proxy" } });
  refuse({ instructions: "" }, { system_prompt: "replace" });
  assert.throws(() => customHeaders({ "Oz0-Job": "job\nX-Evil: 1" }), /line break/);
});
