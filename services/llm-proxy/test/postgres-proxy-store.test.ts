// needs: postgres
// The proxy's PostgreSQL store on a real server: two store instances stand
// for two proxy replicas, reserving one session's budget at the same time.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import pg from "pg";
import { ProxyError } from "../src/proxy-error.js";
import type { CallRecord } from "../src/proxy-store.js";
import { PostgresProxyStore, type StoredReservation } from "../src/postgres-proxy-store.js";

const url = process.env.DATABASE_URL;
if (!url) throw new Error("DATABASE_URL is unset: run through `npm test` (tools/test-infra starts PostgreSQL) or point it at a server");
const connectionString: string = url;
const schema = `oz0_proxy_test_${randomBytes(6).toString("hex")}`;

function call(overrides: Partial<CallRecord> & Pick<CallRecord, "operationId">): CallRecord {
  return {
    job: "job-1",
    agent: "fixer",
    session: "ses-1",
    provider: "anthropic",
    model: "claude-sonnet-5",
    wire: "anthropic",
    stream: false,
    status: 200,
    outcome: "ok",
    usage: { input: 10, output: 20, cacheRead: 1, cacheWrite: 2, reasoning: 0 },
    costUsd: 0.001,
    latencyMs: 12.5,
    estimated: false,
    startedAt: new Date(),
    attempts: 1,
    ...overrides,
  };
}

function isBudgetExhausted(error: unknown): boolean {
  return error instanceof ProxyError && error.code === "budget_exhausted";
}

void describe("PostgresProxyStore", () => {
  let a: PostgresProxyStore;
  let b: PostgresProxyStore;

  before(async () => {
    // Opened at once, as replicas starting together would: the migration runs once.
    [a, b] = await Promise.all([
      PostgresProxyStore.open({ connectionString, schema, maxConnections: 6 }),
      PostgresProxyStore.open({ connectionString, schema, maxConnections: 6 }),
    ]);
  });

  after(async () => {
    await a.close();
    await b.close();
    const client = new pg.Client({ connectionString });
    await client.connect();
    await client.query(`DROP SCHEMA ${schema} CASCADE`);
    await client.end();
  });

  void it("never holds more than the budget when two replicas reserve at once, and adds up to the cent", async () => {
    const session = "race-full";
    // 50 calls of $0.03 worst case against $1.00: exactly 33 fit (0.99), whichever replica asks.
    const attempts = await Promise.allSettled(
      Array.from({ length: 50 }, (_, i) => (i % 2 ? a : b).reserve({ session, limitUsd: 1, worstCaseUsd: 0.03, minimumUsd: 0.001, partial: false })),
    );
    const held = attempts.filter((r): r is PromiseFulfilledResult<StoredReservation> => r.status === "fulfilled").map((r) => r.value);
    const refused = attempts.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    assert.equal(held.length, 33);
    assert.ok(refused.every((r) => isBudgetExhausted(r.reason)), "every refusal says the budget is exhausted");
    assert.deepEqual(await a.budgetSnapshot(session), { limitUsd: 1, spentUsd: 0, reservedUsd: 0.99 });

    // Settled on whichever replica: holds are given back and actual costs charged, exactly.
    await Promise.all(held.map((r, i) => (i % 2 ? a : b).settle(r.id, 0.02)));
    await held[0]!.settle(0.5);
    assert.deepEqual(await b.budgetSnapshot(session), { limitUsd: 1, spentUsd: 0.66, reservedUsd: 0 }, "a second settle changes nothing");

    // Streams may hold less than their worst case: together they take exactly what is left, then are refused.
    const streams = await Promise.allSettled(
      Array.from({ length: 10 }, (_, i) => (i % 2 ? a : b).reserve({ session, limitUsd: 1, worstCaseUsd: 0.1, minimumUsd: 0.001, partial: true })),
    );
    const streamHolds = streams.filter((r): r is PromiseFulfilledResult<StoredReservation> => r.status === "fulfilled").map((r) => r.value.amountUsd);
    assert.deepEqual(streamHolds.sort(), [0.04, 0.1, 0.1, 0.1]);
    assert.deepEqual(await a.budgetSnapshot(session), { limitUsd: 1, spentUsd: 0.66, reservedUsd: 0.34 });
  });

  void it("starts a new account from what the session's calls were already charged", async () => {
    await a.recordCall(call({ operationId: "op-before", session: "ses-restart", costUsd: 0.7 }));
    await assert.rejects(b.reserve({ session: "ses-restart", limitUsd: 1, worstCaseUsd: 0.5, minimumUsd: 0.01, partial: false }), /only \$0\.3000/);
    const ok = await b.reserve({ session: "ses-restart", limitUsd: 1, worstCaseUsd: 0.25, minimumUsd: 0.01, partial: false });
    assert.equal(ok.amountUsd, 0.25);
    assert.equal(await a.forgetBudget("ses-restart"), false, "kept while a call holds part of it");
    await ok.settle(0.05);
    assert.equal(await a.forgetBudget("ses-restart"), true);
    assert.equal(await a.budgetSnapshot("ses-restart"), undefined);
  });

  void it("frees the holds of a replica that died mid-call; a late settle still charges the spend", async () => {
    const short = await PostgresProxyStore.open({ connectionString, schema, reservationHoldMs: 0 });
    try {
      const orphan = await short.reserve({ session: "ses-dead", limitUsd: 1, worstCaseUsd: 0.6, minimumUsd: 0.01, partial: false });
      await assert.rejects(a.reserve({ session: "ses-dead", limitUsd: 1, worstCaseUsd: 0.6, minimumUsd: 0.01, partial: false }), isBudgetExhausted);
      assert.equal(await b.releaseExpiredReservations(), 1);
      assert.equal(await a.releaseExpiredReservations(), 0, "freed once");
      assert.deepEqual(await a.budgetSnapshot("ses-dead"), { limitUsd: 1, spentUsd: 0, reservedUsd: 0 });
      await orphan.settle(0.1);
      assert.deepEqual(await a.budgetSnapshot("ses-dead"), { limitUsd: 1, spentUsd: 0.1, reservedUsd: 0 });
    } finally {
      await short.close();
    }
  });

  void it("meters calls and attempts from both replicas into one set of totals", async () => {
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 2 ? a : b).recordCall(call({ operationId: `op-${i}`, job: "job-metered", agent: i < 15 ? "fixer" : "reviewer", outcome: i === 3 ? "http_error" : "ok", attempts: 2 })),
      ),
    );
    await a.recordAttempt({ ...call({ operationId: "op-0", job: "job-metered" }), attempt: 1, ttftMs: 5 });
    const totals = await b.usageByAgent("job-metered");
    assert.deepEqual([...totals.keys()], ["fixer", "reviewer"]);
    const fixer = totals.get("fixer")!;
    assert.equal(fixer.calls, 15);
    assert.equal(fixer.failedCalls, 1);
    assert.equal(fixer.attempts, 30);
    assert.deepEqual(fixer.usage, { input: 150, output: 300, cacheRead: 15, cacheWrite: 30, reasoning: 0 });
    assert.equal(totals.get("reviewer")!.calls, 5);
    assert.equal((await a.listCalls("job-metered")).length, 20);
    const [attempt] = await b.listAttempts("job-metered");
    assert.equal(attempt?.ttftMs, 5);
    assert.equal(attempt?.stream, false);
    // Metered costs are doubles, as in SQLite (only the budget ledger is exact decimal).
    assert.ok(Math.abs((await a.chargedToSession("ses-1")) - 0.02) < 1e-12);
  });

  void it("keeps secrets and session tokens, revoking each token once", async () => {
    const secret = { name: "anthropic", iv: randomBytes(12), ciphertext: randomBytes(40), tag: randomBytes(16) };
    assert.deepEqual(await a.putSecret(secret, new Date(1000)), { replaced: false });
    assert.deepEqual(await b.putSecret({ ...secret, ciphertext: Buffer.from("new") }, new Date(2000)), { replaced: true });
    const stored = await a.getSecret("anthropic");
    assert.deepEqual(stored?.ciphertext, Buffer.from("new"));
    assert.deepEqual(stored?.iv, secret.iv);
    assert.equal(stored?.createdAt.getTime(), 1000);
    assert.equal(stored?.updatedAt.getTime(), 2000);
    assert.deepEqual((await b.listSecrets()).map((s) => s.name), ["anthropic"]);
    assert.equal(await a.deleteSecret("anthropic"), true);
    assert.equal(await b.deleteSecret("anthropic"), false);

    for (const hash of ["h1", "h2"]) await a.putToken({ hash, job: "j", agent: "x", session: "ses-t", budgetUsd: 2, createdAt: new Date() });
    assert.equal((await b.findToken("h1"))?.budgetUsd, 2);
    const [first, second] = await Promise.all([a.revokeTokens({ session: "ses-t" }, new Date(5000)), b.revokeTokens({ hash: "h1" }, new Date(6000))]);
    assert.deepEqual([...first, ...second].map((t) => t.hash).sort(), ["h1", "h2"], "each token revoked by exactly one caller");
    assert.ok((await a.findToken("h2"))?.revokedAt);
  });
});
