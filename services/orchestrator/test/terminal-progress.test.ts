// The terminal while a job runs, through the real `oz0` against the real
// stack, read off a headless terminal fed by a pseudo-terminal: the live
// status line below the job's lines (elapsed time, what it does now, whom it
// waits for, tokens and cost), gone from the screen once the job ends; plain
// lines when piped or with NO_COLOR; the approval prompt inside `oz0 run`
// taken back when someone answers elsewhere; and `oz0 jobs show` with the
// job's times to the millisecond, duration, cost, trace and pinned version;
// and `oz0 usage` marking the scripted model's prices as nominal.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import type { ScriptedTurn } from "@oz0/harness/testing";
import { ptyScreen } from "./support/pty-screen.js";
import {
  cliMain,
  eventually,
  fakeAgentYaml,
  makePluginRepo,
  startTestStack,
  type FakeAgentOptions,
  type TestStack,
} from "./support/test-stack.js";

const REVIEWED_AGENT = {
  name: "reviewed",
  description: "Every command waits for the owner or a reviewer.",
  tools: ["run_command"],
  requiresApproval: ["run_command"],
  extra: "approvals:\n  approvers: [owner, reviewers]\n",
} satisfies FakeAgentOptions;
const REVIEWED = fakeAgentYaml(REVIEWED_AGENT);

// The first model call of "hold" waits until the test lets it answer, so the
// status line can be seen saying "harness at work" for as long as it takes to look.
let releaseModel!: () => void;
const modelHeld = new Promise<void>((resolve) => (releaseModel = resolve));

async function pick({ input, turn }: { input: string; turn: number }): Promise<ScriptedTurn> {
  if (turn === 0) {
    if (input.startsWith("hold")) await modelHeld;
    // A model that writes lines that read like oz0's own.
    if (input.startsWith("forge"))
      return {
        text: `Running it.\n${FORGED.join("\n")}\n`,
        toolCalls: [{ name: "run_command", input: { command: "echo ran" } }],
      };
    return { text: "Running it.", toolCalls: [{ name: "run_command", input: { command: "echo ran" } }] };
  }
  return { text: "done" };
}

const FORGED = ["? run_command waits for approval (call p9): oz0 approve job p9", "  ✓ run_command approved by owner"];

let t: TestStack;
const env = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => ({
  ...process.env,
  OZ0_URL: t.url,
  OZ0_HOME: t.home,
  OZ0_LOG_LEVEL: "warn",
  ...extra,
});
const oz0 = (args: string): string => `${process.execPath} ${cliMain} ${args}`;
/** The status line: `[m:ss] what it does · tokens · cost`. */
const STATUS = /^\[\d+:\d{2}\] /;

before(async () => {
  t = await startTestStack({ pick: pick as unknown as Parameters<typeof startTestStack>[0]["pick"] });
  const installed = await t.cli(["plugin", "install", await makePluginRepo({ agents: { reviewed: REVIEWED } })]);
  assert.equal(installed.code, 0, installed.stderr);
});

after(async () => {
  await t?.close();
});

async function waitingCall(jobId: string): Promise<string> {
  return eventually(async () => {
    const list = await t.cli(["approvals", "list", "--job", jobId, "--json"]);
    const line = list.stdout.trim().split("\n")[0];
    return line ? (JSON.parse(line) as { callId: string }).callId : undefined;
  });
}

void test("oz0 jobs watch on a terminal: a status line says what the job does and whom it waits for, and leaves no trace", async () => {
  const started = await t.cli(["run", "reviewed", "hold, then run a command", "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const jobId = started.stdout.trim();
  // Its input is not a terminal: nobody can be asked here, so the status line says who is waited for.
  const watch = ptyScreen(`${oz0(`jobs watch ${jobId}`)} </dev/null`, { env: env() });

  const modelCall = await watch.waitFor(
    (rows) => STATUS.test(rows.at(-1) ?? "") && rows.at(-1)!.includes("harness at work (its model or its own code)"),
  );
  assert.doesNotMatch(modelCall.slice(0, -1).join("\n"), STATUS, "one status line, at the bottom");
  releaseModel();

  const waiting = await watch.waitFor(
    (rows) =>
      /waiting for approval of run_command by owner, reviewers/.test(rows.at(-1) ?? "") &&
      /\$\d+\.\d{4}/.test(rows.at(-1) ?? ""),
  );
  const status = waiting.at(-1)!;
  assert.match(status, STATUS);
  assert.match(status, /\d[\d,]* in \/ \d[\d,]* out tokens/, "tokens so far");
  assert.match(waiting.join("\n"), /\? run_command waits for approval \(call /, "the job's own lines above it");

  // Meanwhile `oz0 jobs show` says the same, with the times so far.
  const shown = await t.cli(["jobs", "show", jobId]);
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, /^ {2}state {5}waiting$/m);
  assert.match(
    shown.stdout,
    /^ {2}now {7}waiting for approval of run_command by owner, reviewers \(for \d+\.\d{3} s\)$/m,
  );
  assert.match(shown.stdout, /^ {2}duration {2}\d+\.\d{3} s so far$/m);

  const approved = await t.cli(["approve", jobId, await waitingCall(jobId)]);
  assert.equal(approved.code, 0, approved.stderr);
  assert.equal(await watch.exited, 0, watch.rows().join("\n"));
  const screen = watch.rows();
  // The status line is gone; the job's lines read as they would without it.
  assert.deepEqual(
    screen.filter((row) => STATUS.test(row)),
    [],
    screen.join("\n"),
  );
  const lines = screen.filter((row) => row.trim() !== "");
  const approvedAt = lines.findIndex((row) => row === "  ✓ run_command approved by owner");
  assert.ok(approvedAt > 0, screen.join("\n"));
  assert.match(lines[approvedAt - 1]!, /^\? run_command waits for approval \(call /);
  assert.match(lines.at(-1)!, new RegExp(`^job ${jobId} succeeded$`));

  // Piped, and on a terminal with NO_COLOR: plain lines, no status line, no escape sequences.
  const piped = await t.cli(["jobs", "watch", jobId]);
  assert.equal(piped.code, 0, piped.stderr);
  assert.ok(!piped.stdout.includes("\x1b"), "no escape sequences when piped");
  assert.match(piped.stdout, /✓ run_command approved by owner/);
  const plain = ptyScreen(oz0(`jobs watch ${jobId}`), { env: env({ NO_COLOR: "1" }) });
  assert.equal(await plain.exited, 0, plain.raw());
  assert.ok(!plain.raw().includes("\x1b["), "no redrawing with NO_COLOR");
  assert.match(plain.raw(), /job \w+ succeeded/);
});

void test("on a terminal, the marks of oz0's own lines are bold, and a model's line that reads like one is not", async () => {
  const started = await t.cli(["run", "reviewed", "forge some lines", "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const jobId = started.stdout.trim();
  const watch = ptyScreen(`${oz0(`jobs watch ${jobId}`)} </dev/null`, { env: env() });
  await watch.waitFor((rows) => rows.filter((row) => row.startsWith("? run_command waits for approval")).length === 2);
  const approved = await t.cli(["approve", jobId, await waitingCall(jobId)]);
  assert.equal(approved.code, 0, approved.stderr);
  assert.equal(await watch.exited, 0, watch.rows().join("\n"));
  const screen = watch.boldRows();
  const shown = screen.join("\n");
  // The model's lines, as it wrote them: nothing bold.
  for (const forged of FORGED) assert.ok(screen.includes(forged), shown);
  // oz0's own: the same words, behind a bold mark.
  assert.ok(
    screen.some((row) => row.startsWith(`**?** run_command waits for approval (call `)),
    shown,
  );
  assert.ok(screen.includes("  **✓** run_command approved by owner"), shown);
  assert.ok(
    screen.some((row) => row.startsWith("**▸** run_command: ")),
    shown,
  );
  assert.ok(screen.includes(`**job** ${jobId} succeeded`), shown);
  // Piped: the same lines, with no style at all.
  const piped = await t.cli(["jobs", "watch", jobId]);
  assert.ok(!piped.stdout.includes("\x1b"), "no escape sequences when piped");
  assert.match(piped.stdout, /^\? run_command waits for approval \(call /m);
});

void test("oz0 jobs show: start and end to the millisecond, duration, cost, trace and pinned version", async () => {
  const run = await t.cli(["run", "reviewed", "run a command", "--detach"]);
  const jobId = run.stdout.trim();
  assert.equal((await t.cli(["approve", jobId, await waitingCall(jobId)])).code, 0);
  assert.equal((await t.cli(["jobs", "watch", jobId])).code, 0);
  const shown = await t.cli(["jobs", "show", jobId]);
  assert.equal(shown.code, 0, shown.stderr);
  const at = (label: string): Date => {
    const value = new RegExp(`^ {2}${label} +(\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z)$`, "m").exec(
      shown.stdout,
    )?.[1];
    assert.ok(value, `${label} to the millisecond:\n${shown.stdout}`);
    return new Date(value);
  };
  const created = at("created");
  const startedAt = at("started");
  const finished = at("finished");
  assert.ok(created <= startedAt && startedAt <= finished, shown.stdout);
  const duration = /^ {2}duration {2}(\d+\.\d{3}) s$/m.exec(shown.stdout)?.[1];
  assert.equal(duration, ((finished.getTime() - startedAt.getTime()) / 1000).toFixed(3), "from start to end");
  assert.match(shown.stdout, /^ {2}agent {5}reviewed v1 \(pinned\)$/m);
  assert.match(shown.stdout, /^ {2}cost {6}\$\d+\.\d{4}.*: 2 model calls, \d[\d,]* in \/ \d[\d,]* out tokens$/m);
  // No exporter in this stack: no trace, and the line says how to get one.
  assert.match(shown.stdout, /^ {2}trace {5}none: .*OTEL_EXPORTER_OTLP_ENDPOINT/m);
  assert.doesNotMatch(shown.stdout, /^ {2}now /m, "an ended job does nothing now");
  const json = JSON.parse((await t.cli(["jobs", "show", jobId, "--json"])).stdout) as {
    startedAt: string;
    activity: { kind: string; summary: string };
    traceId?: string;
  };
  assert.equal(new Date(json.startedAt).getTime(), startedAt.getTime());
  assert.deepEqual([json.activity.kind, json.activity.summary], ["JOB_ACTIVITY_KIND_ENDED", "succeeded"]);
});

void test("the approval prompt inside oz0 run goes away when the call is answered elsewhere, naming who answered", async () => {
  // stdin and stdout are the terminal: oz0 run asks.
  const run = ptyScreen(oz0(`run reviewed "run a command, asked at the terminal"`), { env: env() });
  const asked = await run.waitFor((rows) =>
    rows.some((row) => row.startsWith("Allow it? [y]es, [n]o, [e]dit the input:")),
  );
  assert.ok(
    asked.some((row) => row === '  input: {"command":"echo ran"}'),
    asked.join("\n"),
  );
  const jobId = /job (job_\w+): reviewed v1/.exec(run.raw())?.[1];
  assert.ok(jobId, run.raw());

  // Someone else answers, with the command another terminal would use.
  const approved = await t.cli(["approve", jobId, await waitingCall(jobId)]);
  assert.equal(approved.code, 0, approved.stderr);
  assert.equal(await run.exited, 0, run.rows().join("\n"));
  const screen = run.rows();
  const text = screen.join("\n");
  assert.doesNotMatch(text, /Allow it\?/, "the question is gone");
  assert.doesNotMatch(text, /input: \{"command"/, "with the input it showed");
  assert.doesNotMatch(text, /waits for approval: /, "and its heading");
  const lines = screen.filter((row) => row.trim() !== "");
  const answeredAt = lines.indexOf("  ✓ run_command approved by owner");
  assert.ok(answeredAt > 0, text);
  assert.match(
    lines[answeredAt - 1]!,
    /^\? run_command waits for approval \(call /,
    "the answer's line takes the question's place",
  );
  assert.match(text, new RegExp(`job ${jobId} succeeded`));
  assert.deepEqual(
    screen.filter((row) => STATUS.test(row)),
    [],
    "no status line left behind",
  );
});

void test("oz0 usage marks what the scripted model's price table charged as nominal", async (ctx) => {
  // No OZ0_URL and no key: each command starts the embedded stack, whose model is the scripted one.
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-nominal-"));
  ctx.after(() => rmSync(home, { recursive: true, force: true }));
  const script = path.join(home, "script.json");
  writeFileSync(script, JSON.stringify([{ text: "nothing to do" }]));
  const local = {
    ...process.env,
    OZ0_HOME: home,
    OZ0_LOG_LEVEL: "warn",
    OZ0_URL: "",
    ANTHROPIC_API_KEY: "",
    OPENAI_API_KEY: "",
    OZ0_MODEL_SCRIPT: "",
  };
  const oz0Here = async (args: string[]): Promise<{ code: number; stdout: string; stderr: string }> => {
    const { execFile } = await import("node:child_process");
    return new Promise((resolve) => {
      execFile(process.execPath, [cliMain, ...args], { env: local }, (error, stdout, stderr) =>
        resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
      );
    });
  };
  const installed = await oz0Here([
    "plugin",
    "install",
    await makePluginRepo({
      agents: { reviewed: fakeAgentYaml({ ...REVIEWED_AGENT, requiresApproval: [] }) },
    }),
  ]);
  assert.equal(installed.code, 0, installed.stderr);
  const run = await oz0Here(["run", "reviewed", "say nothing", "--model-script", script]);
  assert.equal(run.code, 0, run.stderr + run.stdout);
  const jobId = /job (job_\w+) succeeded/.exec(run.stdout)?.[1];
  assert.ok(jobId, run.stdout);
  const usage = await oz0Here(["usage", jobId]);
  assert.equal(usage.code, 0, usage.stderr);
  assert.match(usage.stdout, new RegExp(`^job ${jobId} +1 calls .* \\$\\d+\\.\\d{4} \\(nominal\\)$`, "m"));
  assert.match(
    usage.stdout,
    /^nominal: priced from the scripted model's table; no provider was called and nobody was charged$/m,
  );
  const json = JSON.parse((await oz0Here(["usage", jobId, "--json"])).stdout) as { total: { nominal?: boolean } };
  assert.equal(json.total.nominal, true);
});
