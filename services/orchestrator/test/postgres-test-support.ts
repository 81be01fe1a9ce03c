// What the PostgreSQL tests share: the server from DATABASE_URL (npm test
// starts one), a schema of their own per test (every test file shares the
// server, so schemas keep runs apart), and a job record to store.
import { randomBytes } from "node:crypto";
import pg from "pg";
import type { JobRecord } from "../src/store/job-store.js";

export { eventually } from "./support/eventually.js";

export function databaseUrl(): string {
  const url = process.env.DATABASE_URL;
  if (!url)
    throw new Error(
      "DATABASE_URL is unset: run through `npm test` (tools/test-infra starts PostgreSQL) or point it at a server",
    );
  return url;
}

export function freshSchema(): string {
  return `oz0_test_${randomBytes(6).toString("hex")}`;
}

export async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  } finally {
    await client.end();
  }
}

export function jobRecord(id: string, overrides: Partial<JobRecord> = {}): JobRecord {
  const now = new Date();
  return {
    id,
    startedBy: "",
    agentName: "fixer",
    agentVersion: 1,
    input: `task ${id}`,
    state: "pending",
    createdAt: now,
    updatedAt: now,
    resultText: "",
    stopReason: 0,
    error: "",
    sessionId: `ses_${id}`,
    sandboxUrl: "",
    ruleBroken: "",
    lastSeq: 0,
    sandboxSeq: 0,
    attachments: [],
    tokenId: "",
    servedTools: "",
    ...overrides,
  };
}
