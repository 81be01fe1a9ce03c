// needs: postgres
// Leases between replicas on a real PostgreSQL server: one owner at a time
// under races, takeover after an owner stops renewing, fencing tokens, and
// approval answers crossing replicas through LISTEN/NOTIFY.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type pg from "pg";
import { ClusterNotifier, type ApprovalAnswered } from "../src/cluster/cluster-notifier.js";
import { LeaseManager, type Lease } from "../src/cluster/lease-manager.js";
import { migrateOrchestrator } from "../src/store/migrations.js";
import { createPostgresPool } from "../src/store/sql-database.js";
import { withTransaction } from "@oz0/postgres";
import { databaseUrl, eventually, freshSchema } from "./postgres-test-support.js";
import { TcpRelay } from "./support/tcp-relay.js";

const connectionString = databaseUrl();
const schema = freshSchema();

void describe("leases", () => {
  let pool: pg.Pool;
  // Each replica gets a pool of its own, as separate processes would.
  const managers: LeaseManager[] = [];
  const replica = async (owner: string, ttlMs?: number): Promise<LeaseManager> => {
    const manager = await LeaseManager.open({
      connection: { connectionString, schema, maxConnections: 4 },
      owner,
      ...(ttlMs ? { ttlMs } : {}),
    });
    managers.push(manager);
    return manager;
  };

  before(async () => {
    pool = createPostgresPool({ connectionString, schema, maxConnections: 2 });
    await migrateOrchestrator(pool, schema);
  });

  after(async () => {
    await Promise.all(managers.map((m) => m.close()));
    await pool.query(`DROP SCHEMA ${schema} CASCADE`);
    await pool.end();
  });

  void it("gives each resource to exactly one of two replicas racing for it", async () => {
    const a = await replica("race-a");
    const b = await replica("race-b");
    const resources = Array.from({ length: 30 }, (_, i) => `race-job-${i}`);
    const results = await Promise.all(resources.flatMap((r) => [a.acquire("job", r), b.acquire("job", r)]));
    for (let i = 0; i < resources.length; i++) {
      const pair = [results[2 * i], results[2 * i + 1]].filter((l): l is Lease => l !== undefined);
      assert.equal(pair.length, 1, `exactly one replica owns ${resources[i]}`);
      assert.equal((await a.get("job", resources[i]!))?.owner, pair[0]!.owner);
    }
    const tokens = results.filter((l): l is Lease => l !== undefined).map((l) => l.token);
    assert.equal(new Set(tokens).size, tokens.length, "fencing tokens are unique");
  });

  void it("keeps a live owner's lease: another replica cannot take it, and re-acquiring by the owner keeps the token", async () => {
    const a = await replica("live-a");
    const b = await replica("live-b");
    const lease = await a.acquire("graph_run", "run-1");
    assert.ok(lease);
    assert.equal(await b.acquire("graph_run", "run-1"), undefined);
    assert.deepEqual(await b.takeOverExpired("graph_run"), []);
    const again = await a.acquire("graph_run", "run-1");
    assert.equal(again?.token, lease.token);
    const renewed = await a.renew(lease);
    assert.ok(renewed && renewed.expiresAt >= lease.expiresAt);
  });

  void it("hands the lease of an owner that stopped renewing to another replica, and the old owner learns it lost it", async () => {
    // A short TTL and no renewal: the owner "died" (or paused). Nothing asserts how long expiry takes.
    const dying = await replica("dying", 200);
    const survivor = await replica("survivor");
    const lease = await dying.acquire("approval", "job-7/perm-1");
    const kept = await dying.acquire("approval", "job-7/perm-2", { ttlMs: 60_000 });
    assert.ok(lease && kept);
    await eventually(async () =>
      (await survivor.listExpired("approval")).some((l) => l.resource === "job-7/perm-1") ? true : undefined,
    );
    // Its own sweep leaves it alone: a live replica whose renewal came late keeps its token by renewing.
    assert.deepEqual(await dying.takeOverExpired("approval"), []);
    const taken = await survivor.takeOverExpired("approval");
    assert.deepEqual(
      taken.map((l) => [l.resource, l.owner]),
      [["job-7/perm-1", "survivor"]],
      "only the expired lease changes hands",
    );
    assert.ok(taken[0]!.token > lease.token);

    // The paused owner wakes up and renews what it believes it holds.
    const lost: Lease[] = [];
    await dying.renewAll((l) => lost.push(l));
    assert.deepEqual(
      lost.map((l) => l.resource),
      ["job-7/perm-1"],
    );
    assert.deepEqual(
      dying.held().map((l) => l.resource),
      ["job-7/perm-2"],
      "the live lease is renewed, the lost one dropped",
    );
    assert.equal(await dying.renew(lease), undefined, "a stale owner cannot renew");
    assert.equal(await dying.release(lease), false, "nor release what is no longer its own");
    assert.equal((await survivor.get("approval", "job-7/perm-1"))?.owner, "survivor");
  });

  void it("a replica cut off from the database gives its leases up by its own clock before they can be taken over", async () => {
    // Its renewals fail, so the database cannot tell it the leases were taken over: it must stop on its own.
    const cutPool = createPostgresPool({ connectionString, schema, maxConnections: 2 });
    const cut = await LeaseManager.open({ pool: cutPool, owner: "cut-off", ttlMs: 900 });
    const lease = (await cut.acquire("job", "cut-off-job"))!;
    const lost: Lease[] = [];
    const errors: unknown[] = [];
    await cutPool.end(); // every renewal fails from here on
    cut.startRenewing({ onLost: (l) => lost.push(l), onError: (e) => errors.push(e) });
    try {
      await eventually(async () => (lost.length > 0 ? true : undefined), "the lease reported lost");
      assert.deepEqual(
        lost.map((l) => l.token),
        [lease.token],
      );
      assert.ok(errors.length > 0, "the failed renewals were reported");
      assert.deepEqual(cut.held(), [], "no longer held");
      // The rule itself: the database surely keeps the lease for its lifetime from the request that set it.
      const b = await replica("clock-b", 60_000);
      const held = (await b.acquire("job", "clock-job"))!;
      const onLost = (l: Lease): void => void lost.push(l);
      b.expireUnconfirmed(onLost, { marginMs: 20_000 });
      assert.equal(b.held().length, 1, "well within its lifetime: kept");
      b.expireUnconfirmed(onLost, { marginMs: 20_000, now: performance.now() + 40_000 });
      assert.deepEqual(b.held(), [], "within the margin of its expiry: given up");
      assert.equal(lost.at(-1)?.token, held.token);
      // Its own lease given up so is taken over like anyone's once it expires: in a cluster of one, nobody else would.
      const c = await replica("clock-c", 300);
      const mine = (await c.acquire("job", "clock-job-c"))!;
      c.expireUnconfirmed(onLost, { marginMs: 0, now: performance.now() + 300 });
      const back = await eventually(
        async () => (await c.takeOverExpired("job")).find((l) => l.resource === "clock-job-c"),
        "the given-up lease taken back",
      );
      assert.ok(back.token > mine.token, "with a new token");
    } finally {
      await cut.stop();
    }
  });

  void it("gives its leases up by its own clock even while a renewal hangs on a silent network", async () => {
    // Nothing errors on a silent network: the renewal in flight never returns, and the next rounds wait for it.
    const server = new URL(connectionString);
    const relay = new TcpRelay({ host: server.hostname, port: Number(server.port) });
    const relayed = new URL(connectionString);
    relayed.port = String(await relay.listen());
    const silentPool = createPostgresPool({ connectionString: relayed.toString(), schema, maxConnections: 1 });
    const silent = await LeaseManager.open({ pool: silentPool, owner: "silent", ttlMs: 900 });
    try {
      const lease = (await silent.acquire("job", "silent-job"))!;
      relay.silence();
      const lost: Lease[] = [];
      silent.startRenewing({ onLost: (l) => lost.push(l) });
      await eventually(async () => (lost.length > 0 ? true : undefined), "the lease given up");
      assert.deepEqual(
        lost.map((l) => l.token),
        [lease.token],
      );
    } finally {
      // Cut first: the hung renewal then fails, and stop() (which waits for it) returns.
      await relay.close();
      await silent.stop();
      await silentPool.end().catch(() => undefined);
    }
  });

  void it("splits a dead replica's expired leases between two replicas sweeping at once, each taken once", async () => {
    const dead = await replica("dead", 100);
    const resources = Array.from({ length: 40 }, (_, i) => `sweep-${i}`);
    for (const r of resources) assert.ok(await dead.acquire("job", r));
    const x = await replica("sweeper-x");
    const y = await replica("sweeper-y");
    await eventually(async () =>
      (await x.listExpired("job")).filter((l) => l.resource.startsWith("sweep-")).length === 40 ? true : undefined,
    );
    const [fromX, fromY] = await Promise.all([
      x.takeOverExpired("job", { limit: 100 }),
      y.takeOverExpired("job", { limit: 100 }),
    ]);
    const all = [...fromX, ...fromY].map((l) => l.resource).filter((r) => r.startsWith("sweep-"));
    assert.deepEqual(all.sort(), [...resources].sort(), "every lease taken over exactly once");
    for (const r of resources) assert.notEqual((await x.get("job", r))?.owner, "dead");
  });

  void it("released leases are free at once, with a newer token for the next owner", async () => {
    const a = await replica("release-a");
    const b = await replica("release-b");
    const lease = await a.acquire("job", "done-job");
    assert.ok(lease);
    assert.equal(await a.release(lease), true);
    const next = await b.acquire("job", "done-job");
    assert.ok(next && next.token > lease.token);
  });

  void it("keeps listening after the database drops the listening connection, and says so, so the owner re-reads the store", async () => {
    let reconnects = 0;
    const errors: unknown[] = [];
    const owner = new ClusterNotifier({
      connectionString,
      schema,
      onReconnect: () => reconnects++,
      onError: (e) => errors.push(e),
    });
    try {
      const received: string[] = [];
      owner.subscribe((answer) => received.push(answer.permissionId));
      await owner.listen();
      // What a failover or an administrator does to the connection.
      const killed = await pool.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1", [
        `LISTEN ${owner.channel}`,
      ]);
      assert.equal(killed.rowCount, 1);
      await eventually(async () => (reconnects > 0 ? true : undefined), "reconnection");
      assert.ok(errors.length > 0, "the loss is reported");
      await new ClusterNotifier({ connectionString, schema }).publish(pool, {
        jobId: "j1",
        permissionId: "after-reconnect",
        status: "approved",
      });
      await eventually(
        async () => (received.includes("after-reconnect") ? true : undefined),
        "the answer after reconnecting",
      );
    } finally {
      await owner.close();
    }
  });

  void it("delivers an approval answered at one replica to the owner listening on another connection, only once committed", async () => {
    const owner = new ClusterNotifier({ connectionString, schema });
    const answering = new ClusterNotifier({ connectionString, schema });
    const answeringPool = createPostgresPool({ connectionString, schema, maxConnections: 2 });
    try {
      const received: ApprovalAnswered[] = [];
      owner.subscribe((answer) => received.push(answer));
      await owner.listen();
      // Answered in a transaction that rolls back: listeners must never hear of it.
      await assert.rejects(
        withTransaction(answeringPool, async (client) => {
          await answering.publish(client, { jobId: "j1", permissionId: "p0", status: "approved" });
          throw new Error("storing the answer failed");
        }),
        /storing the answer failed/,
      );
      await withTransaction(answeringPool, async (client) => {
        await answering.publish(client, { jobId: "j1", permissionId: "p1", status: "denied" });
      });
      await eventually(async () => (received.length > 0 ? true : undefined));
      assert.deepEqual(received[0], { jobId: "j1", permissionId: "p1", status: "denied" });
      // Another deployment's schema uses another channel.
      const other = new ClusterNotifier({ connectionString, schema: `${schema}_other` });
      await other.publish(answeringPool, { jobId: "j9", permissionId: "p9", status: "approved" });
      await answering.publish(answeringPool, { jobId: "j1", permissionId: "p2", status: "approved" });
      await eventually(async () => (received.length > 1 ? true : undefined));
      assert.deepEqual(
        received.map((r) => r.permissionId),
        ["p1", "p2"],
      );
    } finally {
      await owner.close();
      await answering.close();
      await answeringPool.end();
    }
  });
});
