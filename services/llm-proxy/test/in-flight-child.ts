// A proxy's store in a process of its own, for in-flight-slots.test.ts: it
// mints tokens and uses one, records what its arguments say (calls completed,
// calls retried, calls in flight) and SIGKILLs itself in the same turn of the event loop as the last
// write, so nothing of what it wrote is committed but the first completed call
// (a read commits it, and its slots are taken again by the later calls).
//   node --import tsx in-flight-child.ts <dataDir> <job> <completed> <retried> <in flight>
import { SqliteProxyStore } from "../src/sqlite-proxy-store.js";
import type { PendingAttempt } from "../src/proxy-store.js";

const [dataDir, job, completed, retried, inFlight] = process.argv.slice(2) as [string, string, string, string, string];
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

// Tokens: one committed (a read commits what waits) and first used just before the kill; one minted then.
const token = (hash: string) => ({
  hash,
  job,
  agent: "coder",
  session: `s-${hash}`,
  budgetUsd: 0,
  createdAt: new Date(1_000),
});
await store.putToken(token(`${job}-used`));
await store.listCalls(job);

// Completed calls (their slots freed and some taken again by later calls).
for (let i = 0; i < Number(completed); i += 1) {
  const operationId = `${job}-done-${i}`;
  await store.beginAttempt(pending(operationId, 1));
  await store.recordAttempt({ ...ended(operationId, 2), attempt: 1 });
  await store.recordCall({ ...ended(operationId, 2), attempts: 1 });
  if (i === 0) await store.listCalls(job);
}
// Calls whose first attempt failed and whose second is upstream.
for (let i = 0; i < Number(retried); i += 1) {
  const operationId = `${job}-retried-${i}`;
  await store.beginAttempt(pending(operationId, 1));
  await store.recordAttempt({ ...ended(operationId, 1), attempt: 1 });
  await store.beginAttempt(pending(operationId, 2));
}
// Calls on their first attempt.
for (let i = 0; i < Number(inFlight); i += 1) await store.beginAttempt(pending(`${job}-flying-${i}`, 1));
await store.useToken(`${job}-used`, new Date(2_000));
await store.putToken(token(`${job}-minted`));
process.kill(process.pid, "SIGKILL");
