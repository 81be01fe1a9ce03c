// The README's examples run and print what they say.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { test } from "node:test";

const here = path.dirname(fileURLToPath(import.meta.url));
const readme = readFileSync(path.join(here, "..", "README.md"), "utf8");

void test("the README's examples run and print what they say", async () => {
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  assert.equal(blocks.length, 2, "the lifecycle types' example and the publisher's");
  for (const [i, block] of blocks.entries()) {
    const file = path.join(here, `.readme-${process.pid}-${i}.ts`);
    writeFileSync(file, block);
    try {
      const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", file], {
        env: { ...process.env, OZ0_LOG_LEVEL: "warn" },
      });
      assert.equal(stdout.trim(), /\/\/ → (.*)/.exec(block)![1]!);
    } finally {
      rmSync(file, { force: true });
    }
  }
});
