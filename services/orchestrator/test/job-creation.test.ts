// Creating a job and starting its session, with a real SQLite store and the
// orchestrator's tracing, a sandbox and an LLM proxy faked in process:
// - a job is stored with its first event and its `job.created` event in one
//   transaction, or not at all: a creation that fails leaves no job, no
//   lifecycle event, no lease and no open span (its span ends as an error),
//   and a job already known under the same id stays known;
// - the session's token is stored with the session's node, and a job
//   cancelled while its token was minted never starts its session and has
//   the token revoked (the cancel found no token to revoke).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { SpanStatusCode } from "@opentelemetry/api";
import { createLogger, startInMemoryTelemetry, type InMemoryTelemetry } from "@oz0/serving";
import type { JobOwnership } from "../src/cluster/job-ownership.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import { JobRunner } from "../src/jobs/job-runner.js";
import { HookStage } from "../src/policy/hook-stage.js";
import { PermissionPolicy } from "../src/policy/permission-policy.js";
import { StaticPlacement, type SandboxPlacement } from "../src/sessions/sandbox-placement.js";
import type { LifecycleSink, SessionRunner, StartSessionOptions, TokenIssuer } from "../src/sessions/session-runner.js";
import { isTerminal } from "../src/store/job-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { rawEvent } from "@oz0/events-client";
import { JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { OrchestratorTracing } from "../src/tracing.js";
import { eventually } from "./support/eventually.js";
import { claimedEvents } from "./support/claimed-events.js";

let telemetry: InMemoryTelemetry;
let home: string;
let store: SqliteJobStore;

before(async () => {
  telemetry = startInMemoryTelemetry({ serviceName: "oz0-orchestrator" });
  home = mkdtempSync(path.join(os.tmpdir(), "oz0-job-creation-"));
  store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  await store.publishAgentVersion({
    name: "coder",
    contentHash: "h1",
    plugin: "example",
    pluginVersion: "0.1.0",
    pluginPath: home,
    definition: { name: "coder", runtime: "harness:fake", model: { primary: "anthropic/m" }, instructions: "i.md" },
    instructions: "do it",
    harness: { plugin: "example", pluginPath: home, manifest: { name: "fake", command: ["fake"] } },
  });
});

after(async () => {
  await store?.close();
  rmSync(home, { recursive: true, force: true });
  await telemetry?.shutdown();
});

/** A sandbox that records the sessions it is asked to start and sends them nothing. */
function silentSandbox(): SessionRunner & { started: StartSessionOptions[] } {
  const started: StartSessionOptions[] = [];
  return {
    url: "http://sandbox.test",
    started,
    start(options) {
      started.push(options);
      let close: () => void = () => undefined;
      const closed = new Promise<void>((resolve) => (close = resolve));
      return {
        // Silent until closed (the runner's close), then ended.
        // eslint-disable-next-line require-yield
        async *[Symbol.asyncIterator]() {
          await closed;
        },
        answerPermission: async () => {},
        answerRuntimeTool: async () => {},
        close: () => close(),
      };
    },
    reattach: () => {
      throw new Error("not used");
    },
    cancel: async () => {},
  };
}

/** Tokens whose minting waits for `release()`; records what was revoked. */
function gatedTokens(): TokenIssuer & { release(): void; minted: string[]; revoked: string[] } {
  let open: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => (open = resolve));
  const minted: string[] = [];
  const revoked: string[] = [];
  return {
    minted,
    revoked,
    release: () => open(),
    mint: async (options) => {
      await gate;
      const tokenId = `tok_${options.jobId}`;
      minted.push(tokenId);
      return { token: "secret", tokenId, anthropicBaseUrl: "", openaiBaseUrl: "", headers: {} };
    },
    revoke: async ({ tokenId }) => {
      revoked.push(tokenId);
      return { neverUsed: true };
    },
  };
}

function recordingOwnership(): JobOwnership & { released: string[] } {
  const released: string[] = [];
  return {
    released,
    claim: async () => undefined,
    owns: () => true,
    release: async (jobId) => {
      released.push(jobId);
    },
    working: (_jobId, work) => work(),
  };
}

/** Every node full, always: a job placed here waits for room. */
const fullPlacement: SandboxPlacement = {
  tracksNodes: true,
  place: () => Promise.resolve(undefined),
  runnerForSession: () => Promise.reject(new Error("no session is ever placed here")),
  release: () => Promise.resolve(),
  lostSessions: () => Promise.resolve([]),
  lostSession: () => Promise.resolve(undefined),
};

function runnerWith(o: {
  tokens: TokenIssuer;
  sandbox: SessionRunner;
  lifecycle: LifecycleSink;
  ownership: JobOwnership;
  placement?: SandboxPlacement;
}) {
  return new JobRunner({
    store,
    feed: new JobFeed(),
    placement: o.placement ?? new StaticPlacement({ runners: [o.sandbox] }),
    tokens: o.tokens,
    policy: new PermissionPolicy({ hooks: [new HookStage()] }),
    lifecycle: o.lifecycle,
    ownership: o.ownership,
    home,
    logger: createLogger({ name: "job-creation-test", level: "fatal" }),
  });
}

/** A sink that keeps nothing itself: the events go into the store's outbox with their change. */
const bareSink: LifecycleSink = {
  event: (type, init) => rawEvent(type, { source: "orchestrator", ...init }),
  committed: () => undefined,
  publish: () => undefined,
  close: async () => {},
};

async function drainOutbox(): Promise<string[]> {
  const claimed = claimedEvents(await store.claimLifecycleEvents({ limit: 100, claimMs: 60_000 }));
  await store.deleteLifecycleEvents(claimed.map((c) => c.seq));
  return claimed.map((c) => `${c.event.type} ${c.event.jobId}`);
}

void test("a job whose creation fails leaves no job, no lifecycle event, no lease and no open span", async () => {
  telemetry.reset();
  await drainOutbox();
  const tracing = new OrchestratorTracing();
  const lifecycle = tracing.lifecycleSink(bareSink);
  const ownership = recordingOwnership();
  const tokens = gatedTokens();
  const runner = runnerWith({ tokens, sandbox: silentSandbox(), lifecycle, ownership });
  try {
    const first = await runner.runAgent({ agent: "coder", input: "first", id: "job_taken" });
    // The same id again: the job's insert fails, and everything its transaction held goes with it.
    await assert.rejects(runner.runAgent({ agent: "coder", input: "second", id: "job_taken" }));
    assert.equal((await store.getJob("job_taken"))?.input, "first");
    assert.equal((await store.listJobEvents("job_taken", 0)).length, 1, "only the first creation's event");
    assert.deepEqual(await drainOutbox(), ["job.created job_taken"], "one job.created: the first's");
    assert.deepEqual(ownership.released, ["job_taken"], "the failed creation gave its lease back");
    const spans = telemetry.spans().filter((s) => s.name === "invoke_agent coder");
    assert.equal(spans.length, 1, "the failed creation's span ended (the first job's still runs)");
    assert.equal(spans[0]!.status.code, SpanStatusCode.ERROR);
    assert.equal(spans[0]!.attributes["error.type"], "job_not_created");
    assert.notEqual(
      spans[0]!.spanContext().traceId,
      first.traceparent?.split("-")[1],
      "the first job's trace is not the one ended",
    );
    // The first job, which runs on, is still known under its id: its span, and the traceparent calls about it link.
    assert.equal(lifecycle.traceparentOf?.("job_taken"), first.traceparent);
  } finally {
    tokens.release();
    await runner.close();
  }
});

void test("a job is stored with its first event and job.created; its token is stored with its node", async () => {
  await drainOutbox();
  const tokens = gatedTokens();
  tokens.release();
  const sandbox = silentSandbox();
  const runner = runnerWith({ tokens, sandbox, lifecycle: bareSink, ownership: recordingOwnership() });
  try {
    const job = await runner.runAgent({ agent: "coder", input: "go" });
    assert.equal(job.lastSeq, 1);
    assert.deepEqual(
      (await store.listJobEvents(job.id, 0)).map((e) => [Number(e.seq), e.event.case]),
      [[1, "stateChanged"]],
    );
    assert.deepEqual(await drainOutbox(), [`job.created ${job.id}`]);
    await eventually(async () => (sandbox.started.length === 1 ? true : undefined));
    const stored = await store.getJob(job.id);
    assert.equal(stored?.tokenId, `tok_${job.id}`);
    assert.equal(stored?.sandboxUrl, sandbox.url);
  } finally {
    await runner.close();
  }
});

/** Starts a job, cancels it while its token is minted, lets the mint finish and waits for that token's revocation. */
async function cancelledWhileMinting(
  runner: JobRunner,
  tokens: ReturnType<typeof gatedTokens>,
): Promise<{ id: string }> {
  const job = await runner.runAgent({ agent: "coder", input: "go" });
  const cancelled = await runner.cancel({ jobId: job.id, reason: "changed my mind" });
  assert.equal(cancelled.state, "cancelled");
  tokens.release();
  await eventually(async () => (tokens.revoked.includes(`tok_${job.id}`) ? true : undefined));
  return job;
}

void test("a job cancelled while its token is minted never starts its session, and the token is revoked", async () => {
  const tokens = gatedTokens();
  const sandbox = silentSandbox();
  const runner = runnerWith({ tokens, sandbox, lifecycle: bareSink, ownership: recordingOwnership() });
  try {
    const job = await cancelledWhileMinting(runner, tokens);
    assert.deepEqual(tokens.minted, [`tok_${job.id}`]);
    assert.equal(sandbox.started.length, 0, "no session started for a cancelled job");
    const stored = await store.getJob(job.id);
    assert.ok(stored && isTerminal(stored.state));
    assert.equal(stored.state, "cancelled");
  } finally {
    await runner.close();
  }
});

void test("a job cancelled while its token is minted and every node is full has the token revoked, and its transcript ends with its end", async () => {
  const tokens = gatedTokens();
  const sandbox = silentSandbox();
  const runner = runnerWith({
    tokens,
    sandbox,
    lifecycle: bareSink,
    ownership: recordingOwnership(),
    placement: fullPlacement,
  });
  try {
    // The wait for room is where the minted token is stored: the job has ended by then, so it is revoked there.
    const job = await cancelledWhileMinting(runner, tokens);
    assert.equal(sandbox.started.length, 0);
    const events = await store.listJobEvents(job.id, 0, 100);
    const last = events.at(-1);
    assert.equal(last?.event.case, "stateChanged");
    assert.equal(last?.event.case === "stateChanged" ? last.event.value.state : undefined, JobState.CANCELLED);
  } finally {
    await runner.close();
  }
});
