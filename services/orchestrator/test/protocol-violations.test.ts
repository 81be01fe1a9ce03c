// Issue 20's protocol acceptance on the real stack (the four services on
// loopback, `oz0` as a user runs it): a harness that writes two results,
// writes an event after its result, or exits non-zero after it fails its job
// with the protocol error's name, as a plain job, as a harness operation's
// scratch session and in a graph; a line nested past the protocol's limit
// fails its job with invalid_event, even 100,000 levels deep, and the
// sandbox serves the next job; a line at the limit goes through end to end.
// The harness is test/fixtures/protocol/protocol-breaker.mjs.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { EventsService } from "@oz0/proto/oz0/events/v1/events_pb";
import { JobService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { bearerInterceptor } from "@oz0/serving";
import { eventually, packageDir, startTestStack, type CliResult, type TestStack } from "./support/test-stack.js";

const plugin = path.join(packageDir, "test/fixtures/protocol");
/** The sandbox's limit (services/sandbox/src/line-nesting.ts, harness.proto rule 8). */
const MAX_LINE_NESTING = 32;

const VIOLATIONS = [
  {
    mode: "two-results",
    error: "duplicate_result: the harness wrote a second result; exactly one result ends a session",
  },
  {
    mode: "event-after-result",
    error: "event_after_result: the harness wrote a text event after its result; nothing may follow the result",
  },
  {
    mode: "exit-after-result",
    error:
      "nonzero_exit_after_result: the harness exited with code 3 after writing a completed result; a harness exits with code 0 once its result is out",
  },
  {
    mode: "result-alone",
    error:
      "first_event_not_started: the first event must be started; a result before it is only a refusal of the request's protocol version, with stop_reason STOP_REASON_ERROR (this one has STOP_REASON_COMPLETED)",
  },
  {
    mode: "lowercase-enum",
    error:
      /^invalid_event: stdout line 2 is not a valid SessionEvent: result\.stopReason "completed" is not a StopReason name; use one of STOP_REASON_COMPLETED, /,
  },
];

interface JobJson {
  id: string;
  state: string;
  error?: string;
  resultText?: string;
  stopReason?: string;
}

let t: TestStack;

before(async () => {
  // The model is never called: the harness writes its events itself.
  t = await startTestStack({ pick: () => ({ text: "unused" }) });
  const installed = await t.cli(["plugin", "install", plugin]);
  assert.equal(installed.code, 0, installed.stderr);
});

after(async () => {
  await t?.close();
});

/** The job (or graph job) `oz0 run` named. */
async function jobOf(run: CliResult): Promise<JobJson> {
  const id = /\b((?:job|graph)_\w+)/.exec(`${run.stderr}\n${run.stdout}`)?.[1];
  assert.ok(id, `no job id in: ${run.stderr}${run.stdout}`);
  const shown = await t.cli(["jobs", "show", id, "--json"]);
  assert.equal(shown.code, 0, shown.stderr);
  return JSON.parse(shown.stdout) as JobJson;
}

async function failedRun(args: string[]): Promise<JobJson> {
  const run = await t.cli(["run", ...args]);
  assert.equal(run.code, 3, `oz0 run exits 3 when the job failed: ${run.stdout}${run.stderr}`);
  const job = await jobOf(run);
  assert.equal(job.state, "JOB_STATE_FAILED");
  return job;
}

for (const v of VIOLATIONS) {
  void test(`a harness that does ${v.mode} fails its job with the protocol error, and its result is not the job's`, async () => {
    const job = await failedRun(["breaker", v.mode]);
    if (typeof v.error === "string") assert.equal(job.error, `the harness broke the protocol: ${v.error}`);
    else assert.match(job.error?.replace(/^the harness broke the protocol: /, "") ?? "", v.error);
    assert.equal(
      job.resultText ?? "",
      "",
      "the result of a session that broke the protocol is not kept as the job's result",
    );
    assert.equal(job.stopReason ?? "STOP_REASON_UNSPECIFIED", "STOP_REASON_UNSPECIFIED");
  });
}

void test("a result that names no stop reason fails its job, saying which stop reason a harness ends with", async () => {
  const job = await failedRun(["breaker", "no-stop-reason"]);
  assert.match(
    job.error ?? "",
    /^the session's result gave no stop reason \(stopReason unset, or STOP_REASON_UNSPECIFIED\): a harness ends with STOP_REASON_COMPLETED, or the stop reason that says why not/,
  );
});

void test("a harness whose manifest says permissions: true, and whose start does not declare them, fails its job at its start, saying so", async () => {
  const job = await failedRun(["undeclared", "polite"]);
  assert.equal(
    job.error,
    "harness undeclared (it names itself protocol-breaker) does not declare the permissions capability in its started event, though its manifest says permissions: true (rule: a harness whose manifest says permissions asks before every tool call and says so when it starts, capabilities.permissions = true); fix the harness, or take permissions: true out of oz0-plugin.yaml (then no agent with requires_approval or hooks runs on it); the job was stopped",
  );
  assert.equal(job.resultText ?? "", "", "its result is not the job's");
});

void test("a cancelled job whose harness ignored SIGTERM says it was killed, beside the cancel's reason", async (ctx) => {
  // Without bubblewrap: under it, SIGTERM ends the sandbox's namespace, and the harness with it, whatever it ignores.
  const plain = await startTestStack({ pick: () => ({ text: "unused" }), sandboxEnv: { OZ0_ISOLATION: "none" } });
  ctx.after(() => plain.close());
  assert.equal((await plain.cli(["plugin", "install", plugin])).code, 0);
  const started = await plain.cli(["run", "breaker", "deaf", "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const jobId = started.stdout.trim();
  // Cancelled once the harness has said it will not listen (its handler is set by then).
  const jobs = createClient(
    JobService,
    createGrpcTransport({
      baseUrl: plain.stack.urls.orchestrator,
      interceptors: [bearerInterceptor(plain.stack.ownerToken)],
    }),
  );
  for await (const { event } of jobs.watchJob({ jobId }))
    if (event?.event.case === "text" && event.event.value.text === "not listening") break;
  const cancelled = await plain.cli(["jobs", "cancel", jobId, "--reason", "changed plans"]);
  assert.equal(cancelled.code, 0, cancelled.stderr);
  const job = await eventually(async () => {
    const shown = JSON.parse((await plain.cli(["jobs", "show", jobId, "--json"])).stdout) as JobJson;
    return shown.state === "JOB_STATE_CANCELLED" ? shown : undefined;
  });
  assert.equal(
    job.error,
    "changed plans; then ignored_sigterm: the harness was still running 2000 ms after SIGTERM and was killed",
  );
});

void test("the same harness keeping to the protocol succeeds (the control)", async () => {
  const run = await t.cli(["run", "breaker", "polite"]);
  assert.equal(run.code, 0, run.stdout + run.stderr);
  assert.equal((await jobOf(run)).resultText, "polite");
});

void test("a harness's text is stored with a role the protocol names, so no item id makes it read as the graph's own line", async () => {
  const run = await t.cli(["run", "breaker", "graph-label"]);
  assert.equal(run.code, 0, run.stdout + run.stderr);
  const job = await jobOf(run);
  const watched = await t.cli(["jobs", "watch", job.id, "--json"]);
  const texts = watched.stdout
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as { text?: { itemId?: string; role?: string; text?: string } })
    .flatMap((e) => (e.text ? [e.text] : []));
  assert.deepEqual(
    texts.map((x) => [x.itemId, x.role, x.text]),
    [
      ["graph", "assistant", "graph: step review approved by the owner"],
      ["graph", "assistant", "graph: run finished"],
      ["mind", "thinking", "thinking aloud"],
    ],
  );
});

void test("a harness operation whose scratch session breaks the protocol returns operation_session_failed to its parent, never its result", async () => {
  for (const v of VIOLATIONS) {
    const run = await t.cli(["run", "delegator", v.mode]);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    const job = await jobOf(run);
    const failed =
      "tool error: operation_session_failed: check's scratch session failed: the harness broke the protocol: ";
    if (typeof v.error === "string") assert.equal(job.resultText, `${failed}${v.error}`);
    else {
      const text = job.resultText ?? "";
      assert.ok(text.startsWith(failed), text);
      assert.match(text.slice(failed.length), v.error);
    }
  }
  // The control: a scratch session that keeps to the protocol returns its validated result.
  const polite = await t.cli(["run", "delegator", "polite"]);
  assert.equal((await jobOf(polite)).resultText, 'tool output: {"ok":true}');
});

void test("a graph fails with the protocol error of an agent step, or of a custom step's module", async () => {
  const agentStep = await failedRun(["breaker-step", "two-results"]);
  assert.match(
    agentStep.error ?? "",
    /agent breaker \(job job_\w+\) ended failed: the harness broke the protocol: duplicate_result: /,
  );
  const writes = await failedRun(["writes-after", "go"]);
  assert.match(
    writes.error ?? "",
    /custom step writes-after failed in the sandbox: the harness broke the protocol: event_after_result: the harness wrote a text event after its result/,
  );
  const fails = await failedRun(["fails-after", "go"]);
  assert.match(
    fails.error ?? "",
    /custom step fails-after failed in the sandbox: the harness broke the protocol: nonzero_exit_after_result: the harness exited with code 3/,
  );
});

const tooDeep =
  `the harness broke the protocol: invalid_event: stdout line 2 is not a valid SessionEvent: it nests objects and arrays deeper than ${MAX_LINE_NESTING} levels, ` +
  "the protocol's limit (harness.proto, rule 8); the line was refused and the session stopped";

void test(`a line ${MAX_LINE_NESTING + 1} levels deep fails its job with invalid_event naming the limit`, async () => {
  const job = await failedRun(["breaker", `nested-${MAX_LINE_NESTING + 1}`]);
  assert.equal(job.error, tooDeep);
});

void test("a line 100,000 levels deep fails its job the same way, and the sandbox runs the next job", async () => {
  const job = await failedRun(["breaker", "nested-100000"]);
  assert.equal(job.error, tooDeep);
  const next = await t.cli(["run", "breaker", "polite"]);
  assert.equal(next.code, 0, next.stdout + next.stderr);
});

/** How deep a JSON value nests objects and arrays. */
function depthOf(value: unknown): number {
  if (value === null || typeof value !== "object") return 0;
  return 1 + Math.max(0, ...Object.values(value as Record<string, unknown>).map(depthOf));
}

void test(`a line exactly ${MAX_LINE_NESTING} levels deep goes through: the job, its watchers and the events service carry it whole`, async () => {
  const run = await t.cli(["run", "breaker", `nested-${MAX_LINE_NESTING}`]);
  assert.equal(run.code, 0, run.stdout + run.stderr);
  const job = await jobOf(run);
  assert.equal(job.resultText, "nested ok");
  // The event and the tool call are levels 1 and 2 of the line; the input holds the rest.
  const watched = await t.cli(["jobs", "watch", job.id, "--json"]);
  const call = watched.stdout
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as { toolCall?: { input?: unknown } })
    .find((e) => e.toolCall);
  assert.equal(depthOf(call?.toolCall?.input), MAX_LINE_NESTING - 2);
  const events = createClient(
    EventsService,
    createGrpcTransport({ baseUrl: t.stack.urls.events, interceptors: [bearerInterceptor(t.stack.ownerToken)] }),
  );
  const called = await eventually(async () => {
    for await (const r of events.watch({ jobId: job.id, untilCaughtUp: true }))
      if (r.event?.type === "tool.called") return r.event;
    return undefined;
  });
  assert.equal(called.attributes?.tool_name, "echo");
  const transcript = await events.transcript({ jobId: job.id });
  assert.ok(
    transcript.rows.some((r) => r.row.case === "event" && r.row.value.type === "tool.called"),
    "the transcript carries it too",
  );
});
