// needs: postgres
// A PostgreSQL schema the proxy migrated before its migrations were shared
// with SQLite (postgres-migrations.ts, versions 1-4 as raw SQL) stays what it
// was: the shared migrations find every version recorded, every row reads
// back through the store, and a new schema built from the shared migrations
// has the very tables, columns, indexes and functions the old SQL made.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import pg from "pg";
import { PostgresProxyStore } from "../src/postgres-proxy-store.js";
import { migratePostgres } from "../src/store-migrations.js";

const url = process.env.DATABASE_URL;
if (!url)
  throw new Error(
    "DATABASE_URL is unset: run through `npm test` (tools/test-infra starts PostgreSQL) or point it at a server",
  );
const connectionString: string = url;
const oldSchemaSql = readFileSync(
  new URL("./fixtures/old-schemas/postgres-before-shared-migrations.sql", import.meta.url),
  "utf8",
);

async function withClient<T>(use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}

const newSchema = (): string => `oz0_proxy_upgrade_${randomBytes(6).toString("hex")}`;

/** Columns (type, nullability, default), indexes and functions of `schema`, named without the schema. */
function describe(schema: string): Promise<string[]> {
  return withClient(async (client) => {
    const lines = await client.query<{ line: string }>(
      `SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '') AS line
         FROM information_schema.columns WHERE table_schema = $1 AND table_name <> 'oz0_migrations'
       UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename <> 'oz0_migrations'
       UNION ALL SELECT 'function ' || p.proname || '(' || pg_get_function_arguments(p.oid) || ') ' || md5(p.prosrc)
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1`,
      [schema],
    );
    return lines.rows.map((r) => r.line.replaceAll(`${schema}.`, "")).sort();
  });
}

void test("postgres: a schema the old migrations made is migrated forward with nothing lost", async (t) => {
  const schema = newSchema();
  const fresh = newSchema();
  t.after(() =>
    withClient((client) =>
      client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE; DROP SCHEMA IF EXISTS ${fresh} CASCADE`),
    ),
  );
  await withClient((client) => client.query(`CREATE SCHEMA ${schema}; SET search_path TO ${schema}; ${oldSchemaSql}`));
  const store = await PostgresProxyStore.open({ connectionString, schema, sweepIntervalMs: 0 });
  try {
    const pool = new pg.Pool({ connectionString, max: 1, options: `-c search_path=${schema}` });
    try {
      assert.deepEqual(await migratePostgres(pool, schema), [], "versions 1-4 are the old ones, already recorded");
    } finally {
      await pool.end();
    }
    const secret = await store.getSecret("anthropic");
    assert.deepEqual(secret?.ciphertext, Buffer.from("cafe", "hex"));
    assert.equal(secret?.updatedAt.toISOString(), "2025-12-01T00:00:00.600Z");
    const token = await store.findToken("h-old");
    assert.equal(token?.usedAt?.toISOString(), "2025-12-01T00:00:01.500Z");
    const [call] = await store.listCalls("job-old");
    assert.deepEqual(call?.usage, { input: 10, output: 5, cacheRead: 1, cacheWrite: 2, reasoning: 0 });
    assert.equal((await store.listAttempts("job-old")).length, 1);
    assert.equal((await store.usageByAgent("job-old")).get("agent-old")?.costUsd, 0.25);
    assert.deepEqual(await store.budgetSnapshot("ses-old"), { limitUsd: 5, spentUsd: 0.25, reservedUsd: 0 });
    // The call in flight whose claim lapsed is reconciled as interrupted.
    assert.deepEqual(
      (await store.reconcileInterrupted()).map((r) => [r.operationId, r.outcome]),
      [["op-dead", "interrupted"]],
    );
    // The old budget functions still serve.
    const hold = await store.reserveBudget({
      session: "ses-old",
      limitUsd: 5,
      worstCaseUsd: 1,
      minimumUsd: 0.1,
      partial: false,
    });
    await hold.settle(0.5);
    assert.equal((await store.budgetSnapshot("ses-old"))?.spentUsd, 0.75);
    assert.equal((await store.revokeTokens({ session: "ses-old" }, new Date())).use, "used");
  } finally {
    await store.close();
  }
  // A new schema from the shared migrations is the one the old SQL made.
  await (await PostgresProxyStore.open({ connectionString, schema: fresh, sweepIntervalMs: 0 })).close();
  assert.deepEqual(await describe(fresh), await describe(schema));
});
