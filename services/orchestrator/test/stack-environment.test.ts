// What each process of the embedded stack is given: an allowlist of the
// shell's variables, its own service credential and the digests of its
// callers, and nothing else; no provider key or person's token from the shell
// reaches any service's /proc/<pid>/environ. The data directory and its
// credentials are its owner's alone.
import assert from "node:assert/strict";
import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { credentialDigest, stackCredentialNames } from "@oz0/serving";
import {
  installationPaths,
  installRoot,
  isolationNotice,
  unisolatedRefusal,
  serviceEnv,
  stackServiceEnv,
  startEmbeddedStack,
} from "../src/dev/embedded-stack.js";

void test("serviceEnv passes the basics and each service's own settings, never credentials from the shell", () => {
  const shell = {
    PATH: "/usr/bin",
    HOME: "/home/me",
    LC_ALL: "C.UTF-8",
    OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318",
    OZ0_ISOLATION: "user",
    ANTHROPIC_API_KEY: "sk-ant-shell",
    OPENAI_API_KEY: "sk-openai-shell",
    OZ0_TOKEN: "a-person's-token",
    OZ0_SERVICE_TOKEN: "someone-else's",
    OZ0_SERVICE_TOKEN_FOR_EVENTS: "someone-else's-for-events",
    OZ0_PEER_ORCHESTRATOR_SHA256: "0".repeat(64),
    OZ0_NODE_TOKEN: "node-token-from-the-shell",
    OZ0_LLM_PROXY_ADMIN_TOKEN: "old-admin",
    OZ0_KEK: "kek",
    DATABASE_URL: "postgres://elsewhere",
    KAFKA_BROKERS: "broker:9092",
    OZ0_AUTH_CONFIG: "/etc/oz0/auth.yaml",
    OZ0_KAFKA_SASL_MECHANISM: "SCRAM-SHA-512",
    OZ0_KAFKA_SASL_USERNAME: "oz0-events",
    OZ0_KAFKA_SASL_PASSWORD_FILE: "/run/secrets/kafka-password",
    // Refused by the events service, which reads the password from a file: the others must not carry it meanwhile.
    OZ0_KAFKA_SASL_PASSWORD: "kafka-password-in-the-shell",
    OZ0_KAFKA_TLS: "true",
    OZ0_KAFKA_TLS_CA_FILE: "/run/secrets/kafka-ca.crt",
    AWS_SECRET_ACCESS_KEY: "aws",
    // Another deployment's wiring, and a session's, when oz0 runs inside a job.
    OZ0_ORCHESTRATOR_URL: "http://orchestrator.elsewhere:7710",
    OZ0_SANDBOX_URLS: "http://sandbox.elsewhere:7700",
    OZ0_HOME: "/var/lib/oz0",
    OZ0_LLM_TOKEN: "a-session's-token",
    OZ0_SESSION_PATH: "/opt/tools/bin:/usr/bin",
  };
  for (const name of ["events", "llm-proxy", "sandbox", "orchestrator"] as const) {
    const env = serviceEnv(name, shell);
    assert.equal(env.PATH, "/usr/bin");
    assert.equal(env.OTEL_EXPORTER_OTLP_ENDPOINT, "http://collector:4318");
    assert.equal(env.OZ0_ISOLATION, "user");
    assert.equal(env.OZ0_SESSION_PATH, "/opt/tools/bin:/usr/bin", "a setting, not wiring");
    for (const withheld of [
      "ANTHROPIC_API_KEY",
      "OPENAI_API_KEY",
      "OZ0_TOKEN",
      "OZ0_SERVICE_TOKEN",
      "OZ0_SERVICE_TOKEN_FOR_EVENTS",
      "OZ0_PEER_ORCHESTRATOR_SHA256",
      "OZ0_NODE_TOKEN",
      "OZ0_LLM_PROXY_ADMIN_TOKEN",
      "DATABASE_URL",
      "AWS_SECRET_ACCESS_KEY",
      "OZ0_ORCHESTRATOR_URL",
      "OZ0_SANDBOX_URLS",
      "OZ0_HOME",
      "OZ0_LLM_TOKEN",
    ]) {
      assert.equal(env[withheld], undefined, `${name} got ${withheld}`);
    }
    assert.equal(env.KAFKA_BROKERS, name === "events" ? "broker:9092" : undefined);
    // Where the Kafka password is, for the relay alone: not for a sandbox, whose sessions could then go and read it.
    for (const kafka of [
      "OZ0_KAFKA_SASL_MECHANISM",
      "OZ0_KAFKA_SASL_USERNAME",
      "OZ0_KAFKA_SASL_PASSWORD_FILE",
      "OZ0_KAFKA_SASL_PASSWORD",
      "OZ0_KAFKA_TLS",
      "OZ0_KAFKA_TLS_CA_FILE",
    ] as const)
      assert.equal(env[kafka], name === "events" ? shell[kafka] : undefined, `${name} got ${kafka}`);
    assert.equal(env.OZ0_AUTH_CONFIG, name === "events" || name === "orchestrator" ? "/etc/oz0/auth.yaml" : undefined);
    assert.equal(env.OZ0_KEK, name === "llm-proxy" ? "kek" : undefined);
  }
});

void test("no service's environment holds a provider key or another service's credential, and the home keeps its secrets", async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-stack-env-"));
  const planted = {
    ANTHROPIC_API_KEY: `sk-ant-planted-${Date.now()}`,
    OZ0_TOKEN: `oz0_person-${Date.now()}-0123456789`,
    // Left in a shell from another deployment: the stack's sandbox would have refused to start with no node token.
    OZ0_ORCHESTRATOR_URL: `http://orchestrator-planted-${Date.now()}.invalid:7710`,
  };
  const saved = { ...process.env };
  Object.assign(process.env, planted);
  let stack;
  try {
    stack = await startEmbeddedStack({ home });
  } finally {
    for (const key of Object.keys(planted)) {
      if (saved[key] === undefined) delete process.env[key];
      else process.env[key] = saved[key];
    }
  }
  try {
    for (const p of stack.processes) {
      const environ = readFileSync(`/proc/${p.pid}/environ`, "utf8");
      for (const value of Object.values(planted))
        assert.equal(environ.includes(value), false, `${p.name} holds a planted value`);
      // Its own credentials (the orchestrator's for sandboxes among them), and of the others' only digests.
      assert.ok(environ.includes(`OZ0_SERVICE_TOKEN=${stack.credentials[p.name]}`), `${p.name} has its credential`);
      for (const name of stackCredentialNames()) {
        const caller = name.split("-for-")[0];
        assert.equal(environ.includes(stack.credentials[name]!), caller === p.name, `${p.name} and ${name}`);
      }
      if (p.name === "orchestrator")
        assert.ok(environ.includes(`OZ0_SERVICE_TOKEN_FOR_SANDBOX=${stack.credentials["orchestrator-for-sandbox"]}`));
      assert.equal(environ.includes(stack.ownerToken), false, `${p.name} holds the owner's credential`);
      if (p.name === "orchestrator" || p.name === "events")
        assert.ok(environ.includes(`OZ0_OWNER_TOKEN_SHA256=${credentialDigest(stack.ownerToken)}`));
    }
    assert.equal(statSync(home).mode & 0o777, 0o711, "the home lets sessions pass, but not list");
    assert.equal(statSync(path.join(home, "credentials")).mode & 0o777, 0o700);
    assert.equal(statSync(path.join(home, "credentials", "owner")).mode & 0o777, 0o600);
    assert.equal(statSync(path.join(home, "logs")).mode & 0o777, 0o700);
    for (const store of ["orchestrator.db", "events", "llm-proxy"])
      assert.equal(statSync(path.join(home, store)).mode & 0o077, 0, `${store} is its owner's alone`);
    // Whatever the isolation here, the notice says so only when there is none.
    const sandbox = stack.processes.find((p) => p.name === "sandbox");
    assert.ok(sandbox?.isolation, "the sandbox said how it isolates sessions");
    assert.equal(isolationNotice(stack) === undefined, sandbox.isolation.mode !== "none");
  } finally {
    await stack.close();
    rmSync(home, { recursive: true, force: true });
  }
});

void test("a stack that cannot isolate its sessions does not start unless OZ0_ISOLATION=none chose it; the notice names that choice", () => {
  const stack = (mode: string, reason: string): Parameters<typeof isolationNotice>[0] => ({
    isolation: { mode, reason },
  });
  assert.equal(isolationNotice(stack("bwrap", "")), undefined);
  assert.equal(isolationNotice(stack("user", "")), undefined);
  assert.match(isolationNotice(stack("none", "OZ0_ISOLATION=none")) ?? "", /as OZ0_ISOLATION=none chose/);
  // No isolation that nobody chose: the stack does not start, and says what to do.
  assert.equal(unisolatedRefusal({ mode: "bwrap", reason: "" }), undefined);
  assert.equal(unisolatedRefusal({ mode: "user", reason: "no bubblewrap: bwrap not found" }), undefined);
  assert.equal(unisolatedRefusal({ mode: "none", reason: "OZ0_ISOLATION=none" }), undefined);
  assert.match(
    unisolatedRefusal({ mode: "none", reason: "bwrap not found; not root" }) ?? "",
    /cannot isolate sessions here \(bwrap not found; not root\).*install bubblewrap \(apt-get install bubblewrap\).*set OZ0_ISOLATION=none/,
  );
});

void test("the local stack's sandbox binds of the installation only what its harnesses run, as published", (t) => {
  const readOnly = process.env.OZ0_SANDBOX_READ_ONLY_PATHS;
  t.after(() => {
    if (readOnly === undefined) delete process.env.OZ0_SANDBOX_READ_ONLY_PATHS;
    else process.env.OZ0_SANDBOX_READ_ONLY_PATHS = readOnly;
  });
  delete process.env.OZ0_SANDBOX_READ_ONLY_PATHS;
  const env = stackServiceEnv({
    name: "sandbox",
    home: "/tmp/oz0-home",
    urls: {},
    identity: {},
    sessionReadable: ["/srv/fixtures"],
  });
  const root = installRoot();
  assert.ok(root);
  const bound = env.OZ0_SANDBOX_READ_ONLY_PATHS?.split(":") ?? [];
  assert.deepEqual(bound.slice(0, 2), [path.join(root, "node_modules"), path.join(root, "package.json")]);
  assert.equal(bound.at(-1), "/srv/fixtures", "and what the caller adds");
  // The SDK, the harness plugins and what they depend on, as they would be published.
  for (const published of [
    "sdk/harness-ts/dist",
    "sdk/harness-ts/bin",
    "sdk/proto/dist",
    "plugins/harness-claude/dist",
  ])
    assert.ok(bound.includes(path.join(root, published)), published);
  // Not the checkout, nor a service, nor the dev overlay, nor a harness package's sources and tests.
  for (const outside of [
    ".git",
    ".env",
    "services/llm-proxy",
    "deploy",
    "sdk/harness-ts/src",
    "sdk/harness-ts/test",
    "plugins/harness-claude/test",
  ]) {
    const file = path.join(root, outside);
    assert.ok(!bound.some((p) => file === p || file.startsWith(p + path.sep)), outside);
  }
});

void test("an installation's bound packages: the harness SDK, its plugins and their dependencies, each its files", (t) => {
  const root = realpathSync(mkdtempSync(path.join(os.tmpdir(), "oz0-install-")));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const pkg = (dir: string, json: Record<string, unknown>, extra: string[] = []): void => {
    mkdirSync(path.join(root, dir), { recursive: true });
    writeFileSync(path.join(root, dir, "package.json"), JSON.stringify(json));
    for (const sub of extra) mkdirSync(path.join(root, dir, sub), { recursive: true });
  };
  pkg("sdk/harness", { name: "@oz0/harness", files: ["dist", "bin", "missing"], dependencies: { "@oz0/proto": "*" } }, [
    "dist",
    "bin",
    "src",
  ]);
  pkg("sdk/proto", { name: "@oz0/proto", files: ["dist"] }, ["dist", "node_modules"]);
  pkg("plugins/mine", { name: "mine", dependencies: { "@oz0/harness": "*", left: "*" } }, ["dist"]);
  writeFileSync(path.join(root, "plugins/mine/oz0-plugin.yaml"), "name: mine\n");
  pkg("services/api", { name: "@oz0/api", files: ["dist"], dependencies: { "@oz0/proto": "*" } }, ["dist"]);
  writeFileSync(path.join(root, "services/api/.env"), "SECRET=1\n");
  for (const [link, target] of [
    ["@oz0/harness", "../../sdk/harness"],
    ["@oz0/proto", "../../sdk/proto"],
    ["@oz0/api", "../../services/api"],
    ["mine", "../plugins/mine"],
    ["dangling", "../nowhere"],
  ] as const) {
    mkdirSync(path.dirname(path.join(root, "node_modules", link)), { recursive: true });
    symlinkSync(target, path.join(root, "node_modules", link));
  }
  const outside = mkdtempSync(path.join(os.tmpdir(), "oz0-outside-"));
  t.after(() => rmSync(outside, { recursive: true, force: true }));
  symlinkSync(outside, path.join(root, "node_modules", "away"));
  assert.deepEqual(installationPaths(root), [
    path.join(root, "node_modules"),
    path.join(root, "package.json"),
    // A plugin that names no files is bound whole; the others as published, with their own node_modules.
    path.join(root, "plugins/mine"),
    path.join(root, "sdk/harness/bin"),
    path.join(root, "sdk/harness/dist"),
    path.join(root, "sdk/harness/package.json"),
    path.join(root, "sdk/proto/dist"),
    path.join(root, "sdk/proto/node_modules"),
    path.join(root, "sdk/proto/package.json"),
  ]);
});
