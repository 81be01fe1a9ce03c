// The ProxyStore contract, run against every store (sqlite-proxy-store.test.ts,
// postgres-proxy-store.test.ts). `a` and `b` are two handles on the same data:
// two replicas for a shared store, the same object for a store one process uses.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { ProxyError } from "../src/proxy-error.js";
import type {
  AttemptRecord,
  BudgetSnapshot,
  CallRecord,
  CountedCall,
  PendingAttempt,
  ProxyStore,
  Reservation,
} from "../src/proxy-store.js";

export interface StorePair {
  a: ProxyStore;
  b: ProxyStore;
  /**
   * Another process on the same data, about to die: closing it leaves what it
   * had in flight (SQLite: another store on the file; PostgreSQL: a replica
   * whose holds and calls lapse at once, as if it had stopped renewing).
   */
  crashed(): Promise<ProxyStore>;
  close(): Promise<void>;
}

export function call(overrides: Partial<CallRecord> & Pick<CallRecord, "operationId">): CallRecord {
  return {
    job: "job-1",
    agent: "fixer",
    session: "ses-1",
    provider: "anthropic",
    model: "claude-sonnet-5",
    wire: "anthropic",
    stream: false,
    status: 200,
    outcome: "ok",
    usage: { input: 10, output: 20, cacheRead: 1, cacheWrite: 2, reasoning: 0 },
    costUsd: 0.001,
    latencyMs: 12.5,
    estimated: false,
    startedAt: new Date(),
    attempts: 1,
    ...overrides,
  };
}

export function isBudgetExhausted(error: unknown): boolean {
  return error instanceof ProxyError && error.code === "budget_exhausted";
}

export function isModelCallsExhausted(error: unknown): boolean {
  return error instanceof ProxyError && error.code === "model_calls_exhausted";
}

/** Dollars to the nanodollar: the SQLite ledger adds doubles, PostgreSQL's adds decimals. */
export function rounded(snapshot: BudgetSnapshot | undefined): BudgetSnapshot | undefined {
  if (!snapshot) return undefined;
  const r = (n: number): number => Math.round(n * 1e9) / 1e9;
  return { limitUsd: r(snapshot.limitUsd), spentUsd: r(snapshot.spentUsd), reservedUsd: r(snapshot.reservedUsd) };
}

/** An attempt of a call to Anthropic by the agent `fixer`, started a second ago. */
function pendingAttempt(
  o: Pick<PendingAttempt, "operationId" | "job" | "session" | "attempt" | "reservationId">,
): PendingAttempt {
  return {
    agent: "fixer",
    provider: "anthropic",
    model: "claude-sonnet-5",
    wire: "anthropic",
    stream: true,
    startedAt: new Date(Date.now() - 1_000),
    attemptStartedAt: new Date(),
    ...o,
  };
}

export function describeProxyStore(name: string, open: () => Promise<StorePair>): void {
  void describe(`${name}: the ProxyStore contract`, () => {
    let a: ProxyStore;
    let b: ProxyStore;
    let pair: StorePair;
    // Every test names its own jobs and sessions: the data outlives each test.
    const unique = (label: string): string => `${label}-${randomBytes(4).toString("hex")}`;

    before(async () => {
      pair = await open();
      ({ a, b } = pair);
    });
    after(() => pair.close());

    void it("keeps secrets: create, replace, read, list names, delete once", async () => {
      const secret = {
        name: unique("KEY").toUpperCase().replace(/-/g, "_"),
        iv: randomBytes(12),
        ciphertext: randomBytes(40),
        tag: randomBytes(16),
      };
      assert.deepEqual(await a.putSecret(secret, new Date(1000)), { replaced: false });
      assert.deepEqual(await b.putSecret({ ...secret, ciphertext: Buffer.from("new") }, new Date(2000)), {
        replaced: true,
      });
      const stored = await a.getSecret(secret.name);
      assert.deepEqual(stored?.ciphertext, Buffer.from("new"));
      assert.deepEqual(stored?.iv, secret.iv);
      assert.deepEqual(stored?.tag, secret.tag);
      assert.equal(stored?.createdAt.getTime(), 1000);
      assert.equal(stored?.updatedAt.getTime(), 2000);
      assert.ok((await b.listSecrets()).some((s) => s.name === secret.name && s.updatedAt.getTime() === 2000));
      assert.equal(await a.deleteSecret(secret.name), true);
      assert.equal(await b.deleteSecret(secret.name), false);
      assert.equal(await b.getSecret(secret.name), undefined);
    });

    void it("keeps session tokens, and revokes each token once however many callers revoke at once", async () => {
      const session = unique("ses-t");
      const [h1, h2, h3] = [unique("h1"), unique("h2"), unique("h3")];
      for (const hash of [h1, h2])
        await a.putToken({
          hash,
          job: "j",
          agent: "x",
          session,
          budgetUsd: 2,
          maxModelCalls: 12,
          createdAt: new Date(3000),
        });
      // Minted inside a session's span: the trace its calls go in, kept with the token.
      const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
      await b.putToken({
        hash: h3,
        job: "j",
        agent: "x",
        session: unique("other"),
        budgetUsd: 0,
        maxModelCalls: 0,
        traceparent,
        createdAt: new Date(3000),
      });
      const found = await b.findToken(h1);
      assert.deepEqual(found, {
        hash: h1,
        job: "j",
        agent: "x",
        session,
        budgetUsd: 2,
        maxModelCalls: 12,
        createdAt: new Date(3000),
      });
      assert.equal((await a.findToken(h3))?.traceparent, traceparent);
      assert.equal(await a.findToken(unique("nope")), undefined);
      const [first, second] = await Promise.all([
        a.revokeTokens({ session }, new Date(5000)),
        b.revokeTokens({ hash: h1 }, new Date(6000)),
      ]);
      const ended = [...first.ended, ...second.ended];
      assert.deepEqual(ended.map((t) => t.hash).sort(), [h1, h2].sort(), "each token revoked by exactly one caller");
      assert.ok(ended.every((t) => t.revokedAt instanceof Date));
      assert.deepEqual([first.use, second.use], ["never", "never"], "no model call carried them");
      assert.ok((await a.findToken(h2))?.revokedAt);
      assert.equal((await b.findToken(h3))?.revokedAt, undefined, "another session's token lives on");
      assert.deepEqual(
        await a.revokeTokens({ session }, new Date(7000)),
        { ended: [], use: "never" },
        "nothing left to revoke",
      );
      assert.deepEqual(
        await a.revokeTokens({ session: unique("never-minted") }, new Date(7000)),
        { ended: [], use: "unknown" },
        "no token matched",
      );
    });

    void it("marks a token used at its first call, keeps that time, refuses it once revoked, and a revocation reports the use", async () => {
      const [used, unused] = [unique("ses-used"), unique("ses-unused")];
      for (const session of [used, unused])
        await a.putToken({
          hash: `h-${session}`,
          job: "j",
          agent: "x",
          session,
          budgetUsd: 0,
          maxModelCalls: 0,
          createdAt: new Date(3000),
        });
      assert.equal((await b.useToken(`h-${used}`, new Date(4000)))?.usedAt?.getTime(), 4000);
      assert.equal(
        (await a.useToken(`h-${used}`, new Date(4500)))?.usedAt?.getTime(),
        4000,
        "the first use's time is kept",
      );
      assert.equal(await a.useToken(unique("h-nope"), new Date(4500)), undefined, "an unknown token is refused");
      assert.deepEqual(
        (await b.revokeTokens({ session: used }, new Date(5000))).use,
        "used",
        "the revocation of a used token says so",
      );
      assert.equal(await a.useToken(`h-${used}`, new Date(6000)), undefined, "a revoked token is refused");
      assert.equal(
        (await a.revokeTokens({ session: used }, new Date(7000))).use,
        "used",
        "revoked before, used before: still reported",
      );
      assert.deepEqual((await a.revokeTokens({ hash: `h-${unused}` }, new Date(5000))).use, "never");
      assert.equal(await b.useToken(`h-${unused}`, new Date(6000)), undefined, "never used, now revoked: never usable");
    });

    void it("orders uses and revocations racing on one token: used is true exactly when a use got through", async () => {
      for (let round = 0; round < 20; round++) {
        const session = unique(`ses-race-${round}`);
        await a.putToken({
          hash: `h-${session}`,
          job: "j",
          agent: "x",
          session,
          budgetUsd: 0,
          maxModelCalls: 0,
          createdAt: new Date(3000),
        });
        const [uses, revoked] = await Promise.all([
          Promise.all([a, b, a].map((store) => store.useToken(`h-${session}`, new Date(4000)))),
          (round % 2 ? a : b).revokeTokens({ session }, new Date(4000)),
        ]);
        assert.equal(
          revoked.use,
          uses.some((u) => u !== undefined) ? "used" : "never",
          `round ${round}: a use got through exactly when the revocation reports one`,
        );
      }
    });

    void it("refuses a record whose figures are not numbers, and keeps storing every other", async () => {
      const job = unique("job-nan");
      const session = unique("ses-nan");
      for (const bad of [{ costUsd: Number.NaN }, { latencyMs: Number.POSITIVE_INFINITY }]) {
        await assert.rejects(
          async () => a.recordCall(call({ operationId: unique("op-bad"), job, session, ...bad })),
          /not a finite number; it is not stored/,
        );
        await assert.rejects(
          async () => a.recordAttempt({ ...call({ operationId: unique("op-bad"), job, session, ...bad }), attempt: 1 }),
          /not a finite number; it is not stored/,
        );
      }
      await a.recordCall(call({ operationId: unique("op-good"), job, session, costUsd: 0.25 }));
      const calls = await b.listCalls(job);
      assert.deepEqual(
        calls.map((c) => c.costUsd),
        [0.25],
      );
    });

    void it("sums every job's calls per agent over a window of their starts, ends excluded", async () => {
      // A window of its own in the past: the suite's other calls start now.
      const at = (iso: string): Date => new Date(iso);
      const writer = unique("writer");
      const reviewer = unique("reviewer");
      const calls: [string, string, string][] = [
        ["2001-03-04T09:59:59.999Z", writer, unique("job-w0")], // before the window
        ["2001-03-04T10:00:00.000Z", writer, unique("job-w1")], // at its start: in
        ["2001-03-04T11:30:00.000Z", writer, unique("job-w2")],
        ["2001-03-04T11:45:00.000Z", reviewer, unique("job-r1")],
        ["2001-03-04T12:00:00.000Z", reviewer, unique("job-r2")], // at its end: out
      ];
      for (const [startedAt, agent, job] of calls)
        await a.recordCall(call({ operationId: unique("op-window"), job, agent, startedAt: at(startedAt) }));
      const totals = await b.usageByAgentBetween(at("2001-03-04T10:00:00Z"), at("2001-03-04T12:00:00Z"));
      assert.deepEqual(
        [...totals].map(([agent, t]) => [agent, t.calls, t.usage.input]),
        [
          [reviewer, 1, 10],
          [writer, 2, 20],
        ].sort((x, y) => (String(x[0]) < String(y[0]) ? -1 : 1)),
      );
      assert.ok(Math.abs(totals.get(writer)!.costUsd - 0.002) < 1e-12);
      assert.deepEqual(await a.usageByAgentBetween(at("2001-03-05T00:00:00Z"), at("2001-03-06T00:00:00Z")), new Map());
    });

    void it("meters calls and attempts from every handle into one set of totals", async () => {
      const job = unique("job-metered");
      const session = unique("ses-metered");
      await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          (i % 2 ? a : b).recordCall(
            call({
              operationId: unique(`op-${i}`),
              job,
              session,
              agent: i < 15 ? "fixer" : "reviewer",
              outcome: i === 3 ? "http_error" : "ok",
              attempts: 2,
              estimated: i === 19,
            }),
          ),
        ),
      );
      const attempt: AttemptRecord = {
        ...call({ operationId: unique("op-a"), job, session }),
        attempt: 1,
        ttftMs: 5,
        stream: true,
        status: 529,
        outcome: "http_error",
      };
      await a.recordAttempt(attempt);
      await b.recordAttempt({
        ...call({ operationId: attempt.operationId, job, session, startedAt: attempt.startedAt }),
        attempt: 2,
        stream: true,
        status: 200,
        outcome: "ok",
      });
      const totals = await b.usageByAgent(job);
      assert.deepEqual([...totals.keys()], ["fixer", "reviewer"]);
      assert.deepEqual(totals.get("fixer"), {
        calls: 15,
        failedCalls: 1,
        attempts: 30,
        usage: { input: 150, output: 300, cacheRead: 15, cacheWrite: 30, reasoning: 0 },
        costUsd: totals.get("fixer")!.costUsd,
        estimated: false,
        providers: ["anthropic"],
      });
      assert.ok(Math.abs(totals.get("fixer")!.costUsd - 0.015) < 1e-12);
      assert.equal(totals.get("reviewer")!.calls, 5);
      assert.equal(totals.get("reviewer")!.estimated, true);
      assert.equal((await a.listCalls(job)).length, 20);
      const attempts = await b.listAttempts(job);
      assert.deepEqual(
        attempts.map((x) => [x.attempt, x.status, x.outcome, x.ttftMs, x.stream]),
        [
          [1, 529, "http_error", 5, true],
          [2, 200, "ok", undefined, true],
        ],
      );
      assert.equal(attempts[0]!.startedAt.getTime(), attempt.startedAt.getTime());
      // Metered costs are doubles (only the budget ledger may be exact decimal).
      assert.ok(Math.abs((await a.chargedToSession(session)) - 0.02) < 1e-12);
      assert.equal(await b.chargedToSession(unique("nobody")), 0);
      assert.deepEqual(await a.usageByAgent(unique("no-job")), new Map());
    });

    void it("never holds more than the budget when reservations race, and adds up to the cent", async () => {
      const session = unique("race");
      // 50 calls of $0.03 worst case against $1.00: exactly 33 fit (0.99), whichever handle asks.
      const attempts = await Promise.allSettled(
        Array.from({ length: 50 }, (_, i) =>
          (i % 2 ? a : b).reserveBudget({
            session,
            limitUsd: 1,
            worstCaseUsd: 0.03,
            minimumUsd: 0.001,
            partial: false,
          }),
        ),
      );
      const held = attempts
        .filter((r): r is PromiseFulfilledResult<Reservation> => r.status === "fulfilled")
        .map((r) => r.value);
      const refused = attempts.filter((r): r is PromiseRejectedResult => r.status === "rejected");
      assert.equal(held.length, 33);
      assert.ok(
        refused.every((r) => isBudgetExhausted(r.reason)),
        "every refusal says the budget is exhausted",
      );
      assert.match(
        (refused[0]!.reason as Error).message,
        /^this call could cost up to \$0\.0300 but only \$0\.0100 of the session's \$1\.0000 budget is left .*; an operator raises it with the agent's harness\.max_budget_usd \(or, for an agent that sets none, the orchestrator's OZ0_DEFAULT_MAX_BUDGET_USD\)$/,
      );
      assert.deepEqual(rounded(await a.budgetSnapshot(session)), { limitUsd: 1, spentUsd: 0, reservedUsd: 0.99 });

      // Holds are given back and actual costs charged, exactly; a second settle changes nothing.
      await Promise.all(held.map((r) => r.settle(0.02)));
      await held[0]!.settle(0.5);
      assert.deepEqual(rounded(await b.budgetSnapshot(session)), { limitUsd: 1, spentUsd: 0.66, reservedUsd: 0 });

      // Streams may hold less than their worst case: together they take exactly what is left, then are refused.
      const streams = await Promise.allSettled(
        Array.from({ length: 10 }, (_, i) =>
          (i % 2 ? a : b).reserveBudget({ session, limitUsd: 1, worstCaseUsd: 0.1, minimumUsd: 0.001, partial: true }),
        ),
      );
      const streamHolds = streams
        .filter((r): r is PromiseFulfilledResult<Reservation> => r.status === "fulfilled")
        .map((r) => Math.round(r.value.amountUsd * 1e9) / 1e9);
      assert.deepEqual(streamHolds.sort(), [0.04, 0.1, 0.1, 0.1]);
      assert.deepEqual(rounded(await a.budgetSnapshot(session)), { limitUsd: 1, spentUsd: 0.66, reservedUsd: 0.34 });
      await assert.rejects(
        a.reserveBudget({ session, limitUsd: 1, worstCaseUsd: 0.001, minimumUsd: 0.0001, partial: true }),
        /exhausted/,
      );
    });

    void it("starts an account from what the session's calls were charged, and forgets it when asked", async () => {
      const session = unique("ses-restart");
      await a.recordCall(call({ operationId: unique("op-before"), session, costUsd: 0.7 }));
      await assert.rejects(
        b.reserveBudget({ session, limitUsd: 1, worstCaseUsd: 0.5, minimumUsd: 0.01, partial: false }),
        /only \$0\.3000/,
      );
      const ok = await b.reserveBudget({ session, limitUsd: 1, worstCaseUsd: 0.25, minimumUsd: 0.01, partial: false });
      assert.equal(ok.amountUsd, 0.25);
      assert.equal(ok.session, session);
      await ok.settle(0.05);
      assert.deepEqual(rounded(await a.budgetSnapshot(session)), { limitUsd: 1, spentUsd: 0.75, reservedUsd: 0 });
      assert.equal(await a.forgetBudget(session), true);
      assert.equal(await b.budgetSnapshot(session), undefined);
      assert.equal(await b.forgetBudget(session), false, "nothing left to forget");
      // A new account starts again from the calls: the settled $0.05 was never recorded as a call.
      const again = await a.reserveBudget({
        session,
        limitUsd: 1,
        worstCaseUsd: 0.3,
        minimumUsd: 0.01,
        partial: false,
      });
      assert.equal(again.amountUsd, 0.3);
      await again.settle(0);
    });

    void it("starts an account from the calls of its session and of every session whose token spends from it", async () => {
      const parent = unique("ses-parent");
      const scratch = unique("ses-scratch");
      const other = unique("ses-other");
      for (const [session, budgetSession] of [
        [parent, undefined],
        [scratch, parent],
        [other, undefined],
      ] as const)
        await a.putToken({
          hash: unique("hash"),
          job: "job-1",
          agent: "fixer",
          session,
          budgetUsd: 1,
          maxModelCalls: 0,
          ...(budgetSession ? { budgetSession } : {}),
          createdAt: new Date(),
        });
      await a.recordCall(call({ operationId: unique("op-parent"), session: parent, costUsd: 0.2 }));
      await a.recordCall(call({ operationId: unique("op-scratch"), session: scratch, costUsd: 0.5 }));
      await a.recordCall(call({ operationId: unique("op-other"), session: other, costUsd: 0.25 }));
      assert.equal(Math.round((await b.chargedToSession(parent)) * 1e9) / 1e9, 0.7);
      await assert.rejects(
        b.reserveBudget({ session: parent, limitUsd: 1, worstCaseUsd: 0.5, minimumUsd: 0.01, partial: false }),
        /only \$0\.3000/,
      );
      const [token] = (await b.revokeTokens({ session: scratch }, new Date())).ended;
      assert.equal(token?.budgetSession, parent, "the token says whose budget it spent");
    });

    void it("never counts more model calls than a session's limit when counts race from either handle", async () => {
      const session = unique("ses-calls-race");
      const counts = await Promise.allSettled(
        Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).countModelCall({ session, limit: 5 })),
      );
      const counted = counts.filter((r): r is PromiseFulfilledResult<CountedCall> => r.status === "fulfilled");
      const refused = counts.filter((r): r is PromiseRejectedResult => r.status === "rejected");
      assert.equal(counted.length, 5);
      assert.ok(
        refused.every((r) => isModelCallsExhausted(r.reason)),
        "every refusal says the session's model calls are exhausted",
      );
      // Read by the job's operator too: it names the limit and where it is set.
      assert.match(
        (refused[0]!.reason as Error).message,
        /^the session has made 5 model calls, the most it may make \(5, its agent's limits\.max_steps\); the session must end \(an operator raises it with the agent's limits\.max_steps\)$/,
      );
      for (const r of counted) r.value.end();
      // Other sessions count on their own.
      (await a.countModelCall({ session: unique("ses-calls-other"), limit: 1 })).end();
    });

    void it("starts a session's count from its calls that were sent, on record or in flight, never a refused one, and forgets it when asked", async () => {
      const session = unique("ses-calls");
      const job = unique("job-calls");
      // On record: a call sent once, one the proxy sent three times (one call), one refused before it was sent.
      await a.recordCall(call({ operationId: unique("op-once"), job, session, attempts: 1 }));
      await a.recordCall(call({ operationId: unique("op-retried"), job, session, attempts: 3 }));
      await a.recordCall(
        call({ operationId: unique("op-refused"), job, session, attempts: 0, status: 402, outcome: "budget_refused" }),
      );
      // The third call: counted, sent, and its session's tokens revoked while it is in flight.
      const third = await b.countModelCall({ session, limit: 4 });
      const thirdOp = unique("op-third");
      await b.beginAttempt(pendingAttempt({ operationId: thirdOp, job, session, attempt: 1 }));
      await a.forgetModelCalls(session);
      await b.forgetModelCalls(session);
      // A count started again (a new token for the session) still has it: the fourth is the last.
      const fourth = await a.countModelCall({ session, limit: 4 });
      await assert.rejects(b.countModelCall({ session, limit: 4 }), /has made 4 model calls/);
      const fourthOp = unique("op-fourth");
      await a.beginAttempt(pendingAttempt({ operationId: fourthOp, job, session, attempt: 1 }));
      // Both end on record; forgotten now, the count starts from the records alone.
      await b.recordCall(call({ operationId: thirdOp, job, session, attempts: 1 }));
      third.end();
      await a.recordCall(call({ operationId: fourthOp, job, session, attempts: 2 }));
      fourth.end();
      await a.forgetModelCalls(session);
      await b.forgetModelCalls(session);
      await assert.rejects(a.countModelCall({ session, limit: 4 }), isModelCallsExhausted);
      // A token with a larger limit goes on from the same count.
      (await b.countModelCall({ session, limit: 5 })).end();
      await assert.rejects(a.countModelCall({ session, limit: 5 }), /has made 5 model calls/);
    });

    void it("counts the calls a dead process had in flight, once they are reconciled", async () => {
      const session = unique("ses-calls-crash");
      const job = unique("job-calls-crash");
      const dead = await pair.crashed();
      // Counted and sent when the process died: never ended.
      await dead.countModelCall({ session, limit: 2 });
      await dead.beginAttempt(pendingAttempt({ operationId: unique("op-dead"), job, session, attempt: 1 }));
      await dead.close();
      await a.reconcileInterrupted();
      const second = await b.countModelCall({ session, limit: 2 });
      await assert.rejects(a.countModelCall({ session, limit: 2 }), isModelCallsExhausted);
      second.end();
    });

    void it("reconciles a call a dead proxy left in flight once, as interrupted, frees its hold, and never a call that was recorded or is alive", async () => {
      const session = unique("ses-crash");
      const job = unique("job-crash");
      const pending = (operationId: string, attempt: number, reservationId?: string): PendingAttempt =>
        pendingAttempt({ operationId, job, session, attempt, ...(reservationId ? { reservationId } : {}) });
      const [done, inFlight, alive] = [unique("op-done"), unique("op-in-flight"), unique("op-alive")];
      const dead = await pair.crashed();
      // A call that completed before the crash: recorded, and its pending row ended with it.
      const doneHold = await dead.reserveBudget({
        session,
        limitUsd: 1,
        worstCaseUsd: 0.05,
        minimumUsd: 0.001,
        partial: false,
      });
      await dead.beginAttempt(pending(done, 1, doneHold.id));
      await Promise.all([
        dead.recordAttempt({ ...call({ operationId: done, job, session }), attempt: 1 }),
        dead.recordCall(call({ operationId: done, job, session, costUsd: 0.01 })),
        doneHold.settle(0.01),
      ]);
      // A call whose second attempt was upstream when the proxy died, holding most of the budget.
      const hold = await dead.reserveBudget({
        session,
        limitUsd: 1,
        worstCaseUsd: 0.9,
        minimumUsd: 0.001,
        partial: true,
      });
      await dead.beginAttempt(pending(inFlight, 1, hold.id));
      await dead.recordAttempt({
        ...call({ operationId: inFlight, job, session, status: 529, outcome: "http_error" }),
        attempt: 1,
      });
      await dead.beginAttempt(pending(inFlight, 2, hold.id));
      await dead.close();
      // A call in flight at a live handle is its own and stays in flight.
      await a.beginAttempt(pending(alive, 1));

      const reconciled = (await Promise.all([a.reconcileInterrupted(), b.reconcileInterrupted()]))
        .flat()
        .filter((c) => c.job === job);
      assert.deepEqual(
        reconciled.map((c) => [c.operationId, c.outcome, c.attempts, c.costUsd, c.estimated, c.usage]),
        [[inFlight, "interrupted", 2, 0, true, { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 }]],
        "once, however many reconcile at once",
      );
      assert.equal((await b.reconcileInterrupted()).filter((c) => c.job === job).length, 0, "and never again");
      const calls = await a.listCalls(job);
      assert.deepEqual(
        calls.map((c) => [c.operationId, c.outcome]).sort(),
        [
          [done, "ok"],
          [inFlight, "interrupted"],
        ].sort(),
      );
      const attempts = await b.listAttempts(job);
      assert.deepEqual(
        attempts.filter((r) => r.operationId === inFlight).map((r) => [r.attempt, r.outcome]),
        [
          [1, "http_error"],
          [2, "interrupted"],
        ],
      );
      const usage = (await a.usageByAgent(job)).get("fixer");
      assert.equal(usage?.calls, 2);
      assert.equal(usage?.failedCalls, 1);
      assert.equal(usage?.estimated, true);
      // The hold is freed: a call needing all that is left fits (the completed call's $0.01 stays spent).
      const whole = await a.reserveBudget({
        session,
        limitUsd: 1,
        worstCaseUsd: 0.99,
        minimumUsd: 0.01,
        partial: false,
      });
      await assert.rejects(
        b.reserveBudget({ session, limitUsd: 1, worstCaseUsd: 0.001, minimumUsd: 0.001, partial: false }),
        isBudgetExhausted,
        "and no more than that",
      );
      await whole.settle(0);
      // The live call ends normally: metered once, never as interrupted.
      await a.recordCall(call({ operationId: alive, job, session, costUsd: 0 }));
      assert.equal((await b.reconcileInterrupted()).filter((c) => c.job === job).length, 0);
      assert.deepEqual(
        (await b.listCalls(job)).filter((c) => c.operationId === alive).map((c) => c.outcome),
        ["ok"],
      );
    });

    void it("reconciles 5,000 calls a dead proxy left in flight, each once", async () => {
      // Written as one INSERT, PostgreSQL's cap on a statement's parameters made this fail at every start.
      const job = unique("job-many");
      const session = unique("ses-many");
      const dead = await pair.crashed();
      const ids = Array.from({ length: 5_000 }, (_, i) => `${job}-op-${i}`);
      await Promise.all(
        ids.map((operationId) => dead.beginAttempt(pendingAttempt({ operationId, job, session, attempt: 1 }))),
      );
      await dead.close();
      const reconciled = (await a.reconcileInterrupted()).filter((c) => c.job === job);
      assert.equal(reconciled.length, 5_000);
      assert.deepEqual(new Set(reconciled.map((c) => c.outcome)), new Set(["interrupted"]));
      const calls = await b.listCalls(job);
      assert.deepEqual(calls.map((c) => c.operationId).sort(), [...ids].sort());
      assert.equal((await b.reconcileInterrupted()).filter((c) => c.job === job).length, 0, "and never again");
    });
  });
}
