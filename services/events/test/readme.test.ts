// The README's code runs, and its policy table matches the policy, so
// neither rots.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { test } from "node:test";
import { EVENT_POLICY, publicAttributes } from "@oz0/events";
import { LIFECYCLE_EVENTS, LIFECYCLE_TYPES } from "@oz0/events-client";

const here = path.dirname(fileURLToPath(import.meta.url));
const readme = readFileSync(path.join(here, "..", "README.md"), "utf8");

void test("the README's example runs and prints what it says", async () => {
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  assert.equal(blocks.length, 1);
  const file = path.join(here, `.readme-${process.pid}.ts`);
  writeFileSync(file, blocks[0]!);
  try {
    const { stdout } = await promisify(execFile)(process.execPath, ["--import", "tsx", file], {
      env: { ...process.env, OZ0_LOG_LEVEL: "warn" },
    });
    const expected = /\/\/ → (.*)/.exec(blocks[0]!)![1]!;
    assert.equal(stdout.trim(), expected);
  } finally {
    rmSync(file, { force: true });
  }
});

void test("the README's policy table lists every lifecycle type with who sends it and exactly its public attributes", () => {
  const rows = [...readme.matchAll(/^\| `([a-z_.]+)` \| ([a-z, -]+) \| (.*) \|$/gm)].map(
    (m) =>
      [
        m[1]!,
        { sentBy: m[2]!.split(", "), attributes: [...m[3]!.matchAll(/`([a-z_]+)`/g)].map((a) => a[1]!) },
      ] as const,
  );
  assert.deepEqual(
    Object.fromEntries(rows),
    Object.fromEntries(
      LIFECYCLE_TYPES.map((type) => [
        type,
        { sentBy: [...LIFECYCLE_EVENTS[type].sentBy], attributes: publicAttributes(type) },
      ]),
    ),
  );
  assert.deepEqual(
    Object.keys(EVENT_POLICY),
    [...LIFECYCLE_TYPES],
    "the policy follows the list's order, as the table does",
  );
});
