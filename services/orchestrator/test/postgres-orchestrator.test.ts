// needs: postgres
// The orchestrator on PostgreSQL (DATABASE_URL): the same jobs, approvals and
// restart re-attach as on SQLite, with the job's records in the database.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import type { ScriptedTurn } from "@oz0/harness/testing";
import { databaseUrl, dropSchema, freshSchema } from "./postgres-test-support.js";
import { eventually, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

const CAREFUL = `name: careful
description: Every command waits for a person.
runtime: harness:fake
model:
  primary: anthropic/claude-sonnet-5-5
instructions: prompts/fixer.md
harness:
  tools: [read_file, write_file, run_command]
  requires_approval: [run_command]
`;

const schema = freshSchema();
let t: TestStack;

before(async () => {
  t = await startTestStack({
    pick: ({ turn }): ScriptedTurn =>
      turn === 0
        ? { toolCalls: [{ name: "run_command", input: { command: "echo stored > proof.txt" } }] }
        : { text: "proof written" },
    // A stable replica id: the restarted orchestrator takes its own jobs back at once.
    orchestratorEnv: { DATABASE_URL: databaseUrl(), OZ0_DATABASE_SCHEMA: schema, OZ0_REPLICA_ID: "the-only-replica" },
  });
  const installed = await t.cli(["plugin", "install", await makePluginRepo({ agents: { careful: CAREFUL } })]);
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
