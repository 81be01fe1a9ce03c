// needs: postgres
// The proxy's PostgreSQL store on a real server: the ProxyStore contract
// (proxy-store-suite.ts) with two store instances standing for two proxy
// replicas, then what only a shared store does.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import pg from "pg";
import { PostgresProxyStore } from "../src/postgres-proxy-store.js";
import type { StoreChange } from "../src/proxy-store.js";
import { describeProxyStore, isBudgetExhausted, rounded } from "./proxy-store-suite.js";

const url = process.env.DATABASE_URL;
if (!url)
  throw new Error(
    "DATABASE_URL is unset: run through `npm test` (tools/test-infra starts PostgreSQL) or point it at a server",
  );
const connectionString: string = url;

function newSchema(): string {
  return `oz0_proxy_test_${randomBytes(6).toString("hex")}`;
}

async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  } finally {
    await client.end();
  }
}

/** Resolves with the first change `store` hears that matches. */
function heard(store: PostgresProxyStore, match: (change: StoreChange) => boolean): Promise<StoreChange> {
  return new Promise((resolve) => {
    const stop = store.watch((change) => {
      if (!match(change)) return;
      stop();
      resolve(change);
    });
  });
}

describeProxyStore("PostgresProxyStore", async () => {
  const schema = newSchema();
  // Opened at once, as replicas starting together would: the migration runs once.
  const [a, b] = await Promise.all([
    PostgresProxyStore.open({ connectionString, schema, maxConnections: 6 }),
    PostgresProxyStore.open({ connectionString, schema, maxConnections: 6 }),
  ]);
  return {
    a,
    b,
    // Holds and calls that lapse at once: a replica that stopped renewing them.
    crashed: () => PostgresProxyStore.open({ connectionString, schema, reservationHoldMs: 0, sweepIntervalMs: 0 }),
    async close() {
      await a.close();
      await b.close();
      await dropSchema(schema);
    },
  };
});

void describe("PostgresProxyStore across replicas", () => {
  const schema = newSchema();
  let a: PostgresProxyStore;
  let b: PostgresProxyStore;

  before(async () => {
    [a, b] = await Promise.all([
      PostgresProxyStore.open({ connectionString, schema }),
      PostgresProxyStore.open({ connectionString, schema }),
    ]);
  });

  after(async () => {
    await a.close();
    await b.close();
    await dropSchema(schema);
  });

  void it("applies each migration once when replicas start together, and a later start applies none", async () => {
    const third = await PostgresProxyStore.open({ connectionString, schema });
    await third.close();
    const client = new pg.Client({ connectionString });
    await client.connect();
    try {
      const { rows } = await client.query<{ version: number }>(
        `SELECT version FROM ${schema}.oz0_migrations WHERE component = 'llm-proxy' ORDER BY version`,
      );
      assert.deepEqual(
        rows.map((r) => r.version),
        [1, 2, 3, 4, 5, 6, 7, 8, 9],
      );
    } finally {
      await client.end();
    }
  });

  void it("keeps an account while a call holds part of it", async () => {
    const held = await a.reserveBudget({
      session: "ses-held",
      limitUsd: 1,
      worstCaseUsd: 0.25,
      minimumUsd: 0.01,
      partial: false,
    });
    assert.equal(await b.forgetBudget("ses-held"), false, "kept while a call holds part of it");
    await held.settle(0.05);
    assert.equal(await b.forgetBudget("ses-held"), true);
  });

  void it("frees the holds of a replica that died mid-call; a late settle still charges the spend", async () => {
    const short = await PostgresProxyStore.open({ connectionString, schema, reservationHoldMs: 0, sweepIntervalMs: 0 });
    try {
      const orphan = await short.reserveBudget({
        session: "ses-dead",
        limitUsd: 1,
        worstCaseUsd: 0.6,
        minimumUsd: 0.01,
        partial: false,
      });
      await assert.rejects(
        a.reserveBudget({ session: "ses-dead", limitUsd: 1, worstCaseUsd: 0.6, minimumUsd: 0.01, partial: false }),
        isBudgetExhausted,
      );
      assert.equal(await b.releaseExpiredReservations(), 1);
      assert.equal(await a.releaseExpiredReservations(), 0, "freed once");
      assert.deepEqual(rounded(await a.budgetSnapshot("ses-dead")), { limitUsd: 1, spentUsd: 0, reservedUsd: 0 });
      await orphan.settle(0.1);
      assert.deepEqual(rounded(await a.budgetSnapshot("ses-dead")), { limitUsd: 1, spentUsd: 0.1, reservedUsd: 0 });
    } finally {
      await short.close();
    }
  });

  void it("renews the holds of its calls in flight for as long as they run, and a dead replica's stop being renewed", async () => {
    // Renewed every 0.67 s: the holds outlive a loaded machine's pauses by far.
    const busy = await PostgresProxyStore.open({
      connectionString,
      schema,
      reservationHoldMs: 2_000,
      sweepIntervalMs: 0,
    });
    let closed = false;
    try {
      const long = await busy.reserveBudget({
        session: "ses-long",
        limitUsd: 1,
        worstCaseUsd: 0.6,
        minimumUsd: 0.01,
        partial: false,
      });
      // Several hold times pass while the call runs: the sweep at another replica frees nothing.
      for (let i = 0; i < 2; i++) {
        await new Promise((resolve) => setTimeout(resolve, 2_500));
        assert.equal(await b.releaseExpiredReservations(), 0, `still renewed after ${(i + 1) * 2.5} s`);
      }
      assert.equal(rounded(await a.budgetSnapshot("ses-long"))?.reservedUsd, 0.6);
      // The replica dies (its renewals stop with it) while the call is in flight.
      await busy.close();
      closed = true;
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      assert.equal(await b.releaseExpiredReservations(), 1, "freed once no longer renewed");
      assert.equal(rounded(await a.budgetSnapshot("ses-long"))?.reservedUsd, 0);
      assert.equal(long.amountUsd, 0.6);
    } finally {
      if (!closed) await busy.close();
    }
  });

  void it("tells every replica of a secret set or deleted and of a token revoked, when it commits", async () => {
    const setHeard = heard(a, (c) => c.kind === "secret" && c.name === "ROTATED_KEY");
    await b.putSecret(
      { name: "ROTATED_KEY", iv: randomBytes(12), ciphertext: randomBytes(8), tag: randomBytes(16) },
      new Date(),
    );
    assert.deepEqual(await setHeard, { kind: "secret", name: "ROTATED_KEY" });
    const deleteHeard = heard(b, (c) => c.kind === "secret" && c.name === "ROTATED_KEY");
    assert.equal(await a.deleteSecret("ROTATED_KEY"), true);
    await deleteHeard;

    await a.putToken({
      hash: "hash-watched",
      job: "j",
      agent: "x",
      session: "ses-watched",
      budgetUsd: 0,
      maxModelCalls: 0,
      createdAt: new Date(),
    });
    const revokeHeard = heard(a, (c) => c.kind === "token_revoked");
    assert.equal((await b.revokeTokens({ session: "ses-watched" }, new Date())).ended.length, 1);
    assert.deepEqual(await revokeHeard, { kind: "token_revoked", hash: "hash-watched" });
  });

  void it("refuses a schema name that is not a plain identifier", async () => {
    await assert.rejects(
      PostgresProxyStore.open({ connectionString, schema: "oz0; DROP TABLE x" }),
      /lower-case letters/,
    );
  });
});
