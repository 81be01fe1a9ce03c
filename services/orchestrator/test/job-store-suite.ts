// The JobStore contract as a reusable suite: every store implementation
// (SQLite now, PostgreSQL next) runs exactly these tests through its factory.
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { rawAttributes, rawEvent } from "@oz0/events-client";
import { RawEventSchema } from "@oz0/proto/oz0/events/v1/events_pb";
import { JobEventSchema, JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { JobRecord, JobStore, NewAgentVersion, PermissionRecord } from "../src/store/job-store.js";
import { claimedEvents } from "./support/claimed-events.js";

export type StoreFactory = () => Promise<{ store: JobStore; cleanup?: () => Promise<void> }>;

function agent(name: string, hash: string): NewAgentVersion {
  return {
    name,
    contentHash: hash,
    plugin: "example",
    pluginVersion: "0.1.0",
    pluginPath: "/plugins/example/abc",
    definition: {
      name,
      runtime: "harness:fake",
      model: { primary: "anthropic/claude-sonnet-5-5" },
      instructions: "prompts/a.md",
    },
    instructions: `instructions ${hash}`,
    harness: { plugin: "example", pluginPath: "/plugins/example/abc", manifest: { name: "fake", command: ["fake"] } },
  };
}

export function job(id: string, overrides: Partial<JobRecord> = {}): JobRecord {
  const now = new Date();
  return {
    id,
    startedBy: "",
    agentName: "fixer",
    agentVersion: 1,
    input: "fix it",
    state: "pending",
    createdAt: now,
    updatedAt: now,
    resultText: "",
    stopReason: 0,
    error: "",
    sessionId: `ses_${id}`,
    sandboxUrl: "http://127.0.0.1:1",
    ruleBroken: "",
    lastSeq: 0,
    sandboxSeq: 0,
    attachments: [],
    tokenId: "",
    servedTools: "",
    ...overrides,
  };
}

/** A permission request waiting for a person, as the job runner stores one. */
export function permission(jobId: string, id: string, overrides: Partial<PermissionRecord> = {}): PermissionRecord {
  return {
    jobId,
    id,
    callId: `call_${id}`,
    sessionId: `ses_${jobId}`,
    tool: "Bash",
    input: { command: "npm test" },
    title: "Run npm test",
    needsPerson: true,
    status: "pending",
    reason: "",
    answeredBy: "",
    requestedAt: new Date(),
    delivered: false,
    ...overrides,
  };
}

export function jobStoreSuite(name: string, factory: StoreFactory): void {
  const withStore = (title: string, fn: (store: JobStore) => Promise<void>): void => {
    void test(`${name}: ${title}`, async () => {
      const { store, cleanup } = await factory();
      try {
        await fn(store);
      } finally {
        await store.close();
        await cleanup?.();
      }
    });
  };

  withStore("publishing the same content keeps the version; a change publishes the next", async (store) => {
    const first = await store.publishAgentVersion(agent("fixer", "h1"));
    assert.equal(first.published, true);
    assert.equal(first.record.version, 1);
    const same = await store.publishAgentVersion(agent("fixer", "h1"));
    assert.equal(same.published, false);
    assert.equal(same.record.version, 1);
    const changed = await store.publishAgentVersion(agent("fixer", "h2"));
    assert.equal(changed.record.version, 2);
    assert.equal((await store.getAgentVersion("fixer"))?.version, 2);
    assert.equal((await store.getAgentVersion("fixer", 1))?.instructions, "instructions h1");
    assert.deepEqual(
      (await store.listAgentVersions("fixer")).map((v) => v.version),
      [1, 2],
    );
    await store.publishAgentVersion(agent("other", "h9"));
    assert.deepEqual(
      (await store.listAgents()).map((a) => `${a.name}@${a.version}`),
      ["fixer@2", "other@1"],
    );
    assert.equal(await store.getAgentVersion("missing"), undefined);
  });

  withStore("plugins are stored and replaced by name", async (store) => {
    const record = {
      name: "example",
      version: "0.1.0",
      description: "",
      source: "/src",
      path: "/p/1",
      manifest: { name: "example", version: "0.1.0" },
      installedAt: new Date(),
    };
    await store.putPlugin(record);
    await store.putPlugin({ ...record, version: "0.2.0", path: "/p/2" });
    const list = await store.listPlugins();
    assert.equal(list.length, 1);
    assert.equal(list[0]!.version, "0.2.0");
    assert.equal((await store.getPlugin("example"))?.path, "/p/2");
  });

  withStore(
    "a job created with its first events and lifecycle events stores them at once; a creation that fails stores none of them",
    async (store) => {
      const created = job("c1", { createdAt: new Date(5000), updatedAt: new Date(5000) });
      const stored = await store.createJob(created, {
        events: [create(JobEventSchema, { event: { case: "stateChanged", value: { state: JobState.PENDING } } })],
        lifecycle: [rawEvent("job.created", { jobId: "c1", status: "pending" })],
      });
      assert.deepEqual(
        stored.map((e) => [Number(e.seq), e.jobId, e.event.case]),
        [[1, "c1", "stateChanged"]],
      );
      assert.equal(stored[0]!.time?.seconds, 5n, "an event without a time is stamped with the job's creation");
      const row = await store.getJob("c1");
      assert.equal(row?.lastSeq, 1);
      assert.equal(row?.updatedAt.getTime(), 5000);
      assert.deepEqual(
        (await store.listJobEvents("c1", 0)).map((e) => Number(e.seq)),
        [1],
      );
      const next = await store.append({
        jobId: "c1",
        events: [create(JobEventSchema, { event: { case: "text", value: { text: "after" } } })],
      });
      assert.equal(Number(next[0]!.seq), 2, "appends number on from the first events");
      // The same id again: the insert fails, and the events and the lifecycle event that came with it go too.
      await assert.rejects(
        store.createJob(job("c1", { input: "second" }), {
          events: [create(JobEventSchema, { event: { case: "text", value: { text: "never" } } })],
          lifecycle: [rawEvent("job.failed", { jobId: "c1" })],
        }),
      );
      assert.equal((await store.getJob("c1"))?.input, "fix it");
      assert.deepEqual(
        (await store.listJobEvents("c1", 0)).map((e) => e.event.case),
        ["stateChanged", "text"],
      );
      assert.deepEqual(
        claimedEvents(await store.claimLifecycleEvents({ limit: 10, claimMs: 60_000 })).map((c) => c.event.type),
        ["job.created"],
      );
    },
  );

  withStore(
    "one step of 20,000 events and 70,000 lifecycle events stores them all, numbered in order",
    async (store) => {
      // A burst a re-attach replays after a long outage can be this long. As one INSERT it passed the database's
      // cap on a statement's parameters (PostgreSQL 65,535, four a row), and the step failed at every delivery.
      await store.createJob(job("big"));
      const texts = Array.from({ length: 20_000 }, (_, i) =>
        create(JobEventSchema, { event: { case: "text", value: { text: `line ${i}` } } }),
      );
      const lifecycle = Array.from({ length: 70_000 }, (_, i) =>
        rawEvent("tool.called", { jobId: "big", toolCallId: `c${i}` }),
      );
      const stored = await store.append({ jobId: "big", events: texts, job: { sandboxSeq: 20_000 }, lifecycle });
      assert.equal(stored.length, 20_000);
      assert.equal(Number(stored.at(-1)!.seq), 20_000);
      const j = await store.getJob("big");
      assert.equal(j?.lastSeq, 20_000);
      assert.equal(j?.sandboxSeq, 20_000);
      let read = 0;
      for (let after = 0; ;) {
        const page = await store.listJobEvents("big", after);
        if (page.length === 0) break;
        for (const e of page) {
          assert.equal(Number(e.seq), ++read);
          assert.equal(e.event.case === "text" && e.event.value.text, `line ${read - 1}`);
        }
        after = Number(page.at(-1)!.seq);
      }
      assert.equal(read, 20_000);
    },
  );

  withStore("events get gap-free sequence numbers, with the job patch in the same step", async (store) => {
    await store.createJob(job("j1"));
    const stored = await store.append({
      jobId: "j1",
      events: [
        create(JobEventSchema, { event: { case: "stateChanged", value: { state: JobState.RUNNING } } }),
        create(JobEventSchema, { event: { case: "text", value: { text: "hello" } } }),
      ],
      job: { state: "running", sandboxSeq: 7 },
    });
    assert.deepEqual(
      stored.map((e) => Number(e.seq)),
      [1, 2],
    );
    const more = await store.append({
      jobId: "j1",
      events: [create(JobEventSchema, { event: { case: "text", value: { text: "again" } } })],
    });
    assert.equal(Number(more[0]!.seq), 3);
    const j = await store.getJob("j1");
    assert.equal(j?.state, "running");
    assert.equal(j?.sandboxSeq, 7);
    assert.equal(j?.lastSeq, 3);
    const after1 = await store.listJobEvents("j1", 1);
    assert.deepEqual(
      after1.map((e) => Number(e.seq)),
      [2, 3],
    );
    assert.equal(after1[0]!.event.case, "text");
    assert.equal(after1[0]!.jobId, "j1");
  });

  withStore("a job keeps the runtime tools the orchestrator serves it, and their recorded answers", async (store) => {
    // Whichever replica runs the job next serves them from this record alone.
    await store.createJob(job("m1", { servedTools: "graph-manager" }));
    await store.createJob(job("p1"));
    await store.append({
      jobId: "m1",
      events: [
        create(JobEventSchema, {
          event: {
            case: "servedToolCall",
            value: { callId: "c1", tool: "abort", input: { reason: "stop" }, error: "" },
          },
        }),
      ],
    });
    assert.equal((await store.getJob("m1"))?.servedTools, "graph-manager");
    assert.equal((await store.getJob("p1"))?.servedTools, "");
    const [recorded] = await store.listJobEvents("m1", 0);
    assert.equal(recorded?.event.case, "servedToolCall");
    assert.deepEqual(recorded?.event.case === "servedToolCall" ? recorded.event.value.input : undefined, {
      reason: "stop",
    });
  });

  withStore("a job keeps when it started (to the millisecond) and its trace id", async (store) => {
    await store.createJob(job("t1"));
    await store.createJob(
      job("g1", {
        state: "running",
        startedAt: new Date(1_700_000_000_123),
        traceId: "0af7651916cd43dd8448eb211c80319c",
      }),
    );
    const pending = await store.getJob("t1");
    assert.equal(pending?.startedAt, undefined);
    assert.equal(pending?.traceId ?? "", "");
    await store.append({
      jobId: "t1",
      events: [],
      job: { state: "running", startedAt: new Date(1_700_000_000_456), traceId: "4bf92f3577b34da6a3ce929d0e0e4736" },
    });
    const started = await store.getJob("t1");
    assert.equal(started?.startedAt?.getTime(), 1_700_000_000_456);
    assert.equal(started?.traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
    const graph = (await store.listJobs({ limit: 10 })).find((j) => j.id === "g1");
    assert.equal(graph?.startedAt?.getTime(), 1_700_000_000_123);
    assert.equal(graph?.traceId, "0af7651916cd43dd8448eb211c80319c");
  });

  withStore(
    "a job keeps its root span's traceparent, for whichever replica resumes it; older jobs have none",
    async (store) => {
      const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
      await store.createJob(job("r1"));
      assert.equal((await store.getJob("r1"))?.traceparent, undefined, "a job stored without one has none");
      await store.append({
        jobId: "r1",
        events: [],
        job: { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", traceparent },
      });
      assert.equal((await store.getJob("r1"))?.traceparent, traceparent);
      await store.createJob(job("r2", { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00" }));
      const listed = (await store.listJobs({ limit: 10 })).find((j) => j.id === "r2");
      assert.equal(listed?.traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");
    },
  );

  withStore("jobs list newest first, filter by state, agent and text, and page after a job", async (store) => {
    await store.createJob(job("a", { createdAt: new Date(1000) }));
    await store.createJob(job("b", { createdAt: new Date(2000), state: "succeeded" }));
    await store.createJob(job("c", { createdAt: new Date(3000), agentName: "other" }));
    assert.deepEqual(
      (await store.listJobs()).map((j) => j.id),
      ["c", "b", "a"],
    );
    assert.deepEqual(
      (await store.listJobs({ state: "pending" })).map((j) => j.id),
      ["c", "a"],
    );
    assert.deepEqual(
      (await store.listJobs({ agent: "fixer" })).map((j) => j.id),
      ["b", "a"],
    );
    assert.deepEqual(
      (await store.listJobs({ limit: 1 })).map((j) => j.id),
      ["c"],
    );
    // Pages: the jobs after a given one, in the same order; ties of creation time in insertion order.
    await store.createJob(job("d", { createdAt: new Date(3000), input: "Fix the 100% case_1" }));
    assert.deepEqual(
      (await store.listJobs()).map((j) => j.id),
      ["d", "c", "b", "a"],
    );
    assert.deepEqual(
      (await store.listJobs({ after: "d", limit: 2 })).map((j) => j.id),
      ["c", "b"],
    );
    assert.deepEqual(
      (await store.listJobs({ after: "c" })).map((j) => j.id),
      ["b", "a"],
    );
    assert.deepEqual(
      (await store.listJobs({ after: "b", state: "pending" })).map((j) => j.id),
      ["a"],
    );
    // Text: a job id, or words of the input in any case; % and _ are themselves.
    assert.deepEqual(
      (await store.listJobs({ text: "b" })).map((j) => j.id),
      ["b"],
    );
    assert.deepEqual(
      (await store.listJobs({ text: "FIX" })).map((j) => j.id),
      ["d", "c", "b", "a"],
    );
    assert.deepEqual(
      (await store.listJobs({ text: "100% case_1" })).map((j) => j.id),
      ["d"],
    );
    assert.deepEqual(
      (await store.listJobs({ text: "1_0" })).map((j) => j.id),
      [],
    );
    assert.deepEqual(
      (await store.listJobs({ text: "fix", agent: "other" })).map((j) => j.id),
      ["c"],
    );
    const updated = await store.updateJob("a", {
      state: "failed",
      error: "boom",
      finishedAt: new Date(5000),
      cancelRequestedAt: new Date(4000),
    });
    assert.equal(updated.error, "boom");
    assert.equal(updated.finishedAt?.getTime(), 5000);
    assert.equal(updated.cancelRequestedAt?.getTime(), 4000);
    await assert.rejects(store.updateJob("missing", { state: "failed" }), /not found/);
  });

  withStore("permissions are durable records: pending, answered, delivered", async (store) => {
    await store.createJob(job("j1"));
    await store.append({
      jobId: "j1",
      events: [],
      permissions: [
        permission("j1", "p1"),
        permission("j1", "p2", { needsPerson: false, status: "approved", decider: "policy" }),
      ],
    });
    assert.deepEqual(
      (await store.listPermissions({ approvalsOnly: true, pendingOnly: true })).map((p) => p.id),
      ["p1"],
    );
    const p1 = await store.getPermission("j1", "p1");
    assert.deepEqual(p1?.input, { command: "npm test" });
    assert.equal((await store.getPermission("j1", "call_p1"))?.id, "p1", "found by its tool call id too");
    await store.append({
      jobId: "j1",
      events: [],
      permissions: [
        {
          ...p1!,
          status: "approved",
          decider: "person",
          answeredBy: "ann",
          answerInput: { command: "npm test -- --x" },
          answeredAt: new Date(),
        },
      ],
    });
    assert.deepEqual((await store.listPermissions({ jobId: "j1", undeliveredOnly: true })).map((p) => p.id).sort(), [
      "p1",
      "p2",
    ]);
    await store.markPermissionDelivered("j1", "p1");
    assert.deepEqual(
      (await store.listPermissions({ jobId: "j1", undeliveredOnly: true })).map((p) => p.id),
      ["p2"],
    );
    const answered = await store.getPermission("j1", "p1");
    assert.equal(answered?.status, "approved");
    assert.equal(answered?.answeredBy, "ann");
    assert.deepEqual(answered?.answerInput, { command: "npm test -- --x" });
    assert.equal(answered?.delivered, true);
  });

  withStore(
    "permissions list a page at a time: at most `limit`, then those after a given one, in request order",
    async (store) => {
      await store.createJob(job("j1"));
      await store.createJob(job("j2"));
      const at = new Date(5000);
      // Three requested in one millisecond: insertion order breaks the tie, across jobs.
      await store.append({ jobId: "j1", events: [], permissions: [permission("j1", "b", { requestedAt: at })] });
      await store.append({ jobId: "j2", events: [], permissions: [permission("j2", "a", { requestedAt: at })] });
      await store.append({
        jobId: "j1",
        events: [],
        permissions: [
          permission("j1", "c", { requestedAt: at }),
          permission("j1", "first", { requestedAt: new Date(1000) }),
          permission("j1", "last", {
            requestedAt: new Date(9000),
            answerInput: { command: "npm test --silent" },
            inputChangedBy: "hook quiet-tests (agent fixer)",
          }),
        ],
      });
      const ids = (list: PermissionRecord[]): string[] => list.map((p) => `${p.jobId}/${p.id}`);
      assert.deepEqual(ids(await store.listPermissions({ approvalsOnly: true, limit: 2 })), ["j1/first", "j1/b"]);
      assert.deepEqual(ids(await store.listPermissions({ approvalsOnly: true, after: { jobId: "j1", id: "b" } })), [
        "j2/a",
        "j1/c",
        "j1/last",
      ]);
      assert.deepEqual(
        ids(await store.listPermissions({ approvalsOnly: true, after: { jobId: "j2", id: "a" }, limit: 1 })),
        ["j1/c"],
      );
      const last = await store.getPermission("j1", "last");
      assert.equal(last?.inputChangedBy, "hook quiet-tests (agent fixer)", "who changed the input is kept");
      assert.equal((await store.getPermission("j1", "c"))?.inputChangedBy, undefined);
    },
  );

  withStore("an approved permission allows one runtime call, once, whoever asks and however often", async (store) => {
    await store.createJob(job("j1"));
    await store.append({
      jobId: "j1",
      events: [],
      permissions: [permission("j1", "p1", { status: "approved", decider: "policy" }), permission("j1", "p2")],
    });
    assert.equal(await store.usePermissionForRuntimeCall("j1", "p2", "rt1"), false, "a pending one allows nothing");
    // Two calls race for it (two replicas, or a process before and after a restart): one has it.
    const [a, b] = await Promise.all([
      store.usePermissionForRuntimeCall("j1", "p1", "rt1"),
      store.usePermissionForRuntimeCall("j1", "p1", "rt2"),
    ]);
    assert.deepEqual([a, b].sort(), [false, true]);
    const winner = a ? "rt1" : "rt2";
    assert.equal(await store.usePermissionForRuntimeCall("j1", "p1", winner), true, "the same call, replayed, again");
    assert.equal(await store.usePermissionForRuntimeCall("j1", "p1", "rt3"), false);
    assert.equal((await store.getPermission("j1", "p1"))?.runtimeCall, winner);
    // A later write of the record (its delivery, a re-upsert) keeps which call used it.
    const p1 = (await store.getPermission("j1", "p1"))!;
    await store.append({ jobId: "j1", events: [], permissions: [{ ...p1, runtimeCall: undefined, delivered: true }] });
    assert.equal((await store.getPermission("j1", "p1"))?.runtimeCall, winner);
    assert.equal(await store.usePermissionForRuntimeCall("j2", "p1", "rt1"), false, "another job's has none");
  });

  withStore(
    "a session token is kept until forgotten, and due for revoke once its job ended or its revoke failed",
    async (store) => {
      // Each check claims nothing for long: a claim that has run out (claimMs < 0) leaves the token to the next.
      const due = async (limit = 10): Promise<string[]> =>
        (await store.claimSessionTokensToRevoke({ limit, claimMs: -1000 })).sort();
      await store.createJob(job("j1"));
      await store.createJob(job("j2"));
      await store.recordSessionToken("s1", "j1");
      await store.recordSessionToken("s2", "j2");
      assert.deepEqual(await due(), [], "tokens of running jobs are not due");
      await store.markSessionTokenRevokeAsked("s2");
      await store.markSessionTokenRevokeAsked("s3");
      assert.deepEqual(await due(), ["s2", "s3"], "failed revokes, known or not");
      await store.updateJob("j1", { state: "succeeded", finishedAt: new Date() });
      assert.deepEqual(await due(), ["s1", "s2", "s3"], "a token of an ended job");
      assert.equal((await due(2)).length, 2, "at most the limit");
      // The same session minted again (a job started again under its session id) is kept for the new token.
      await store.recordSessionToken("s2", "j2");
      await store.forgetSessionToken("s1");
      await store.forgetSessionToken("s3");
      assert.deepEqual(await due(), []);
    },
  );

  withStore(
    "a due session token is claimed by one sweep at a time, until it is released or the claim runs out",
    async (store) => {
      await store.createJob(job("j1", { state: "succeeded", finishedAt: new Date() }));
      for (const token of ["s1", "s2", "s3"]) await store.recordSessionToken(token, "j1");
      const claim = (limit: number) => store.claimSessionTokensToRevoke({ limit, claimMs: 60_000 });
      const first = await claim(2);
      const second = await claim(10);
      assert.equal(first.length, 2);
      assert.deepEqual([...first, ...second].sort(), ["s1", "s2", "s3"], "two sweeps at once share the tokens");
      assert.deepEqual(await claim(10), [], "claimed tokens are no other sweep's");
      await store.releaseSessionTokens([first[0]!]);
      assert.deepEqual(await claim(10), [first[0]], "a released token is the next sweep's");
      // A sweep that died: its claim runs out by itself.
      await store.releaseSessionTokens(["s1", "s2", "s3"]);
      await store.claimSessionTokensToRevoke({ limit: 10, claimMs: -1000 });
      assert.equal((await claim(10)).length, 3, "a claim that ran out holds nothing");
      // A token minted again for its session is not left claimed by a sweep of the old one.
      await store.createJob(job("j2"));
      await store.recordSessionToken("s1", "j2");
      await store.markSessionTokenRevokeAsked("s1");
      assert.deepEqual(await claim(10), ["s1"]);
    },
  );

  withStore(
    "a session's stderr is kept with the seq that passes it, once per sandbox seq, at most maxBytes of it, the rest counted",
    async (store) => {
      await store.createJob(job("j1"));
      const piece = (sessionId: string, seq: number, text: string, droppedBytes = 0, maxBytes = 10) =>
        store.append({
          jobId: "j1",
          events: [],
          job: { sandboxSeq: seq },
          stderr: { sessionId, piece: { seq, text, droppedBytes }, maxBytes },
        });
      const text = async (sessionId: string): Promise<string> =>
        (await store.listStderrPieces("j1", sessionId, 0)).map((p) => p.text).join("");
      await piece("s1", 2, "abcd");
      await piece("s2", 3, "other");
      await piece("s1", 4, "efgh");
      assert.equal((await store.getJob("j1"))?.sandboxSeq, 4, "in the same step as the job's patch");
      // A re-attach delivers pieces again: each is stored once.
      await piece("s1", 2, "abcd");
      await piece("s1", 4, "efgh");
      assert.equal(await text("s1"), "abcdefgh");
      // Past 10 bytes, the oldest pieces go and are counted.
      await piece("s1", 6, "ijk");
      assert.equal(await text("s1"), "efghijk");
      // The sandbox dropped a piece whole (a later attach got its size only), then a piece it cut: both counted where they were.
      await piece("s1", 7, "", 100);
      await piece("s1", 8, "lm", 5);
      assert.deepEqual(await store.listStderrPieces("j1", "s1", 4), [
        { seq: 6, text: "ijk", droppedBytes: 0 },
        { seq: 8, text: "lm", droppedBytes: 105 },
      ]);
      // A piece larger than the whole allowance keeps its end (the oldest pieces all go for it).
      await piece("s1", 9, "nopqrstuvwxyzé");
      assert.deepEqual(await store.listStderrPieces("j1", "s1", 0), [{ seq: 9, text: "stuvwxyzé", droppedBytes: 5 }]);
      await piece("s1", 10, "", 7);
      assert.deepEqual(await store.listStderrSessions("j1"), [
        { sessionId: "s1", keptBytes: 10, droppedBytes: 4 + 4 + 3 + (105 + 2), trailingDroppedBytes: 7 },
        { sessionId: "s2", keptBytes: 5, droppedBytes: 0, trailingDroppedBytes: 0 },
      ]);
      // Never half a character: the last 2 bytes of "abéx" start inside "é", so only "x" is kept.
      await piece("s3", 1, "abéx", 0, 2);
      assert.deepEqual(await store.listStderrPieces("j1", "s3", 0), [{ seq: 1, text: "x", droppedBytes: 4 }]);
      await piece("s3", 2, "xyz", 0, 2);
      assert.deepEqual(await store.listStderrPieces("j1", "s3", 0), [{ seq: 2, text: "yz", droppedBytes: 1 }]);
      assert.deepEqual(
        (await store.listStderrSessions("j1")).find((s) => s.sessionId === "s3"),
        { sessionId: "s3", keptBytes: 2, droppedBytes: 5, trailingDroppedBytes: 0 },
      );
      assert.deepEqual(await store.listStderrSessions("j_none"), []);
    },
  );

  withStore(
    "lifecycle events are kept with their change, claimed oldest first, held from others while claimed, gone once delivered",
    async (store) => {
      await store.createJob(job("j1"));
      const created = rawEvent("job.created", { jobId: "j1", attributes: { plugin: "example" } });
      await store.append({
        jobId: "j1",
        events: [create(JobEventSchema, { event: { case: "text", value: { text: "hi" } } })],
        lifecycle: [created],
      });
      await store.putLifecycleEvents([rawEvent("graph.step_started", { jobId: "j1" })]);
      await assert.rejects(
        store.append({ jobId: "missing", events: [], lifecycle: [rawEvent("job.failed", { jobId: "missing" })] }),
        /not found/,
      );

      const claimed = claimedEvents(await store.claimLifecycleEvents({ limit: 10, claimMs: 60_000 }));
      assert.deepEqual(
        claimed.map((c) => c.event.type),
        ["job.created", "graph.step_started"],
        "in the order kept; nothing from the failed append",
      );
      assert.equal(claimed[0]!.event.id, created.id);
      assert.deepEqual(rawAttributes(claimed[0]!.event), { plugin: "example" });
      assert.deepEqual(
        claimedEvents(await store.claimLifecycleEvents({ limit: 10, claimMs: 60_000 })),
        [],
        "claimed: held from every other shipper",
      );
      await store.deleteLifecycleEvents([claimed[0]!.seq]);
      // A send that failed gives its claim back at once.
      await store.releaseLifecycleEvents([claimed[1]!.seq]);
      const released = claimedEvents(await store.claimLifecycleEvents({ limit: 10, claimMs: 60_000 }));
      assert.deepEqual(
        released.map((c) => c.seq),
        [claimed[1]!.seq],
        "given back, and claimed again; the delivered one is gone",
      );
      // Delivered: while it was claimed, a later event of its job waited (PostgreSQL's claim, where replicas ship at once).
      await store.deleteLifecycleEvents([claimed[1]!.seq]);

      // A claim that runs out (its shipper died) lets the events go to the next claim.
      await store.putLifecycleEvents([rawEvent("tool.called", { jobId: "j1" })]);
      assert.deepEqual(
        claimedEvents(await store.claimLifecycleEvents({ limit: 10, claimMs: 1 })).map((c) => c.event.type),
        ["tool.called"],
      );
      await new Promise((resolve) => setTimeout(resolve, 50));
      const again = claimedEvents(await store.claimLifecycleEvents({ limit: 10, claimMs: 60_000 }));
      assert.deepEqual(
        again.map((c) => c.event.type),
        ["tool.called"],
      );
      await store.deleteLifecycleEvents([again[0]!.seq]);
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.deepEqual(
        claimedEvents(await store.claimLifecycleEvents({ limit: 10, claimMs: 1 })),
        [],
        "delivered: gone",
      );
    },
  );

  withStore(
    "a stored lifecycle event that no longer reads is claimed as unreadable, alone: the events claimed with it read",
    async (store) => {
      // A count past its uint32 field: written as JSON, it never decodes again (rawEvent now saturates counts;
      // a row from before, or from another producer, may still hold one).
      const unreadable = create(RawEventSchema, {
        id: "e-bad",
        type: "harness.operation_completed",
        jobId: "attacker",
        tokens: { inputTokens: 2 ** 32 },
      });
      await store.putLifecycleEvents([
        rawEvent("job.created", { jobId: "victim" }),
        unreadable,
        rawEvent("job.completed", { jobId: "victim" }),
      ]);
      const claimed = await store.claimLifecycleEvents({ limit: 10, claimMs: 60_000 });
      assert.deepEqual(
        claimed.map((c) => ("event" in c ? c.event.type : "unreadable")),
        ["job.created", "unreadable", "job.completed"],
      );
      const bad = claimed[1]!;
      assert.ok("unreadable" in bad && /out of range/.test(bad.unreadable), JSON.stringify(bad));
      await store.deleteLifecycleEvents(claimed.map((c) => c.seq));
    },
  );
}
