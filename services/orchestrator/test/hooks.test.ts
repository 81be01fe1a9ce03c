// The hooks stage and the policy order without a stack: declarative rules
// (name globs, JSON pointers with equals and regex), command hooks (allow,
// deny, changed input, ask; hanging, crashing and garbage hooks deny), the
// order tool list → hooks → requires_approval, and schema errors that name
// the file and the field.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { runCommandHook, parseHookAnswer } from "../src/policy/command-hooks.js";
import { hookMatches, nameMatches, resolvePointer, type PreToolCall } from "../src/policy/hook-rules.js";
import { chooseHookIsolation } from "../src/policy/hook-isolation.js";
import { HookStage } from "../src/policy/hook-stage.js";
import type { AgentVersionRecord } from "../src/store/job-store.js";
import { PermissionPolicy, type PermissionQuestion } from "../src/policy/permission-policy.js";
import type { AgentDefinition } from "../src/plugins/plugin-types.js";
import { validateDocument } from "../src/plugins/yaml-validation.js";

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "hooks");
// Every plugin and data directory of this file, removed when it ends.
const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-hooks-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

function agentWith(options: {
  pluginHooks?: unknown[];
  agentHooks?: unknown[];
  harness?: AgentDefinition["harness"];
}): AgentVersionRecord {
  const dir = mkdtempSync(path.join(scratch, "plugin-"));
  writeFileSync(
    path.join(dir, "oz0-plugin.yaml"),
    JSON.stringify({ name: "tools", version: "1.0.0", hooks: options.pluginHooks ?? [] }),
  );
  return {
    name: "coder",
    version: 3,
    contentHash: "sha256:x",
    plugin: "tools",
    pluginVersion: "1.0.0",
    pluginPath: dir,
    definition: {
      name: "coder",
      runtime: "harness:fake",
      model: { primary: "anthropic/x" },
      instructions: "p.md",
      harness: options.harness ?? { tools: ["read_file", "write_file", "run_command"] },
      ...(options.agentHooks ? { hooks: options.agentHooks as Record<string, unknown>[] } : {}),
    },
    instructions: "",
    harness: {
      plugin: "tools",
      pluginPath: dir,
      manifest: { name: "fake", command: ["oz0-fake-harness"], permissions: true },
    },
    publishedAt: new Date(),
  };
}

function question(agent: AgentVersionRecord, tool: string, input: Record<string, unknown>): PermissionQuestion {
  return { jobId: "job_1", sessionId: "ses_1", agent, id: "perm_1", tool, input, title: tool, callId: "call_1" };
}

function call(name: string, args: Record<string, unknown>): PreToolCall {
  const [harness, tool] = name.split(".") as [string, string];
  return {
    event: "pre_tool_call",
    name,
    harness,
    tool,
    arguments: args,
    job_id: "j",
    session_id: "s",
    call_id: "c",
    agent: { name: "a", version: 1 },
  };
}

void test("names match exactly or by glob, and JSON pointers walk the input", () => {
  assert.ok(nameMatches("claude-agent-sdk.Bash", "claude-agent-sdk.Bash"));
  assert.ok(!nameMatches("claude-agent-sdk.Bash", "claude-agent-sdk.BashOutput"));
  assert.ok(nameMatches("claude-agent-sdk.*", "claude-agent-sdk.Read"));
  assert.ok(nameMatches(["x.y", "fake.run_?ommand"], "fake.run_command"));
  assert.ok(!nameMatches("fake.*", "fakes.read_file"));
  assert.deepEqual(resolvePointer({ a: [{ "b/c": 1 }] }, "/a/0/b~1c"), { found: true, value: 1 });
  assert.deepEqual(resolvePointer({ a: 1 }, "/b"), { found: false });
  const spec = {
    match: "fake.run_command",
    when: [
      { pointer: "/command", regex: "^git " },
      { pointer: "/cwd", equals: "repo" },
    ],
    decision: "allow" as const,
  };
  assert.ok(hookMatches(spec, call("fake.run_command", { command: "git status", cwd: "repo" })));
  assert.ok(
    !hookMatches(spec, call("fake.run_command", { command: "git status" })),
    "a missing pointer does not match",
  );
  assert.ok(!hookMatches(spec, call("fake.run_command", { command: "rm -rf .", cwd: "repo" })));
  // The model chooses the input a rule runs over: a pattern that backtracks exponentially on it (2^64 steps here,
  // never ending on a backtracking engine) answers at once on the linear-time engine, and so does the README's
  // rule over a harness line's worth of "git push ".
  const nested = {
    match: "fake.run_command",
    when: [{ pointer: "/command", regex: "(a+)+$" }],
    decision: "deny" as const,
  };
  assert.ok(!hookMatches(nested, call("fake.run_command", { command: `${"a".repeat(64)}!` })));
  const force = {
    match: "fake.*",
    when: [{ pointer: "/command", regex: "git push .*--force" }],
    decision: "deny" as const,
  };
  assert.ok(!hookMatches(force, call("fake.run_command", { command: "git push ".repeat(116_000) })));
  assert.ok(hookMatches(force, call("fake.run_command", { command: "git push origin main --force" })));
});

void test("the policy refuses tools outside the list before any hook sees them", async () => {
  const agent = agentWith({
    pluginHooks: [{ name: "allow-all", decision: "allow" }],
    harness: { tools: ["read_file"] },
  });
  const decision = await new PermissionPolicy({ hooks: [new HookStage()] }).decide(
    question(agent, "run_command", { command: "ls" }),
  );
  assert.equal(decision.kind, "deny");
  assert.equal(decision.kind === "deny" && decision.decider, "policy");
  assert.match(decision.reason, /tool run_command is not in this agent's harness\.tools \(read_file\)/);
});

void test("rules allow, deny with their reason, change the input, and ask; the first that decides wins", async () => {
  const agent = agentWith({
    pluginHooks: [
      {
        name: "no-rm",
        match: "fake.run_command",
        when: [{ pointer: "/command", regex: "\\brm\\b" }],
        decision: "deny",
        reason: "deleting files is not allowed",
      },
    ],
    agentHooks: [
      {
        name: "quiet-tests",
        match: "fake.run_command",
        when: [{ pointer: "/command", equals: "npm test" }],
        decision: "allow",
        set_input: { command: "npm test --silent" },
      },
      { name: "ask-writes", match: "fake.write_*", decision: "ask", reason: "a person checks writes" },
      { name: "reads", match: "fake.read_file", decision: "allow" },
    ],
  });
  const policy = new PermissionPolicy({ hooks: [new HookStage()] });
  const denied = await policy.decide(question(agent, "run_command", { command: "rm -rf src" }));
  assert.deepEqual(denied, {
    kind: "deny",
    decider: "hook",
    reason: "hook no-rm (plugin tools): deleting files is not allowed",
  });
  const changed = await policy.decide(question(agent, "run_command", { command: "npm test" }));
  assert.equal(changed.kind, "allow");
  assert.deepEqual(changed.kind === "allow" && changed.input, { command: "npm test --silent" });
  assert.equal(changed.kind === "allow" && changed.decider, "hook");
  const asked = await policy.decide(question(agent, "write_file", { path: "a", content: "b" }));
  assert.deepEqual(asked, { kind: "ask", reason: "hook ask-writes (agent coder): a person checks writes" });
  const unmatched = await policy.decide(question(agent, "run_command", { command: "ls" }));
  assert.deepEqual(unmatched, { kind: "allow", decider: "policy", reason: "no rule asks for approval" });
});

void test("a hook's allow still waits for requires_approval, with the input the hook chose", async () => {
  const agent = agentWith({
    agentHooks: [{ name: "pin-shell", match: "fake.run_command", decision: "allow", set_input: { shell: "sh" } }],
    harness: { tools: ["run_command"], requires_approval: ["run_command"] },
  });
  const decision = await new PermissionPolicy({ hooks: [new HookStage()] }).decide(
    question(agent, "run_command", { command: "ls" }),
  );
  assert.equal(decision.kind, "ask");
  assert.match(decision.reason, /^hook pin-shell \(agent coder\): .*; run_command is in harness\.requires_approval/);
  assert.deepEqual(decision.kind === "ask" && decision.input, { command: "ls", shell: "sh" });
});

void test("command hooks allow, deny, change the input and ask", async () => {
  const guard = {
    name: "guard",
    match: "fake.run_command",
    command: ["node", path.join(fixtures, "guard-commands.mjs")],
  };
  const agent = agentWith({ pluginHooks: [guard] });
  const policy = new PermissionPolicy({ hooks: [new HookStage()] });
  assert.deepEqual(await policy.decide(question(agent, "run_command", { command: "rm x" })), {
    kind: "deny",
    decider: "hook",
    reason: "hook guard (plugin tools): no deleting files (fake.run_command)",
  });
  const rewritten = await policy.decide(question(agent, "run_command", { command: "echo plain" }));
  assert.deepEqual(rewritten.kind === "allow" && rewritten.input, { command: "echo rewritten" });
  assert.equal((await policy.decide(question(agent, "run_command", { command: "deploy prod" }))).kind, "ask");
  assert.equal((await policy.decide(question(agent, "run_command", { command: "ls" }))).kind, "allow");
  assert.equal(
    (await policy.decide(question(agent, "read_file", { path: "x" }))).reason,
    "no rule asks for approval",
    "the hook only runs for the calls it matches",
  );
});

void test("a hook that hangs, crashes or prints garbage denies the call, saying why", async () => {
  const c = call("fake.run_command", { command: "ls" });
  const hung = await runCommandHook({
    command: [process.execPath, path.join(fixtures, "hang.mjs")],
    call: c,
    label: "hook hang",
    cwd: fixtures,
    timeoutMs: 300,
  });
  assert.deepEqual(hung, { decision: "deny", reason: "hook hang did not answer within 300 ms; the call is denied" });
  const crashed = await runCommandHook({
    command: [process.execPath, path.join(fixtures, "crash.mjs")],
    call: c,
    label: "hook crash",
    cwd: fixtures,
  });
  assert.deepEqual(crashed, {
    decision: "deny",
    reason: "hook crash failed (exit code 3): guard: cannot reach the policy server; the call is denied",
  });
  const garbage = await runCommandHook({
    command: [process.execPath, path.join(fixtures, "garbage.mjs")],
    call: c,
    label: "hook garbage",
    cwd: fixtures,
  });
  assert.equal(garbage.decision, "deny");
  assert.match(garbage.reason, /hook garbage printed something that is not JSON/);
  const missing = await runCommandHook({
    command: ["/nonexistent/hook"],
    call: c,
    label: "hook missing",
    cwd: fixtures,
  });
  assert.match(missing.reason, /^hook missing could not start/);
  assert.equal(parseHookAnswer('{"decision":"maybe"}', "hook h").decision, "deny");
  assert.equal(parseHookAnswer('{"decision":"allow","input":[1]}', "hook h").decision, "deny");
  // A reason is stored with the job and shown to viewers: cut at 2,000 characters, inert in a terminal.
  const long = parseHookAnswer(JSON.stringify({ decision: "deny", reason: `${"r".repeat(5_000)}` }), "hook h");
  assert.equal(long.reason, `${"r".repeat(2_000)}… (5000 characters)`);
  const escaped = parseHookAnswer(JSON.stringify({ decision: "deny", reason: "no\u001b[2Jclear" }), "hook h");
  assert.equal(escaped.reason, "no\\u001b[2Jclear");
  // Through the stage: a hanging hook with a declared timeout denies, and later hooks are not asked.
  const agent = agentWith({
    agentHooks: [
      { name: "slow", command: ["node", path.join(fixtures, "hang.mjs")], timeout: "1s" },
      { decision: "allow" },
    ],
  });
  const decision = await new PermissionPolicy({ hooks: [new HookStage()] }).decide(
    question(agent, "run_command", { command: "ls" }),
  );
  assert.deepEqual(decision, {
    kind: "deny",
    decider: "hook",
    reason: "hook slow (agent coder) did not answer within 1000 ms; the call is denied",
  });
  // An input no record can hold denies, naming the hook (the job once failed, blaming its session's message).
  const infinite = await new PermissionPolicy({ hooks: [new HookStage()] }).decide(
    question(
      agentWith({ agentHooks: [{ name: "overflow", command: ["node", path.join(fixtures, "infinite-input.mjs")] }] }),
      "run_command",
      { command: "ls" },
    ),
  );
  assert.deepEqual(infinite, {
    kind: "deny",
    decider: "hook",
    reason:
      "hook overflow (agent coder) answered with an input whose number at /retries is not finite (JSON has no Infinity or NaN); the call is denied",
  });
});

void test("invalid hooks are refused naming the file and the field", () => {
  const base = { name: "a", runtime: "harness:fake", model: { primary: "anthropic/x" }, instructions: "p.md" };
  assert.throws(
    () =>
      validateDocument({
        schema: "agent",
        file: "agents/a.yaml",
        value: { ...base, hooks: [{ match: "fake.*", decision: "maybe" }] },
      }),
    /agents\/a\.yaml: field \/hooks\/0\/decision: expected one of "allow", "deny", "ask"/,
  );
  assert.throws(
    () =>
      validateDocument({
        schema: "agent",
        file: "agents/a.yaml",
        value: { ...base, hooks: [{ decision: "deny", when: [{ regex: "x" }] }] },
      }),
    /agents\/a\.yaml: field \/hooks\/0\/when\/0\/pointer: expected a value \(the field is required\)/,
  );
  assert.throws(
    () =>
      validateDocument({
        schema: "plugin-manifest",
        file: "oz0-plugin.yaml",
        value: { name: "p", version: "1", hooks: [{ command: "not-a-list" }] },
      }),
    /oz0-plugin\.yaml: field \/hooks\/0\/command: expected a value of type array/,
  );
  assert.throws(
    () =>
      validateDocument({
        schema: "agent",
        file: "agents/a.yaml",
        value: { ...base, hooks: [{ decision: "deny", command: ["guard"] }] },
      }),
    /agents\/a\.yaml: field \/hooks\/0: expected either a rule \(decision, reason, set_input\) or a command hook \(command, timeout\), not both/,
  );
  assert.throws(
    () =>
      validateDocument({ schema: "agent", file: "agents/a.yaml", value: { ...base, approvals: { timeout: "soon" } } }),
    /agents\/a\.yaml: field \/approvals\/timeout: expected a duration of hours, minutes and seconds, for example 90s, 10m or 1h30m; got "soon"/,
  );
  assert.doesNotThrow(() =>
    validateDocument({
      schema: "agent",
      file: "agents/a.yaml",
      value: {
        ...base,
        approvals: { timeout: "2h" },
        hooks: [
          { name: "n", match: ["fake.*"], when: [{ pointer: "/command", regex: "^git" }], decision: "allow" },
          { command: ["node", "h.mjs"], timeout: "5s" },
        ],
      },
    }),
  );
});

void test("the README's hooks example validates and decides as documented, unisolated, under bubblewrap and in a Landlock domain", async () => {
  const { readFileSync, mkdirSync } = await import("node:fs");
  const { parse } = await import("yaml");
  const packageDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
  const readme = readFileSync(path.join(packageDir, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Hooks and approvals"));
  const yaml = /```yaml\n([\s\S]*?)```/.exec(section)?.[1];
  const script = /```js\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(yaml && script, "the section has a YAML and a hook script example");
  const excerpt = parse(yaml) as Partial<AgentDefinition>;
  const definition = validateDocument<AgentDefinition>({
    schema: "agent",
    file: "README.md",
    value: {
      name: "coder",
      runtime: "harness:fake",
      model: { primary: "anthropic/x" },
      instructions: "p.md",
      ...excerpt,
    },
  });
  const agent = agentWith({
    agentHooks: definition.hooks ?? [],
    ...(definition.harness ? { harness: definition.harness } : {}),
  });
  mkdirSync(path.join(agent.pluginPath, "hooks"));
  writeFileSync(path.join(agent.pluginPath, "hooks", "review.mjs"), script);
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "oz0-hooks-home-"));
  after(() => rmSync(dataDir, { recursive: true, force: true }));
  for (const setting of ["none", "bwrap", "landlock"] as const) {
    const { isolation } = await chooseHookIsolation({ setting, dataDir });
    await decidesAsDocumented(agent, new PermissionPolicy({ hooks: [new HookStage({ isolation })] }));
  }
});

async function decidesAsDocumented(agent: AgentVersionRecord, policy: PermissionPolicy): Promise<void> {
  assert.deepEqual(await policy.decide(question(agent, "run_command", { command: "git push origin main --force" })), {
    kind: "deny",
    decider: "hook",
    reason: "hook no-force-push (agent coder): force pushes are not allowed; push without --force",
  });
  const tests = await policy.decide(question(agent, "run_command", { command: "npm test" }));
  assert.deepEqual(tests.kind === "allow" && tests.input, { command: "npm test --silent" });
  assert.deepEqual(await policy.decide(question(agent, "run_command", { command: "./deploy prod" })), {
    kind: "ask",
    reason: "hook review-deploys (agent coder): deploys need a person",
  });
  assert.deepEqual(await policy.decide(question(agent, "run_command", { command: "ls" })), {
    kind: "allow",
    decider: "policy",
    reason: "no rule asks for approval",
  });
  assert.equal(
    (await policy.decide(question(agent, "write_file", { path: "a", content: "b" }))).kind,
    "ask",
    "requires_approval after the hooks said continue",
  );
}

void test("an agent whose harness does not ask cannot be published with hooks or approvals, and a bad regex is refused at install", async () => {
  const { mkdirSync } = await import("node:fs");
  const { SqliteJobStore } = await import("../src/store/sqlite-store.js");
  const { PluginRegistry } = await import("../src/plugins/plugin-registry.js");
  const home = mkdtempSync(path.join(scratch, "home-"));
  const store = new SqliteJobStore({ file: ":memory:" });
  const registry = new PluginRegistry({ store, home });
  const plugin = (options: { permissions: boolean; agent: string; manifestHooks?: string }): string => {
    const dir = mkdtempSync(path.join(scratch, "src-"));
    mkdirSync(path.join(dir, "agents"));
    writeFileSync(path.join(dir, "p.md"), "p\n");
    writeFileSync(
      path.join(dir, "oz0-plugin.yaml"),
      `name: quiet\nversion: 0.1.0\nharnesses:\n  - name: quiet\n    command: ["oz0-fake-harness"]\n    permissions: ${options.permissions}\nagents: [agents/a.yaml]\n${options.manifestHooks ?? ""}`,
    );
    writeFileSync(
      path.join(dir, "agents", "a.yaml"),
      `name: a\nruntime: harness:quiet\nmodel:\n  primary: anthropic/x\ninstructions: p.md\n${options.agent}`,
    );
    return dir;
  };
  try {
    await assert.rejects(
      registry.install({
        source: plugin({ permissions: false, agent: "harness:\n  requires_approval: [run_command]\n" }),
      }),
      /agents\/a\.yaml: field \/harness\/requires_approval: harness quiet does not ask before tool calls/,
    );
    await assert.rejects(
      registry.install({ source: plugin({ permissions: false, agent: "hooks:\n  - decision: deny\n" }) }),
      /agents\/a\.yaml: field \/hooks: harness quiet does not ask/,
    );
    await assert.rejects(
      registry.install({
        source: plugin({
          permissions: true,
          agent: "hooks:\n  - decision: deny\n    when:\n      - pointer: /command\n        regex: '(unclosed'\n",
        }),
      }),
      /agents\/a\.yaml: field \/hooks\/0\/when\/0\/regex: expected a valid regular expression/,
    );
    // A pattern only a backtracking engine runs (a backreference) is refused, saying why.
    await assert.rejects(
      registry.install({
        source: plugin({
          permissions: true,
          agent: "hooks:\n  - decision: deny\n    when:\n      - pointer: /command\n        regex: '(a)\\1'\n",
        }),
      }),
      /field \/hooks\/0\/when\/0\/regex: expected a valid regular expression that runs in linear time, without backreferences or lookarounds \(.*Cannot be executed in linear time\)/,
    );
    await assert.rejects(
      registry.install({
        source: plugin({
          permissions: true,
          agent: "",
          manifestHooks: "hooks:\n  - decision: deny\n    when: [{ pointer: /x, regex: '[' }]\n",
        }),
      }),
      /oz0-plugin\.yaml: field \/hooks\/0\/when\/0\/regex/,
    );
    // A command hook runs on this host: refused unless the admin allows it, naming each of them.
    const hooked = plugin({
      permissions: true,
      agent: 'hooks:\n  - name: review\n    command: ["node", "review.mjs"]\n',
      manifestHooks: 'hooks:\n  - command: ["node", "audit.mjs"]\n',
    });
    await assert.rejects(
      registry.install({ source: hooked }),
      /plugin quiet declares command hooks, hook 0 \(oz0-plugin\.yaml\), review \(agents\/a\.yaml\): they run on the orchestrator's host, with its network, and as the orchestrator with its files \(its credentials among them\) unless bubblewrap or Landlock isolates them \(OZ0_HOOK_ISOLATION\); install it with --allow-host-hooks/,
    );
    assert.equal((await registry.install({ source: hooked, allowHostHooks: true })).plugin.name, "quiet");
    const ok = await registry.install({
      source: plugin({
        permissions: true,
        agent: "harness:\n  requires_approval: [run_command]\nhooks:\n  - decision: allow\n",
      }),
    });
    assert.deepEqual(
      ok.published.map((a) => a.name),
      ["a"],
    );
  } finally {
    await store.close();
  }
});
