// needs: kafka, postgres
// Past one machine, end to end (issue 13's acceptance): three orchestrators,
// two sandbox nodes, two LLM proxies, one events service on the real Kafka
// broker and one PostgreSQL, each its own process on loopback. 200 jobs —
// plain ones, ones whose command waits for a person, and graph runs — are
// submitted across the replicas; in the middle one orchestrator and one
// sandbox node are SIGKILLed. Then: every job ends exactly once (its whole
// log, read from PostgreSQL, holds one ending); no job or graph step ran
// twice (each conversation was opened with the model once); every approval
// is answered at a replica that does not own the job (by its lease) and
// honoured; the jobs whose sessions died with their node fail saying so;
// the proxies' metering sums to exactly what the scripted model served; and
// every lifecycle event the events service accepted is on Kafka once.
import { testCredentials } from "@oz0/serving/testing";
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { ScriptedTurn } from "@oz0/harness/testing";
import { EventsService, type PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { JobState, type Job } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { Kafka, logLevel } from "kafkajs";
import pg from "pg";
import { databaseUrl, dropSchema, eventually, freshSchema } from "./postgres-test-support.js";
import { proxySchema, startClusterStack, type ClusterStack } from "./support/cluster-stack.js";
import { agentOf } from "./support/graph-agents.js";
import { makePluginRepo, repoRoot } from "./support/test-stack.js";

const brokers = (process.env.KAFKA_BROKERS ?? "").split(",").filter(Boolean);
const topic = `oz0.cluster.${Date.now()}`;
const schema = freshSchema();
const JOBS = 200;
/** Every model turn reports this usage, so the served total is known exactly. */
const USAGE = { input: 40, output: 9 };

function turn(agent: string, input: string, assistantTurns: number): ScriptedTurn {
  // Slow enough that the kills land while sessions run.
  const base = { usage: USAGE, delayMs: 150 };
  switch (agent) {
    case "plain":
    case "careful":
      return assistantTurns === 0
        ? { ...base, toolCalls: [{ name: "run_command", input: { command: `echo ran > ${agent}.txt` } }] }
        : { ...base, text: `${agent} done` };
    case "email-triage":
      return { ...base, text: input.includes("crash") ? "bug_report" : "other" };
    case "writer":
      return { ...base, text: "Re: your mail" };
    default:
      return { ...base, text: `no script for ${agent}` };
  }
}

function agentYaml(name: string, extra = ""): string {
  return [
    `name: ${name}`,
    "description: cluster test agent",
    "runtime: harness:fake",
    "model:",
    "  primary: anthropic/claude-sonnet-5-5",
    `instructions: prompts/${name}.md`,
    "harness:",
    "  tools: [read_file, write_file, run_command]",
    extra,
    "",
  ].join("\n");
}

let c: ClusterStack;
/** The cluster's own database, read to check what the API does not show: who owns a job, and its whole log. */
let db: pg.Pool;

before(async () => {
  assert.ok(brokers.length > 0, "KAFKA_BROKERS must point at a broker (npm test starts one)");
  c = await startClusterStack({
    databaseUrl: databaseUrl(),
    schema,
    kafkaBrokers: brokers,
    topic,
    orchestrators: 3,
    sandboxes: 2,
    proxies: 2,
    sandboxCapacity: 24,
    leaseTtlMs: 5_000,
    nodeStaleAfterMs: 6_000,
    turns: (request) => {
      const messages = (request.body?.messages as { role: string; content: unknown }[] | undefined) ?? [];
      const first = messages[0]?.content;
      return turn(
        agentOf(request),
        typeof first === "string" ? first : JSON.stringify(first ?? ""),
        messages.filter((m) => m.role === "assistant").length,
      );
    },
  });
  const plugin = await makePluginRepo({
    name: "cluster-test",
    agents: { plain: agentYaml("plain"), careful: agentYaml("careful", "  requires_approval: [run_command]") },
    prompts: { "plain.md": "You are plain.\n", "careful.md": "You are careful.\n" },
  });
  db = new pg.Pool({ connectionString: databaseUrl(), max: 2, options: `-c search_path=${schema}` });
  await c.plugins(0).installPlugin({ source: plugin });
  await c.plugins(1).installPlugin({ source: path.join(repoRoot, "examples/plugins/support-graphs") });
});

after(async () => {
  await db?.end();
  await c?.close();
  await dropSchema(schema);
  await dropSchema(proxySchema(schema));
});

const TERMINAL = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]);

void test("200 jobs across three orchestrators, two sandbox nodes and two proxies survive losing an orchestrator and a node", async (t) => {
  const live = [0, 1, 2];
  const submitted: { id: string; kind: "plain" | "careful" | "graph" }[] = [];
  const submit = async (i: number): Promise<void> => {
    const kind = i % 10 === 0 ? "graph" : i % 5 === 1 ? "careful" : "plain";
    const replica = live[i % live.length]!;
    const agent = kind === "graph" ? "inbox" : kind;
    const input = kind === "graph" ? `mail ${i}: the app crashes on start` : `job ${i}`;
    const { job } = await c.jobs(replica).runAgent({ agent, input });
    submitted.push({ id: job!.id, kind });
  };
  // First half, in bursts of ten.
  for (let i = 0; i < JOBS / 2; i += 10) await Promise.all(Array.from({ length: 10 }, (_, k) => submit(i + k)));
  // Kill orchestrator 3 (it owns a third of the jobs, some waiting for approval) and sandbox node 2 (its sessions die with it).
  await eventually(
    async () => ((await c.jobs(0).listApprovals({})).approvals.length >= 5 ? true : undefined),
    "approvals waiting",
  );
  await c.orchestrators[2]!.stop({ signal: "SIGKILL" });
  await c.sandboxes[1]!.stop({ signal: "SIGKILL" });
  live.splice(2, 1);
  for (let i = JOBS / 2; i < JOBS; i += 10) await Promise.all(Array.from({ length: 10 }, (_, k) => submit(i + k)));
  assert.equal(submitted.length, JOBS);

  // Answer every approval at a live replica that does not own the job (by its lease): approve three in four, deny the fourth.
  const answered = new Map<string, boolean>();
  let answeredElsewhere = 0;
  let waiting: string[] = [];
  const finished = await eventually(
    async () => {
      for (const approval of (await c.jobs(0).listApprovals({})).approvals) {
        const key = `${approval.jobId}/${approval.callId}`;
        if (answered.has(key)) continue;
        const allow = answered.size % 4 !== 3;
        answered.set(key, allow);
        const owner = (
          await db.query<{ owner: string }>("SELECT owner FROM leases WHERE kind = 'job' AND resource = $1", [
            approval.jobId,
          ])
        ).rows[0]?.owner;
        const at = live.find((i) => `orchestrator-${i + 1}` !== owner) ?? live[0]!;
        if (owner && `orchestrator-${at + 1}` !== owner) answeredElsewhere++;
        await c
          .jobs(at)
          .answerPermission({
            jobId: approval.jobId,
            callId: approval.callId,
            allow,
            reason: allow ? "" : "not this time",
            answeredBy: "someone-else",
          })
          .catch((error: unknown) => {
            // The job may have ended meanwhile (its node died): its approval closed with it.
            if (!/ended|cancelled|not found|already/.test(String(error))) throw error;
          });
      }
      const jobs = await Promise.all(submitted.map(async (s) => (await c.jobs(0).getJob({ jobId: s.id })).job!));
      waiting = jobs.filter((j) => !TERMINAL.has(j.state)).map((j) => `${j.id} (${JobState[j.state]})`);
      return waiting.length === 0 ? jobs : undefined;
    },
    "every job ending",
    300_000,
  ).catch((error: unknown) => {
    throw new Error(`${(error as Error).message}: still waiting ${waiting.join(", ")}`);
  });
  assert.ok(answered.size >= 10, `approvals answered: ${answered.size}`);
  assert.ok(
    answeredElsewhere >= answered.size / 2,
    `most answers given at a replica not owning the job: ${answeredElsewhere} of ${answered.size}`,
  );

  // Exactly once, from the store itself: each job's log holds one ending, whatever a watcher would have stopped at.
  const { rows: endingRows } = await db.query<{ job_id: string; endings: string }>(
    `SELECT job_id, count(*) FILTER (WHERE event->'stateChanged'->>'state' IN ('JOB_STATE_SUCCEEDED', 'JOB_STATE_FAILED', 'JOB_STATE_CANCELLED')) AS endings
     FROM job_events WHERE job_id = ANY($1) GROUP BY job_id`,
    [submitted.map((s) => s.id)],
  );
  const endings = new Map(endingRows.map((r) => [r.job_id, Number(r.endings)]));
  for (const s of submitted) assert.equal(endings.get(s.id), 1, `job ${s.id} (${s.kind}) has one ending in its log`);

  // Exactly once: each job's stored events end it once, and its state agrees.
  const byId = new Map<string, Job>(finished.map((j) => [j.id, j]));
  const lostMessage = /stopped sending heartbeats|session was lost|its node/;
  let lost = 0;
  for (const s of submitted) {
    const job = byId.get(s.id)!;
    const endings: JobState[] = [];
    for await (const r of c.jobs(s.id.length % 2).watchJob({ jobId: s.id, afterSeq: 0n })) {
      if (r.event?.event.case === "stateChanged" && TERMINAL.has(r.event.event.value.state))
        endings.push(r.event.event.value.state);
      if (r.event?.event.case === "stateChanged" && TERMINAL.has(r.event.event.value.state)) break;
    }
    assert.deepEqual(
      endings,
      [job.state],
      `job ${s.id} (${s.kind}) ended once, as ${JobState[job.state]}: ${job.error}`,
    );
    if (job.state === JobState.FAILED) {
      assert.match(job.error, lostMessage, `job ${s.id} (${s.kind}) failed only because its node died: ${job.error}`);
      lost++;
      continue;
    }
    if (s.kind === "plain") assert.equal(job.resultText, "plain done");
    if (s.kind === "graph") assert.equal(job.state, JobState.SUCCEEDED, `graph ${s.id}: ${job.error}`);
  }
  // Every approval honoured: an approved command ran, a denied one did not.
  for (const [key, allow] of answered) {
    const [jobId] = key.split("/");
    const job = byId.get(jobId!)!;
    if (job.state === JobState.FAILED) continue;
    const approvals = (await c.jobs(1).listApprovals({ jobId, includeAnswered: true })).approvals;
    // The test's credential is the owner's: the recorded answerer is that principal, whatever the request claimed.
    assert.ok(
      approvals.every((a) => a.answeredBy === "owner"),
      `job ${jobId}'s approvals answered by the test's principal`,
    );
    assert.equal(job.state, JobState.SUCCEEDED, `job ${jobId} went on after its answer: ${job.error}`);
    const events = [];
    for await (const r of c.jobs(0).watchJob({ jobId, afterSeq: 0n })) {
      events.push(r.event);
      if (r.event?.event.case === "stateChanged" && TERMINAL.has(r.event.event.value.state)) break;
    }
    const result = events.find((e) => e?.event.case === "toolResult");
    assert.ok(result?.event.case === "toolResult", `job ${jobId} has its command's result`);
    assert.equal(
      result.event.value.isError,
      !allow,
      `job ${jobId}: the command ${allow ? "ran" : "was refused"} as answered`,
    );
  }
  assert.ok(lost > 0 && lost < JOBS / 2, `some jobs died with sandbox node 2, not most: ${lost}`);

  // No job, and no graph step, ran twice: each conversation was opened once with the model (its first turn asked once).
  const opened = new Map<string, number>();
  for (const request of c.model.requests) {
    const messages = (request.body?.messages as { role: string; content: unknown }[] | undefined) ?? [];
    if (messages.some((m) => m.role === "assistant")) continue;
    const first = JSON.stringify(messages[0]?.content ?? "");
    const key = `${agentOf(request)}|${/\b(job|mail) \d+\b/.exec(first)?.[0] ?? first}`;
    opened.set(key, (opened.get(key) ?? 0) + 1);
  }
  const twice = [...opened].filter(([, n]) => n > 1);
  assert.deepEqual(twice, [], "every session of the run opened its conversation once");
  for (const s of submitted.filter((s) => byId.get(s.id)!.state === JobState.SUCCEEDED && s.kind !== "graph")) {
    const i = /\d+$/.exec(byId.get(s.id)!.input)![0];
    assert.equal(opened.get(`${s.kind}|job ${i}`), 1, `job ${s.id} ran one session`);
  }

  // Metering: every token the scripted model served is on some job, whichever proxy metered it.
  // Every job, a page (at most 500) at a time.
  const all: Job[] = [];
  let pageToken = "";
  do {
    const page = await c.jobs(0).listJobs({ limit: 500, pageToken });
    all.push(...page.jobs);
    pageToken = page.nextPageToken;
  } while (pageToken !== "");
  let input = 0;
  let output = 0;
  // A graph run's usage is its step jobs' (GetJobUsage sums them), so it is counted through its steps only.
  for (const job of all.filter((j) => !j.id.startsWith("graph_"))) {
    const usage = (await c.jobs(1).getJobUsage({ jobId: job.id })).usage?.total;
    input += Number(usage?.inputTokens ?? 0);
    output += Number(usage?.outputTokens ?? 0);
  }
  const served = c.model.tokensServed;
  assert.deepEqual(
    { input, output },
    { input: served.input, output: served.output },
    "metering across both proxies equals what the model served",
  );

  // Lifecycle events: what the events service accepted is on Kafka, each event once.
  // The orchestrators ship theirs from the store (a batch the killed one had claimed is sent again once its
  // claim runs out): wait until none is left there. The other producers publish asynchronously: then wait
  // until the log stops growing, and read it to its end.
  await eventually(
    async () =>
      (await db.query<{ n: string }>("SELECT count(*) AS n FROM lifecycle_outbox")).rows[0]!.n === "0"
        ? true
        : undefined,
    "every stored lifecycle event shipped",
  );
  const accepted = await eventually(async () => {
    const first = await readLog();
    await new Promise((r) => setTimeout(r, 1_000));
    const second = await readLog();
    return second.length === first.length ? second : undefined;
  }, "the events service's log settling");
  const total = accepted.length;
  const onKafka = await readTopic(topic, total);
  const ids = onKafka.map((m) => m.id);
  assert.equal(new Set(ids).size, ids.length, "no event twice on the topic");
  assert.deepEqual(new Set(ids), new Set(accepted.map((e) => e.id)), "every accepted event on the topic");
  for (const s of submitted) {
    const ofJob = accepted.filter((e) => e.jobId === s.id).map((e) => e.type);
    const [created, ended] =
      s.kind === "graph"
        ? ["graph.run_started", /^graph\.run_(completed|failed|cancelled)$/]
        : ["job.created", /^job\.(completed|failed|cancelled)$/];
    assert.equal(
      ofJob.filter((t) => t === created).length,
      1,
      `job ${s.id} started once on the stream: ${ofJob.join(", ")}`,
    );
    assert.equal(
      ofJob.filter((t) => ended.test(t)).length,
      1,
      `job ${s.id} ended once on the stream: ${ofJob.join(", ")}`,
    );
  }
  t.diagnostic(
    `${JOBS} jobs: ${answered.size} approvals answered (${answeredElsewhere} at a replica not owning the job), ${lost} lost with their node; ${served.input + served.output} tokens metered; ${total} lifecycle events on Kafka`,
  );
});

async function readLog(): Promise<PublicEvent[]> {
  const events = createClient(
    EventsService,
    createGrpcTransport({ baseUrl: c.events.url, interceptors: [testCredentials.caller] }),
  );
  const log: PublicEvent[] = [];
  for await (const r of events.watch({ fromPosition: 0n, untilCaughtUp: true })) if (r.event) log.push(r.event);
  return log;
}

async function readTopic(name: string, atLeast: number): Promise<{ id: string }[]> {
  const kafka = new Kafka({ clientId: "oz0-cluster-test", brokers, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const ends = await eventually(async () => {
    const offsets = await admin.fetchTopicOffsets(name).catch(() => []);
    const sum = offsets.reduce((a, o) => a + Number(o.high), 0);
    return sum >= atLeast ? offsets : undefined;
  }, `${atLeast} messages on ${name}`);
  await admin.disconnect();
  const remaining = new Map(ends.filter((o) => Number(o.high) > 0).map((o) => [o.partition, Number(o.high)]));
  const consumer = kafka.consumer({ groupId: `oz0-cluster-test-${Date.now()}` });
  const messages: { id: string }[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic: name, fromBeginning: true });
    await new Promise<void>((resolve) => {
      void consumer.run({
        eachMessage: async ({ partition, message }) => {
          messages.push({ id: message.headers?.ce_id?.toString() ?? "" });
          if (Number(message.offset) + 1 >= (remaining.get(partition) ?? 0)) remaining.delete(partition);
          if (remaining.size === 0) resolve();
        },
      });
    });
  } finally {
    await consumer.disconnect();
  }
  return messages;
}
