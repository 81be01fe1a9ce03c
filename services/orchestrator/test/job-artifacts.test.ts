// A job's artifacts are files under its folder, named after what the session
// called them. Two that end up with one name must not overwrite each other
// (each event lists the path of the file it handed back), and a message the
// re-attach delivers again must find its files, not write copies.
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { storeArtifacts } from "../src/jobs/job-artifacts.js";

const home = mkdtempSync(path.join(os.tmpdir(), "oz0-artifacts-"));
after(() => rmSync(home, { recursive: true, force: true }));

const artifact = (name: string, content: string) => ({
  name,
  content: Buffer.from(content),
  mediaType: "text/plain",
});
const stored = (jobId: string, artifacts: ReturnType<typeof artifact>[]) =>
  storeArtifacts(home, jobId, artifacts).map((a) => [a.name, readFileSync(a.path, "utf8")]);

void test("two artifacts of one message with one name are both kept", () => {
  assert.deepEqual(
    stored("job_same", [
      artifact("src/notes.md", "one"),
      artifact("docs/notes.md", "two"),
      artifact("notes.md", "one"),
      artifact("a\u0000b", "nul"),
      artifact("a\uFFFDb", "replacement"),
    ]),
    [
      ["notes.md", "one"],
      ["notes (2).md", "two"],
      ["notes (3).md", "one"],
      ["a\uFFFDb", "nul"],
      ["a\uFFFDb (2)", "replacement"],
    ],
  );
});

void test("a later message's artifact of the same name is kept apart; a message delivered again writes nothing new", () => {
  const first = [artifact("changes.patch", "first session")];
  assert.deepEqual(stored("job_later", first), [["changes.patch", "first session"]]);
  const later = [artifact("changes.patch", "second session")];
  assert.deepEqual(stored("job_later", later), [["changes (2).patch", "second session"]]);
  // Delivered again after a re-attach: the same names, the same files.
  assert.deepEqual(stored("job_later", first), [["changes.patch", "first session"]]);
  assert.deepEqual(stored("job_later", later), [["changes (2).patch", "second session"]]);
  assert.deepEqual(readdirSync(path.join(home, "jobs", "job_later", "artifacts")).sort(), [
    "changes (2).patch",
    "changes.patch",
  ]);
});

void test("a name near the file system's limit is cut so that a second one still fits", () => {
  const long = `${"é".repeat(119)}.txt`; // 242 bytes
  const names = storeArtifacts(home, "job_long", [artifact(long, "a"), artifact(long, "b")]).map((a) => a.name);
  assert.ok(names.every((n) => Buffer.byteLength(n) <= 255));
  assert.equal(names[0], "é".repeat(100));
  assert.equal(names[1], `${"é".repeat(100)} (2)`);
});

void test("many artifacts of one long name all fit, numbered, with room for the temporary file they are written as", () => {
  const long = "a".repeat(240);
  const stored = storeArtifacts(
    home,
    "job_many_long",
    Array.from({ length: 1_000 }, (_, i) => artifact(long, String(i))),
  );
  assert.equal(new Set(stored.map((a) => a.name)).size, 1_000);
  assert.ok(
    stored.every((a) => Buffer.byteLength(a.name) <= 255 - ".4194304.tmp".length),
    "a seven-digit pid fits too",
  );
});
