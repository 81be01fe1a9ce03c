// The orchestrator reads its environment in one place (configFromEnv): the
// variables the README lists become its configuration, and a malformed one
// stops the process at start, naming the variable and the form it expects.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { stackServiceEnv } from "../src/dev/embedded-stack.js";
import { configFromEnv } from "../src/orchestrator-config.js";
import { packageDir } from "./support/test-stack.js";

void test("the environment's variables become the orchestrator's configuration", () => {
  const config = configFromEnv({
    OZ0_PORT: "0",
    OZ0_HOST: "0.0.0.0",
    OZ0_HOME: "/var/lib/oz0",
    OZ0_SANDBOX_URLS: "http://sandbox-a:7701,http://sandbox-b:7701",
    OZ0_LLM_PROXY_URL: "http://llm-proxy:7702",
    OZ0_EVENTS_URL: "http://events:7703",
    DATABASE_URL: "postgres://oz0@db/oz0",
    OZ0_DATABASE_SCHEMA: "tenant_a",
    OZ0_REPLICA_ID: "orchestrator-0",
    OZ0_LEASE_TTL_MS: "15000",
    OZ0_NODE_TOKEN: "a-node-token-long-enough-for-the-check",
    OZ0_NODE_PORT: "7710",
    OZ0_NODE_STALE_AFTER_MS: "5000",
    OZ0_MAX_SESSION_STDERR_BYTES: "0",
    OZ0_MAX_SESSION_BYTES: "268435456",
    OZ0_MAX_WAITING_APPROVALS: "8",
    OZ0_MAX_OPERATIONS_PER_JOB: "2",
    OZ0_DEFAULT_MAX_BUDGET_USD: "2.5",
    OZ0_MAX_TRANSCRIPT_WATCHES_PER_PERSON: "4",
    OZ0_CONSOLE_DIR: "/srv/console",
    OZ0_ATTACHMENT_ROOTS: "/srv/shared:/home/projects",
    OZ0_MAX_MESSAGE_BYTES: "8388608",
    OZ0_HOOK_ISOLATION: "bwrap",
  });
  const { auth, ...rest } = config;
  assert.ok(auth);
  assert.deepEqual(rest, {
    host: "0.0.0.0",
    port: 0,
    home: "/var/lib/oz0",
    sandboxUrls: ["http://sandbox-a:7701", "http://sandbox-b:7701"],
    llmProxyUrl: "http://llm-proxy:7702",
    eventsUrl: "http://events:7703",
    databaseUrl: "postgres://oz0@db/oz0",
    databaseSchema: "tenant_a",
    replicaId: "orchestrator-0",
    leaseTtlMs: 15_000,
    nodeToken: "a-node-token-long-enough-for-the-check",
    nodePort: 7710,
    nodeStaleAfterMs: 5_000,
    maxSessionStderrBytes: 0,
    maxSessionBytes: 256 * 1024 * 1024,
    maxWaitingApprovals: 8,
    maxOperationsPerJob: 2,
    defaultBudgetUsd: 2.5,
    maxTranscriptWatchesPerPerson: 4,
    consoleDir: "/srv/console",
    attachmentRoots: ["/srv/shared", "/home/projects"],
    maxMessageBytes: 8 * 1024 * 1024,
    hookIsolation: "bwrap",
  });
});

void test("unset variables take the README's defaults", () => {
  const { auth, ...rest } = configFromEnv({});
  assert.ok(auth);
  assert.deepEqual(rest, { host: "127.0.0.1", port: 7700, sandboxUrls: [] });
});

void test("a local stack's orchestrator knows it is one, so its errors speak of that stack's own sandbox", () => {
  const env = stackServiceEnv({
    name: "orchestrator",
    home: "/tmp/oz0-home",
    urls: { sandbox: "http://127.0.0.1:40001" },
    identity: {},
  });
  assert.equal(env.OZ0_LOCAL_STACK, "1");
  assert.equal(configFromEnv(env).localStack, true);
  assert.equal(configFromEnv({}).localStack, undefined);
});

void test("a malformed variable is refused, naming it and the form it expects", () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ OZ0_PORT: "x" }, /^OZ0_PORT must be a port number from 0 \(any free port\) to 65535; got "x"$/],
    [{ OZ0_NODE_PORT: "99999" }, /^OZ0_NODE_PORT must be a port number/],
    [
      { OZ0_MAX_TRANSCRIPT_WATCHES_PER_PERSON: "0" },
      /^OZ0_MAX_TRANSCRIPT_WATCHES_PER_PERSON must be a whole number of streams, at least 1; got "0"$/,
    ],
    [{ OZ0_LEASE_TTL_MS: "30s" }, /^OZ0_LEASE_TTL_MS must be a whole number of milliseconds, at least 100; got "30s"$/],
    [
      { OZ0_NODE_STALE_AFTER_MS: "50" },
      /^OZ0_NODE_STALE_AFTER_MS must be a whole number of milliseconds, at least 100; got "50"$/,
    ],
    [
      { OZ0_MAX_SESSION_STDERR_BYTES: "1MiB" },
      /^OZ0_MAX_SESSION_STDERR_BYTES must be a whole number of bytes \(0 keeps none\), at least 0; got "1MiB"$/,
    ],
    [{ OZ0_MAX_SESSION_BYTES: "0" }, /^OZ0_MAX_SESSION_BYTES must be a whole number of bytes, at least 1; got "0"$/],
    [
      { OZ0_DEFAULT_MAX_BUDGET_USD: "0" },
      /^OZ0_DEFAULT_MAX_BUDGET_USD must be a number of US dollars, at least 0\.01; got "0"$/,
    ],
    [
      { OZ0_DEFAULT_MAX_BUDGET_USD: "$5" },
      /^OZ0_DEFAULT_MAX_BUDGET_USD must be a number of US dollars, at least 0\.01; got "\$5"$/,
    ],
    [
      { OZ0_MAX_WAITING_APPROVALS: "0" },
      /^OZ0_MAX_WAITING_APPROVALS must be a whole number of calls, at least 1; got "0"$/,
    ],
    [
      { OZ0_SANDBOX_URLS: "sandbox:7701" },
      /^OZ0_SANDBOX_URLS must be comma-separated http:\/\/ or https:\/\/ URLs; got "sandbox:7701"$/,
    ],
    [{ OZ0_LLM_PROXY_URL: "llm-proxy" }, /^OZ0_LLM_PROXY_URL must be an http:\/\/ or https:\/\/ URL/],
    [{ OZ0_MAX_MESSAGE_BYTES: "0" }, /^OZ0_MAX_MESSAGE_BYTES must be a whole number of bytes, from 1 to 4294967295/],
    [
      { OZ0_ATTACHMENT_ROOTS: "/srv/shared:projects" },
      /^OZ0_ATTACHMENT_ROOTS must be `:`-separated absolute paths; got "\/srv\/shared:projects"$/,
    ],
    [{ OZ0_HOOK_ISOLATION: "gvisor" }, /^OZ0_HOOK_ISOLATION must be one of auto, bwrap, landlock, none; got "gvisor"$/],
  ];
  for (const [env, message] of cases)
    assert.throws(() => configFromEnv(env), { name: "EnvConfigError", message }, JSON.stringify(env));
});

void test("oz0-orchestrator with OZ0_PORT=x stops at start with exit code 2 and says what to set", (t) => {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-config-test-"));
  t.after(() => rmSync(home, { recursive: true, force: true }));
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    OZ0_HOME: home,
    OZ0_PORT: "x",
    OZ0_SANDBOX_URLS: "http://127.0.0.1:1",
    OZ0_LLM_PROXY_URL: "http://127.0.0.1:1",
  };
  const result = spawnSync(process.execPath, [path.join(packageDir, "dist", "main.js")], {
    env,
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(result.status, 2, result.stderr);
  assert.equal(
    result.stderr,
    'oz0-orchestrator: OZ0_PORT must be a port number from 0 (any free port) to 65535; got "x"\n',
  );
});
