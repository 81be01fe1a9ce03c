// Crash tests: a child process runs a graph with SQLite checkpoints and is
// SIGKILLed inside a step; a new process resumes the run. Every step must be
// recorded exactly once, steps recorded before the crash must not run again,
// and the final bag must be what an uninterrupted run produces.
import assert from "node:assert/strict";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";

const worker = fileURLToPath(new URL("./fixtures/crash-worker.ts", import.meta.url));
const dirs: string[] = [];
after(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

interface Worker {
  child: ChildProcessWithoutNullStreams;
  /** Resolves with the first stdout line starting with `prefix`. */
  waitFor(prefix: string): Promise<string>;
  exited: Promise<number | null>;
}

function startWorker(args: string[]): Worker {
  const child = spawn(process.execPath, ["--import", "tsx", worker, ...args], { stdio: ["pipe", "pipe", "pipe"] });
  const lines: string[] = [];
  const waiters: { prefix: string; resolve: (l: string) => void }[] = [];
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  createInterface({ input: child.stdout }).on("line", (line) => {
    lines.push(line);
    for (const w of [...waiters]) {
      if (line.startsWith(w.prefix)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(line);
      }
    }
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return {
    child,
    exited,
    waitFor: (prefix) =>
      new Promise((resolve, reject) => {
        const seen = lines.find((l) => l.startsWith(prefix));
        if (seen) return resolve(seen);
        waiters.push({ prefix, resolve });
        void exited.then((code) => reject(new Error(`worker exited (${code}) before printing "${prefix}": ${stderr}`)));
      }),
  };
}

interface Outcome {
  status: string;
  bag: Record<string, unknown>;
  rows: { path: string; n: number }[];
}

async function finish(w: Worker): Promise<Outcome> {
  const line = await w.waitFor("RESULT ");
  await w.exited;
  return JSON.parse(line.slice("RESULT ".length)) as Outcome;
}

function setup(scenario: string): {
  args: (mode: string, stall?: string) => string[];
  log: () => string[];
  db: string;
} {
  const dir = mkdtempSync(path.join(tmpdir(), "oz0-graph-crash-"));
  dirs.push(dir);
  const db = path.join(dir, "graph.db");
  const log = path.join(dir, "executions.log");
  writeFileSync(log, "");
  return {
    db,
    args: (mode, stall) => [mode, scenario, db, log, "run-1", ...(stall ? [stall] : [])],
    log: () => readFileSync(log, "utf8").split("\n").filter(Boolean),
  };
}

async function kill(w: Worker): Promise<void> {
  w.child.kill("SIGKILL");
  await w.exited;
}

void test("SIGKILL in the middle of a step: the resumed run continues at that step and records each step once", async () => {
  const s = setup("sequence");
  const first = startWorker(s.args("start", "s3"));
  await first.waitFor("STALLED s3");
  await kill(first);
  assert.deepEqual(
    s.log().map((l) => l.split(" ")[0]),
    ["s1", "s2", "s3"],
  );

  const out = await finish(startWorker(s.args("resume")));
  assert.equal(out.status, "succeeded");
  // s1 and s2 ran once; s3 was in flight and ran again (at-least-once) with the same idempotency key.
  assert.deepEqual(s.log(), ["s1 run-1/0", "s2 run-1/1", "s3 run-1/2", "s3 run-1/2", "s4 run-1/3", "s5 run-1/4"]);
  assert.deepEqual(
    out.rows.map((r) => [r.path, r.n]),
    [
      ["/0", 1],
      ["/1", 1],
      ["/2", 1],
      ["/3", 1],
      ["/4", 1],
    ],
  );
  assert.equal(out.bag.count, 5);
  assert.equal(out.bag["s5@0"], 5);
});

void test("SIGKILL in one parallel branch: the other branch's recorded steps are not run again", async () => {
  const s = setup("parallel");
  const first = startWorker(s.args("start", "b2"));
  await first.waitFor("STALLED b2");
  await kill(first);
  const before = s.log().map((l) => l.split(" ")[0]);
  assert.deepEqual([...before].sort(), ["a1", "a2", "a3", "b1", "b2"]);

  const out = await finish(startWorker(s.args("resume")));
  assert.equal(out.status, "succeeded");
  const ran = s.log().map((l) => l.split(" ")[0]);
  const count = (name: string): number => ran.filter((n) => n === name).length;
  assert.deepEqual(["a1", "a2", "a3", "b1", "b2", "b3"].map(count), [1, 1, 1, 1, 2, 1]);
  assert.equal(out.rows.length, 6);
  assert.ok(out.rows.every((r) => r.n === 1));
  // Each branch counted from the bag as it was at the fork; the later branch's `count` wins at the join.
  assert.equal(out.bag["a3@0"], 3);
  assert.equal(out.bag["b3@0"], 3);
  assert.equal(out.bag.count, 3);
});

void test("SIGKILL inside the second loop iteration: iterations replay and the loop ends where it should", async () => {
  const s = setup("loop");
  const first = startWorker(s.args("start", "w2"));
  await first.waitFor("STALLED w2");
  await kill(first);

  const out = await finish(startWorker(s.args("resume")));
  assert.equal(out.status, "succeeded");
  const ran = s.log();
  const count = (entry: string): number => ran.filter((l) => l === entry).length;
  assert.equal(count("first run-1/0"), 1);
  assert.equal(count("w1 run-1/1/1/body/0"), 1);
  assert.equal(count("w2 run-1/1/2/body/1"), 2, "the step in flight ran again");
  assert.equal(count("judge run-1/1/1/until/0"), 1);
  assert.equal(count("last run-1/2"), 1);
  assert.equal(out.bag.count, 8);
  assert.equal(out.bag["w2@3"], 7);
  assert.equal(out.bag.choice, "break");
  assert.ok(out.rows.every((r) => r.n === 1));
  // first + 3 rounds of (w1, w2, judge) + last
  assert.equal(out.rows.length, 11);
});

void test("approvals waiting in two branches are independent: one answered before the crash is not asked again", async () => {
  const s = setup("approvals");
  const first = startWorker(s.args("start"));
  await first.waitFor("WAITING approve-left");
  await first.waitFor("WAITING approve-right");
  writeFileSync(`${s.db}.approve-left`, "yes");
  await first.waitFor("RECORDED step:approve-left");
  await kill(first);

  const second = startWorker(s.args("resume"));
  await second.waitFor("WAITING approve-right");
  writeFileSync(`${s.db}.approve-right`, "yes");
  const out = await finish(second);
  assert.equal(out.status, "succeeded");
  const ran = s.log().map((l) => l.split(" ")[0]);
  assert.equal(ran.filter((n) => n === "approve-left").length, 1);
  assert.equal(ran.filter((n) => n === "approve-right").length, 2);
  assert.equal(out.bag["approve-left"], "approved");
  assert.equal(out.bag["approve-right"], "approved");
  assert.ok(out.rows.every((r) => r.n === 1));
});
