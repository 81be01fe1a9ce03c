// needs: postgres
// Two proxy replicas on one PostgreSQL, in front of one scripted model: a
// session token minted at one is honoured at both, one budget and one limit
// of model calls are held across both, and usage read at either is exactly
// what the model served.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { startScriptedModel, type ScriptedModel, type ScriptedRequest } from "@oz0/harness/testing";
import { LlmProxyService, SecretService, TokenUse } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import pg from "pg";
import pino from "pino";
import { startLlmProxy, type LlmProxy, type LlmProxyConfig } from "../src/index.js";
import type { StoreChange } from "../src/proxy-store.js";
import { PLANTED_KEY } from "./proxy-fixture.js";
import { testCredentials } from "@oz0/serving/testing";

const url = process.env.DATABASE_URL;
if (!url)
  throw new Error(
    "DATABASE_URL is unset: run through `npm test` (tools/test-infra starts PostgreSQL) or point it at a server",
  );
const databaseUrl: string = url;

const PRICE = { input: 3, output: 15 };
const RACE_CALLS = 40;
const RACE_USAGE = { input: 100, output: 500 };
/** Calls of one session sent at once, half at each replica, against its limit of model calls. */
const CALLS_RACE = 12;

interface Replica {
  proxy: LlmProxy;
  control: Client<typeof LlmProxyService>;
  secrets: Client<typeof SecretService>;
}

async function post(
  base: string,
  path: string,
  body: unknown,
  headers: Record<string, string>,
): Promise<{ status: number; text: string }> {
  const response = await fetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  return { status: response.status, text: await response.text() };
}

void describe("two proxy replicas on one PostgreSQL", () => {
  const schema = `oz0_proxy_replicas_${randomBytes(6).toString("hex")}`;
  const kek = randomBytes(32);
  let model: ScriptedModel;
  let a: Replica;
  let b: Replica;
  // The budget race: the model holds every admitted call until each of the calls was either admitted or refused.
  let raceArrived = 0;
  let raceRefused = 0;
  let releaseRace!: () => void;
  const raceGate = new Promise<void>((resolve) => (releaseRace = resolve));
  const raceDecided = (): void => {
    if (raceArrived + raceRefused === RACE_CALLS) releaseRace();
  };
  // The same for the race against a session's limit of model calls.
  let callsArrived = 0;
  let callsRefused = 0;
  let releaseCalls!: () => void;
  const callsGate = new Promise<void>((resolve) => (releaseCalls = resolve));
  const callsDecided = (): void => {
    if (callsArrived + callsRefused === CALLS_RACE) releaseCalls();
  };

  const config = (): LlmProxyConfig => ({
    auth: testCredentials.settingsFor("llm-proxy"),
    databaseUrl,
    databaseSchema: schema,
    kek,
    providers: [
      { name: "anthropic", baseUrl: model.url, keySecret: "ANTHROPIC_API_KEY", prices: { "*": PRICE } },
      { name: "openai", baseUrl: model.url, keySecret: "ANTHROPIC_API_KEY", auth: "bearer", prices: { "*": PRICE } },
    ],
    logger: pino({ level: "warn" }),
  });

  const replica = (proxy: LlmProxy): Replica => {
    const transport = createGrpcTransport({ baseUrl: proxy.url, interceptors: [testCredentials.caller] });
    return {
      proxy,
      control: createClient(LlmProxyService, transport),
      secrets: createClient(SecretService, transport),
    };
  };

  before(async () => {
    model = await startScriptedModel({
      isSideCall: () => false,
      turns: async (request: ScriptedRequest) => {
        // The phase rides in the prompt: the proxy passes no header of its own invention to a provider.
        const prompt = String(
          (request.body as { messages?: { content?: unknown }[] } | undefined)?.messages?.[0]?.content ?? "",
        );
        const phase = prompt.startsWith("phase:") ? prompt.slice("phase:".length) : undefined;
        if (phase === "race") {
          raceArrived += 1;
          raceDecided();
          await raceGate;
        }
        if (phase === "calls-race") {
          callsArrived += 1;
          callsDecided();
          await callsGate;
        }
        if (phase) return { text: "admitted", usage: RACE_USAGE };
        // Every other call reports its own counts, so the sums below test every row.
        const n = request.turn ?? 0;
        return { text: `answer ${n} `.repeat(3), usage: { input: 20 + n, output: 7 + (n % 5) } };
      },
    });
    // Started together, as a Deployment's pods are: the migrations run once, under the advisory lock.
    const [pa, pb] = await Promise.all([startLlmProxy(config()), startLlmProxy(config())]);
    a = replica(pa);
    b = replica(pb);
  });

  after(async () => {
    await a?.proxy.close({ graceMs: 50 });
    await b?.proxy.close({ graceMs: 50 });
    await model?.close();
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  });

  void it("uses a key set at one replica from the other, and holds one budget across both: never overspent, exact usage at either", async () => {
    await a.secrets.setSecret({ name: "ANTHROPIC_API_KEY", value: PLANTED_KEY });
    assert.deepEqual(
      (await b.secrets.listSecrets({})).secrets.map((s) => s.name),
      ["ANTHROPIC_API_KEY"],
      "the KEK check value is not listed",
    );

    const job = "job-replicas";
    // Both phases' prompts are as long, so every call's worst case is the same.
    const bodyOf = (phase: "race" | "next") => ({
      model: "claude-sonnet-5",
      max_tokens: 1000,
      messages: [{ role: "user", content: `phase:${phase}` }],
    });
    const body = bodyOf("race");
    // The proxy's worst case for this call (model-call.ts): every request byte half a token at the input price, max_tokens at the output price.
    const worstCase =
      (Math.ceil(Buffer.byteLength(JSON.stringify(body)) / 2) * PRICE.input + 1000 * PRICE.output) / 1e6;
    const actual = (RACE_USAGE.input * PRICE.input + RACE_USAGE.output * PRICE.output) / 1e6;
    // Six worst cases and a half: however the calls interleave across replicas, exactly six holds fit at once.
    const budgetUsd = 6.5 * worstCase;
    // Minted at A, used at A and B at once.
    const budgeted = await a.control.mintSessionToken({ job, agent: "budgeted", session: "ses-budgeted", budgetUsd });
    const headers = { "x-api-key": budgeted.token, "Oz0-Job": job, "Oz0-Agent": "budgeted" };

    const race = await Promise.all(
      Array.from({ length: RACE_CALLS }, async (_, i) => {
        const r = await post((i % 2 ? a : b).proxy.url, "/anthropic/v1/messages", body, headers);
        if (r.status === 402) {
          raceRefused += 1;
          raceDecided();
        }
        return r;
      }),
    );
    assert.equal(race.filter((r) => r.status === 200).length, 6);
    assert.equal(race.filter((r) => r.status === 402).length, RACE_CALLS - 6);
    assert.ok(race.filter((r) => r.status === 402).every((r) => JSON.parse(r.text).error.type === "budget_exhausted"));
    assert.equal(raceArrived, 6, "a refused call never reached the model");

    // Then one call after another, alternating replicas, until the budget refuses: never past it.
    let admitted = 0;
    for (let i = 0; i < 20; i += 1) {
      const r = await post((i % 2 ? b : a).proxy.url, "/anthropic/v1/messages", bodyOf("next"), headers);
      if (r.status === 402) break;
      assert.equal(r.status, 200);
      admitted += 1;
    }
    let fits = 0;
    while (budgetUsd - (6 + fits) * actual >= worstCase) fits += 1;
    assert.equal(admitted, fits, "admitted while a worst case fitted, refused after");
    const spent = (await a.proxy.store.budgetSnapshot("ses-budgeted"))!;
    const charged = await b.proxy.store.chargedToSession("ses-budgeted");
    assert.ok(Math.abs(spent.spentUsd - charged) < 1e-9, "the ledger and the call records agree");
    assert.equal(spent.reservedUsd, 0);
    assert.ok(charged <= budgetUsd, `charged ${charged} of a ${budgetUsd} budget`);
    assert.ok(Math.abs(charged - (6 + admitted) * actual) < 1e-9, "each admitted call charged what the model reported");

    // An unbudgeted session minted at B, used at both at once: streams and whole answers, both wire formats.
    const streamer = await b.control.mintSessionToken({ job, agent: "streamer", session: "ses-streamer" });
    const sHeaders = { "Oz0-Job": job, "Oz0-Agent": "streamer" };
    const mixed = await Promise.all(
      Array.from({ length: 24 }, (_, i) => {
        const base = (i % 2 ? a : b).proxy.url;
        const stream = i % 3 !== 0;
        return i % 4 < 2
          ? post(
              base,
              "/anthropic/v1/messages",
              { model: "claude-sonnet-5", max_tokens: 100, stream, messages: [{ role: "user", content: `m${i}` }] },
              { ...sHeaders, "x-api-key": streamer.token },
            )
          : post(
              base,
              "/openai/v1/chat/completions",
              { model: "gpt-4o", stream, messages: [{ role: "user", content: `m${i}` }] },
              { ...sHeaders, authorization: `Bearer ${streamer.token}` },
            );
      }),
    );
    assert.deepEqual(
      mixed.map((r) => r.status),
      Array(24).fill(200),
    );
    assert.ok(
      model.requests.every(
        (r) => r.headers["x-api-key"] === PLANTED_KEY || r.headers.authorization === `Bearer ${PLANTED_KEY}`,
      ),
      "both replicas decrypted the key",
    );

    // Read at either replica as soon as the clients have their answers: the same totals, exactly what the model served.
    const [usageA, usageB] = await Promise.all([a.control.getUsage({ job }), b.control.getUsage({ job })]);
    assert.deepEqual(usageA, usageB);
    const served = model.tokensServed;
    assert.equal(usageA.total?.inputTokens, BigInt(served.input));
    assert.equal(usageA.total?.outputTokens, BigInt(served.output));
    assert.equal(usageA.total?.cacheReadTokens, BigInt(served.cacheRead));
    assert.equal(
      usageA.total?.calls,
      BigInt(RACE_CALLS + admitted + 1 + 24),
      "every call is a record, refused ones included",
    );
    assert.equal(usageA.total?.failedCalls, BigInt(RACE_CALLS - 6 + 1));
    assert.equal(usageA.total?.estimated, false);
    assert.deepEqual(
      usageA.agents.map((x) => x.agent),
      ["budgeted", "streamer"],
    );
    assert.ok(Math.abs((usageA.agents[0]!.usage?.costUsd ?? 0) - charged) < 1e-9);
  });

  void it("refuses a token revoked at one replica at the other as soon as the notice reaches it", async () => {
    const minted = await b.control.mintSessionToken({ job: "job-revoked", agent: "x", session: "ses-revoked" });
    const headers = { "x-api-key": minted.token, "Oz0-Job": "job-revoked", "Oz0-Agent": "x" };
    const ask = { model: "claude-sonnet-5", max_tokens: 10, messages: [{ role: "user", content: "hi" }] };
    // Used at both first, so both replicas cache it.
    assert.equal((await post(a.proxy.url, "/anthropic/v1/messages", ask, headers)).status, 200);
    assert.equal((await post(b.proxy.url, "/anthropic/v1/messages", ask, headers)).status, 200);
    const noticed = new Promise<StoreChange>((resolve) => {
      const stop = b.proxy.store.watch((change) => {
        if (change.kind !== "token_revoked") return;
        stop();
        resolve(change);
      });
    });
    assert.equal((await a.control.revokeSessionToken({ session: "ses-revoked" })).revoked, 1);
    await noticed;
    for (const replica of [a, b]) {
      const r = await post(replica.proxy.url, "/anthropic/v1/messages", ask, headers);
      assert.equal(r.status, 401);
      assert.match(JSON.parse(r.text).error.message, /unknown or revoked/);
    }
  });

  void it("a token minted at one replica and first used there is reported used when revoked at the other", async () => {
    // The minting replica caches the token unused; its first call must still reach the shared store.
    const minted = await b.control.mintSessionToken({ job: "job-used", agent: "x", session: "ses-used" });
    const ask = { model: "claude-sonnet-5", max_tokens: 10, messages: [{ role: "user", content: "hi" }] };
    const headers = { "x-api-key": minted.token, "Oz0-Job": "job-used", "Oz0-Agent": "x" };
    assert.equal((await post(b.proxy.url, "/anthropic/v1/messages", ask, headers)).status, 200);
    const revoked = await a.control.revokeSessionToken({ session: "ses-used" });
    assert.deepEqual({ revoked: revoked.revoked, use: revoked.use }, { revoked: 1, use: TokenUse.USED });
  });

  void it("holds a session's limit of model calls across both replicas: calls one after another, at a replica started after, and at once", async () => {
    const job = "job-model-calls";
    const minted = await a.control.mintSessionToken({
      job,
      agent: "counted",
      session: "ses-counted",
      maxModelCalls: 8,
    });
    const headers = { "x-api-key": minted.token, "Oz0-Job": job, "Oz0-Agent": "counted" };
    const ask = (phase: string) => ({
      model: "claude-sonnet-5",
      max_tokens: 10,
      messages: [{ role: "user", content: `phase:${phase}` }],
    });
    const sentToModel = (): number =>
      model.requests.filter((r) => JSON.stringify(r.body).includes("phase:calls")).length;
    // Two, one at each replica.
    assert.equal((await post(a.proxy.url, "/anthropic/v1/messages", ask("calls"), headers)).status, 200);
    assert.equal((await post(b.proxy.url, "/anthropic/v1/messages", ask("calls"), headers)).status, 200);
    // Replica A restarts: the replica that replaces it goes on from the count.
    await a.proxy.close({ graceMs: 50 });
    a = replica(await startLlmProxy(config()));
    assert.equal((await post(a.proxy.url, "/anthropic/v1/messages", ask("calls"), headers)).status, 200);
    // Twelve at once, half at each, every admitted one held by the model until all were decided: the five left fit.
    const race = await Promise.all(
      Array.from({ length: CALLS_RACE }, async (_, i) => {
        const r = await post((i % 2 ? a : b).proxy.url, "/anthropic/v1/messages", ask("calls-race"), headers);
        if (r.status === 402) {
          callsRefused += 1;
          callsDecided();
        }
        return r;
      }),
    );
    assert.equal(race.filter((r) => r.status === 200).length, 5);
    assert.ok(
      race
        .filter((r) => r.status !== 200)
        .every((r) => r.status === 402 && JSON.parse(r.text).error.type === "model_calls_exhausted"),
    );
    for (const at of [a, b]) {
      const past = await post(at.proxy.url, "/anthropic/v1/messages", ask("calls"), headers);
      assert.equal(past.status, 402);
      assert.match(JSON.parse(past.text).error.message, /has made 8 model calls, the most it may make \(8/);
    }
    assert.equal(sentToModel(), 8, "a refused call never reached the model");
    const outcomes = (await b.proxy.store.listCalls(job)).map((c) => c.outcome);
    assert.equal(outcomes.filter((o) => o === "ok").length, 8);
    assert.equal(outcomes.filter((o) => o === "model_calls_refused").length, CALLS_RACE - 5 + 2);
  });

  void it("refuses to start a replica whose key-encryption key differs, or that has none", async () => {
    await assert.rejects(
      startLlmProxy({ auth: testCredentials.settingsFor("llm-proxy"), ...config(), kek: randomBytes(32) }),
      /same OZ0_KEK/,
    );
    const withoutKek = config();
    delete withoutKek.kek;
    await assert.rejects(startLlmProxy(withoutKek), /set OZ0_KEK or OZ0_KEK_FILE/);
  });
});
