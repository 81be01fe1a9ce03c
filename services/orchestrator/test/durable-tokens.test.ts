// DurableTokens' ledger around a mint, against the real SQLite store and an
// issuer that models the proxy (tokens kept by session, revoking idempotent).
// The sweeps against the real proxy are in token-sweep.test.ts.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { createLogger } from "@oz0/serving";
import { DurableTokens } from "../src/sessions/durable-tokens.js";
import type { MintedToken, TokenIssuer } from "../src/sessions/session-runner.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { job } from "./job-store-suite.js";
import { eventually } from "./support/eventually.js";

const logger = createLogger({ name: "test", level: "silent" });
const cleanups: (() => Promise<void>)[] = [];
after(() => Promise.all(cleanups.map((cleanup) => cleanup())));

/**
 * The proxy's tokens, live by id. `answer`: "lost" mints and then fails the
 * call, as a dropped connection does; "never" mints and never answers, all
 * the caller sees of a process that died before the answer reached it.
 */
class ProxyModel implements TokenIssuer {
  readonly live = new Set<string>();
  answer: "given" | "lost" | "never" = "given";
  /** Every revoke asked, in order; `revokesLeft` of them succeed, then the proxy is away. */
  readonly revokes: string[] = [];
  revokesLeft = Infinity;
  tokenIdOf = (sessionId: string): string => sessionId;

  mint(options: Parameters<TokenIssuer["mint"]>[0]): Promise<MintedToken> {
    this.live.add(this.tokenIdOf(options.sessionId));
    if (this.answer === "lost") return Promise.reject(new Error("connection reset after the proxy took the call"));
    if (this.answer === "never") return new Promise(() => undefined);
    return Promise.resolve({
      token: `tok-${options.sessionId}`,
      tokenId: this.tokenIdOf(options.sessionId),
      anthropicBaseUrl: "http://llm",
      openaiBaseUrl: "http://llm/v1",
      headers: {},
    });
  }

  revoke(options: { tokenId: string }): Promise<{ neverUsed: boolean }> {
    if (this.revokesLeft-- <= 0) return Promise.reject(new Error("the LLM proxy is away"));
    this.revokes.push(options.tokenId);
    this.live.delete(options.tokenId);
    return Promise.resolve({ neverUsed: false });
  }
}

async function setup() {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-tokens-"));
  const store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  cleanups.push(async () => {
    await store.close();
    rmSync(home, { recursive: true, force: true });
  });
  await store.createJob(job("j1", { sessionId: "ses_1" }));
  const proxy = new ProxyModel();
  return { store, proxy, tokens: new DurableTokens({ issuer: proxy, store, logger }) };
}

const mintFor = (tokens: DurableTokens) =>
  tokens.mint({ jobId: "j1", agent: "fixer", agentVersion: 1, sessionId: "ses_1" });

void test("a token the proxy minted but whose answer was lost is revoked by the next sweep", async () => {
  const { proxy, tokens } = await setup();
  proxy.answer = "lost";
  await assert.rejects(mintFor(tokens), /connection reset/);
  assert.deepEqual([...proxy.live], ["ses_1"], "the proxy holds a token no one was told of");
  // The job is still running: a failed mint is due all the same.
  assert.equal(await tokens.sweep(), 1);
  assert.deepEqual([...proxy.live], [], "the sweep revoked it");
  assert.equal(await tokens.sweep(), 0, "and forgot it");
});

void test("a token minted as its process died is revoked by the next process's sweep once its job ended", async () => {
  const { store, proxy, tokens } = await setup();
  proxy.answer = "never";
  void mintFor(tokens);
  await eventually(async () => proxy.live.has("ses_1") || undefined, "the proxy's mint");
  // The process is gone; its job is cancelled before another takes it up.
  await store.updateJob("j1", { state: "cancelled", finishedAt: new Date() });
  const next = new DurableTokens({ issuer: proxy, store, logger });
  assert.equal(await next.sweep(), 1);
  assert.deepEqual([...proxy.live], [], "the next process revoked it");
});

void test("an issuer whose token ids are not their sessions' is refused, and its token revoked", async () => {
  const { proxy, tokens } = await setup();
  proxy.tokenIdOf = (sessionId) => `tid-${sessionId}`;
  await assert.rejects(mintFor(tokens), /must give each token its session's id/);
  assert.deepEqual([...proxy.live], []);
});

/** `count` tokens of an ended job, live at the proxy and kept in the ledger. */
async function endedJobTokens(store: SqliteJobStore, proxy: ProxyModel, count: number): Promise<string[]> {
  await store.createJob(job("j_ended", { state: "succeeded", finishedAt: new Date() }));
  const ids = Array.from({ length: count }, (_, i) => `ses_old_${i}`);
  for (const id of ids) {
    proxy.live.add(id);
    await store.recordSessionToken(id, "j_ended");
  }
  return ids;
}

void test("two replicas sweeping at once revoke each token once between them", async () => {
  const { store, proxy, tokens } = await setup();
  // More than a sweep's batch, so each sweep claims more than once.
  const ids = await endedJobTokens(store, proxy, 250);
  const other = new DurableTokens({ issuer: proxy, store, logger });
  const [a, b] = await Promise.all([tokens.sweep(), other.sweep()]);
  assert.equal(a + b, 250);
  assert.deepEqual([...proxy.revokes].sort(), [...ids].sort(), "every token revoked, none twice");
  assert.deepEqual([...proxy.live], []);
});

void test("what a sweep could not revoke is the next sweep's at once, not when its claim runs out", async () => {
  const { store, proxy, tokens } = await setup();
  await endedJobTokens(store, proxy, 5);
  proxy.revokesLeft = 2;
  await assert.rejects(tokens.sweep(), /away/);
  assert.equal(proxy.live.size, 3);
  proxy.revokesLeft = Infinity;
  assert.equal(await new DurableTokens({ issuer: proxy, store, logger }).sweep(), 3);
  assert.deepEqual([...proxy.live], []);
});
