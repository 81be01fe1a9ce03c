// The SQLite store's slots (in-flight-slots.ts) against a real SIGKILL: a
// process killed right after writing calls in flight (before their attempts
// go out) and records (before they are committed) leaves them to the next
// start, which commits each record once and meters each call in flight once
// as interrupted; never a call that completed, never a retried call twice.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import pino from "pino";
import { startLlmProxy } from "../src/index.js";
import type { PendingAttempt } from "../src/proxy-store.js";
import { SqliteProxyStore } from "../src/sqlite-proxy-store.js";

const child = path.join(path.dirname(fileURLToPath(import.meta.url)), "in-flight-child.ts");

/** A call on its first attempt, as the proxy hands it to the store. */
const inFlight = (operationId: string, model = "m"): PendingAttempt => ({
  operationId,
  job: "j",
  agent: "a",
  session: "s",
  provider: "p",
  model,
  wire: "openai",
  stream: false,
  attempt: 1,
  startedAt: new Date(2),
  attemptStartedAt: new Date(2),
});

/** Runs in-flight-child.ts, which SIGKILLs itself once it has written its calls. */
async function killedAfter(options: { dataDir: string; job: string; mode: "alone" | "overlapping" }): Promise<void> {
  const args = [options.dataDir, options.job, options.mode];
  const process_ = spawn(process.execPath, ["--import", "tsx", child, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  process_.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const signal = await new Promise<NodeJS.Signals | null>((resolve) =>
    process_.once("exit", (_code, exitSignal) => resolve(exitSignal)),
  );
  assert.equal(signal, "SIGKILL", output);
}

void test("calls in flight when their process is SIGKILLed are metered once each as interrupted at the next start; completed calls keep their records, committed or not, a retried call is metered once with its last attempt, and tokens minted or first used keep that", async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-in-flight-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  await killedAfter({ dataDir, job: "j", mode: "overlapping" });
  await killedAfter({ dataDir, job: "j", mode: "alone" });
  const committed = new Database(path.join(dataDir, "llm-proxy.sqlite"), { readonly: true });
  try {
    assert.deepEqual(
      committed.prepare("SELECT operation_id FROM calls").all(),
      [{ operation_id: "j-done-0" }],
      "the first completed call alone was committed before its kill",
    );
  } finally {
    committed.close();
  }
  assert.equal(readdirSync(path.join(dataDir, "in-flight")).length, 2, "the dead processes' slot files");

  const store = new SqliteProxyStore({ dataDir });
  try {
    const reconciled = await store.reconcileInterrupted();
    assert.equal(reconciled.length, 72);
    assert.deepEqual(
      reconciled
        .filter((c) => c.operationId.includes("retried"))
        .map((c) => [c.operationId, c.attempts])
        .sort(),
      [
        ["j-retried-0", 2],
        ["j-retried-1", 2],
      ],
    );
    const calls = await store.listCalls("j");
    assert.equal(calls.length, 75);
    assert.equal(new Set(calls.map((c) => c.operationId)).size, 75, "each call once");
    assert.deepEqual(
      calls.filter((c) => c.operationId.includes("done")).map((c) => c.outcome),
      ["ok", "ok", "ok"],
      "completed calls keep their own record: one committed, two taken from their slots",
    );
    assert.ok(calls.filter((c) => !c.operationId.includes("done")).every((c) => c.outcome === "interrupted"));
    const attempts = await store.listAttempts("j");
    assert.deepEqual(
      attempts.filter((a) => a.operationId === "j-done-2").map((a) => [a.attempt, a.outcome]),
      [[1, "ok"]],
    );
    assert.deepEqual(
      attempts.filter((a) => a.operationId === "j-retried-0").map((a) => [a.attempt, a.outcome]),
      [
        [1, "http_error"],
        [2, "interrupted"],
      ],
    );
    assert.equal((await store.reconcileInterrupted()).length, 0, "and never again");
    // Tokens: one minted in the turn of the kill is known; one first used then is on record as used.
    assert.equal((await store.findToken("j-minted"))?.session, "s-j-minted");
    assert.equal((await store.findToken("j-minted"))?.maxModelCalls, 5, "with its limit of model calls");
    assert.equal((await store.findToken("j-used"))?.usedAt?.getTime(), 2_000);
    assert.equal((await store.revokeTokens({ session: "s-j-used" }, new Date(3_000))).use, "used");
    assert.equal((await store.revokeTokens({ session: "s-j-minted" }, new Date(3_000))).use, "never");
    for (let i = 0; i < 70; i += 1)
      assert.ok(await store.findToken(`j-many-${i}`), `token ${i} of 70, past the first 64 slots`);
  } finally {
    await store.close();
  }
  assert.deepEqual(readdirSync(path.join(dataDir, "in-flight")), [], "reconciled files and a clean close leave none");
});

void test("a call's slots are freed once its records are committed, and taken by later calls: calls one after another keep the file at its first size", async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-slots-"));
  const store = new SqliteProxyStore({ dataDir });
  t.after(async () => {
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const slotFile = (): string => {
    const [name] = readdirSync(path.join(dataDir, "in-flight"));
    return path.join(dataDir, "in-flight", name!);
  };
  const firstSize = statSync(slotFile()).size;
  for (let i = 0; i < 200; i += 1) {
    const call = inFlight(`op-${i}`);
    await store.beginAttempt(call);
    await store.recordCall({
      ...call,
      status: 200,
      outcome: "ok",
      usage: { input: 1, output: 2, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
      costUsd: 0,
      latencyMs: 1,
      estimated: false,
      attempts: 1,
    });
    // A read commits what waits (as the few milliseconds' timer does): ten calls' slots at most are taken.
    if (i % 10 === 9) await store.usageByAgent("j");
  }
  assert.equal(statSync(slotFile()).size, firstSize);
  assert.equal((await store.listCalls("j")).length, 200);
});

void test("a call too big for a slot (a model name of kilobytes) is written to pending_calls instead, and reconciled from there", async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-big-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const dead = new SqliteProxyStore({ dataDir });
  const model = "m".repeat(5_000);
  await dead.beginAttempt(inFlight("op-big", model));
  await dead.close();
  const store = new SqliteProxyStore({ dataDir });
  try {
    assert.deepEqual(
      (await store.reconcileInterrupted()).map((c) => [c.operationId, c.outcome, c.model.length]),
      [["op-big", "interrupted", 5_000]],
    );
  } finally {
    await store.close();
  }
});

/** A slot file as a dead process left it: one row (kind, values) a slot, 4 KB each. */
function slotFile(dataDir: string, name: string, rows: unknown[][]): string {
  const dir = path.join(dataDir, "in-flight");
  mkdirSync(dir, { recursive: true });
  const bytes = Buffer.alloc(rows.length * 4096);
  rows.forEach((row, slot) => {
    const json = JSON.stringify(row);
    bytes.writeUInt32LE(Buffer.byteLength(json), slot * 4096);
    bytes.write(json, slot * 4096 + 4);
  });
  const file = path.join(dir, name);
  writeFileSync(file, bytes);
  return file;
}

const GOOD_TOKEN = ["t", "h-good", "j", "a", "s", 1, 5, null, null, 7];

void test("a start refuses a slot file it cannot replay whole (another version's, a row of another shape, a value SQLite refuses), names it, commits none of it and keeps it, and the proxy does not serve", async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-bad-slots-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const cases: [string, unknown[][], RegExp][] = [
    // An earlier version's file (its token rows had 6 values), and one without a version, which is version 1.
    ["dead-1.v1.slots", [GOOD_TOKEN], /dead-1\.v1\.slots is of version 1 .* reads version 4/],
    ["dead-0.slots", [GOOD_TOKEN], /dead-0\.slots is of version 1 .* reads version 4/],
    [
      "dead-2.v4.slots",
      [GOOD_TOKEN, ["t", "h-short", "j"]],
      /dead-2\.v4\.slots holds a row of kind token with 2 values, not 9 in slot 1/,
    ],
    ["dead-3.v4.slots", [GOOD_TOKEN, ["x", 1]], /dead-3\.v4\.slots holds a row of unknown kind "x"/],
    // A budget that was NaN or Infinity, written as null: SQLite refuses it, and the whole replay rolls back.
    [
      "dead-4.v4.slots",
      [GOOD_TOKEN, ["t", "h-null", "j", "a", "s", null, 5, null, null, null]],
      /could not replay the slot file .*dead-4\.v4\.slots \(NOT NULL constraint failed/,
    ],
  ];
  for (const [name, rows, message] of cases) {
    const file = slotFile(dataDir, name, rows);
    const store = new SqliteProxyStore({ dataDir });
    try {
      await assert.rejects(store.reconcileInterrupted(), message);
      assert.equal(await store.findToken("h-good"), undefined, "nothing of the file is committed");
    } finally {
      await store.close();
    }
    await assert.rejects(
      startLlmProxy({ dataDir, providers: [], logger: pino({ level: "silent" }) }),
      (error: Error) =>
        error.message.includes("does not serve") &&
        message.test(error.message) &&
        /move the file out of/.test(error.message),
    );
    assert.ok(existsSync(file), "the file is kept for a version that reads it");
    rmSync(file);
  }
  // Once the file is moved away the proxy starts; a file of this version replays, one of version 2, whose
  // tokens hold no traceparent (7 values), and one of version 3, whose tokens hold no limit of model calls (8).
  slotFile(dataDir, "dead-5.v4.slots", [GOOD_TOKEN]);
  slotFile(dataDir, "dead-6.v2.slots", [["t", "h-v2", "j", "a", "s2", 1, 5, null]]);
  slotFile(dataDir, "dead-7.v3.slots", [["t", "h-v3", "j", "a", "s3", 1, 5, null, null]]);
  const proxy = await startLlmProxy({ dataDir, providers: [], logger: pino({ level: "silent" }) });
  try {
    const good = await proxy.store.findToken("h-good");
    assert.equal(good?.session, "s");
    assert.equal(good?.maxModelCalls, 7);
    const upgraded = await proxy.store.findToken("h-v2");
    assert.equal(upgraded?.session, "s2");
    assert.equal(upgraded?.traceparent, undefined);
    assert.equal(upgraded?.maxModelCalls, 0);
    const fromV3 = await proxy.store.findToken("h-v3");
    assert.equal(fromV3?.session, "s3");
    assert.equal(fromV3?.maxModelCalls, 0);
  } finally {
    await proxy.close();
  }
});
