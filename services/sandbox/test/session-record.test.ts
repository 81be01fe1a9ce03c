// A kept session's record is written without O_TRUNC (a reused internal
// folder holds the file, emptied; ext4 writes back a file truncated and
// written again when it is closed): whatever the file held before, the
// record reads back whole and alone.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { StartSessionSchema } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { resolveSessionPaths } from "../src/session-directories.js";
import { readSessionRecord, writeSessionRecord, type SessionRecord } from "../src/session-record.js";

function recordIn(root: string): SessionRecord {
  const paths = resolveSessionPaths({ root, sessionId: "s1", workingDir: "", stateDir: "" });
  mkdirSync(paths.internalDir, { recursive: true });
  const request = create(SessionRequestSchema, { sessionId: "s1", jobId: "job-1", input: "hello" });
  return {
    start: create(StartSessionSchema, { request, command: ["harness"] }),
    request,
    command: ["harness"],
    paths,
    keeper: { pid: 4242, startTime: "17" },
    baseline: "empty",
    startTime: new Date(0).toISOString(),
  };
}

void describe("session record", () => {
  for (const [name, before] of [
    ["a new file", undefined],
    ["an emptied one", ""],
    ["one holding a longer leftover", `{"version":1,"request":${JSON.stringify("x".repeat(10_000))}}`],
  ] as const) {
    void it(`reads back whole when written over ${name}`, (t) => {
      const root = mkdtempSync(path.join(os.tmpdir(), "oz0-record-"));
      t.after(() => rmSync(root, { recursive: true, force: true }));
      const record = recordIn(root);
      const file = path.join(record.paths.internalDir, "session.json");
      if (before !== undefined) writeFileSync(file, before);

      writeSessionRecord(record);

      const read = readSessionRecord(record.paths.internalDir);
      assert.equal(read?.request.input, "hello");
      assert.deepEqual(read?.keeper, record.keeper);
      assert.doesNotMatch(readFileSync(file, "utf8"), /xxxx/, "nothing of what the file held");
      if (before === undefined) assert.equal(statSync(file).mode & 0o777, 0o600);
    });
  }

  void it("keeps the uid the session runs under, and none for one run as the sandbox's user", (t) => {
    const root = mkdtempSync(path.join(os.tmpdir(), "oz0-record-"));
    t.after(() => rmSync(root, { recursive: true, force: true }));
    const record = recordIn(root);
    writeSessionRecord({ ...record, uid: 200_123 });
    assert.equal(readSessionRecord(record.paths.internalDir)?.uid, 200_123);
    writeSessionRecord(record);
    assert.equal(readSessionRecord(record.paths.internalDir)?.uid, undefined);
  });
});
