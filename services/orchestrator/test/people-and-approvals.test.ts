// Identity on the real stack: people log in with OIDC tokens from a real
// issuer (jose, on loopback), roles come from OZ0_AUTH_CONFIG, and who answers
// an approval is the authenticated person, never a name the request makes up.
// alice approves; bob (an approver, not in the agent's approvers) is refused
// naming the rule; the job's starter is refused under prevent_self_approval;
// a viewer may look but not approve. What is recorded, on the job and in the
// public event, is the principal's id.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { EventsService, type PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { bearerInterceptor } from "@oz0/serving";
import { startTestOidcIssuer, type TestOidcIssuer } from "@oz0/serving/testing";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import { commitAll, eventually, fakeAgentYaml, startTestStack, type TestStack } from "./support/test-stack.js";
import { toolResults } from "./support/tool-results.js";

let t: TestStack;
let issuer: TestOidcIssuer;
const tokens: Record<string, string> = {};

/** An agent whose every command waits for a person whom its `approvals:` block (the lines under it) names. */
const agent = (name: string, approvals: string): string =>
  fakeAgentYaml({
    name,
    instructions: "prompts/p.md",
    limits: { maxSteps: 5 },
    tools: ["run_command"],
    requiresApproval: ["run_command"],
    extra: `approvals:\n${approvals}`,
  });

function pick({ input, turn, request }: { input: string; turn: number; request: ScriptedRequest }): ScriptedTurn {
  if (turn > 0) return { text: `saw: ${toolResults(request)}` };
  return { toolCalls: [{ name: "run_command", input: { command: `echo ${input}` } }] };
}

// The plugin, the auth configuration and the CLI homes of this file, removed when it ends.
const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-people-"));
/** The one folder people who are not admins may attach from (OZ0_ATTACHMENT_ROOTS). */
const attachable = path.join(scratch, "attachable");

async function makeRepo(): Promise<string> {
  const dir = mkdtempSync(path.join(scratch, "repo-"));
  for (const sub of ["agents", "prompts"]) mkdirSync(path.join(dir, sub));
  writeFileSync(path.join(dir, "prompts", "p.md"), "Run the command you are asked to run.\n");
  writeFileSync(
    path.join(dir, "oz0-plugin.yaml"),
    'name: people\nversion: 0.1.0\nharnesses:\n  - name: fake\n    command: ["oz0-fake-harness"]\n    permissions: true\n    tools: [run_command]\nagents:\n  - agents/restricted.yaml\n  - agents/reviewed.yaml\n',
  );
  writeFileSync(path.join(dir, "agents", "restricted.yaml"), agent("restricted", "  approvers: [alice]\n"));
  writeFileSync(
    path.join(dir, "agents", "reviewed.yaml"),
    agent("reviewed", "  approvers: [reviewers]\n  prevent_self_approval: true\n"),
  );
  await commitAll(dir, "plugin");
  return dir;
}

const as = (person: string) => ({ env: { OZ0_TOKEN: tokens[person]! } });

const jsonLines = (text: string): Record<string, unknown>[] =>
  text
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, unknown>);

async function start(person: string, agentName: string, input: string): Promise<string> {
  const started = await t.cli(["run", agentName, input, "--detach"], as(person));
  assert.equal(started.code, 0, started.stderr);
  return started.stdout.trim();
}

async function waitingCall(jobId: string): Promise<string> {
  const [approval] = await eventually(async () => {
    const found = jsonLines((await t.cli(["approvals", "list", "--job", jobId, "--json"])).stdout);
    return found.length > 0 ? found : undefined;
  });
  return String(approval!.callId);
}

async function finishedState(jobId: string): Promise<string> {
  await t.cli(["jobs", "watch", jobId]);
  return String((JSON.parse((await t.cli(["jobs", "show", jobId, "--json"])).stdout) as { state: string }).state);
}

async function publicEvents(jobId: string, type: string): Promise<PublicEvent[]> {
  const events = createClient(
    EventsService,
    createGrpcTransport({ baseUrl: t.stack.urls.events, interceptors: [bearerInterceptor(t.stack.ownerToken)] }),
  );
  return eventually(async () => {
    const found: PublicEvent[] = [];
    for await (const r of events.watch({ jobId, fromPosition: 0n, untilCaughtUp: true }))
      if (r.event?.type === type) found.push(r.event);
    return found.length > 0 ? found : undefined;
  });
}

before(async () => {
  issuer = await startTestOidcIssuer();
  const home = mkdtempSync(path.join(scratch, "auth-"));
  const config = path.join(home, "auth.yaml");
  writeFileSync(
    config,
    [
      "oidc:",
      `  issuer: ${issuer.url}`,
      "  audience: oz0",
      "  usernameClaim: preferred_username",
      "roles:",
      "  operator: { users: [carol, alice] }",
      "  approver: { groups: [approvers] }",
      "  viewer: { users: [dave] }",
      "",
    ].join("\n"),
  );
  const person = (name: string, groups: string[]): Promise<string> =>
    issuer.sign({ sub: `id-${name}`, preferred_username: name, groups });
  tokens.alice = await person("alice", ["approvers", "reviewers"]);
  tokens.bob = await person("bob", ["approvers"]);
  tokens.carol = await person("carol", ["approvers", "reviewers"]);
  tokens.dave = await person("dave", []);
  mkdirSync(attachable);
  t = await startTestStack({ pick, orchestratorEnv: { OZ0_AUTH_CONFIG: config, OZ0_ATTACHMENT_ROOTS: attachable } });
  const installed = await t.cli(["plugin", "install", `file://${await makeRepo()}`]);
  assert.equal(installed.code, 0, installed.stderr);
});

after(async () => {
  await t?.close();
  await issuer?.close();
  rmSync(scratch, { recursive: true, force: true });
});

void test("only the agent's approvers answer: bob is refused naming the rule, alice approves, and the record says alice", async () => {
  const jobId = await start("carol", "restricted", "for-alice");
  const callId = await waitingCall(jobId);
  const bob = await t.cli(["approve", jobId, callId], as("bob"));
  assert.equal(bob.code, 1);
  assert.match(
    bob.stderr,
    /bob may not answer call .*: agent restricted lets only alice answer \(approvals\.approvers names users and groups\)/,
  );
  const alice = await t.cli(["approve", jobId, callId], as("alice"));
  assert.equal(alice.code, 0, alice.stderr);
  assert.equal(await finishedState(jobId), "JOB_STATE_SUCCEEDED");
  // The same answer again is accepted once, but only from someone who may answer: bob read "approved".
  const bobAgain = await t.cli(["approve", jobId, callId], as("bob"));
  assert.equal(bobAgain.code, 1, bobAgain.stdout);
  assert.match(bobAgain.stderr, /bob may not answer call .*: agent restricted lets only alice answer/);
  const [record] = jsonLines((await t.cli(["approvals", "list", "--job", jobId, "--all", "--json"])).stdout);
  assert.equal(record?.answeredBy, "alice");
  const [answered] = await publicEvents(jobId, "approval.answered");
  assert.deepEqual(
    {
      by: answered?.attributes?.answered_by,
      changed: answered?.attributes?.input_changed,
      command: JSON.stringify(answered?.attributes ?? {}).includes("for-alice"),
    },
    { by: "alice", changed: false, command: false },
  );
});

void test("the job's starter may not approve its own call under prevent_self_approval; another reviewer may, and a changed input is said, not shown", async () => {
  const jobId = await start("carol", "reviewed", "self-review");
  const callId = await waitingCall(jobId);
  const carol = await t.cli(["approve", jobId, callId], as("carol"));
  assert.equal(carol.code, 1);
  assert.match(
    carol.stderr,
    /carol started this job and may not answer its own call .*approvals\.prevent_self_approval/,
  );
  // bob is an approver but not a reviewer (the agent's approvers name a group).
  const bob = await t.cli(["approve", jobId, callId], as("bob"));
  assert.equal(bob.code, 1);
  assert.match(bob.stderr, /lets only reviewers answer/);
  const alice = await t.cli(
    ["approve", jobId, callId, "--input", JSON.stringify({ command: "echo edited-by-alice" })],
    as("alice"),
  );
  assert.equal(alice.code, 0, alice.stderr);
  assert.equal(await finishedState(jobId), "JOB_STATE_SUCCEEDED");
  const [answered] = await publicEvents(jobId, "approval.answered");
  assert.equal(answered?.attributes?.answered_by, "alice");
  assert.equal(answered?.attributes?.input_changed, true);
  assert.equal(
    JSON.stringify(answered?.attributes ?? {}).includes("edited-by-alice"),
    false,
    "the input itself is never public",
  );
});

void test("a viewer reads jobs but may neither approve nor run; a stale token is refused saying why", async () => {
  const jobId = await start("carol", "restricted", "viewer-try");
  const callId = await waitingCall(jobId);
  const list = await t.cli(["approvals", "list", "--job", jobId, "--json"], as("dave"));
  assert.equal(list.code, 0, list.stderr);
  const approve = await t.cli(["approve", jobId, callId], as("dave"));
  assert.equal(approve.code, 1);
  assert.match(approve.stderr, /AnswerPermission is open only to people with the approver role; dave may not call it/);
  const run = await t.cli(["run", "restricted", "x", "--detach"], as("dave"));
  assert.equal(run.code, 1);
  assert.match(run.stderr, /RunAgent is open only to people with the operator role/);
  const expired = await t.cli(["jobs", "list"], {
    env: { OZ0_TOKEN: await issuer.sign({ preferred_username: "alice" }, { expiresIn: "-1m" }) },
  });
  assert.equal(expired.code, 1);
  assert.match(expired.stderr, /the token has expired/);
  const anonymous = await t.cli(["jobs", "list"], { env: { OZ0_TOKEN: "oz0_not-a-credential-anyone-issued" } });
  assert.equal(anonymous.code, 1);
  assert.match(anonymous.stderr, /not one this service accepts/);
  const cancelled = await t.cli(["jobs", "cancel", jobId], as("carol"));
  assert.equal(cancelled.code, 0, cancelled.stderr);
});

void test("an operator attaches only from OZ0_ATTACHMENT_ROOTS, and nobody attaches the orchestrator's data directory", async () => {
  const owner = path.join(t.home, "credentials", "owner");
  assert.ok(existsSync(owner));
  const attempt = async (person: string | undefined, attachment: string) => {
    const r = await t.cli(
      ["run", "restricted", "attached", "--attach", attachment, "--detach"],
      person ? as(person) : undefined,
    );
    return { code: r.code, said: `${r.stdout}${r.stderr}` };
  };
  // The review's attack: an operator attaches the owner's credential, to read it back from the job.
  const direct = await attempt("carol", owner);
  assert.equal(direct.code, 1);
  assert.match(direct.said, /is, or holds, the orchestrator's data directory/);
  // Through a link planted in the folder she may attach from.
  const link = path.join(attachable, "innocent.txt");
  symlinkSync(owner, link);
  const linked = await attempt("carol", link);
  assert.equal(linked.code, 1);
  assert.match(linked.said, /is, or holds, the orchestrator's data directory/);
  // Any other file of the host, outside the roots.
  const elsewhere = path.join(scratch, "elsewhere.txt");
  writeFileSync(elsewhere, "not for carol\n");
  const outside = await attempt("carol", elsewhere);
  assert.equal(outside.code, 1);
  assert.match(outside.said, /is outside the folders attachments may come from \(OZ0_ATTACHMENT_ROOTS: /);
  // The owner (an admin) may attach from anywhere, but not the data directory, nor a folder holding it.
  for (const holding of [t.home, path.dirname(t.home)]) {
    const admin = await attempt(undefined, holding);
    assert.equal(admin.code, 1, admin.said);
    assert.match(admin.said, /is, or holds, the orchestrator's data directory/);
  }
  // What the roots hold, she attaches; the owner attaches what he likes outside them.
  writeFileSync(path.join(attachable, "notes.txt"), "for the agent\n");
  for (const [person, attachment] of [
    ["carol", path.join(attachable, "notes.txt")],
    [undefined, elsewhere],
  ] as const) {
    const started = await attempt(person, attachment);
    assert.equal(started.code, 0, started.said);
    const jobId = started.said.trim();
    const cancelled = await t.cli(["jobs", "cancel", jobId]);
    assert.equal(cancelled.code, 0, cancelled.stderr);
  }
});

void test("oz0 login keeps a checked credential for an orchestrator, commands use it, and oz0 logout forgets it", async () => {
  const home = mkdtempSync(path.join(scratch, "login-"));
  const env = { OZ0_HOME: home, OZ0_URL: "" };
  const refused = await t.cli(["login", "--url", t.url, "--token", "oz0_not-a-credential-anyone-issued"], { env });
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /not one this service accepts/);
  assert.match(
    refused.stderr,
    /^oz0: warning: a credential given with --token can be read by every user .*pipe it in/m,
  );
  const login = await t.cli(["login", "--url", t.url], { env, input: `${tokens.dave}\n` });
  assert.equal(login.code, 0, login.stderr);
  assert.doesNotMatch(login.stderr, /warning/, "a credential piped in is read by no one else");
  assert.equal(statSync(path.join(home, "credentials", "login.json")).mode & 0o777, 0o600);
  const listed = await t.cli(["approvals", "list", "--json"], { env });
  assert.equal(listed.code, 0, listed.stderr);
  const run = await t.cli(["run", "restricted", "x", "--detach"], { env });
  assert.match(run.stderr, /dave may not call it/, "commands went to the orchestrator as dave");
  assert.equal((await t.cli(["logout"], { env })).stdout, "logged out\n");
  assert.equal(existsSync(path.join(home, "credentials", "login.json")), false);
});
