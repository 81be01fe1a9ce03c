// needs: postgres
// The sandbox node registry on a real PostgreSQL server: capacity counted
// once across orchestrator replicas, no placement on a node whose heartbeats
// stopped, and that node's sessions reported lost with a clear reason; a slot
// whose job ended comes back at the node's next heartbeat, and a session on a
// silent node stays there until its caller gives it back.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type pg from "pg";
import { createPostgresPool } from "../src/store/sql-database.js";
import { PostgresJobStore } from "../src/store/postgres-store.js";
import { NodePinnedError, SandboxNodeRegistry, type Placement } from "../src/cluster/sandbox-node-registry.js";
import { databaseUrl, eventually, freshSchema, jobRecord } from "./postgres-test-support.js";

const connectionString = databaseUrl();

void describe("sandbox node registry", () => {
  const schemas: string[] = [];
  const opened: { close(): Promise<void> }[] = [];
  let admin: pg.Pool;

  // Each test gets a schema of its own (node rows are global within one), and each replica a pool of its own.
  async function replicas(count: number, staleAfterMs?: number): Promise<SandboxNodeRegistry[]> {
    return (await withJobs(count, staleAfterMs)).registries;
  }

  // The registries and the job store of one schema: the registry reads the jobs' states.
  async function withJobs(
    count: number,
    staleAfterMs?: number,
  ): Promise<{ registries: SandboxNodeRegistry[]; store: PostgresJobStore }> {
    const schema = freshSchema();
    schemas.push(schema);
    const store = await PostgresJobStore.open({ connectionString, schema, maxConnections: 2 });
    opened.push(store);
    const list: SandboxNodeRegistry[] = [];
    for (let i = 0; i < count; i++) {
      const registry = await SandboxNodeRegistry.open({
        connection: { connectionString, schema, maxConnections: 4 },
        ...(staleAfterMs ? { staleAfterMs } : {}),
      });
      opened.push(registry);
      list.push(registry);
    }
    return { registries: list, store };
  }

  // Only "alive" keeps sending heartbeats; waits until "silent" counts as gone.
  async function untilOnlyAlive(registry: SandboxNodeRegistry): Promise<void> {
    await eventually(async () => {
      await registry.heartbeat("alive");
      const live = (await registry.listLive()).map((n) => n.id);
      return live.length === 1 && live[0] === "alive" ? true : undefined;
    });
  }

  before(() => {
    admin = createPostgresPool({ connectionString, maxConnections: 1 });
  });

  after(async () => {
    await Promise.all(opened.map((r) => r.close()));
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.end();
  });

  void it("keeps a node its pod registered at that pod's URL: the same pod's identity elsewhere is refused, a later pod of its name takes it over, an earlier one's never", async () => {
    const [registry] = await replicas(1);
    const pod = { id: "sandbox-abc", capacity: 2, pod: { uid: "uid-1", issuedAt: 1_000 } };
    await registry!.register({ ...pod, url: "http://10.0.0.7:7701" });
    await registry!.register({ ...pod, url: "http://10.0.0.7:7701" });
    // A copy of the pod's token, sent from elsewhere: the node stays where its pod is, and says where.
    await assert.rejects(
      registry!.register({ ...pod, url: "http://10.0.0.66:7701" }),
      (error: unknown) =>
        error instanceof NodePinnedError && /registered by its pod at http:\/\/10\.0\.0\.7:7701/.test(error.message),
    );
    assert.deepEqual(
      (await registry!.listLive()).map((n) => [n.id, n.url]),
      [["sandbox-abc", "http://10.0.0.7:7701"]],
    );
    // A StatefulSet's next pod of that name, at its own address, with a token issued after the last one.
    await registry!.register({ ...pod, pod: { uid: "uid-2", issuedAt: 2_000 }, url: "http://10.0.0.8:7701" });
    assert.deepEqual(
      (await registry!.listLive()).map((n) => n.url),
      ["http://10.0.0.8:7701"],
    );
    // A copy of the replaced pod's token, still unexpired: it does not take the node back.
    await assert.rejects(
      registry!.register({ ...pod, pod: { uid: "uid-1", issuedAt: 1_500 }, url: "http://10.0.0.66:7701" }),
      NodePinnedError,
    );
    assert.equal((await registry!.listLive()).find((n) => n.id === "sandbox-abc")?.url, "http://10.0.0.8:7701");
    // Without node identities a node's URL moves as its heartbeats say (a node restarted elsewhere).
    await registry!.register({ id: "plain", capacity: 1, url: "http://10.0.0.9:7701" });
    await registry!.register({ id: "plain", capacity: 1, url: "http://10.0.0.10:7701" });
    assert.equal((await registry!.listLive()).find((n) => n.id === "plain")?.url, "http://10.0.0.10:7701");
  });

  void it("places sessions from two replicas at once without exceeding any node's capacity", async () => {
    const [a, b] = await replicas(2);
    await a!.register({ id: "node-1", url: "http://10.0.0.1:7701", capacity: 5 });
    await b!.register({ id: "node-2", url: "http://10.0.0.2:7701", capacity: 7 });
    const requests = Array.from({ length: 20 }, (_, i) =>
      (i % 2 ? a! : b!).place({ sessionId: `ses-${i}`, jobId: `job-${i}` }),
    );
    const placed = (await Promise.all(requests)).filter((p): p is Placement => p !== undefined);
    assert.equal(placed.length, 12, "exactly the total capacity is placed");
    const perNode = new Map<string, number>();
    for (const p of placed) perNode.set(p.node.id, (perNode.get(p.node.id) ?? 0) + 1);
    assert.deepEqual(Object.fromEntries(perNode), { "node-1": 5, "node-2": 7 });
    assert.deepEqual(
      (await a!.listLive()).map((n) => [n.id, n.placed, n.free]),
      [
        ["node-1", 5, 0],
        ["node-2", 7, 0],
      ],
    );

    // A retried placement of a placed session takes no second slot.
    const again = await b!.place({ sessionId: placed[0]!.sessionId, jobId: placed[0]!.jobId });
    assert.equal(again?.node.id, placed[0]!.node.id);
    assert.equal(await a!.place({ sessionId: "ses-extra", jobId: "job-extra" }), undefined, "no room anywhere");

    assert.equal(await a!.release(placed[0]!.sessionId), true);
    assert.equal(await a!.release(placed[0]!.sessionId), false);
    assert.equal(
      (await b!.place({ sessionId: "ses-extra", jobId: "job-extra" }))?.node.id,
      placed[0]!.node.id,
      "the freed slot is used",
    );
  });

  void it("stops placing on a node whose heartbeats stopped and reports its sessions lost", async () => {
    const [registry] = await replicas(1, 2_000);
    await registry!.register({ id: "alive", url: "http://10.0.0.1:7701", capacity: 10 });
    await registry!.register({ id: "silent", url: "http://10.0.0.2:7701", capacity: 10 });
    // Both live: the least loaded gets each session, so one lands on each.
    const first = await registry!.place({ sessionId: "s1", jobId: "j1" });
    const second = await registry!.place({ sessionId: "s2", jobId: "j2" });
    assert.deepEqual([first?.node.id, second?.node.id].sort(), ["alive", "silent"]);
    const onSilent = first?.node.id === "silent" ? first : second;

    await untilOnlyAlive(registry!);
    for (let i = 0; i < 5; i++) {
      const placement = await eventually(async () => {
        await registry!.heartbeat("alive");
        return registry!.place({ sessionId: `later-${i}`, jobId: `job-later-${i}` });
      });
      assert.equal(placement.node.id, "alive", "nothing goes to a node without heartbeats");
    }
    const lost = await registry!.lostSessions();
    assert.deepEqual(
      lost.map((l) => [l.sessionId, l.jobId, l.nodeId]),
      [[onSilent!.sessionId, onSilent!.jobId, "silent"]],
    );
    assert.match(lost[0]!.reason, /sandbox node silent \(http:\/\/10\.0\.0\.2:7701\) stopped sending heartbeats/);

    assert.equal(await registry!.heartbeat("never-registered"), false);
    // Once the owner failed the job and released the session, it is no longer reported; a node that registers again is live.
    assert.equal(await registry!.release(onSilent!.sessionId), true);
    assert.deepEqual(await registry!.lostSessions(), []);
    await registry!.register({ id: "silent", url: "http://10.0.0.2:7701", capacity: 10 });
    assert.deepEqual((await registry!.listLive()).map((n) => n.id).sort(), ["alive", "silent"]);
  });

  void it("gives back the slot of a session whose job ended at its node's next heartbeat, when nobody released it", async () => {
    const {
      registries: [registry],
      store,
    } = await withJobs(1);
    await registry!.register({ id: "node-1", url: "http://10.0.0.1:7701", capacity: 3 });
    for (const id of ["ended", "running", "pending"]) {
      await store.createJob(jobRecord(id));
      assert.equal((await registry!.place({ sessionId: `ses_${id}`, jobId: id }))?.node.id, "node-1");
    }
    // Two jobs end, but their runner died (or its release failed) before it gave their slots back.
    await store.updateJob("ended", { state: "succeeded", finishedAt: new Date() });
    await store.updateJob("running", { state: "running", sandboxSeq: 3 });
    assert.equal(await registry!.place({ sessionId: "ses_new", jobId: "new" }), undefined, "the node is full");

    // The node's heartbeat (the RPC handler registers on each one) frees the ended job's slot only.
    assert.equal((await registry!.register({ id: "node-1", url: "http://10.0.0.1:7701", capacity: 3 })).placed, 2);
    assert.equal(await registry!.release("ses_ended"), false, "its placement is gone");
    await store.updateJob("running", { state: "cancelled", finishedAt: new Date() });
    assert.equal(await registry!.heartbeat("node-1"), true);
    assert.deepEqual(
      (await registry!.listLive()).map((n) => [n.id, n.placed, n.free]),
      [["node-1", 1, 2]],
    );
    assert.equal(await registry!.release("ses_pending"), true, "an active job keeps its slot");
    assert.equal(
      (await registry!.place({ sessionId: "ses_new", jobId: "new" }))?.node.id,
      "node-1",
      "the freed slots are used",
    );
  });

  void it("keeps a session on its silent node, reporting it lost, until its caller gives it back to place it on a live one", async () => {
    const {
      registries: [registry],
      store,
    } = await withJobs(1, 2_000);
    await registry!.register({ id: "silent", url: "http://10.0.0.2:7701", capacity: 10 });
    for (const id of ["never-started", "started"]) {
      await store.createJob(jobRecord(id));
      assert.equal((await registry!.place({ sessionId: `ses_${id}`, jobId: id }))?.node.id, "silent");
    }
    await registry!.register({ id: "alive", url: "http://10.0.0.1:7701", capacity: 10 });
    await untilOnlyAlive(registry!);

    // Placing again never moves a session by itself: whether it ran there is for its caller to know.
    for (const id of ["never-started", "started"])
      assert.equal((await registry!.place({ sessionId: `ses_${id}`, jobId: id }))?.node.id, "silent");
    assert.equal((await registry!.lostSession("ses_started"))?.nodeId, "silent");
    assert.equal(await registry!.lostSession("ses_unknown"), undefined);
    assert.deepEqual((await registry!.lostSessions()).map((l) => l.sessionId).sort(), [
      "ses_never-started",
      "ses_started",
    ]);

    // The caller that knows a session never started there gives it back, and it goes to the live node.
    assert.equal(await registry!.release("ses_never-started"), true);
    const again = await registry!.place({ sessionId: "ses_never-started", jobId: "never-started" });
    assert.deepEqual([again?.node.id, again?.node.placed], ["alive", 1]);
    assert.equal(await registry!.lostSession("ses_never-started"), undefined, "no longer lost");
    assert.deepEqual(
      (await registry!.lostSessions()).map((l) => [l.sessionId, l.nodeId]),
      [["ses_started", "silent"]],
    );
    assert.equal(await registry!.release("ses_started"), true);
    await registry!.register({ id: "silent", url: "http://10.0.0.2:7701", capacity: 10 });
    assert.deepEqual(
      (await registry!.listLive()).map((n) => [n.id, n.placed]),
      [
        ["silent", 0],
        ["alive", 1],
      ],
    );
  });
});
