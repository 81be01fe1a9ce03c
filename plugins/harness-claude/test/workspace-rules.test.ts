// The harness's own rules around Claude Code: file tools confined to the
// working directory (whatever the runtime answers), runtime tool names, and
// structured output from text.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, symlink } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import type { JsonObject } from "@bufbuild/protobuf";
import type { PermissionDecision } from "@oz0/harness";
import { createPermissionGate } from "../src/permission-gate.js";
import { runtimeToolNames } from "../src/runtime-tool-server.js";
import { structuredOutputFromText } from "../src/structured-output.js";
import { workspaceBoundary } from "../src/workspace-boundary.js";

void test("file tools may use paths inside the working directory only; skills are readable, not writable", async (t) => {
  const root = await mkdtemp(path.join(os.tmpdir(), "oz0-boundary-"));
  t.after(() => rm(root, { recursive: true, force: true }));
  const work = path.join(root, "work");
  const skill = path.join(root, "skill");
  await mkdir(work);
  await mkdir(skill);
  await symlink(root, path.join(work, "link-out"));
  const boundary = workspaceBoundary({ workingDir: work, readOnlyDirs: [skill] });
  assert.equal(boundary.check("Write", { file_path: path.join(work, "a/b.txt") }), undefined);
  assert.equal(boundary.check("Grep", { pattern: "x" }), undefined);
  assert.equal(boundary.check("Read", { file_path: path.join(skill, "SKILL.md") }), undefined);
  assert.match(
    boundary.check("Edit", { file_path: path.join(skill, "SKILL.md") }) ?? "",
    /Edit may only use paths inside the working directory/,
  );
  assert.match(boundary.check("Write", { file_path: `${work}/../escaped.txt` }) ?? "", /escaped\.txt is outside it/);
  assert.match(boundary.check("Read", { file_path: "/etc/passwd" }) ?? "", /outside/);
  assert.match(boundary.check("Glob", { pattern: "*", path: "/" }) ?? "", /outside/);
  // A symlink inside that points outside does not open a way out.
  assert.match(boundary.check("Write", { file_path: path.join(work, "link-out", "x.txt") }) ?? "", /outside/);
  assert.equal(boundary.check("Bash", { command: "cat /etc/passwd" }), undefined);
  // Claude Code reads ~ as the session's home (its state directory), whatever the working directory is.
  for (const value of ["~", "~/..", "~/.ssh/id_ed25519"]) {
    assert.match(boundary.check("Grep", { pattern: "x", path: value }) ?? "", /starts with ~/);
    assert.match(boundary.check("Read", { file_path: value }) ?? "", /starts with ~/);
  }
  // A Glob pattern is searched from the filesystem's root when absolute, whatever its path says.
  for (const pattern of [`${root}/*`, "../*", "src/../../*", "~/*"])
    assert.match(boundary.check("Glob", { pattern, path: work }) ?? "", /absolute or leaves it/);
  assert.equal(boundary.check("Glob", { pattern: "src/**/*.ts", path: work }), undefined);
  assert.equal(boundary.check("Glob", { pattern: "**/..foo" }), undefined);
});

void test("runtime tools answer to their MCP name and to their plain name, unless that is a Claude Code tool", () => {
  const names = runtimeToolNames([{ name: "lookup" }, { name: "Bash" }] as never, new Set(["Bash", "Read"]));
  assert.deepEqual(names.aliases, { lookup: "mcp__oz0__lookup" });
  assert.equal(names.runtimeName("mcp__oz0__lookup"), "lookup");
  assert.equal(names.runtimeName("lookup"), "lookup");
  assert.equal(names.runtimeName("mcp__oz0__Bash"), "Bash");
  assert.equal(names.runtimeName("Bash"), undefined);
  assert.equal(names.runtimeName("mcp__other__lookup"), undefined);
});

void test("a plain-text JSON answer becomes the structured output when it matches the schema", () => {
  const schema = { type: "object", properties: { answer: { type: "number" } }, required: ["answer"] };
  assert.deepEqual(structuredOutputFromText('{"answer": 42}', schema), { ok: true, value: { answer: 42 } });
  assert.deepEqual(structuredOutputFromText('Here:\n```json\n{"answer": 1}\n```', schema), {
    ok: true,
    value: { answer: 1 },
  });
  const wrong = structuredOutputFromText('{"answer": "many"}', schema);
  assert.equal(wrong.ok, false);
  assert.match(wrong.ok ? "" : wrong.error, /does not match the output_schema: answer/);
  const prose = structuredOutputFromText("forty-two", schema);
  assert.match(prose.ok ? "" : prose.error, /not JSON/);
});

void test("an input the runtime changed in its answer stays inside the working directory too", async (t) => {
  const root = await mkdtemp(path.join(os.tmpdir(), "oz0-boundary-"));
  t.after(() => rm(root, { recursive: true, force: true }));
  const work = path.join(root, "work");
  await mkdir(work);
  const answers: Record<string, unknown>[] = [
    { file_path: "/etc/hostname" },
    { file_path: path.join(work, "notes.txt") },
  ];
  const gate = createPermissionGate({
    session: {
      requestPermission: () =>
        Promise.resolve({ allow: true, input: answers.shift() as JsonObject } as PermissionDecision),
    },
    tools: ["Read"],
    runtimeToolName: () => undefined,
    boundary: workspaceBoundary({ workingDir: work }),
    announceToolCall: () => undefined,
  });
  const ask = () =>
    gate.canUseTool("Read", { file_path: path.join(work, "notes.txt") }, {
      signal: new AbortController().signal,
      toolUseID: "toolu_1",
    } as Parameters<typeof gate.canUseTool>[2]);
  const redirected = await ask();
  assert.ok(redirected?.behavior === "deny", "the changed input is refused");
  assert.match(redirected.message, /\/etc\/hostname is outside it/);
  assert.deepEqual(await ask(), { behavior: "allow", updatedInput: { file_path: path.join(work, "notes.txt") } });
});

void test("a call outside the working directory is asked about, then refused though allowed (the orchestrator audits every result)", async (t) => {
  const root = await mkdtemp(path.join(os.tmpdir(), "oz0-boundary-"));
  t.after(() => rm(root, { recursive: true, force: true }));
  const work = path.join(root, "work");
  await mkdir(work);
  const asked: string[] = [];
  const gate = createPermissionGate({
    session: {
      requestPermission: (request) => {
        asked.push(request.callId ?? "");
        return Promise.resolve({ allow: true, input: request.input } as PermissionDecision);
      },
    },
    tools: ["Read"],
    runtimeToolName: () => undefined,
    boundary: workspaceBoundary({ workingDir: work }),
    announceToolCall: () => undefined,
  });
  const refused = await gate.canUseTool("Read", { file_path: "/etc/hostname" }, {
    signal: new AbortController().signal,
    toolUseID: "toolu_out",
  } as Parameters<typeof gate.canUseTool>[2]);
  assert.deepEqual(asked, ["toolu_out"]);
  assert.ok(refused?.behavior === "deny", "the call outside is refused");
  assert.match(refused.message, /\/etc\/hostname is outside it/);
});
