// The CLI as a user drives it, against the real four services on loopback:
// install a plugin from a git repository, run an agent through real tools,
// watch, cancel, kill and restart the orchestrator while a call waits for
// approval, publish a changed agent and see the old job stay pinned.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { ScriptedTurn } from "@oz0/harness/testing";
import { SecretService } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import {
  cliMain,
  commitAll,
  eventually,
  fakeAgentYaml,
  makePluginRepo,
  repoRoot,
  startTestStack,
  type FakeAgentOptions,
  type TestStack,
} from "./support/test-stack.js";

const run = promisify(execFile);
const demoScript = JSON.parse(
  readFileSync(path.join(repoRoot, "examples/plugins/example/demo-script.json"), "utf8"),
) as ScriptedTurn[];
const datesProject = path.join(repoRoot, "examples/projects/dates");

const FIXER_AGENT = {
  name: "fixer",
  description: "Fixes failing tests.",
  limits: { maxSteps: 10, timeout: "10m" },
} satisfies FakeAgentOptions;
const FIXER = fakeAgentYaml(FIXER_AGENT);

const CAREFUL = fakeAgentYaml({
  name: "careful",
  description: "Every command waits for a person.",
  requiresApproval: ["run_command"],
});

function pick({ input, turn }: { input: string; turn: number }): ScriptedTurn {
  if (input.startsWith("Fix")) return demoScript[turn] ?? { text: "done" };
  if (input.startsWith("sleep"))
    return turn === 0 ? { toolCalls: [{ name: "run_command", input: { command: "sleep 120" } }] } : { text: "woke up" };
  if (input.startsWith("approve")) {
    return turn === 0
      ? {
          text: "Writing the proof.",
          toolCalls: [{ name: "run_command", input: { command: "echo approved > proof.txt" } }],
        }
      : { text: "proof written" };
  }
  if (input.startsWith("fail"))
    return turn === 0
      ? { toolCalls: [{ name: "run_command", input: { command: "echo boom; exit 3" } }] }
      : { text: "the command failed" };
  return { text: `no script for ${input}` };
}

let t: TestStack;
let repo: string;
const jsonLines = (text: string): Record<string, unknown>[] =>
  text
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, unknown>);

before(async () => {
  t = await startTestStack({ pick });
  repo = await makePluginRepo({ agents: { fixer: FIXER, careful: CAREFUL } });
});

after(async () => {
  await t?.close();
});

void test("a plugin installs from a git repository and publishes its agents", async () => {
  const installed = await t.cli(["plugin", "install", `file://${repo}`]);
  assert.equal(installed.code, 0, installed.stderr);
  assert.match(installed.stdout, /installed plugin testing 0\.1\.0/);
  assert.match(installed.stdout, /published agent fixer v1/);
  assert.match(installed.stdout, /published agent careful v1/);
  // Neither sets a budget, and this orchestrator has no default: the operator is told, with what to set.
  assert.deepEqual(
    installed.stderr
      .split("\n")
      .filter((line) => line.startsWith("warning: "))
      .sort(),
    ["careful", "fixer"].map(
      (name) =>
        `warning: agent ${name} sets no harness.max_budget_usd and this orchestrator has no OZ0_DEFAULT_MAX_BUDGET_USD: its jobs spend at the LLM proxy without limit; set the agent's harness.max_budget_usd, or OZ0_DEFAULT_MAX_BUDGET_USD where the orchestrator starts`,
    ),
  );
  const plugins = await t.cli(["plugin", "list"]);
  assert.match(plugins.stdout, /testing\s+0\.1\.0\s+harnesses: fake/);
  const agents = await t.cli(["agents", "list"]);
  assert.match(agents.stdout, /fixer\s+v1\s+harness:fake\s+no budget /);
  // Audited later too, not only when the install warned.
  assert.match(
    (await t.cli(["agents", "show", "fixer"])).stdout,
    /^# budget: none: its jobs spend without limit \(set the agent's harness\.max_budget_usd, or OZ0_DEFAULT_MAX_BUDGET_USD where the orchestrator starts\)$/m,
  );
  const again = await t.cli(["plugin", "install", `file://${repo}`]);
  assert.match(again.stdout, /no agent changed/);
  assert.doesNotMatch(again.stderr, /warning:/, "said of what was published, once");
});

void test("an invalid agent is refused naming the file, the field and what was expected", async () => {
  const bad = await makePluginRepo({
    name: "broken",
    agents: {
      bad: fakeAgentYaml({ ...FIXER_AGENT, name: "bad" }).replace(
        "  primary: anthropic/claude-sonnet-5-5\n",
        "  fallbacks: []\n",
      ),
    },
  });
  const result = await t.cli(["plugin", "install", bad]);
  assert.equal(result.code, 1);
  assert.equal(result.stderr.trim().split("\n").length, 1, result.stderr);
  assert.match(result.stderr, /agents\/bad\.yaml: field \/model\/primary: expected a value \(the field is required\)/);
  const missing = await t.cli(["plugin", "install", "/nonexistent/plugin"]);
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /^oz0: plugin not found: .*\n$/);
  const unknown = await t.cli(["run", "nosuch", "hello"]);
  assert.equal(unknown.code, 1);
  assert.match(unknown.stderr, /^oz0: unknown agent "nosuch"; see `oz0 agents list`.*\n$/);
});

void test("oz0 run streams text and tool calls, the test passes, and the patch is stored", async () => {
  // A model script exported in the shell cannot reach a running stack: said, not silently ignored (newcomer review).
  const result = await t.cli(["run", "fixer", "Fix the failing test in dates", "--attach", datesProject], {
    env: { OZ0_MODEL_SCRIPT: "/nowhere/script.json" },
  });
  assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
  assert.match(
    result.stderr,
    /oz0: OZ0_MODEL_SCRIPT is not used: commands go to http:\/\/127\.0\.0\.1:\d+ \(OZ0_URL\), which answers with the model it was started with/,
  );
  assert.match(result.stdout, /Let me read the date helpers first\./);
  assert.match(result.stdout, /▸ read_file/);
  assert.match(result.stdout, /▸ run_command: \{"command":"cd dates && node --test"\}/);
  assert.match(result.stdout, /[#ℹ] pass 2/); // TAP before Node 23, spec after
  assert.match(result.stdout, /result \(completed, 4 turns\)/);
  assert.match(result.stdout, /job job_\w+ succeeded/);
  const where = /artifacts of (job_\w+) are in (.+)/.exec(result.stdout);
  assert.ok(where, result.stdout);
  const patch = readFileSync(path.join(where[2]!, "changes.patch"), "utf8");
  assert.match(patch, /\+\s+const month = String\(date\.getUTCMonth\(\) \+ 1\)/);
  const artifacts = await t.cli(["jobs", "artifacts", where[1]!]);
  assert.match(artifacts.stdout, /changes\.patch/);
  // Copied out, never through a link at an artifact's name, nor into a folder that is a link (local stack review).
  const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-artifacts-out-"));
  try {
    const out = path.join(scratch, "out");
    mkdirSync(out);
    const victim = path.join(scratch, "victim");
    writeFileSync(victim, "kept\n");
    symlinkSync(victim, path.join(out, "changes.patch"));
    const through = await t.cli(["jobs", "artifacts", where[1]!, "--out", out]);
    assert.equal(through.code, 2, through.stdout);
    assert.match(through.stderr, /changes\.patch is a link; artifacts are never written through one/);
    assert.equal(readFileSync(victim, "utf8"), "kept\n");
    symlinkSync(out, path.join(scratch, "link"));
    const linked = await t.cli(["jobs", "artifacts", where[1]!, "--out", path.join(scratch, "link")]);
    assert.match(linked.stderr, /link is a link; give a folder of your own/);
    rmSync(path.join(out, "changes.patch"));
    const copied = await t.cli(["jobs", "artifacts", where[1]!, "--out", out]);
    assert.equal(copied.code, 0, copied.stderr);
    assert.equal(readFileSync(path.join(out, "changes.patch"), "utf8"), patch);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  // The proxy metered the job's four model calls under its agent.
  const usage = await t.cli(["usage", where[1]!, "--json"]);
  assert.equal(usage.code, 0, usage.stderr);
  const metered = JSON.parse(usage.stdout) as {
    total?: { calls?: string; inputTokens?: string };
    agents?: { agent: string; usage?: { calls?: string } }[];
  };
  assert.equal(Number(metered.total?.calls), 4, usage.stdout);
  assert.ok(Number(metered.total?.inputTokens) > 0, usage.stdout);
  assert.deepEqual(
    metered.agents?.map((a) => [a.agent, Number(a.usage?.calls)]),
    [["fixer", 4]],
  );
  const table = await t.cli(["usage", where[1]!]);
  assert.match(table.stdout, /agent fixer\s+4 calls/);
  const unknown = await t.cli(["usage", "job_nope"]);
  assert.equal(unknown.code, 1);
  assert.match(unknown.stderr, /job job_nope not found/);
  const json = await t.cli(["run", "fixer", "Fix the failing test in dates", "--attach", datesProject, "--json"]);
  assert.equal(json.code, 0, json.stderr);
  const events = jsonLines(json.stdout);
  assert.deepEqual(
    events.map((e) => Number(e.seq)),
    events.map((_, i) => i + 1),
  );
  assert.ok(events.some((e) => (e.toolCall as { tool?: string } | undefined)?.tool === "write_file"));
  assert.deepEqual(events.at(-1)?.stateChanged, { state: "JOB_STATE_SUCCEEDED" });
});

void test("cancelling a job ends its session and the job is cancelled", async () => {
  const started = await t.cli(["run", "fixer", "sleep for a while", "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const jobId = started.stdout.trim();
  const watcher = t.spawnCli(["jobs", "watch", jobId, "--json"]);
  let watched = "";
  watcher.stdout!.on("data", (d: Buffer) => (watched += d.toString()));
  const watcherDone = new Promise<number>((resolve) => watcher.on("exit", (code) => resolve(code ?? 1)));
  // The sleep runs once the policy allowed it.
  await eventually(async () => (watched.includes('"permissionDecision"') ? true : undefined));
  const cancelled = await t.cli(["jobs", "cancel", jobId, "--reason", "testing cancel"]);
  assert.equal(cancelled.code, 0, cancelled.stderr);
  assert.equal(await watcherDone, 4, watched);
  const again = await t.cli(["jobs", "watch", jobId]);
  assert.equal(again.code, 4, again.stdout + again.stderr);
  assert.match(again.stdout, new RegExp(`job ${jobId} cancelled`));
  const shown = await t.cli(["jobs", "show", jobId, "--json"]);
  assert.equal((JSON.parse(shown.stdout) as { state: string }).state, "JOB_STATE_CANCELLED");
});

void test("a job survives an orchestrator restart while a call waits for approval, and the watcher loses and repeats nothing", async () => {
  const started = await t.cli(["run", "careful", "approve this command", "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const jobId = started.stdout.trim();
  const callId = await eventually(async () => {
    const list = await t.cli(["approvals", "list", "--job", jobId, "--json"]);
    const first = jsonLines(list.stdout)[0];
    return first ? String(first.callId) : undefined;
  });
  // A watcher that follows the job across the restart.
  const watcher = t.spawnCli(["jobs", "watch", jobId, "--json"]);
  let watched = "";
  watcher.stdout!.on("data", (d: Buffer) => (watched += d.toString()));
  const watcherDone = new Promise<number>((resolve) => watcher.on("exit", (code) => resolve(code ?? 1)));
  await eventually(async () => (watched.includes("permissionDecision") ? true : undefined));

  await t.restartOrchestrator();

  const still = await t.cli(["approvals", "list"]);
  assert.match(still.stdout, new RegExp(`${jobId}\\s+${callId}\\s+run_command`));
  const approved = await t.cli(["approve", jobId, callId]);
  assert.equal(approved.code, 0, approved.stderr);
  assert.equal(await watcherDone, 0);
  const events = jsonLines(watched);
  assert.deepEqual(
    events.map((e) => Number(e.seq)),
    events.map((_, i) => i + 1),
    "every event once, in order",
  );
  assert.ok(events.some((e) => (e.toolResult as { callId?: string } | undefined) !== undefined));
  assert.deepEqual(events.at(-1)?.stateChanged, { state: "JOB_STATE_SUCCEEDED" });
  const twice = await t.cli(["approve", jobId, callId]);
  assert.equal(twice.code, 0, "the same answer again is accepted once");
  const different = await t.cli(["deny", jobId, callId, "--reason", "changed my mind"]);
  assert.equal(different.code, 1);
  assert.match(different.stderr, /already approved/);
});

void test("publishing a changed agent makes a new version; the old job stays pinned to the old one", async () => {
  const jobs = await t.cli(["jobs", "list", "--agent", "fixer", "--json"]);
  const oldJob = jsonLines(jobs.stdout).at(-1)!;
  assert.deepEqual(oldJob.agent, { name: "fixer", version: 1 });
  writeFileSync(
    path.join(repo, "agents", "fixer.yaml"),
    fakeAgentYaml({ ...FIXER_AGENT, description: "Fixes failing tests, carefully." }),
  );
  await commitAll(repo, "change fixer");
  const installed = await t.cli(["plugin", "install", `file://${repo}`]);
  assert.match(installed.stdout, /published agent fixer v2/);
  assert.doesNotMatch(installed.stdout, /careful/);
  const versions = await t.cli(["agents", "versions", "fixer"]);
  assert.match(versions.stdout, /^v1 .*\nv2 /m);
  const v1 = await t.cli(["agents", "show", "fixer", "--version", "1"]);
  assert.match(v1.stdout, /description: Fixes failing tests\.\n/);
  const latest = await t.cli(["agents", "show", "fixer"]);
  assert.match(latest.stdout, /description: Fixes failing tests, carefully\./);
  const shown = await t.cli(["jobs", "show", String(oldJob.id), "--json"]);
  assert.deepEqual((JSON.parse(shown.stdout) as { agent: unknown }).agent, { name: "fixer", version: 1 });
  const next = await t.cli(["run", "fixer", "Fix the failing test in dates", "--attach", datesProject]);
  assert.equal(next.code, 0, next.stderr);
  assert.match(next.stderr, /fixer v2/);
});

void test("buf curl lists and calls the orchestrator's services through reflection", async () => {
  const buf = path.join(repoRoot, "node_modules/@bufbuild/buf/bin/buf");
  const args = ["curl", "--protocol", "grpc", "--http2-prior-knowledge"];
  // Reflection needs a principal: the owner's credential of this machine.
  args.push("-H", `authorization: Bearer ${t.stack.ownerToken}`, "--reflect-header", "*");
  const listed = await run(buf, [...args, "--list-services", t.url]);
  for (const service of ["JobService", "PluginService", "AgentService", "SecretService"]) {
    assert.match(listed.stdout, new RegExp(`oz0\\.orchestrator\\.v1\\.${service}`));
  }
  const called = await run(buf, [
    ...args,
    "--data",
    '{"name":"fixer"}',
    `${t.url}/oz0.orchestrator.v1.AgentService/ListAgentVersions`,
  ]);
  const versions = (JSON.parse(called.stdout) as { versions: { version: number }[] }).versions;
  assert.deepEqual(
    versions.map((v) => v.version),
    [1, 2],
  );
});

void test("oz0 secret set hands the value to the LLM proxy; the orchestrator never prints or stores it", async () => {
  const value = `sk-test-${Math.random().toString(36).slice(2)}`;
  const set = await t.cli(["secret", "set", "ANTHROPIC_API_KEY"], { input: `${value}\n` });
  assert.equal(set.code, 0, set.stderr);
  assert.equal(set.stdout, "secret ANTHROPIC_API_KEY set\n");
  // The proxy's control API answers only the orchestrator's credential (sessions reach the same port; people do not).
  const anonymous = createClient(SecretService, createGrpcTransport({ baseUrl: t.stack.urls["llm-proxy"] }));
  await assert.rejects(anonymous.listSecrets({}), (e: unknown) => ConnectError.from(e).code === Code.Unauthenticated);
  await assert.rejects(
    anonymous.listSecrets({}, { headers: { authorization: `Bearer ${t.stack.ownerToken}` } }),
    (e: unknown) => ConnectError.from(e).code === Code.Unauthenticated,
  );
  const proxy = createClient(SecretService, createGrpcTransport({ baseUrl: t.stack.urls["llm-proxy"] }));
  const { secrets } = await proxy.listSecrets(
    {},
    { headers: { authorization: `Bearer ${t.stack.credentials.orchestrator}` } },
  );
  assert.deepEqual(
    secrets.map((s) => s.name),
    ["ANTHROPIC_API_KEY"],
  );
  for (const file of ["orchestrator.db", "orchestrator.db-wal", "logs/orchestrator.log"].map((f) =>
    path.join(t.home, f),
  )) {
    if (existsSync(file)) assert.equal(readFileSync(file).includes(value), false, `${file} holds the secret`);
  }
  const empty = await t.cli(["secret", "set", "OPENAI_API_KEY"], { input: "" });
  assert.equal(empty.code, 1);
  assert.match(empty.stderr, /^oz0: no value on stdin: pipe it in/);
});

void test("oz0 secret list names the proxy's secrets and when each was set, never a value; oz0 secret delete removes one", async () => {
  const value = `sk-list-${Math.random().toString(36).slice(2)}`;
  assert.equal((await t.cli(["secret", "set", "OPENAI_API_KEY"], { input: value })).code, 0);
  const listed = await t.cli(["secret", "list"]);
  assert.equal(listed.code, 0, listed.stderr);
  assert.match(listed.stdout, /^OPENAI_API_KEY +set \d{4}-\d\d-\d\dT/m);
  assert.ok(!listed.stdout.includes(value), "no value is listed");
  const json = (await t.cli(["secret", "list", "--json"])).stdout
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as { name: string; value?: string });
  assert.ok(json.some((s) => s.name === "OPENAI_API_KEY" && s.value === undefined));
  const deleted = await t.cli(["secret", "delete", "OPENAI_API_KEY"]);
  assert.equal(deleted.code, 0, deleted.stderr);
  assert.equal(deleted.stdout, "secret OPENAI_API_KEY deleted\n");
  assert.doesNotMatch((await t.cli(["secret", "list"])).stdout, /OPENAI_API_KEY/);
  const again = await t.cli(["secret", "delete", "OPENAI_API_KEY"]);
  assert.equal(again.code, 1);
  assert.match(again.stderr, /OPENAI_API_KEY/);
});

void test("output piped to another program is whole: jobs list --json over 10 MB reads the same as written to a file", async () => {
  const { JobService } = await import("@oz0/proto/oz0/orchestrator/v1/orchestrator_pb");
  const { bearerInterceptor } = await import("@oz0/serving");
  const jobs = createClient(
    JobService,
    createGrpcTransport({ baseUrl: t.url, interceptors: [bearerInterceptor(t.stack.ownerToken)] }),
  );
  // Installed already by the first test; again, so this test also runs on its own (no agent changes: nothing new is published).
  assert.equal((await t.cli(["plugin", "install", repo])).code, 0);
  // Large inputs make a large listing; the jobs are cancelled at once (what they do does not matter).
  const input = "x".repeat(1 << 20);
  for (let i = 0; i < 11; i++) {
    const { job } = await jobs.runAgent({ agent: "fixer", input: `${i} ${input}` });
    await jobs.cancelJob({ jobId: job!.id, reason: "only listed" });
  }
  const file = path.join(t.home, "listing.json");
  const env = { ...process.env, OZ0_URL: t.url, OZ0_HOME: t.home, OZ0_LOG_LEVEL: "warn" };
  const cli = `${JSON.stringify(process.execPath)} ${JSON.stringify(cliMain)} jobs list --json --limit 100`;
  await promisify(execFile)("bash", ["-c", `${cli} > ${JSON.stringify(file)}`], { env });
  // A slow reader: the pipe fills and the CLI must wait for it before exiting.
  const piped = await promisify(execFile)("bash", ["-c", `set -o pipefail; ${cli} | (sleep 1; wc -c)`], { env });
  const written = readFileSync(file).length;
  assert.ok(written > 10 * (1 << 20), `the listing is ${written} bytes`);
  assert.equal(Number(piped.stdout.trim()), written);
});

void test("the API refuses an input over its limit and a state that is not one, naming what is allowed", async () => {
  const { JobService } = await import("@oz0/proto/oz0/orchestrator/v1/orchestrator_pb");
  const { bearerInterceptor } = await import("@oz0/serving");
  const jobs = createClient(
    JobService,
    createGrpcTransport({ baseUrl: t.url, interceptors: [bearerInterceptor(t.stack.ownerToken)] }),
  );
  assert.equal((await t.cli(["plugin", "install", repo])).code, 0);
  await assert.rejects(jobs.runAgent({ agent: "fixer", input: "x".repeat(2 * 1024 * 1024 + 1) }), (e: unknown) => {
    const err = ConnectError.from(e);
    return (
      err.code === Code.InvalidArgument &&
      /at most 2097152 \(2 MiB\) are taken: put larger material in a file and pass it with --attach/.test(
        err.rawMessage,
      )
    );
  });
  await assert.rejects(jobs.listJobs({ state: 99 as never }), (e: unknown) => {
    const err = ConnectError.from(e);
    return (
      err.code === Code.InvalidArgument && /state 99 is not a job state; use one of .*RUNNING/.test(err.rawMessage)
    );
  });
});

void test("a plugin manifest that sets harnesses[].env is refused at install, saying how to set variables instead", async () => {
  const bad = await makePluginRepo({
    name: "with-env",
    agents: { envy: fakeAgentYaml({ ...FIXER_AGENT, name: "envy" }) },
  });
  const manifest = path.join(bad, "oz0-plugin.yaml");
  writeFileSync(
    manifest,
    readFileSync(manifest, "utf8").replace(
      '    command: ["oz0-fake-harness"]\n',
      '    command: ["oz0-fake-harness"]\n    env:\n      MODE: fast\n',
    ),
  );
  await commitAll(bad, "env");
  const installed = await t.cli(["plugin", "install", `file://${bad}`]);
  assert.equal(installed.code, 1, installed.stdout);
  assert.match(
    installed.stderr,
    /field \/harnesses\/0\/env: expected no field env: a harness runs with the sandbox's minimal environment.*\["env", "NAME=value", "my-harness"\]/,
  );
});

void test("a command that exits non-zero is shown as a failed call (✗), not a success", async () => {
  const ran = await t.cli(["run", "fixer", "fail a command"]);
  assert.equal(ran.code, 0, ran.stderr);
  assert.match(ran.stdout, /▸ run_command: .*exit 3/);
  assert.match(ran.stdout, /✗ exit code 3\n\s+boom/);
  assert.doesNotMatch(ran.stdout, /✓ exit code 3/);
});
