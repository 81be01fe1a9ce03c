// A plugin's YAML refused at install says where and what, in words a person fixes it by: invalid YAML with
// its line and column, a name's rule without a regular expression.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { readYamlDocument, validateDocument } from "../src/plugins/yaml-validation.js";

const AGENT = "runtime: harness:fake\nmodel: { primary: anthropic/claude-sonnet-5-5 }\ninstructions: p.md\n";

function refusal(text: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-yaml-"));
  try {
    const file = path.join(dir, "a.yaml");
    writeFileSync(file, text);
    readYamlDocument({ schema: "agent", file, displayName: "agents/a.yaml" });
  } catch (error) {
    return (error as Error).message;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.fail("the file was accepted");
}

void test("invalid YAML is refused with the line and column where it breaks", () => {
  // An unclosed flow sequence (the operator's typo), and a tab as indentation.
  const unclosed = refusal(`name: a\n${AGENT}harness:\n  tools: [read_file, run_command\n  requires_approval: [x]\n`);
  assert.match(unclosed, /^agents\/a\.yaml:\d+:\d+: invalid YAML: Flow sequence/);
  const tabs = refusal(`name: a\n${AGENT}harness:\n\ttools: [read_file]\n`);
  assert.match(tabs, /^agents\/a\.yaml:6:1: invalid YAML: Tabs are not allowed as indentation/);
});

void test("a name that breaks its pattern is refused in words, with what was written", () => {
  assert.throws(
    () =>
      validateDocument({
        schema: "plugin-manifest",
        file: "oz0-plugin.yaml",
        value: { name: "My_Plugin", version: "1" },
      }),
    (e: Error) =>
      e.message.includes(
        `oz0-plugin.yaml: field /name: expected a name of lower-case letters, digits and '-', starting with a letter, at most 64 characters; got "My_Plugin"`,
      ) && !e.message.includes("[a-z]"),
  );
  assert.throws(
    () =>
      validateDocument({
        schema: "agent",
        file: "agents/a.yaml",
        value: { name: "a", runtime: "fake", model: { primary: "anthropic/x" }, instructions: "p.md" },
      }),
    (e: Error) => /field \/runtime: expected harness:NAME, NAME being a harness's name \(lower-case/.test(e.message),
  );
});
