// Provider keys from OZ0_SECRETS_DIR: a directory laid out as Kubernetes
// mounts a Secret (one file per key, the files links into `..data`, beside
// the KEK and the providers file), read at start-up and never shown.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Writable } from "node:stream";
import { describe, it, type TestContext } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { startScriptedModel } from "@oz0/harness/testing";
import { LlmProxyService, SecretService } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import pino from "pino";
import { startLlmProxy, type LlmProxyConfig } from "../src/index.js";
import { PLANTED_KEY } from "./proxy-fixture.js";
import { testCredentials } from "@oz0/serving/testing";

const OPENAI_KEY = "sk-proj-FILEKEYq9Zx7Lw2Vb8Nc4Md6Kf1Hg3Js5Tr0Yu0123456789";

/** A Secret volume as the kubelet lays it out: the files are links into a timestamped folder. */
function mountedSecret(t: TestContext, files: Record<string, string>): string {
  const dir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-secrets-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const data = path.join(dir, "..2026_11_29_00_00_00.000000001");
  mkdirSync(data);
  for (const [name, value] of Object.entries(files)) writeFileSync(path.join(data, name), value);
  symlinkSync(path.basename(data), path.join(dir, "..data"));
  for (const name of Object.keys(files)) symlinkSync(path.join("..data", name), path.join(dir, name));
  return dir;
}

function capture(): { logger: pino.Logger; lines: string[] } {
  const lines: string[] = [];
  const logger = pino(
    { level: "debug" },
    new Writable({
      write(chunk: Buffer, _encoding, callback) {
        lines.push(chunk.toString("utf8"));
        callback();
      },
    }),
  );
  return { logger, lines };
}

void describe("provider keys from OZ0_SECRETS_DIR", () => {
  void it("stores each key file at start-up, skips the other files, never shows a key, and does not rewrite an unchanged key", async (t) => {
    const secretsDir = mountedSecret(t, {
      kek: Buffer.alloc(32, 5).toString("base64"),
      "providers.json": "{}",
      // Files written from a shell end in a newline: it is not part of the key.
      ANTHROPIC_API_KEY: `${PLANTED_KEY}\n`,
      OPENAI_API_KEY: `  ${OPENAI_KEY}\n`,
      "lower-case-name": "not a key",
    });
    const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-secrets-data-"));
    t.after(() => rmSync(dataDir, { recursive: true, force: true }));
    const model = await startScriptedModel({
      turns: () => ({ text: "ok", usage: { input: 1, output: 1 } }),
      isSideCall: () => false,
    });
    const config = (logger: pino.Logger): LlmProxyConfig => ({
      auth: testCredentials.settingsFor("llm-proxy"),
      dataDir,
      secretsDir,
      kek: Buffer.alloc(32, 5),
      logger,
      providers: [
        { name: "anthropic", baseUrl: model.url, keySecret: "ANTHROPIC_API_KEY" },
        { name: "openai", baseUrl: model.url, keySecret: "OPENAI_API_KEY", auth: "bearer" },
      ],
    });
    const first = capture();
    const proxy = await startLlmProxy(config(first.logger));
    let listed: { name: string; updatedAt?: { seconds: bigint; nanos: number } }[];
    try {
      const transport = createGrpcTransport({ baseUrl: proxy.url, interceptors: [testCredentials.caller] });
      listed = (await createClient(SecretService, transport).listSecrets({})).secrets;
      assert.deepEqual(
        listed.map((s) => s.name),
        ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"],
      );
      const minted = await createClient(LlmProxyService, transport).mintSessionToken({
        job: "j",
        agent: "a",
        session: "s",
      });
      const headers = { "content-type": "application/json", "Oz0-Job": "j", "Oz0-Agent": "a" };
      const anthropic = await fetch(`${proxy.url}/anthropic/v1/messages`, {
        method: "POST",
        headers: { ...headers, "x-api-key": minted.token },
        body: JSON.stringify({ model: "m", max_tokens: 5, messages: [{ role: "user", content: "x" }] }),
      });
      const openai = await fetch(`${proxy.url}/openai/v1/chat/completions`, {
        method: "POST",
        headers: { ...headers, authorization: `Bearer ${minted.token}` },
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "x" }] }),
      });
      assert.deepEqual([anthropic.status, openai.status], [200, 200]);
      assert.equal(
        model.requests[0]?.headers["x-api-key"],
        PLANTED_KEY,
        "the key as the file holds it, without the newline",
      );
      assert.equal(model.requests[1]?.headers.authorization, `Bearer ${OPENAI_KEY}`);
    } finally {
      await proxy.close({ graceMs: 50 });
    }
    const loaded = first.lines
      .map((l) => JSON.parse(l) as { msg: string; stored?: string[] })
      .find((l) => l.msg.includes("OZ0_SECRETS_DIR"));
    assert.deepEqual(loaded?.stored, ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"], "the log names the keys it stored");

    // A restart with the same files: nothing to rewrite.
    const second = capture();
    const again = await startLlmProxy(config(second.logger));
    try {
      const relisted = (
        await createClient(
          SecretService,
          createGrpcTransport({ baseUrl: again.url, interceptors: [testCredentials.caller] }),
        ).listSecrets({})
      ).secrets;
      assert.deepEqual(
        relisted.map((s) => s.updatedAt),
        listed.map((s) => s.updatedAt),
      );
    } finally {
      await again.close({ graceMs: 50 });
      await model.close();
    }
    const reloaded = second.lines
      .map((l) => JSON.parse(l) as { msg: string; unchanged?: string[] })
      .find((l) => l.msg.includes("OZ0_SECRETS_DIR"));
    assert.deepEqual(reloaded?.unchanged, ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]);

    // No key, nor any 8 characters of one, in the logs or the store's files.
    const outputs = [
      ...first.lines,
      ...second.lines,
      ...readdirSync(dataDir, { recursive: true, withFileTypes: true })
        .filter((entry) => entry.isFile())
        .map((entry) => readFileSync(path.join(entry.parentPath, entry.name)).toString("latin1")),
    ].join("\n");
    for (const key of [PLANTED_KEY, OPENAI_KEY]) {
      for (let i = 0; i + 8 <= key.length; i += 1)
        assert.ok(!outputs.includes(key.slice(i, i + 8)), `a fragment of a key leaked: offset ${i}`);
    }
  });

  void it("refuses to start on an empty key file, naming the file and nothing of its neighbours", async (t) => {
    const secretsDir = mountedSecret(t, { ANTHROPIC_API_KEY: PLANTED_KEY, OPENAI_API_KEY: "\n" });
    const { logger } = capture();
    await assert.rejects(
      startLlmProxy({
        auth: testCredentials.settingsFor("llm-proxy"),
        secretsDir,
        kek: Buffer.alloc(32, 5),
        logger,
        providers: [],
      }),
      (error: Error) => {
        assert.match(error.message, /OPENAI_API_KEY in OZ0_SECRETS_DIR is empty/);
        assert.ok(!error.message.includes(PLANTED_KEY.slice(0, 8)));
        return true;
      },
    );
  });
});
