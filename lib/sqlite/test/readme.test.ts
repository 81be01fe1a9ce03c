// The README's example runs and prints what it says.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { test } from "node:test";

const here = path.dirname(fileURLToPath(import.meta.url));
const readme = readFileSync(path.join(here, "..", "README.md"), "utf8");

void test("the README's example adopts a file from before, migrates it, and finds nothing to do the second time", async () => {
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  assert.equal(blocks.length, 1);
  const file = path.join(here, `.readme-${process.pid}.ts`);
  writeFileSync(file, blocks[0]!);
  try {
    const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", file]);
    assert.equal(stdout.trim(), /\/\/ → (.*)/.exec(blocks[0]!)![1]!);
  } finally {
    rmSync(file, { force: true });
  }
});
