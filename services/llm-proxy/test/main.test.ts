// The process entry point: environment in, a serving proxy, SIGTERM out.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { SecretService } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import pg from "pg";
import { testCredentials } from "@oz0/serving/testing";

const main = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "src", "main.ts");

/** Starts main.ts with `env` and resolves with its URL once it serves. */
function startMain(
  env: Record<string, string | undefined>,
): Promise<{ child: ReturnType<typeof spawn>; url: string; stderr: () => string }> {
  const child = spawn(process.execPath, ["--import", "tsx", main], {
    env: { PATH: process.env.PATH, OZ0_PORT: "0", ...testCredentials.envFor("llm-proxy"), ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  return new Promise((resolve, reject) => {
    child.stderr!.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
      const match = /"url":"(http:\/\/[^"]+)"/.exec(stderr);
      if (match) resolve({ child, url: match[1]!, stderr: () => stderr });
    });
    child.once("exit", (code) => reject(new Error(`main exited with ${code}: ${stderr}`)));
  });
}

void describe("main", () => {
  void it("reads the environment (port, data, KEK file, providers file, key files, its callers) and stops on SIGTERM", async (t) => {
    const dir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-main-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(path.join(dir, "kek"), Buffer.alloc(32, 3).toString("base64"));
    writeFileSync(
      path.join(dir, "providers.json"),
      JSON.stringify({ providers: [{ name: "scripted", kind: "scripted" }] }),
    );
    // The directory Kubernetes mounts: the KEK, the providers file and one file per provider key.
    writeFileSync(path.join(dir, "OPENAI_API_KEY"), "sk-from-a-file-987654321\n");
    const child = spawn(process.execPath, ["--import", "tsx", main], {
      env: {
        PATH: process.env.PATH,
        OZ0_PORT: "0",
        OZ0_LOG_LEVEL: "info",
        OZ0_LLM_PROXY_DATA: path.join(dir, "data"),
        OZ0_KEK_FILE: path.join(dir, "kek"),
        OZ0_PROVIDERS_FILE: path.join(dir, "providers.json"),
        OZ0_SECRETS_DIR: dir,
        ...testCredentials.envFor("llm-proxy"),
      },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on("data", (chunk: Buffer) => {
        stderr += chunk.toString();
        const match = /"url":"(http:\/\/[^"]+)"/.exec(stderr);
        if (match) resolve(match[1]!);
      });
      child.once("exit", (code) => reject(new Error(`main exited with ${code}: ${stderr}`)));
    });
    const secrets = createClient(
      SecretService,
      createGrpcTransport({ baseUrl: url, interceptors: [testCredentials.caller] }),
    );
    const set = await secrets.setSecret({ name: "ANTHROPIC_API_KEY", value: "sk-x-123456789" });
    assert.equal(set.replaced, false);
    const listed = await secrets.listSecrets({});
    assert.deepEqual(
      listed.secrets.map((s) => s.name),
      ["ANTHROPIC_API_KEY", "OPENAI_API_KEY"],
    );
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    child.kill("SIGTERM");
    assert.equal(await exited, 0);
    assert.doesNotMatch(stderr, /sk-x-123456789/);
    assert.doesNotMatch(stderr, /sk-from-a-file/);
    assert.match(stderr, /OPENAI_API_KEY/, "the log names the key it read");
  });

  void it("refuses to start with a malformed KEK and says how to make one", async () => {
    const child = spawn(process.execPath, ["--import", "tsx", main], {
      env: { PATH: process.env.PATH, OZ0_PORT: "0", OZ0_LLM_PROXY_DATA: ":memory:", OZ0_KEK: "too-short" },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
    assert.equal(code, 1);
    assert.match(stderr, /openssl rand -base64 32/);
  });

  void it("keeps its store in PostgreSQL when DATABASE_URL is set, in the OZ0_DATABASE_SCHEMA schema", async () => {
    const databaseUrl = process.env.DATABASE_URL;
    assert.ok(databaseUrl, "run through `npm test`, which starts PostgreSQL");
    const schema = `oz0_proxy_main_${process.pid}`;
    const { child, url, stderr } = await startMain({
      OZ0_LOG_LEVEL: "info",
      DATABASE_URL: databaseUrl,
      OZ0_DATABASE_SCHEMA: schema,
      OZ0_KEK: Buffer.alloc(32, 4).toString("base64"),
    });
    const client = new pg.Client({ connectionString: databaseUrl });
    await client.connect();
    try {
      await createClient(
        SecretService,
        createGrpcTransport({ baseUrl: url, interceptors: [testCredentials.caller] }),
      ).setSecret({ name: "ANTHROPIC_API_KEY", value: "sk-in-postgres-123456" });
      const { rows } = await client.query<{ name: string }>(`SELECT name FROM ${schema}.secrets ORDER BY name`);
      assert.ok(rows.some((r) => r.name === "ANTHROPIC_API_KEY"));
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
      child.kill("SIGTERM");
      assert.equal(await exited, 0);
      assert.match(stderr(), /llm-proxy store: PostgreSQL/);
      assert.doesNotMatch(stderr(), /sk-in-postgres/);
    } finally {
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    }
  });
});
