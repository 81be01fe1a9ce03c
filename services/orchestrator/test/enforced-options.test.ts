// The agent options the orchestrator enforces (harness.tools,
// requires_approval, max_budget_usd), checked at publication
// (policy/policy-checks.ts): a misspelt one installed and enforced nothing,
// so a call ran with no approval and no budget (operator review).
import assert from "node:assert/strict";
import { test } from "node:test";
import { checkToolPolicy } from "../src/policy/policy-checks.js";
import type { AgentDefinition, HarnessManifest } from "../src/plugins/plugin-types.js";

const harness: HarnessManifest = { name: "fake", command: ["oz0-fake-harness"], permissions: true };
const check = (options: Record<string, unknown>, manifest: HarnessManifest = harness) =>
  checkToolPolicy({
    definition: {
      name: "a",
      runtime: "harness:fake",
      model: { primary: "anthropic/claude-sonnet-5-5" },
      instructions: "p.md",
      harness: options,
    } as AgentDefinition,
    harness: manifest,
    file: "agents/a.yaml",
  });
const refused = (options: Record<string, unknown>, manifest?: HarnessManifest): string => {
  try {
    check(options, manifest);
  } catch (error) {
    return (error as Error).message;
  }
  assert.fail(`installed: ${JSON.stringify(options)}`);
};

void test("a misspelt enforced option is refused, naming the one meant", () => {
  assert.match(
    refused({ tools: ["run_command"], requires_aproval: ["run_command"] }),
    /^agents\/a\.yaml: field \/harness\/requires_aproval: did you mean requires_approval\? The orchestrator enforces tools, requires_approval, max_budget_usd; any other key of harness goes to the harness as it is/,
  );
  assert.match(refused({ max_budget_ust: 0.5 }), /field \/harness\/max_budget_ust: did you mean max_budget_usd\?/);
  assert.match(refused({ Tools: ["x"] }), /field \/harness\/Tools: did you mean tools\?/);
  assert.match(refused({ "requires-approval": ["x"] }), /did you mean requires_approval\?/);
  assert.match(refused({ max_budget: 1 }), /did you mean max_budget_usd\?/, "two letters and an underscore short");
  // A harness's own options pass as they are.
  check({ tools: ["Bash"], permission_mode: "default", system_prompt: "be brief", agent: "gemini" });
});

void test("requires_approval names only the agent's tools, exactly", () => {
  assert.match(
    refused({ tools: ["run_command", "read_file"], requires_approval: ["Run_command"] }),
    /field \/harness\/requires_approval: Run_command is not one of the agent's tools \(run_command, read_file\), so no call of it is ever asked about; tool names are exact: did you mean run_command\?/,
  );
  assert.match(
    refused({ tools: ["read_file"], requires_approval: ["write_file"] }),
    /write_file is not one of the agent's tools \(read_file\), .*add it to harness\.tools, or remove it/,
  );
  // The harness's default tools when the agent names none; no list at all checks nothing.
  assert.match(refused({ requires_approval: ["Bash"] }, { ...harness, tools: ["bash"] }), /did you mean bash\?/);
  check({ requires_approval: ["run_command"] }, { ...harness, tools: ["run_command"] });
  check({ requires_approval: ["anything"] });
});
