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
