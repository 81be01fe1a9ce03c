// Publication limits of harness operations, each at its boundary: valid at
// the edge, refused one past it, with a message naming the operation and rule.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  compileResultSchema,
  describeValidationErrors,
  OPERATION_LIMITS,
  readOperationTask,
  validateHarnessOperations,
} from "../src/operations/harness-operations.js";

const schema = {
  type: "object",
  properties: { ok: { type: "boolean" } },
  required: ["ok"],
  additionalProperties: false,
};

function op(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    key: "extract_shipment",
    description: "d",
    instructions: "i",
    result_schema: schema,
    timeout_ms: 60_000,
    ...overrides,
  };
}

function check(operations: unknown, toolNamespace: string[] = []): ReturnType<typeof validateHarnessOperations> {
  return validateHarnessOperations({ operations, toolNamespace, file: "agents/a.yaml" });
}

function refused(operations: unknown, pattern: RegExp, toolNamespace: string[] = []): void {
  assert.throws(
    () => check(operations, toolNamespace),
    (error: Error & { code?: string }) => {
      assert.equal(error.code, "invalid_argument");
      assert.match(error.message, pattern);
      return true;
    },
  );
}

void test("at most 32 operations", () => {
  const many = (n: number) => Array.from({ length: n }, (_, i) => op({ key: `op_${i}` }));
  assert.equal(check(many(32)).length, 32);
  refused(many(33), /harness_operations: declares 33 operations; at most 32/);
});

void test("key length 1–64 and pattern", () => {
  assert.equal(check([op({ key: "a" })])[0]!.key, "a");
  const k64 = "a".repeat(64);
  assert.equal(check([op({ key: k64 })])[0]!.key, k64);
  refused([op({ key: "a".repeat(65) })], /operation "a{65}"\): key must be 1–64 characters \(it has 65\)/);
  refused([op({ key: "" })], /key must be 1–64 characters \(it has 0\)/);
  refused([op({ key: "Extract" })], /operation "Extract"\): key must match/);
  refused([op({ key: "1x" })], /key must match/);
  assert.equal(check([op({ key: "a-b_9" })])[0]!.key, "a-b_9");
});

void test("keys are unique across operations and the harness's tools", () => {
  refused([op(), op()], /operation "extract_shipment"\): key is declared twice/);
  refused([op({ key: "read_file" })], /operation "read_file"\): key collides with the tool "read_file"/, [
    "read_file",
    "write_file",
  ]);
  assert.equal(check([op({ key: "read_files" })], ["read_file"]).length, 1);
});

void test("description 1–2,000 characters (counted as characters, not bytes)", () => {
  assert.equal(check([op({ description: "é".repeat(2_000) })]).length, 1);
  refused(
    [op({ description: "x".repeat(2_001) })],
    /operation "extract_shipment"\): description must be 1–2,000 characters \(it has 2,001\)/,
  );
  refused([op({ description: "" })], /description must be 1–2,000 characters \(it has 0\)/);
});

void test("instructions 1–100,000 characters", () => {
  assert.equal(check([op({ instructions: "x".repeat(100_000) })]).length, 1);
  refused([op({ instructions: "x".repeat(100_001) })], /instructions must be 1–100,000 characters \(it has 100,001\)/);
  refused([op({ instructions: "" })], /instructions must be 1–100,000 characters \(it has 0\)/);
});

void test("timeout 1,000–300,000 ms", () => {
  assert.equal(check([op({ timeout_ms: 1_000 })])[0]!.timeout_ms, 1_000);
  assert.equal(check([op({ timeout_ms: 300_000 })])[0]!.timeout_ms, 300_000);
  refused(
    [op({ timeout_ms: 999 })],
    /timeout_ms must be a whole number of milliseconds from 1,000 to 300,000 \(got 999\)/,
  );
  refused([op({ timeout_ms: 300_001 })], /\(got 300001\)/);
  refused([op({ timeout_ms: 1500.5 })], /timeout_ms must be a whole number/);
});

void test("result_schema: required, top-level object, supported subset, compiles", () => {
  refused([op({ result_schema: undefined })], /result_schema is required/);
  refused([op({ result_schema: { type: "array" } })], /result_schema must be a top-level object schema/);
  refused(
    [op({ result_schema: { type: "object", properties: { a: { $ref: "#/x" } } } })],
    /result_schema\/properties\/a\/\$ref uses a keyword outside the supported subset/,
  );
  refused(
    [op({ result_schema: { type: "object", properties: { a: { type: "strin" } } } })],
    /result_schema does not compile/,
  );
  refused([op({ result_schema: { type: "object", required: "a" } })], /result_schema does not compile/);
});

void test("result_schema: a format is checked, and one the orchestrator does not check is refused at publication", () => {
  const withFormat = (format: unknown) =>
    op({
      result_schema: { type: "object", properties: { contact: { type: "string", format } }, required: ["contact"] },
    });
  refused(
    [withFormat("e-mail")],
    /result_schema\/properties\/contact\/format is "e-mail", not a format the orchestrator checks \(date, time, date-time, .*email.*\); use one of those, or a pattern/,
  );
  refused([withFormat(7)], /result_schema\/properties\/contact\/format is 7, not a format/);
  // A result that breaks its declared format does not validate: the model is asked again, then the call fails.
  const validate = compileResultSchema(withFormat("email").result_schema as Record<string, unknown>);
  assert.equal(validate({ contact: "ops@example.com" }), true);
  assert.equal(validate({ contact: "not an address" }), false);
  assert.deepEqual(describeValidationErrors(validate.errors), ['/contact must match format "email"']);
  assert.equal(
    compileResultSchema(withFormat("date-time").result_schema as Record<string, unknown>)({
      contact: "2026-12-04T19:30:00Z",
    }),
    true,
  );
});

void test("result_schema: a pattern is matched in linear time, and one RE2 cannot match is refused at publication", () => {
  const withPattern = (pattern: string) =>
    op({ result_schema: { type: "object", properties: { code: { type: "string", pattern } }, required: ["code"] } });
  // Validated in the orchestrator's process: with a backtracking engine this answer took hours, blocking every job.
  const validate = compileResultSchema(withPattern("^(a+)+$").result_schema as Record<string, unknown>);
  const started = performance.now();
  assert.equal(validate({ code: `${"a".repeat(50_000)}!` }), false);
  assert.ok(performance.now() - started < 2_000, "a catastrophic-backtracking pattern is matched in linear time");
  assert.deepEqual(describeValidationErrors(validate.errors), ['/code must match pattern "^(a+)+$"']);
  assert.equal(validate({ code: "aaa" }), true);
  assert.equal(
    compileResultSchema(withPattern("^\\p{Lu}[a-z]{2,}\\d$").result_schema as Record<string, unknown>)({
      code: "Abc1",
    }),
    true,
  );
  refused(
    [withPattern("^(?!draft)")],
    /result_schema\/properties\/code\/pattern "\^\(\?!draft\)" is not a pattern RE2 can match .*without lookaround or backreferences/,
  );
  refused([withPattern("^(a)\\1$")], /is not a pattern RE2 can match/);
});

void test("result_schema serialised size ≤ 65,536 bytes", () => {
  // {"type":"object","description":"…"} is 33 bytes around the description.
  const sized = (bytes: number) => ({
    type: "object",
    description: "x".repeat(bytes - JSON.stringify({ type: "object", description: "" }).length),
  });
  assert.equal(Buffer.byteLength(JSON.stringify(sized(65_536))), 65_536);
  assert.equal(check([op({ result_schema: sized(65_536) })]).length, 1);
  refused([op({ result_schema: sized(65_537) })], /result_schema serialises to 65,537 bytes; at most 65,536/);
});

void test("an operation cannot attach a skill or pick a model", () => {
  refused([op({ skills: ["shipment-intake"] })], /unknown field "skills".*cannot attach or scope a skill/);
});

void test("task input 1–100,000 characters", () => {
  assert.deepEqual(readOperationTask({ task: "x".repeat(OPERATION_LIMITS.taskMaxChars) }), {
    task: "x".repeat(100_000),
  });
  assert.match(
    (readOperationTask({ task: "x".repeat(100_001) }) as { error: string }).error,
    /1–100,000 characters \(it has 100,001\)/,
  );
  assert.match((readOperationTask({ task: "" }) as { error: string }).error, /it has 0/);
  assert.match((readOperationTask({}) as { error: string }).error, /expected \{"task"/);
  assert.match((readOperationTask({ task: "a", extra: 1 }) as { error: string }).error, /unknown field\(s\) extra/);
});

void test("the README's harness-operations example and the shipments example plugin publish", async () => {
  const { readFileSync } = await import("node:fs");
  const path = await import("node:path");
  const { parse } = await import("yaml");
  const { resolveSkills } = await import("../src/agents/agent-skills.js");
  const { packageDir, repoRoot } = await import("./support/test-stack.js");
  const readme = readFileSync(path.join(packageDir, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Harness operations"));
  const yaml = /```yaml\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(yaml, "the section has a YAML example");
  const excerpt = parse(yaml) as { harness_operations: unknown[]; skills: string[] };
  assert.deepEqual(
    check(excerpt.harness_operations, ["read_file", "write_file", "run_command"]).map((o) => o.key),
    ["verify_shipment"],
  );

  const pluginDir = path.join(repoRoot, "examples", "plugins", "shipments");
  const agent = parse(readFileSync(path.join(pluginDir, "agents", "shipment-orchestrator.yaml"), "utf8")) as {
    harness_operations: unknown[];
    skills: string[];
  };
  assert.deepEqual(
    check(agent.harness_operations, ["read_file", "write_file", "run_command"]).map((o) => o.key),
    ["extract_shipment", "verify_shipment"],
  );
  const skills = resolveSkills({ skills: agent.skills, pluginDir, file: "agents/shipment-orchestrator.yaml" });
  assert.deepEqual(
    skills.map((s) => [s.name, path.relative(pluginDir, s.path)]),
    [["shipment-intake", path.join("skills", "shipment-intake")]],
  );
  assert.throws(
    () => resolveSkills({ skills: ["prompts"], pluginDir, file: "a.yaml" }),
    /field \/skills\/0: prompts is not a folder with a SKILL.md/,
  );
  assert.throws(() => resolveSkills({ skills: ["../.."], pluginDir, file: "a.yaml" }), /is outside the plugin/);
});
