// The `harness:` options: what an agent definition may say, and the errors
// that name the option when it says something wrong.
import { test } from "node:test";
import assert from "node:assert/strict";
import { HarnessOptionsError, parseHarnessOptions, validateHarnessOptions } from "../src/harness-options.js";
import { buildAgentEnvironment, customHeaderLines } from "../src/agent-environment.js";
import { modelEndpointFrom } from "@oz0/harness";
import { create } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";

void test("a preset name or a command with env and model_env", () => {
  assert.deepEqual(parseHarnessOptions({ agent: "claude" }).agent, { kind: "preset", preset: "claude" });
  assert.deepEqual(
    parseHarnessOptions({
      agent: { command: ["gemini", "--experimental-acp"], env: { GEMINI_API_KEY: "{llm.token}" }, model_env: "none" },
      requires_approval: ["Bash"],
    }),
    {
      agent: {
        kind: "command",
        command: ["gemini", "--experimental-acp"],
        env: { GEMINI_API_KEY: "{llm.token}" },
        modelEnv: "none",
      },
      requiresApproval: ["Bash"],
      tools: undefined,
    },
  );
  assert.deepEqual(parseHarnessOptions({ agent: "claude", tools: ["Read", "Bash"] }).tools, ["Read", "Bash"]);
  // claude-agent-acp turns TodoWrite into a plan update: its permission request names a call never announced.
  assert.throws(
    () => parseHarnessOptions({ agent: "claude", tools: ["Read", "TodoWrite"] }),
    /^HarnessOptionsError: invalid harness options for acp: harness\.tools: TodoWrite: claude-agent-acp reports its calls as a plan update, never as a tool call, .*leave it out$/,
  );
  assert.throws(
    () => parseHarnessOptions({ agent: { command: ["x"] }, tools: ["Read"] }),
    /harness\.tools: only the claude preset can restrict its tools/,
  );
  // The command line's default applies only when the options name no agent.
  assert.deepEqual(parseHarnessOptions({}, { kind: "preset", preset: "claude" }).agent, {
    kind: "preset",
    preset: "claude",
  });
});

void test("every bad option is named, with what to write instead", () => {
  const problems = validateHarnessOptions({
    agent: { command: [], env: { OPENAI_API_KEY: "sk-live-123", "BAD NAME": "x" }, model_env: "bedrock", args: [] },
    colour: "blue",
  });
  assert.deepEqual(
    problems.map((p) => p.option),
    ["colour", "agent.args", "agent.command", "agent.env.OPENAI_API_KEY", "agent.env.BAD NAME", "agent.model_env"],
  );
  assert.match(
    problems.find((p) => p.option === "agent.env.OPENAI_API_KEY")?.message ?? "",
    /credential.*\{llm\.token\}/,
  );
  assert.throws(
    () => parseHarnessOptions({}),
    (error: unknown) =>
      error instanceof HarnessOptionsError && /harness\.agent: is required: a preset \(claude\)/.test(error.message),
  );
  assert.throws(
    () => parseHarnessOptions({ agent: "codex" }),
    /harness\.agent: "codex" is not a preset; choose from claude/,
  );
});

void test("the agent's environment is built from scratch: no inherited key, the endpoint in the agent's variables", () => {
  const request = create(SessionRequestSchema, {
    jobId: "job-1",
    agent: { name: "coder" },
    model: { primary: "anthropic/claude-x" },
    llm: {
      anthropicBaseUrl: "http://proxy/anthropic/",
      openaiBaseUrl: "http://proxy/openai/v1",
      token: "tok-1",
      headers: { "Oz0-Job": "job-1", "Oz0-Agent": "coder@1" },
    },
  });
  const env = buildAgentEnvironment({
    stateDir: "/state",
    endpoint: modelEndpointFrom(request),
    modelEnv: "anthropic",
    extra: { MY_URL: "{llm.openai_base_url}/x", MY_MODEL: "{llm.model}" },
    inherited: { PATH: "/bin", ANTHROPIC_API_KEY: "sk-ant-inherited", AWS_SECRET_ACCESS_KEY: "x", LANG: "C.UTF-8" },
  });
  assert.deepEqual(env, {
    PATH: "/bin",
    LANG: "C.UTF-8",
    HOME: "/state/home",
    TMPDIR: "/state/tmp",
    OZ0_LLM_ANTHROPIC_BASE_URL: "http://proxy/anthropic",
    OZ0_LLM_OPENAI_BASE_URL: "http://proxy/openai/v1",
    OZ0_LLM_TOKEN: "tok-1",
    OZ0_LLM_HEADERS: JSON.stringify({ "Oz0-Job": "job-1", "Oz0-Agent": "coder@1" }),
    OZ0_LLM_MODEL: "claude-x",
    ANTHROPIC_BASE_URL: "http://proxy/anthropic",
    ANTHROPIC_API_KEY: "tok-1",
    ANTHROPIC_CUSTOM_HEADERS: "Oz0-Job: job-1\nOz0-Agent: coder@1",
    MY_URL: "http://proxy/openai/v1/x",
    MY_MODEL: "claude-x",
  });
  assert.throws(() => customHeaderLines({ "Oz0-Job": "a\r\nX-Evil: 1" }), /line break/);
});
