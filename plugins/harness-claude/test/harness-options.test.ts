import { test } from "node:test";
import assert from "node:assert/strict";
import { DEFAULT_TOOLS, HarnessOptionsError, parseHarnessOptions, validateHarnessOptions } from "../src/index.js";

void test("no options: the default tools, permission mode and system prompt", () => {
  assert.deepEqual(parseHarnessOptions(undefined), {
    tools: [...DEFAULT_TOOLS],
    permissionMode: "default",
    systemPrompt: "append",
    maxBudgetUsd: undefined,
    requiresApproval: [],
  });
  assert.deepEqual(DEFAULT_TOOLS, ["Read", "Write", "Edit", "Glob", "Grep", "Bash"]);
});

void test("the options of the seed's example are accepted as written", () => {
  const options = parseHarnessOptions({
    tools: ["Read", "Glob", "Grep", "Bash"],
    requires_approval: ["Bash"],
    permission_mode: "acceptEdits",
    system_prompt: "replace",
    max_budget_usd: 2.0,
  });
  assert.deepEqual(options, {
    tools: ["Read", "Glob", "Grep", "Bash"],
    permissionMode: "acceptEdits",
    systemPrompt: "replace",
    maxBudgetUsd: 2,
    requiresApproval: ["Bash"],
  });
});

void test("every bad option is named, with what it accepts", () => {
  const problems = validateHarnessOptions({
    tools: ["Read", "WebFetch", "Task"],
    permission_mode: "dontAsk",
    system_prompt: "prepend",
    max_budget_usd: -1,
    permision_mode: "plan",
  });
  const byOption = Object.fromEntries(problems.map((p) => [p.option, p.message]));
  assert.deepEqual(Object.keys(byOption).sort(), [
    "max_budget_usd",
    "permision_mode",
    "permission_mode",
    "system_prompt",
    "tools",
  ]);
  assert.match(
    byOption["tools"] ?? "",
    /WebFetch, Task are not supported; choose from Read, Write, Edit, Glob, Grep, Bash/,
  );
  assert.match(byOption["permission_mode"] ?? "", /default, acceptEdits, plan, bypassPermissions, got "dontAsk"/);
  assert.match(byOption["permision_mode"] ?? "", /unknown option/);
  assert.throws(
    () => parseHarnessOptions({ tools: "Bash" }),
    (error: unknown) => {
      assert.ok(error instanceof HarnessOptionsError);
      assert.equal(error.code, "invalid_harness_options");
      assert.match(error.message, /harness\.tools: must be a list of tool names, got "Bash"/);
      return true;
    },
  );
});

void test("valid options have no problems", () => {
  assert.deepEqual(validateHarnessOptions({ tools: ["Bash"], permission_mode: "plan" }), []);
  assert.deepEqual(validateHarnessOptions(null), []);
});

void test("the README's install-time check says what it shows", () => {
  assert.deepEqual(validateHarnessOptions({ tools: ["Read", "WebFetch"], permission_mode: "dontAsk" }), [
    { option: "tools", message: "WebFetch is not supported; choose from Read, Write, Edit, Glob, Grep, Bash" },
    {
      option: "permission_mode",
      message: 'must be one of default, acceptEdits, plan, bypassPermissions, got "dontAsk"',
    },
  ]);
});
