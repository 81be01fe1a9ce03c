// The LLM proxy reads its environment in one place (configFromEnv, on
// @oz0/serving's readers): the variables the README lists become its
// configuration, and a malformed one stops oz0-llm-proxy at start with exit
// code 2, naming the variable and the form it expects (OZ0_PORT=x was read as
// NaN before).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { configFromEnv } from "../src/llm-proxy-config.js";

void test("the environment's variables become the proxy's configuration", () => {
  const kek = Buffer.alloc(32, 7);
  const { auth, ...rest } = configFromEnv({
    OZ0_PORT: "0",
    OZ0_HOST: "0.0.0.0",
    OZ0_PUBLIC_URL: "http://10.96.0.12:7702",
    OZ0_LLM_PROXY_DATA: "/var/lib/oz0-llm-proxy",
    DATABASE_URL: "postgres://oz0@db/oz0",
    OZ0_DATABASE_SCHEMA: "proxy_a",
    OZ0_SECRETS_DIR: "/run/secrets/llm",
    OZ0_EVENTS_URL: "http://events:7703",
    OZ0_UPSTREAM_TIMEOUT_MS: "30000",
    OZ0_STREAM_IDLE_TIMEOUT_MS: "90000",
    OZ0_KEK: kek.toString("base64"),
    OZ0_MAX_MESSAGE_BYTES: "65536",
    OZ0_MAX_MODEL_REQUEST_BYTES: "67108864",
    OZ0_MAX_SESSION_BYTES_IN_FLIGHT: "134217728",
    OZ0_MAX_BYTES_IN_FLIGHT: "1073741824",
    OZ0_PROVIDER_SIDE_FEATURES: " web_search, code_execution ",
  });
  assert.ok(auth);
  assert.deepEqual(rest, {
    port: 0,
    host: "0.0.0.0",
    publicUrl: "http://10.96.0.12:7702",
    dataDir: "/var/lib/oz0-llm-proxy",
    databaseUrl: "postgres://oz0@db/oz0",
    databaseSchema: "proxy_a",
    secretsDir: "/run/secrets/llm",
    eventsUrl: "http://events:7703",
    retry: { attemptTimeoutMs: 30_000, streamIdleTimeoutMs: 90_000 },
    kek,
    maxMessageBytes: 65_536,
    maxModelRequestBytes: 64 * 1024 * 1024,
    maxSessionBytesInFlight: 128 * 1024 * 1024,
    maxBytesInFlight: 1024 * 1024 * 1024,
    providerSideFeatures: ["web_search", "code_execution"],
  });
});

void test("unset variables take the README's defaults", () => {
  const { auth, ...rest } = configFromEnv({});
  assert.ok(auth);
  assert.deepEqual(rest, { port: 7702, host: "127.0.0.1", dataDir: ".oz0/llm-proxy" });
});

void test("a malformed variable is refused, naming it and the form it expects", () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ OZ0_PORT: "x" }, /^OZ0_PORT must be a port number from 0 \(any free port\) to 65535; got "x"$/],
    [{ OZ0_PORT: "-1" }, /^OZ0_PORT must be a port number/],
    [
      { OZ0_UPSTREAM_TIMEOUT_MS: "10m" },
      /^OZ0_UPSTREAM_TIMEOUT_MS must be a whole number of milliseconds, at least 1; got "10m"$/,
    ],
    [{ OZ0_UPSTREAM_TIMEOUT_MS: "0" }, /^OZ0_UPSTREAM_TIMEOUT_MS must be a whole number of milliseconds, at least 1/],
    [
      { OZ0_STREAM_IDLE_TIMEOUT_MS: "1.5" },
      /^OZ0_STREAM_IDLE_TIMEOUT_MS must be a whole number of milliseconds, at least 1/,
    ],
    [{ OZ0_EVENTS_URL: "events:7703" }, /^OZ0_EVENTS_URL must be an http:\/\/ or https:\/\/ URL/],
    [{ OZ0_MAX_MESSAGE_BYTES: "1MiB" }, /^OZ0_MAX_MESSAGE_BYTES must be a whole number of bytes, from 1 to 4294967295/],
    [{ OZ0_MAX_MODEL_REQUEST_BYTES: "0" }, /^OZ0_MAX_MODEL_REQUEST_BYTES must be a whole number of bytes, at least 1/],
    [{ OZ0_MAX_SESSION_BYTES_IN_FLIGHT: "64M" }, /^OZ0_MAX_SESSION_BYTES_IN_FLIGHT must be a whole number of bytes/],
    [{ OZ0_MAX_BYTES_IN_FLIGHT: "0" }, /^OZ0_MAX_BYTES_IN_FLIGHT must be a whole number of bytes, at least 1/],
    [
      { OZ0_HOST: "0.0.0.0" },
      /^OZ0_PUBLIC_URL must be the URL sessions reach the proxy at, since OZ0_HOST=0.0.0.0 listens on every interface/,
    ],
    [{ OZ0_PUBLIC_URL: "llm-proxy:7702" }, /^OZ0_PUBLIC_URL must be an http:\/\/ or https:\/\/ URL/],
    [
      { OZ0_PROVIDER_SIDE_FEATURES: "web_search web_fetch" },
      /^OZ0_PROVIDER_SIDE_FEATURES must be a comma-separated list of feature names such as web_search,code_execution; got "web_search web_fetch"$/,
    ],
  ];
  for (const [env, message] of cases)
    assert.throws(() => configFromEnv(env), { name: "EnvConfigError", message }, JSON.stringify(env));
});

void test("oz0-llm-proxy with a malformed variable stops at start with exit code 2 and says what to set", () => {
  const main = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "src", "main.ts");
  const result = spawnSync(process.execPath, ["--import", "tsx", main], {
    env: { PATH: process.env.PATH, OZ0_PORT: "x" },
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(result.status, 2, result.stderr);
  assert.equal(
    result.stderr,
    'oz0-llm-proxy: OZ0_PORT must be a port number from 0 (any free port) to 65535; got "x"\n',
  );
});
