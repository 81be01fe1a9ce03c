// needs: postgres
// The orchestrator on PostgreSQL (DATABASE_URL): the same jobs, approvals and
// restart re-attach as on SQLite, with the job's records in the database,
// and a NUL (which PostgreSQL's text cannot hold) in what a session reports.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import type { ScriptedTurn } from "@oz0/harness/testing";
import { databaseUrl, dropSchema, freshSchema } from "./postgres-test-support.js";
import { eventually, fakeAgentYaml, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

const CAREFUL = fakeAgentYaml({
  name: "careful",
  description: "Every command waits for a person.",
  requiresApproval: ["run_command"],
});

const PLAIN = fakeAgentYaml({ name: "plain", description: "Runs its command at once." });

const schema = freshSchema();
let t: TestStack;

before(async () => {
  t = await startTestStack({
    pick: ({ input, turn }): ScriptedTurn => {
      if (input.includes("binary"))
        // A model's text and a command's output (a binary file's bytes) with NULs in them.
        return turn === 0
          ? { text: "reading\u0000it", toolCalls: [{ name: "run_command", input: { command: "printf 'ELF\\0bin'" } }] }
          : { text: "read\u0000" };
      return turn === 0
        ? { toolCalls: [{ name: "run_command", input: { command: "echo stored > proof.txt" } }] }
        : { text: "proof written" };
    },
    // A stable replica id: the restarted orchestrator takes its own jobs back at once.
    orchestratorEnv: { DATABASE_URL: databaseUrl(), OZ0_DATABASE_SCHEMA: schema, OZ0_REPLICA_ID: "the-only-replica" },
  });
  const installed = await t.cli([
    "plugin",
    "install",
    await makePluginRepo({ agents: { careful: CAREFUL, plain: PLAIN } }),
  ]);
  assert.equal(installed.code, 0, installed.stderr);
});

after(async () => {
  await t?.close();
  await dropSchema(schema);
});

void test("with DATABASE_URL the orchestrator keeps jobs in PostgreSQL, and a job survives a restart while it waits for approval", async () => {
  const started = await t.cli(["run", "careful", "write the proof", "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const jobId = started.stdout.trim();
  const callId = await eventually(async () => {
    const list = await t.cli(["approvals", "list", "--json"]);
    const line = list.stdout.split("\n").find((l) => l.includes(jobId));
    return line ? (JSON.parse(line) as { callId?: string }).callId : undefined;
  });
  await t.restartOrchestrator();
  const approved = await t.cli(["approve", jobId, callId!]);
  assert.equal(approved.code, 0, approved.stderr);
  const watched = await t.cli(["jobs", "watch", jobId]);
  assert.equal(watched.code, 0, watched.stdout + watched.stderr);
  assert.match(watched.stdout, /proof written/);

  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  try {
    const jobs = await client.query(`SELECT count(*)::int AS n FROM ${schema}.jobs WHERE id = $1`, [jobId]);
    assert.equal(jobs.rows[0].n, 1);
    const events = await client.query(`SELECT count(*)::int AS n FROM ${schema}.job_events WHERE job_id = $1`, [jobId]);
    assert.ok(events.rows[0].n > 3, `job events stored: ${events.rows[0].n}`);
  } finally {
    await client.end();
  }
});

void test("a NUL in a model's text or a command's output is stored as U+FFFD, and the job ends as it would without", async () => {
  // PostgreSQL refuses U+0000 in text and jsonb: the write of each such event failed, was retried and failed
  // again, and the job ended as "lost the session's stream" (or, with nodes tracked, never ended).
  const started = await t.cli(["run", "plain", "read the binary", "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const jobId = started.stdout.trim();
  const watched = await t.cli(["jobs", "watch", jobId]);
  assert.equal(watched.code, 0, watched.stdout + watched.stderr);
  assert.match(watched.stdout, /reading\uFFFDit/);
  assert.match(watched.stdout, /ELF\uFFFDbin/);
  assert.match(watched.stdout, /succeeded/);

  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  try {
    const job = await client.query(`SELECT result_text FROM ${schema}.jobs WHERE id = $1`, [jobId]);
    assert.equal(job.rows[0].result_text, "read\uFFFD");
  } finally {
    await client.end();
  }
});
