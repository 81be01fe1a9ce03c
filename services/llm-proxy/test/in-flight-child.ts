// A proxy's store in a process of its own, for in-flight-slots.test.ts, which
// SIGKILLs itself in the same turn of the event loop as its last write.
//   node --import tsx in-flight-child.ts <dataDir> <job> alone|overlapping
// alone: one call at a time, so every row goes to a slot: three calls
// completed (the first committed by a read, the others' records only in
// their slots), a call retried with its second attempt upstream, a token
// first used and 71 minted (past the file's first 64 slots), none committed.
// overlapping: 70 calls in flight at once, the first alone when it came (a
// slot), the rest in pending_calls (each committed before its attempt would
// go out), and a call retried among them.
import { SqliteProxyStore } from "../src/sqlite-proxy-store.js";
import type { PendingAttempt } from "../src/proxy-store.js";

const [dataDir, job, mode] = process.argv.slice(2) as [string, string, "alone" | "overlapping"];
const store = new SqliteProxyStore({ dataDir });
const identity = (operationId: string) => ({
  operationId,
  job,
  agent: "coder",
  session: "s",
  provider: "p",
  model: "m",
  wire: "anthropic",
  stream: false,
});
const pending = (operationId: string, attempt: number): PendingAttempt => ({
  ...identity(operationId),
  attempt,
  startedAt: new Date(1_000),
  attemptStartedAt: new Date(1_000 + attempt),
});
const ended = (operationId: string, attempt: number) => ({
  ...identity(operationId),
  status: attempt === 1 ? 529 : 200,
  outcome: attempt === 1 ? ("http_error" as const) : ("ok" as const),
  usage: { input: 1, output: 2, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
  costUsd: 0.01,
  latencyMs: 3,
  estimated: false,
  startedAt: new Date(1_000),
});

/** A call whose first attempt failed and whose second is upstream. */
async function retried(operationId: string): Promise<void> {
  await store.beginAttempt(pending(operationId, 1));
  await store.recordAttempt({ ...ended(operationId, 1), attempt: 1 });
  await store.beginAttempt(pending(operationId, 2));
}

if (mode === "overlapping") {
  for (let i = 0; i < 70; i += 1) await store.beginAttempt(pending(`${job}-flying-${i}`, 1));
  await retried(`${job}-retried-1`);
  process.kill(process.pid, "SIGKILL");
}

const token = (hash: string) => ({
  hash,
  job,
  agent: "coder",
  session: `s-${hash}`,
  budgetUsd: 0,
  maxModelCalls: 5,
  createdAt: new Date(1_000),
});
await store.putToken(token(`${job}-used`));
await store.listCalls(job);
for (let i = 0; i < 3; i += 1) {
  const operationId = `${job}-done-${i}`;
  await store.beginAttempt(pending(operationId, 1));
  await store.recordAttempt({ ...ended(operationId, 2), attempt: 1 });
  await store.recordCall({ ...ended(operationId, 2), attempts: 1 });
  if (i === 0) await store.listCalls(job);
}
await retried(`${job}-retried-0`);
await store.useToken(`${job}-used`, new Date(2_000));
await store.putToken(token(`${job}-minted`));
for (let i = 0; i < 70; i += 1) await store.putToken(token(`${job}-many-${i}`));
process.kill(process.pid, "SIGKILL");
