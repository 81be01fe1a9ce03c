// Where a harness's stderr goes on the real stack (the four services on
// loopback, `oz0` as a user runs it): `oz0 jobs logs JOB` prints it, a failed
// job's message ends with its last lines and points there, the session token
// the harness prints is redacted in both, a re-attach after an orchestrator
// restart neither loses nor repeats a line, and the orchestrator keeps only
// the last OZ0_MAX_SESSION_STDERR_BYTES of a session. The harness is
// test/fixtures/stderr/noisy-harness.mjs.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { eventually, packageDir, startTestStack, type CliResult, type TestStack } from "./support/test-stack.js";

const plugin = path.join(packageDir, "test/fixtures/stderr");
/** What the orchestrator keeps of each session here (the sandbox keeps its default, 1 MiB). */
const KEPT = 4096;

interface JobJson {
  id: string;
  state: string;
  error?: string;
}

let t: TestStack;

before(async () => {
  // The model is never called: the harness writes its events itself.
  t = await startTestStack({
    pick: () => ({ text: "unused" }),
    orchestratorEnv: { OZ0_MAX_SESSION_STDERR_BYTES: String(KEPT) },
  });
  const installed = await t.cli(["plugin", "install", plugin]);
  assert.equal(installed.code, 0, installed.stderr);
});

after(async () => {
  await t?.close();
});

function jobIdOf(run: CliResult): string {
  const id = /\b(job_\w+)/.exec(`${run.stderr}\n${run.stdout}`)?.[1];
  assert.ok(id, `no job id in: ${run.stderr}${run.stdout}`);
  return id;
}

async function shown(jobId: string): Promise<JobJson> {
  const result = await t.cli(["jobs", "show", jobId, "--json"]);
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout) as JobJson;
}

/** Every 8-character window of `secret` found in `text`, read through white space. */
function leaks(text: string, secret: string): string[] {
  const squeezed = text.replace(/\s/g, "");
  const found: string[] = [];
  for (let i = 0; i + 8 <= secret.length; i++)
    if (squeezed.includes(secret.slice(i, i + 8))) found.push(secret.slice(i, i + 8));
  return found;
}

void test("oz0 jobs logs prints a failed harness's stderr, the failure ends with its last lines, and the session token it printed is redacted in both", async () => {
  const run = await t.cli(["run", "noisy", "fail"]);
  assert.equal(run.code, 3, `${run.stdout}\n${run.stderr}`);
  const jobId = jobIdOf(run);
  // The harness wrote its key (the session token) into key.txt too: the job's patch holds it.
  const patch = readFileSync(path.join(t.home, "jobs", jobId, "artifacts", "changes.patch"), "utf8");
  const token = /^\+(oz0st_\S+)$/m.exec(patch)?.[1];
  assert.ok(token, `no session token in the patch:\n${patch}`);

  const logs = await t.cli(["jobs", "logs", jobId]);
  assert.equal(logs.code, 0, logs.stderr);
  assert.equal(
    logs.stdout,
    "starting up \\u001b[1mnow\\u001b[0m\nANTHROPIC_API_KEY=[redacted]\nspaced: [redacted]\nError: the harness gave up\n    at main (noisy-harness.mjs:1:1)\n",
  );
  assert.match(logs.stderr, /^oz0: stderr of session ses_\w+\n$/);
  assert.deepEqual(leaks(logs.stdout + logs.stderr, token), []);

  const job = await shown(jobId);
  assert.equal(job.state, "JOB_STATE_FAILED");
  assert.equal(
    job.error,
    "the harness broke the protocol: no_result: the harness exited (code 1) without writing a result; its stderr ended with: " +
      `starting up \\u001b[1mnow\\u001b[0m | ANTHROPIC_API_KEY=[redacted] | spaced: [redacted] | Error: the harness gave up |     at main (noisy-harness.mjs:1:1) (all of it: \`oz0 jobs logs ${jobId}\`)`,
  );
  assert.deepEqual(leaks(job.error, token), []);
  // What `oz0 run` printed as the job ended says the same.
  assert.match(run.stdout, /its stderr ended with: .*Error: the harness gave up/);
  assert.deepEqual(leaks(run.stdout + run.stderr, token), []);

  const json = await t.cli(["jobs", "logs", jobId, "--json"]);
  const pieces = json.stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { sessionId: string; text?: string });
  // As it came: the escape sequence whole, where the terminal output shows it inert.
  assert.equal(
    pieces.map((p) => p.text ?? "").join(""),
    logs.stdout.replace("\\u001b[1mnow\\u001b[0m", "\u001b[1mnow\u001b[0m"),
  );
  assert.deepEqual(leaks(json.stdout, token), []);
});

void test("a re-attach after an orchestrator restart neither loses nor repeats a line of stderr", async () => {
  const started = await t.cli(["run", "noisy", "wait", "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const jobId = started.stdout.trim();
  // The harness waits for a person, ticking on stderr; some ticks are stored before the restart.
  const callId = await eventually(async () => {
    const list = await t.cli(["approvals", "list", "--job", jobId, "--json"]);
    const first = list.stdout.trim()
      ? (JSON.parse(list.stdout.trim().split("\n")[0]!) as { callId: string })
      : undefined;
    return first?.callId;
  });
  await eventually(async () => ((await t.cli(["jobs", "logs", jobId])).stdout.includes("tick 2\n") ? true : undefined));

  // Ticks go on while the orchestrator is down: the sandbox keeps them for the re-attach.
  await t.restartOrchestrator();
  await eventually(async () => ((await t.cli(["jobs", "logs", jobId])).stdout.includes("tick 4\n") ? true : undefined));
  const approved = await t.cli(["approve", jobId, callId]);
  assert.equal(approved.code, 0, approved.stderr);
  const ended = await eventually(async () => {
    const job = await shown(jobId);
    return job.state === "JOB_STATE_FAILED" ? job : undefined;
  });

  const logs = await t.cli(["jobs", "logs", jobId]);
  const lines = logs.stdout.split("\n");
  assert.deepEqual(lines.slice(0, 3), ["before 1", "before 2", "before 3"]);
  const ticks = lines.filter((l) => l.startsWith("tick "));
  assert.deepEqual(
    ticks,
    ticks.map((_, i) => `tick ${i + 1}`),
    "every tick once, in order, across the restart",
  );
  assert.ok(ticks.length >= 4);
  assert.deepEqual(lines.slice(3 + ticks.length), ["after the answer", "Error: still failing", ""]);
  assert.match(
    ended.error ?? "",
    new RegExp(
      `no_result: the harness exited \\(code 2\\) without writing a result; its stderr ended with: tick \\d+ \\| tick \\d+ \\| tick \\d+ \\| after the answer \\| Error: still failing \\(all of it: \`oz0 jobs logs ${jobId}\`\\)$`,
    ),
  );
});

void test("the orchestrator keeps the last OZ0_MAX_SESSION_STDERR_BYTES of a session, and counts what it dropped", async () => {
  const run = await t.cli(["run", "noisy", "flood 200"]);
  assert.equal(run.code, 3, `${run.stdout}\n${run.stderr}`);
  const jobId = jobIdOf(run);
  const written = Array.from(
    { length: 200 },
    (_, i) => `flood line ${String(i).padStart(4, "0")} ${"x".repeat(80)}\n`,
  ).join("");

  const json = await t.cli(["jobs", "logs", jobId, "--json"]);
  const pieces = json.stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { text?: string; droppedBytes?: string });
  const kept = pieces.map((p) => p.text ?? "").join("");
  const dropped = pieces.reduce((sum, p) => sum + Number(p.droppedBytes ?? 0), 0);
  assert.ok(Buffer.byteLength(kept) <= KEPT, `kept ${Buffer.byteLength(kept)} bytes`);
  assert.ok(kept.length > 0 && written.endsWith(kept), "the last bytes are kept");
  assert.equal(
    Buffer.byteLength(kept) + dropped,
    Buffer.byteLength(written),
    "what was kept and what was dropped add up to what was written",
  );

  const logs = await t.cli(["jobs", "logs", jobId]);
  assert.equal(logs.stdout, kept);
  assert.match(
    logs.stderr,
    new RegExp(`^oz0: stderr of session ses_\\w+\\noz0: \\[${dropped} bytes of it not kept\\]\\n$`),
  );
  assert.match(
    (await shown(jobId)).error ?? "",
    /its stderr ended with: flood line 0195 x+ \| .* \| flood line 0199 x+ \(all of it/,
  );
});

void test("oz0 jobs logs of a job whose harness wrote nothing to stderr says so, and of an unknown job fails", async () => {
  const run = await t.cli(["run", "noisy", "quiet"]);
  assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
  const logs = await t.cli(["jobs", "logs", jobIdOf(run)]);
  assert.equal(logs.code, 0, logs.stderr);
  assert.equal(logs.stdout, "");
  assert.match(logs.stderr, /has no harness stderr: its harness wrote none/);
  const unknown = await t.cli(["jobs", "logs", "job_nope"]);
  assert.equal(unknown.code, 1);
  assert.match(unknown.stderr, /job job_nope not found/);
});
