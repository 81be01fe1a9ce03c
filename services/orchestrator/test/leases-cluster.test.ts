// needs: postgres
// Three orchestrator replicas on one PostgreSQL schema, at the level of
// their shared state: one dies holding jobs and a graph run, the other two
// sweep at once and each orphaned resource is resumed by exactly one of them;
// the dead replica's late writes are refused, but an answer taken at a
// replica that lost the lease before it noticed still lands; an approval
// answered at one replica reaches the replica owning the job, and so does a
// cancel.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { JobEventSchema } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { ApprovalAnswered } from "../src/cluster/cluster-notifier.js";
import { createLogger } from "@oz0/serving";
import { HookStage } from "../src/policy/hook-stage.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import { JobRunner } from "../src/jobs/job-runner.js";
import { asBystander } from "../src/cluster/job-ownership.js";
import { LeaseLostError, type Lease, type LeaseFence } from "../src/cluster/lease-manager.js";
import { PermissionPolicy } from "../src/policy/permission-policy.js";
import { openPostgresCluster, type PostgresCluster } from "../src/cluster/postgres-cluster.js";
import { SandboxClient } from "../src/sessions/sandbox-client.js";
import { StaticPlacement } from "../src/sessions/sandbox-placement.js";
import { permission } from "./job-store-suite.js";
import { databaseUrl, dropSchema, eventually, freshSchema, jobRecord } from "./postgres-test-support.js";

const connectionString = databaseUrl();
const schema = freshSchema();
const job = (id: string) => jobRecord(id, { state: "running" });

interface Replica {
  cluster: PostgresCluster;
  resumed: Lease[];
  answers: ApprovalAnswered[];
  /** Jobs this replica owns that were cancelled (at any replica). */
  cancels: string[];
}

void describe("orchestrator replicas sharing PostgreSQL", () => {
  const replicas: Replica[] = [];
  after(async () => {
    await Promise.all(replicas.map((r) => r.cluster.close()));
    await dropSchema(schema);
  });

  async function replica(id: string, leaseTtlMs: number, options: { failTakeOvers?: number } = {}): Promise<Replica> {
    let failures = options.failTakeOvers ?? 0;
    const resumed: Lease[] = [];
    const answers: ApprovalAnswered[] = [];
    const cancels: string[] = [];
    // Sweeping is driven by the test (sweepOnce) so the race between survivors is explicit.
    const cluster = await openPostgresCluster({
      connectionString,
      schema,
      replicaId: id,
      maxConnections: 4,
      leaseTtlMs,
      sweepIntervalMs: 3_600_000,
    });
    await cluster.start({
      onTakeOver: async (lease) => {
        // As a resume that hits a database error would.
        if (failures > 0 && failures--) throw new Error("the database blinked while resuming");
        resumed.push(lease);
      },
      onLeaseLost: () => undefined,
      onApprovalAnswered: (answer) => {
        // Only the owner acts on an answer; the others hear it and ignore it.
        if (cluster.jobs.owns(answer.jobId)) answers.push(answer);
      },
      onCancelRequested: (cancel) => {
        if (cluster.jobs.owns(cancel.jobId)) cancels.push(cancel.jobId);
      },
    });
    const r = { cluster, resumed, answers, cancels };
    replicas.push(r);
    return r;
  }

  void it("resumes a dead replica's jobs (a graph job among them) exactly once between the survivors, and refuses the dead one's late writes", async () => {
    // Replicas open at once, as pods of one Deployment would: migrations run once.
    const [one, two, dying] = await Promise.all([
      replica("orch-1", 60_000),
      replica("orch-2", 60_000),
      replica("orch-3", 300),
    ]);
    // The dying replica stops renewing at once: it is as good as dead once its leases expire.
    await dying!.cluster.leases.stop();

    const owned = new Map<string, LeaseFence>();
    for (let i = 0; i < 30; i++) {
      const owner = [one!, two!, dying!][i % 3]!;
      // Lease first, then the job row, so a job is never visible without an owner unless its creator crashed.
      await owner.cluster.jobs.claim(`job-${i}`);
      const lease = owner.cluster.jobs.fenceFor(`job-${i}`);
      assert.ok(lease);
      owned.set(`job-${i}`, lease);
      await owner.cluster.store.createJob(job(`job-${i}`));
    }
    // A replica crashed between creating two jobs and leasing them.
    await one!.cluster.store.createJob(job("unleased-a"));
    await one!.cluster.store.createJob(job("unleased-b"));
    await one!.cluster.store.createJob({ ...job("finished"), state: "succeeded" });
    // A graph run's job is leased like any job.
    await dying!.cluster.jobs.claim("graph_run1");
    await dying!.cluster.store.createJob(job("graph_run1"));

    await eventually(async () => ((await one!.cluster.leases.listExpired()).length >= 11 ? true : undefined));
    const [fromOne, fromTwo] = await Promise.all([one!.cluster.sweeper.sweepOnce(), two!.cluster.sweeper.sweepOnce()]);
    const taken = [...fromOne, ...fromTwo].map((l) => `${l.kind}/${l.resource}`).sort();
    const expected = [
      ...Array.from({ length: 30 }, (_, i) => i)
        .filter((i) => i % 3 === 2)
        .map((i) => `job/job-${i}`),
      "job/unleased-a",
      "job/unleased-b",
      "job/graph_run1",
    ].sort();
    assert.deepEqual(
      taken,
      expected,
      "each orphaned resource taken once; live replicas' jobs and finished jobs left alone",
    );
    assert.deepEqual(
      [...one!.resumed, ...two!.resumed].map((l) => `${l.kind}/${l.resource}`).sort(),
      expected,
      "and resumed once",
    );

    // The dead replica wakes up and tries to write to a job it used to own.
    const stale = owned.get("job-2")!;
    await assert.rejects(
      dying!.cluster.store.fenced(stale).append({
        jobId: "job-2",
        events: [create(JobEventSchema, { event: { case: "text", value: { text: "late" } } })],
      }),
      LeaseLostError,
    );
    const newOwner = [...fromOne, ...fromTwo].find((l) => l.resource === "job-2")!;
    const ownerCluster = newOwner.owner === "orch-1" ? one! : two!;
    await ownerCluster.cluster.store.fenced(newOwner).updateJob("job-2", { state: "succeeded" });
    assert.equal((await one!.cluster.store.getJob("job-2"))?.state, "succeeded");
    assert.equal((await one!.cluster.store.listJobEvents("job-2", 0)).length, 0);
  });

  void it("gives back the lease of a job whose takeover failed, so a later sweep resumes it", async () => {
    const flaky = await replica("orch-flaky", 60_000, { failTakeOvers: 1 });
    const steady = await replica("orch-steady", 60_000);
    // Nobody leased it (its creator died): the flaky replica wins it, and its resume fails.
    await steady.cluster.store.createJob(job("takeover-fails"));
    const first = await flaky.cluster.sweeper.sweepOnce();
    assert.deepEqual(
      first.map((l) => l.resource),
      ["takeover-fails"],
    );
    assert.deepEqual(flaky.resumed, []);
    assert.equal(flaky.cluster.jobs.owns("takeover-fails"), false, "not kept by the replica that could not resume it");
    assert.equal(await flaky.cluster.leases.get("job", "takeover-fails"), undefined, "its lease given back");
    const second = await steady.cluster.sweeper.sweepOnce();
    assert.deepEqual(
      second.map((l) => l.resource),
      ["takeover-fails"],
      "the next sweep takes it",
    );
    assert.deepEqual(
      steady.resumed.map((l) => l.resource),
      ["takeover-fails"],
    );
  });

  void it("refuses a replica's writes to a job whose lease it lost, but for a bystander's (an answer or cancel taken there)", async () => {
    const stale = await replica("orch-stale", 300);
    const owner = await replica("orch-owner", 60_000);
    await stale.cluster.jobs.claim("lost-job");
    await stale.cluster.store.createJob(job("lost-job"));
    await stale.cluster.leases.stop(); // paused: it stops renewing, and its lease expires
    await eventually(
      async () => ((await owner.cluster.sweeper.sweepOnce()).some((l) => l.resource === "lost-job") ? true : undefined),
      "the job taken over",
    );
    await stale.cluster.leases.renewAll((lease) => stale.cluster.jobs.lose(lease));
    assert.equal(stale.cluster.jobs.owns("lost-job"), false);
    // Work of the job still in flight at the stale replica: refused, however long after the loss.
    await assert.rejects(stale.cluster.store.updateJob("lost-job", { error: "a late write" }), LeaseLostError);
    // The same id cannot be claimed here again: acquire would hand back the lost lease, and a failed create release it.
    await assert.rejects(stale.cluster.jobs.claim("lost-job"), /already exists at this replica/);
    // A person cancelling at the stale replica writes as a bystander.
    await asBystander(() => stale.cluster.store.updateJob("lost-job", { cancelRequestedAt: new Date() }));
    const seen = await owner.cluster.store.getJob("lost-job");
    assert.ok(seen?.cancelRequestedAt, "the bystander's write landed");
    assert.equal(seen.error, "", "the stale write did not");
  });

  void it("refuses the writes of work begun under a lease this replica lost, once it took the job again under a new one", async () => {
    // The CI failure this holds: a replica lost a job's lease by its own clock while it was deciding the
    // session's permission request, took the job again at its next sweep, and the old decision was stored
    // under the new lease beside the new follower's (duplicate_request_id for the session's own request).
    const slow = await replica("orch-slow", 300);
    await slow.cluster.jobs.claim("again-job");
    await slow.cluster.store.createJob(job("again-job"));
    let unblock!: () => void;
    const blocked = new Promise<void>((resolve) => (unblock = resolve));
    const inFlight = slow.cluster.jobs.working("again-job", async () => {
      await blocked;
      return slow.cluster.store.updateJob("again-job", { error: "written under the lost lease" });
    });
    // Its renewals did not confirm in time by its own clock: it stops working on the job.
    const lost: Lease[] = [];
    slow.cluster.leases.expireUnconfirmed((lease) => slow.cluster.jobs.lose(lease) && lost.push(lease), {
      marginMs: 0,
      now: performance.now() + 60_000,
    });
    assert.deepEqual(
      lost.map((l) => l.resource),
      ["again-job"],
    );
    const retaken = await eventually(
      async () => (await slow.cluster.sweeper.sweepOnce()).find((l) => l.resource === "again-job"),
      "the job taken again at the replica's own sweep",
    );
    assert.notEqual(retaken.token, lost[0]!.token, "taken again under a new lease");
    assert.equal(slow.cluster.jobs.owns("again-job"), true);
    // Work under the new lease writes; the old work, let go now, is refused.
    await slow.cluster.jobs.working("again-job", () =>
      slow.cluster.store.updateJob("again-job", { resultText: "new" }),
    );
    unblock();
    await assert.rejects(inFlight, LeaseLostError);
    const stored = await slow.cluster.store.getJob("again-job");
    assert.equal(stored?.resultText, "new");
    assert.equal(stored?.error, "", "the old lease's write did not land");
    // Outside any work's scope a write is the current lease's.
    await slow.cluster.store.updateJob("again-job", { stopReason: 1 });
    assert.equal((await slow.cluster.store.getJob("again-job"))?.stopReason, 1);
  });

  void it("renews on no lease it gave up by its own clock while a renewal round was in flight; the lease expires and is taken over", async () => {
    const r = await replica("orch-round", 1_000);
    await r.cluster.leases.stop(); // the test runs the rounds
    await r.cluster.jobs.claim("round-job");
    await r.cluster.store.createJob(job("round-job"));
    const lost: string[] = [];
    const onLost = (lease: Lease): void => {
      if (r.cluster.jobs.lose(lease)) lost.push(lease.resource);
    };
    const round = r.cluster.leases.renewAll(onLost);
    // The round is in flight when the timer's check finds the lease unconfirmed for too long.
    r.cluster.leases.expireUnconfirmed(onLost, { marginMs: 0, now: performance.now() + 60_000 });
    await round;
    assert.deepEqual(lost, ["round-job"]);
    assert.deepEqual(
      r.cluster.leases.held().map((l) => l.resource),
      [],
      "the round's renewal does not hold it again: nobody works on the job here",
    );
    await eventually(
      async () => ((await r.cluster.sweeper.sweepOnce()).some((l) => l.resource === "round-job") ? true : undefined),
      "the job taken over once its lease expired",
    );
  });

  void it("takes an answer at a replica that lost the job's lease before it noticed as a bystander's, not refused", async () => {
    const unaware = await replica("orch-unaware", 60_000);
    await unaware.cluster.jobs.claim("answer-job");
    await unaware.cluster.store.createJob(job("answer-job"));
    const waiting = permission("answer-job", "perm-1");
    await unaware.cluster.store.append({ jobId: "answer-job", events: [], permissions: [waiting] });
    // Another replica takes the lease (this one was paused): its token moves on, and this replica has not noticed yet.
    await unaware.cluster.store.pool.query(
      "UPDATE leases SET token = token + 1, owner = 'orch-thief' WHERE kind = 'job' AND resource = 'answer-job'",
    );
    const home = mkdtempSync(path.join(os.tmpdir(), "oz0-leases-answer-"));
    const runner = new JobRunner({
      store: unaware.cluster.store,
      feed: new JobFeed(),
      placement: new StaticPlacement({ runners: [new SandboxClient({ url: "http://127.0.0.1:1" })] }),
      tokens: { mint: () => Promise.reject(new Error("not used")), revoke: () => Promise.resolve({ neverUsed: true }) },
      policy: new PermissionPolicy({ hooks: [new HookStage()] }),
      home,
      logger: createLogger({ name: "leases-answer", level: "error" }),
      ownership: unaware.cluster.jobs,
    });
    try {
      assert.equal(unaware.cluster.jobs.owns("answer-job"), true, "it has not noticed");
      const answered = await runner.answerPermission({
        jobId: "answer-job",
        callId: waiting.callId,
        allow: true,
        answeredBy: { id: "ann", groups: [] },
      });
      assert.equal(answered.status, "approved");
      const stored = await unaware.cluster.store.getPermission("answer-job", "perm-1");
      assert.deepEqual(
        [stored?.status, stored?.answeredBy],
        ["approved", "ann"],
        "stored for the new owner to deliver",
      );
    } finally {
      await runner.close();
      rmSync(home, { recursive: true, force: true });
    }
  });

  void it("brings an approval answered at any replica to the replica that owns the job", async () => {
    // By id: the replicas were opened concurrently, so their order in the list is arbitrary.
    const one = replicas.find((r) => r.cluster.leases.owner === "orch-1");
    const two = replicas.find((r) => r.cluster.leases.owner === "orch-2");
    const ownedByTwo = { resource: two!.cluster.jobs.owned()[0]! };
    // A pending approval of that job, then the answer taken at replica one: the store publishes it as it commits.
    const requested = {
      jobId: ownedByTwo.resource,
      id: "perm-1",
      callId: "call-1",
      sessionId: "ses",
      tool: "Bash",
      title: "Run it",
      needsPerson: true,
      reason: "",
      answeredBy: "",
      requestedAt: new Date(),
      delivered: false,
    };
    await two!.cluster.store.append({
      jobId: ownedByTwo.resource,
      events: [],
      permissions: [{ ...requested, status: "pending" }],
    });
    await one!.cluster.store.append({
      jobId: ownedByTwo.resource,
      events: [],
      permissions: [{ ...requested, status: "approved", decider: "person", answeredBy: "ann", answeredAt: new Date() }],
    });
    await eventually(async () => (two!.answers.length > 0 ? true : undefined));
    assert.deepEqual(
      two!.answers.map((a) => [a.jobId, a.permissionId]),
      [[ownedByTwo.resource, "perm-1"]],
    );
    assert.deepEqual(one!.answers, [], "a replica not owning the job ignores the answer");
  });

  void it("brings a cancel taken at any replica to the replica that owns the job", async () => {
    const one = replicas.find((r) => r.cluster.leases.owner === "orch-1")!;
    const two = replicas.find((r) => r.cluster.leases.owner === "orch-2")!;
    await two.cluster.jobs.claim("job-cancelled");
    await two.cluster.store.createJob(job("job-cancelled"));
    // A person cancels at replica one, which does not own the job: its write is a bystander's.
    await asBystander(() =>
      one.cluster.store.append({
        jobId: "job-cancelled",
        events: [],
        job: { cancelRequestedAt: new Date(), error: "not needed" },
      }),
    );
    await eventually(async () => (two.cancels.includes("job-cancelled") ? true : undefined));
    assert.ok(!one.cancels.includes("job-cancelled"), "a replica not owning the job ignores the cancel");
  });

  void it("carries a job's events appended at its owner to watchers at another replica, each once and in order", async () => {
    const one = replicas.find((r) => r.cluster.leases.owner === "orch-1")!;
    const two = replicas.find((r) => r.cluster.leases.owner === "orch-2")!;
    await two.cluster.jobs.claim("job-watched");
    await two.cluster.store.createJob(job("job-watched"));
    const feed = new JobFeed();
    const stop = feed.followCluster({
      listJobEvents: (jobId, afterSeq, limit) => one.cluster.store.listJobEvents(jobId, afterSeq, limit),
      subscribeAppended: (handler) => one.cluster.notifier.subscribeAppended(handler),
    });
    const seen: number[] = [];
    const unsubscribe = feed.subscribe("job-watched", (event) => seen.push(Number(event.seq)));
    const text = (t: string) => create(JobEventSchema, { event: { case: "text", value: { text: t } } });
    for (let i = 0; i < 5; i++)
      await two.cluster.store.append({ jobId: "job-watched", events: [text(`a${i}`), text(`b${i}`)] });
    await eventually(async () => (seen.length >= 10 ? true : undefined));
    // Published locally too (as the owner's own feed would): nothing is passed on twice.
    feed.publish("job-watched", await one.cluster.store.listJobEvents("job-watched", 0));
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(seen, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    unsubscribe();
    stop();
  });
});
