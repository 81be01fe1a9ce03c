// Identity on every API: the access table covers every method of every proto,
// and the one gate refuses what it must, over a real server, with
// messages that say what is missing. OIDC against a real issuer (jose).
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import type { GenFile } from "@bufbuild/protobuf/codegenv2";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { pino } from "pino";
import { Health } from "@oz0/proto/grpc/health/v1/health_pb";
import {
  AgentService,
  JobService,
  SandboxNodeService,
  SecretService,
} from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { ACCESS_TABLE } from "../src/auth/access-table.js";
import { Authenticator, credentialDigest, type SessionCredentials } from "../src/auth/authenticator.js";
import { authSettingsFromEnv } from "../src/auth/auth-settings.js";
import { parsePeopleConfig } from "../src/auth/people-config.js";
import { principalOf, ROLES, type Principal } from "../src/auth/principal.js";
import { callerToken } from "../src/auth/bearer-credential.js";
import {
  generateStackCredentials,
  newCredential,
  serviceAuthSettings,
  stackTokenFor,
} from "../src/auth/stack-credentials.js";
import { registration, serve, type RunningServer } from "../src/serve.js";
import { startTestOidcIssuer, type TestOidcIssuer } from "../src/testing.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/**
 * Proto folders of services no Orchestrator Zero service serves: OTLP's trace service is the collector's (the
 * sandbox's trace relay reads its export messages and posts them over HTTP).
 */
const NOT_SERVED = new Set([path.join(repoRoot, "proto", "opentelemetry")]);

/** Every .proto under proto/ of a service served here, with the generated module it becomes. */
function protoFiles(dir = path.join(repoRoot, "proto")): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const entry = path.join(dir, e.name);
    if (e.isDirectory()) return NOT_SERVED.has(entry) ? [] : protoFiles(entry);
    return e.name.endsWith(".proto") ? [entry] : [];
  });
}

async function methodsOf(modulePath: string): Promise<string[]> {
  const mod = (await import(modulePath)) as Record<string, unknown>;
  const files = Object.entries(mod)
    .filter(([name]) => name.startsWith("file_"))
    .map(([, f]) => f as GenFile);
  assert.equal(files.length, 1, `${modulePath} exports one file descriptor`);
  return files[0]!.services.flatMap((s) => s.methods.map((m) => `${s.typeName}/${m.name}`));
}

void describe("the access table", () => {
  void it("has exactly one rule for every method of every service in every proto, health and reflection included", async () => {
    const modules = [
      ...protoFiles().map(
        (f) => `@oz0/proto/${path.relative(path.join(repoRoot, "proto"), f).replace(/\.proto$/, "_pb")}`,
      ),
      "@oz0/proto/grpc/health/v1/health_pb",
      "@oz0/proto/grpc/reflection/v1/reflection_pb",
      "@oz0/proto/grpc/reflection/v1alpha/reflection_pb",
    ];
    const methods = (await Promise.all(modules.map(methodsOf))).flat();
    assert.ok(methods.length >= 30, `found ${methods.length} methods`);
    const missing = methods.filter((m) => !(m in ACCESS_TABLE));
    assert.deepEqual(missing, [], "methods with no access rule (add them to lib/serving/src/auth/access-table.ts)");
    const stale = Object.keys(ACCESS_TABLE).filter((m) => !methods.includes(m));
    assert.deepEqual(stale, [], "access rules for methods no proto has");
  });

  void it("keeps health and redeeming a login code open, and nothing else", () => {
    const open = Object.entries(ACCESS_TABLE)
      .filter(([, a]) => "open" in a)
      .map(([m]) => m);
    assert.deepEqual(open.sort(), [
      "grpc.health.v1.Health/Check",
      "grpc.health.v1.Health/Watch",
      "oz0.orchestrator.v1.LoginService/RedeemLoginCode",
    ]);
  });

  void it("lets no person reach a service-only API, and no service answer approvals", () => {
    for (const method of [
      "oz0.sandbox.v1.SandboxService/RunSession",
      "oz0.llmproxy.v1.SecretService/SetSecret",
      "oz0.llmproxy.v1.LlmProxyService/MintSessionToken",
      "oz0.events.v1.EventsService/Publish",
      "oz0.events.v1.EventsService/PublishStream",
    ]) {
      const access = ACCESS_TABLE[method]!;
      assert.ok(!("open" in access) && !("anyPrincipal" in access) && !("role" in access && access.role), method);
    }
    const answer = ACCESS_TABLE["oz0.orchestrator.v1.JobService/AnswerPermission"]!;
    assert.deepEqual(answer, { role: "approver" });
  });

  void it("refuses to serve a method that has no rule", async () => {
    const fake = { ...Health, typeName: "oz0.unlisted.v1.UnlistedService" } as typeof Health;
    await assert.rejects(
      serve({ name: "t", port: 0, services: [registration(fake, {})], auth: new Authenticator({}) }),
      /no access rule for oz0\.unlisted\.v1\.UnlistedService\/Check/,
    );
  });
});

void describe("the access gate", () => {
  const orchestrator = newCredential();
  const sandbox = newCredential();
  const alice = newCredential();
  const bob = newCredential();
  const node = newCredential();
  let server: RunningServer;
  const seen: string[] = [];

  before(async () => {
    const people = parsePeopleConfig(
      `roles:\n  approver: { users: [alice] }\n  viewer: { groups: [staff] }\ntokens:\n  - { user: alice, sha256: ${credentialDigest(alice)} }\n  - { user: bob, sha256: ${credentialDigest(bob)}, groups: [staff] }\n`,
      "test config",
    );
    server = await serve({
      name: "auth-test",
      port: 0,
      auth: new Authenticator({
        peers: { orchestrator: credentialDigest(orchestrator), sandbox: credentialDigest(sandbox) },
        people,
        nodeTokenSha256: credentialDigest(node),
      }),
      services: [
        registration(JobService, {
          answerPermission(_req, context) {
            const p = principalOf(context);
            seen.push(p?.kind === "person" ? p.id : "?");
            return {};
          },
          listJobs: () => ({}),
        }),
        registration(SecretService, { setSecret: () => ({}) }),
        registration(SandboxNodeService, { heartbeat: () => ({}) }),
      ],
    });
  });
  after(() => server.close({ graceMs: 0 }));

  const transport = () => createGrpcTransport({ baseUrl: server.url });
  const as = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });
  const refused = (code: Code, pattern: RegExp) => (e: unknown) => {
    const err = ConnectError.from(e);
    assert.equal(err.code, code, err.rawMessage);
    assert.match(err.rawMessage, pattern);
    return true;
  };

  void it("answers health with no credential", async () => {
    assert.equal((await createClient(Health, transport()).check({ service: "liveness" })).status, 1);
  });

  void it("refuses a call without a credential, naming what is missing", async () => {
    await assert.rejects(
      createClient(JobService, transport()).listJobs({}),
      refused(Code.Unauthenticated, /JobService\/ListJobs needs a credential: send `authorization: Bearer <token>`/),
    );
  });

  void it("refuses a malformed header and an unknown token", async () => {
    const jobs = createClient(JobService, transport());
    await assert.rejects(
      jobs.listJobs({}, { headers: { authorization: "Basic abc" } }),
      refused(Code.Unauthenticated, /must be `Bearer <token>`/),
    );
    await assert.rejects(
      jobs.listJobs({}, as(newCredential())),
      refused(Code.Unauthenticated, /not one this service accepts/),
    );
    await assert.rejects(
      jobs.listJobs({}, as("aaa.bbb.ccc")),
      refused(Code.Unauthenticated, /no OIDC issuer is configured/),
    );
  });

  void it("tells a principal without the right which role or service the method needs", async () => {
    const jobs = createClient(JobService, transport());
    await assert.rejects(
      jobs.answerPermission({ jobId: "j", callId: "c" }, as(bob)),
      refused(
        Code.PermissionDenied,
        /AnswerPermission is open only to people with the approver role; bob may not call it \(bob has viewer;/,
      ),
    );
    await assert.rejects(
      jobs.listJobs({}, as(orchestrator)),
      refused(
        Code.PermissionDenied,
        /ListJobs is open only to people with the viewer role; the orchestrator service may not call it/,
      ),
    );
    await assert.rejects(jobs.listJobs({}, as(node)), refused(Code.PermissionDenied, /a sandbox node may not call it/));
    await assert.rejects(
      createClient(SecretService, transport()).setSecret({}, as(sandbox)),
      refused(Code.PermissionDenied, /people with the admin role; the sandbox service may not/),
    );
    await assert.rejects(
      createClient(SandboxNodeService, transport()).heartbeat({}, as(alice)),
      refused(Code.PermissionDenied, /open only to sandbox nodes/),
    );
  });

  void it("lets the right principal through and hands it to the handler, whatever the request claims", async () => {
    const jobs = createClient(JobService, transport());
    await jobs.answerPermission({ jobId: "j", callId: "c", answeredBy: "mallory" }, as(alice));
    assert.deepEqual(seen, ["alice"]);
    await jobs.listJobs({}, as(bob));
    await createClient(SandboxNodeService, transport()).heartbeat({}, as(node));
  });

  void it("answers an authenticator that fails with Internal and a reference, never its error", async () => {
    class Failing extends Authenticator {
      override authenticate(): never {
        throw new Error("connect ECONNREFUSED /var/lib/secret-issuer");
      }
    }
    const failing = await serve({
      name: "auth-failing",
      port: 0,
      auth: new Failing({}),
      logger: pino({ level: "silent" }),
      services: [registration(JobService, { listJobs: () => ({}) })],
    });
    try {
      await assert.rejects(
        createClient(JobService, createGrpcTransport({ baseUrl: failing.url })).listJobs({}, as(bob)),
        refused(Code.Internal, /^internal error \(ref [0-9a-f]{8}\); the service log has the details$/),
      );
    } finally {
      await failing.close({ graceMs: 0 });
    }
  });
});

void describe("console sessions", () => {
  // A session store with one session per person, as the orchestrator's ConsoleLogin keeps them.
  const person = (id: string, groups: string[]): Extract<Principal, { kind: "person" }> => ({
    kind: "person",
    id,
    groups,
    roles: new Set(ROLES),
    via: "console",
  });
  const sessions: SessionCredentials = {
    sessionOf: (digest: string) =>
      ({
        [credentialDigest("bob-session")]: { principal: person("bob", []), origin: "token" as const },
        [credentialDigest("carol-session")]: { principal: person("carol", ["staff"]), origin: "oidc" as const },
        [credentialDigest("owner-session")]: { principal: person("owner", []), origin: "owner" as const },
      })[digest],
  };
  const people = (text: string) => parsePeopleConfig(text, "auth.yaml");

  void it("takes each session's roles from the configuration as it is now, not as it was when the session opened", async () => {
    const auth = new Authenticator({
      ownerTokenSha256: credentialDigest("owner-token"),
      people: people(
        `roles:\n  approver: { users: [bob] }\n  viewer: { groups: [staff] }\ntokens:\n  - { user: bob, sha256: ${credentialDigest("bob-token")} }\n`,
      ),
      sessions,
    });
    const rolesOf = async (token: string) => {
      const result = await auth.authenticate(token);
      assert.ok("principal" in result && result.principal.kind === "person", JSON.stringify(result));
      return [...result.principal.roles].sort();
    };
    assert.deepEqual(await rolesOf("bob-session"), ["approver", "viewer"], "bob's grant, not the admin he opened with");
    assert.deepEqual(await rolesOf("carol-session"), ["viewer"]);
    assert.deepEqual(await rolesOf("owner-session"), ["admin", "approver", "operator", "viewer"]);
  });

  void it("refuses a session whose person was taken out of the configuration: their token, their grants or the owner credential", async () => {
    const auth = new Authenticator({
      // No owner credential; bob's grant stays but his token is gone; carol's group has no role.
      people: people(`roles:\n  approver: { users: [bob] }\n`),
      sessions,
    });
    for (const token of ["bob-session", "carol-session", "owner-session"]) {
      const result = await auth.authenticate(token);
      assert.ok("refused" in result, `${token}: ${JSON.stringify(result)}`);
      assert.match(result.refused, /no credential or role here any more \(revoked since it opened\); log in again/);
    }
  });
});

void describe("logged-out OIDC tokens", () => {
  void it("refuses a JWT its session store says was logged out, before anything else is asked of it", async () => {
    const jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJl";
    const auth = new Authenticator({
      sessions: { sessionOf: () => undefined, loggedOut: (digest) => digest === credentialDigest(jwt) },
    });
    const result = await auth.authenticate(jwt);
    assert.ok("refused" in result, JSON.stringify(result));
    assert.match(result.refused, /was logged out/);
  });
});

void describe("identity settings from the environment", () => {
  void it("reads peers, owner and service token, and names a malformed variable", () => {
    const token = newCredential();
    const settings = authSettingsFromEnv({
      OZ0_SERVICE_TOKEN: token,
      OZ0_PEER_LLM_PROXY_SHA256: credentialDigest("x"),
      OZ0_OWNER_TOKEN_SHA256: credentialDigest("o"),
    });
    assert.deepEqual(settings, {
      serviceToken: token,
      peers: { "llm-proxy": credentialDigest("x") },
      ownerTokenSha256: credentialDigest("o"),
    });
    assert.throws(
      () => authSettingsFromEnv({ OZ0_PEER_ORCHESTRATOR_SHA256: "nothex" }),
      /OZ0_PEER_ORCHESTRATOR_SHA256 must be the lowercase hex SHA-256/,
    );
    assert.throws(
      () => authSettingsFromEnv({ OZ0_SERVICE_TOKEN: "short" }),
      /OZ0_SERVICE_TOKEN has 5 characters; use at least 16/,
    );
  });

  void it("sends an audience with a credential of its own that one, and refuses it equal to OZ0_SERVICE_TOKEN", () => {
    const own = newCredential();
    const forSandbox = newCredential();
    const settings = authSettingsFromEnv({ OZ0_SERVICE_TOKEN: own, OZ0_SERVICE_TOKEN_FOR_SANDBOX: forSandbox });
    assert.equal(callerToken(settings, "sandbox"), forSandbox);
    assert.equal(callerToken(settings, "llm-proxy"), own);
    assert.equal(callerToken(settings, "events"), own);
    assert.throws(
      () => authSettingsFromEnv({ OZ0_SERVICE_TOKEN: own, OZ0_SERVICE_TOKEN_FOR_SANDBOX: own }),
      /OZ0_SERVICE_TOKEN_FOR_SANDBOX is the same as OZ0_SERVICE_TOKEN; it must be a credential of its own/,
    );
    assert.throws(
      () => authSettingsFromEnv({ OZ0_SERVICE_TOKEN_FOR_SANDBOX: "short" }),
      /OZ0_SERVICE_TOKEN_FOR_SANDBOX has 5 characters; use at least 16/,
    );
  });

  void it("gives the orchestrator a credential that sandboxes accept and no other service does", async () => {
    // A sandbox's memory is beside agent code; what a session could read there must not open the proxy's keys or events.
    const stack = generateStackCredentials();
    const forSandbox = stackTokenFor(stack, "orchestrator", "sandbox");
    assert.notEqual(forSandbox, stack.orchestrator);
    const orchestrator = serviceAuthSettings(stack, "orchestrator");
    assert.equal(callerToken(orchestrator, "sandbox"), forSandbox);
    assert.equal(callerToken(orchestrator, "llm-proxy"), stack.orchestrator);
    const principal = async (service: "sandbox" | "llm-proxy" | "events", token: string) =>
      new Authenticator(serviceAuthSettings(stack, service)).authenticate(token);
    assert.deepEqual(await principal("sandbox", forSandbox), { principal: { kind: "service", id: "orchestrator" } });
    assert.ok("refused" in (await principal("sandbox", stack.orchestrator)), "the sandbox refuses the general one");
    for (const other of ["llm-proxy", "events"] as const) {
      assert.ok("refused" in (await principal(other, forSandbox)), `${other} refuses the sandboxes' credential`);
      assert.deepEqual(await principal(other, stack.orchestrator), {
        principal: { kind: "service", id: "orchestrator" },
      });
    }
  });

  void it("refuses an auth config with an unknown field or a bad digest, naming it", () => {
    assert.throws(
      () => parsePeopleConfig("rolez: {}\n", "f.yaml"),
      /f\.yaml is not a valid auth config: \/rolez: unknown field/,
    );
    assert.throws(
      () => parsePeopleConfig("tokens:\n  - { user: a, sha256: abc }\n", "f.yaml"),
      /\/tokens\/0\/sha256: must be the lowercase hex SHA-256/,
    );
    assert.throws(() => parsePeopleConfig("oidc: { issuer: https://i }\n", "f.yaml"), /\/oidc\/audience: required/);
    assert.throws(() => parsePeopleConfig("roles: [\n", "f.yaml"), /f\.yaml is not valid YAML/);
    assert.throws(
      () => parsePeopleConfig("oidc: { issuer: https://i, audience: a, consoleScopes: [profile] }\n", "f.yaml"),
      /\/oidc\/consoleScopes: must include openid/,
    );
    assert.throws(
      () => parsePeopleConfig('oidc: { issuer: https://i, audience: a, consoleScopes: [openid, "a b"] }\n', "f.yaml"),
      /\/oidc\/consoleScopes\/1: a scope is one word/,
    );
    assert.throws(
      () => parsePeopleConfig('oidc: { issuer: https://i, audience: a, consoleClientId: "" }\n', "f.yaml"),
      /\/oidc\/consoleClientId/,
    );
  });
});

void describe("OIDC people", () => {
  let issuer: TestOidcIssuer;
  let server: RunningServer;
  before(async () => {
    issuer = await startTestOidcIssuer();
    const people = parsePeopleConfig(
      `oidc: { issuer: "${issuer.url}", audience: oz0, usernameClaim: preferred_username, consoleClientId: oz0-console }\nroles:\n  operator: { groups: [dev] }\n`,
      "test",
    );
    server = await serve({
      name: "oidc-test",
      port: 0,
      auth: new Authenticator({ people }),
      services: [
        registration(AgentService, { listAgents: () => ({}) }),
        registration(JobService, { runAgent: () => ({}) }),
      ],
    });
  });
  after(async () => {
    await server.close({ graceMs: 0 });
    await issuer.close();
  });

  const agents = () => createClient(AgentService, createGrpcTransport({ baseUrl: server.url }));
  const as = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });

  void it("accepts a token the issuer signed, with roles from its groups", async () => {
    const token = await issuer.sign({ sub: "u-1", preferred_username: "carol", groups: ["dev"] });
    await agents().listAgents({}, as(token));
    await createClient(JobService, createGrpcTransport({ baseUrl: server.url })).runAgent({}, as(token));
  });

  void it("says when the token ends, so what it opens (a console session) ends with it", async () => {
    const token = await issuer.sign({ preferred_username: "carol", groups: ["dev"] }, { expiresIn: "10m" });
    const auth = new Authenticator({
      people: parsePeopleConfig(
        `oidc: { issuer: "${issuer.url}", audience: oz0, usernameClaim: preferred_username }\n`,
        "test",
      ),
    });
    const result = await auth.authenticate(token);
    assert.ok("principal" in result && result.principal.kind === "person", JSON.stringify(result));
    const exp = (JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()) as { exp: number }).exp;
    assert.equal(result.principal.credentialEnds, exp * 1000);
  });

  void it("accepts an ID token issued to the console's client (oidc.consoleClientId), as the console sends it", async () => {
    const token = await issuer.sign({ preferred_username: "carol", groups: ["dev"] }, { audience: "oz0-console" });
    await agents().listAgents({}, as(token));
  });

  void it("refuses expired, wrong-audience, wrong-issuer and wrong-signature tokens, saying why", async () => {
    const check = async (token: string, pattern: RegExp): Promise<void> =>
      assert.rejects(agents().listAgents({}, as(token)), (e: unknown) => {
        const err = ConnectError.from(e);
        assert.equal(err.code, Code.Unauthenticated);
        assert.match(err.rawMessage, pattern);
        return true;
      });
    await check(
      await issuer.sign({ preferred_username: "carol", groups: ["dev"] }, { expiresIn: "-1m" }),
      /the token has expired/,
    );
    await check(
      await issuer.sign({ preferred_username: "carol" }, { audience: "someone-else" }),
      /the token's aud claim is not accepted here/,
    );
    await check(
      await issuer.sign({ preferred_username: "carol" }, { issuer: "https://evil.example" }),
      /the token's iss claim is not accepted here/,
    );
    await check(await issuer.sign({ preferred_username: "carol" }, { key: "stranger" }), /signature does not verify/);
    // The console's client id is an audience too (its ID tokens), but no other client's.
    await check(
      await issuer.sign({ preferred_username: "carol" }, { audience: "another-app" }),
      /the token's aud claim is not accepted here/,
    );
    await check(await issuer.sign({ groups: ["dev"] }), /no preferred_username claim/);
  });

  void it("a person without a granted role is refused with the role named", async () => {
    const token = await issuer.sign({ preferred_username: "dave", groups: ["sales"] });
    await assert.rejects(
      agents().listAgents({}, as(token)),
      (e: unknown) =>
        ConnectError.from(e).code === Code.PermissionDenied &&
        /viewer role; dave may not call it \(dave has no role/.test(ConnectError.from(e).rawMessage),
    );
  });
});

void describe("a stream and its credential", () => {
  // The gate checked a call's credential once, when it opened: a stream (WatchJobs never ends by itself) went on
  // sending every job's changes to a console session that was logged out, or whose person was taken out of the
  // configuration (attacker review).
  void it("ends a streaming call with the gate's refusal at its first message after the credential ended", async () => {
    const open = new Set([credentialDigest("dora-session")]);
    const sessions: SessionCredentials = {
      sessionOf: (digest) =>
        open.has(digest)
          ? {
              principal: { kind: "person", id: "dora", groups: [], roles: new Set(), via: "console" },
              origin: "token",
            }
          : undefined,
    };
    const people = parsePeopleConfig(
      `roles:\n  viewer: { users: [dora] }\ntokens:\n  - { user: dora, sha256: ${credentialDigest("dora-token")} }\n`,
      "auth.yaml",
    );
    let release!: () => void;
    const server = await serve({
      name: "stream-test",
      port: 0,
      auth: new Authenticator({ people, sessions }),
      services: [
        registration(JobService, {
          async *watchJobs() {
            yield {};
            // The next change comes once the test has logged the session out.
            await new Promise<void>((resolve) => (release = resolve));
            yield {};
            yield {};
          },
        }),
      ],
    });
    try {
      const jobs = createClient(JobService, createGrpcTransport({ baseUrl: server.url }));
      const received: string[] = [];
      const watching = (async () => {
        for await (const _ of jobs.watchJobs({}, { headers: { authorization: "Bearer dora-session" } })) {
          received.push("change");
          if (received.length === 1) {
            open.delete(credentialDigest("dora-session"));
            release();
          }
        }
      })();
      await assert.rejects(watching, (e: unknown) => {
        const err = ConnectError.from(e);
        assert.equal(err.code, Code.Unauthenticated, err.rawMessage);
        assert.match(err.rawMessage, /WatchJobs: the credential is not one this service accepts/);
        return true;
      });
      assert.deepEqual(received, ["change"], "nothing is sent once the session has ended");
    } finally {
      await server.close({ graceMs: 0 });
    }
  });
});
