// lockDataDirectory against real processes: a second process is refused at
// once while the first holds the directory, naming it; the lock goes with its
// holder however it ends (SIGKILL included); a second store in one process is
// refused too; release lets the directory go.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { DataDirectoryInUseError, lockDataDirectory } from "../src/data-directory-lock.js";

const LOCK_MODULE = path.join(import.meta.dirname, "..", "src", "data-directory-lock.ts");

/** A process that takes the directory, says "held" and waits to be killed. */
async function holder(dir: string): Promise<{ pid: number; kill: () => Promise<void> }> {
  const program = `
    const { lockDataDirectory } = await import(${JSON.stringify(LOCK_MODULE)});
    lockDataDirectory({ dir: ${JSON.stringify(dir)}, name: "events" });
    process.stdout.write("held\\n");
    setInterval(() => undefined, 60_000);
  `;
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", program], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
  await new Promise<void>((resolve, reject) => {
    child.stdout.on("data", (chunk: Buffer) => {
      if (chunk.toString().includes("held")) resolve();
    });
    child.once("exit", (code) => reject(new Error(`the holder exited (${code}) before taking the lock: ${output}`)));
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  return {
    pid: child.pid!,
    kill: async () => {
      child.kill("SIGKILL");
      await exited;
    },
  };
}

void test("a second process is refused the data directory while the first holds it, naming its pid, and gets it once the first is SIGKILLed", async (t) => {
  const dir = mkdtempSync(path.join(tmpdir(), "oz0-dir-lock-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const first = await holder(dir);
  try {
    assert.throws(
      () => lockDataDirectory({ dir, name: "events" }),
      (error: unknown) =>
        error instanceof DataDirectoryInUseError &&
        error.code === "data_directory_in_use" &&
        error.message.includes(`in use by another events process (pid ${first.pid})`) &&
        error.message.includes("give this one a data directory of its own"),
    );
  } finally {
    await first.kill();
  }
  // No stale lock: the kernel let it go with the process.
  const lock = lockDataDirectory({ dir, name: "events" });
  lock.release();
});

void test("one process cannot take a directory twice; after release it can again, and another name is another lock", () => {
  const dir = mkdtempSync(path.join(tmpdir(), "oz0-dir-lock-"));
  try {
    const lock = lockDataDirectory({ dir, name: "llm-proxy" });
    assert.throws(() => lockDataDirectory({ dir, name: "llm-proxy" }), /this process: a store opened twice/);
    const other = lockDataDirectory({ dir, name: "events" });
    other.release();
    lock.release();
    lock.release();
    lockDataDirectory({ dir, name: "llm-proxy" }).release();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
