// needs: kafka, postgres
// The servers `npm test` starts answer like the real things they are, and
// the runner starts only what the selected test files need.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, test } from "node:test";
import { Kafka, logLevel } from "kafkajs";
import pg from "pg";
import { InfrastructureError, startKafka, startPostgres, testNeeds } from "@oz0/test-infra";

void describe("the runner's infrastructure", () => {
  void test("Kafka from KAFKA_BROKERS takes and returns a message", async () => {
    const brokers = (process.env.KAFKA_BROKERS ?? "").split(",").filter(Boolean);
    assert.ok(brokers.length > 0, "the runner exports KAFKA_BROKERS");
    const kafka = new Kafka({ clientId: "oz0-test-infra-test", brokers, logLevel: logLevel.NOTHING });
    const topic = `oz0.test-infra.${process.pid}.${Date.now()}`;
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    await producer.send({ topic, acks: -1, messages: [{ key: "k", value: "hello" }] });
    await producer.disconnect();
    const consumer = kafka.consumer({ groupId: `g-${process.pid}-${Date.now()}` });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    const value = await new Promise<string>((resolve, reject) => {
      consumer.run({ eachMessage: async ({ message }) => resolve(message.value!.toString()) }).catch(reject);
    });
    await consumer.disconnect();
    assert.equal(value, "hello");
  });

  void test("PostgreSQL from DATABASE_URL runs queries", async () => {
    assert.ok(process.env.DATABASE_URL, "the runner exports DATABASE_URL");
    const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await client.connect();
    try {
      await client.query("CREATE TABLE IF NOT EXISTS launcher_probe (id serial PRIMARY KEY, note text)");
      await client.query("INSERT INTO launcher_probe (note) VALUES ($1)", ["hi"]);
      const { rows } = await client.query<{ note: string }>("SELECT note FROM launcher_probe");
      assert.ok(rows.some((r) => r.note === "hi"));
    } finally {
      await client.end();
    }
  });

  void test("startPostgres gives a test a server of its own, removed on close", async () => {
    const own = await startPostgres({ database: "mine" });
    const client = new pg.Client({ connectionString: own.url });
    await client.connect();
    const { rows } = await client.query<{ db: string }>("SELECT current_database() AS db");
    await client.end();
    assert.equal(rows[0]!.db, "mine");
    await own.close();
    await assert.rejects(async () => {
      const late = new pg.Client({ connectionString: own.url, connectionTimeoutMillis: 1000 });
      try {
        await late.connect();
      } finally {
        await late.end().catch(() => undefined);
      }
    });
  });
});

void describe("startKafka's SCRAM users", () => {
  void test("a name or password the format tool would split is refused before anything starts", async () => {
    for (const user of [
      { username: "events", password: "a,b" },
      { username: "ev]ents", password: "secret" },
      { username: "events", password: 'quo"te' },
    ])
      await assert.rejects(startKafka({ scramUsers: [user] }), (error: unknown) => {
        assert.ok(error instanceof InfrastructureError);
        assert.equal(error.code, "KAFKA_SCRAM_USER_INVALID");
        // The refusal names the field, never the value: a test's password stays out of its report.
        assert.doesNotMatch(error.message, /a,b|ev\]ents|quo"te/);
        return true;
      });
  });
});

void describe("testNeeds", () => {
  void test("reads `// needs:` lines and the variables a file reads", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "oz0-needs-"));
    try {
      const file = (name: string, text: string): string => {
        const p = path.join(dir, name);
        writeFileSync(p, text);
        return p;
      };
      const plain = file("plain.test.ts", "import { test } from 'node:test';\n");
      const marked = file("marked.test.ts", "// needs: kafka\n");
      const readsUrl = file("db.test.ts", "const url = process.env.DATABASE_URL;\n");
      const namesOnly = file("manifest.test.ts", "assert.equal(env.KAFKA_BROKERS, 'kafka:9092');\n");
      assert.deepEqual(testNeeds([plain]), { kafka: false, postgres: false });
      assert.deepEqual(testNeeds([plain, marked]), { kafka: true, postgres: false });
      assert.deepEqual(testNeeds([readsUrl]), { kafka: false, postgres: true });
      assert.deepEqual(testNeeds([namesOnly]), { kafka: false, postgres: false });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
