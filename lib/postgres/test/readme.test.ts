// needs: postgres
// The README's example runs against the real server and prints what it says.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { test } from "node:test";
import pg from "pg";

const here = path.dirname(fileURLToPath(import.meta.url));
const readme = readFileSync(path.join(here, "..", "README.md"), "utf8");

void test("the README's example migrates, listens, hears its notice and exits", async () => {
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  assert.equal(blocks.length, 1);
  const schema = `oz0_readme_${randomBytes(6).toString("hex")}`;
  const file = path.join(here, `.readme-${process.pid}.ts`);
  writeFileSync(file, blocks[0]!);
  try {
    const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", file], {
      env: { ...process.env, OZ0_DATABASE_SCHEMA: schema },
    });
    assert.equal(stdout.trim(), /\/\/ → (.*)/.exec(blocks[0]!)![1]!);
  } finally {
    rmSync(file, { force: true });
    const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  }
});
