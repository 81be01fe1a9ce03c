// @oz0/serving/testing: credentials for tests that start the suite's
// services in-process or as processes, and clients that present the right one
// for each method (a service's credential where the access table names
// services, the owner's where it names a role); a logger whose lines a test
// reads back.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Writable } from "node:stream";
import type { Interceptor } from "@connectrpc/connect";
import { exportJWK, generateKeyPair, SignJWT, type JWK } from "jose";
import { pino } from "pino";
import { ACCESS_TABLE } from "./auth/access-table.js";
import { credentialDigest, type AuthSettings } from "./auth/authenticator.js";
import type { ServiceName } from "./auth/principal.js";
import type { Logger } from "./logger.js";
import {
  generateStackCredentials,
  newCredential,
  serviceAuthSettings,
  serviceIdentityEnv,
  stackTokenFor,
  type StackCredentials,
} from "./auth/stack-credentials.js";

export interface TestCredentials {
  /** Each service's credential, and those a service sends one audience alone (`orchestrator-for-sandbox`). */
  readonly services: StackCredentials;
  /** A person with every role (the embedded owner). */
  readonly owner: string;
  /** What a service started in-process is given: its own credential, its accepted peers, the owner. */
  settingsFor(service: ServiceName, extra?: AuthSettings): AuthSettings;
  /** The same as environment variables, for a service started as a process. */
  envFor(service: ServiceName): Record<string, string>;
  /** Client interceptor: each call carries the credential its method is open to. */
  readonly caller: Interceptor;
}

/** The services people call, as the embedded stack configures them: the others know no person. */
const PEOPLE_SERVE = new Set<ServiceName>(["orchestrator", "events"]);

/** The service that serves a proto service: `oz0.sandbox.v1.SandboxService` → `sandbox`. */
const SERVED_BY: Readonly<Record<string, ServiceName>> = {
  orchestrator: "orchestrator",
  sandbox: "sandbox",
  llmproxy: "llm-proxy",
  events: "events",
};

export function createTestCredentials(): TestCredentials {
  const services = generateStackCredentials();
  const owner = newCredential();
  const ownerTokenSha256 = credentialDigest(owner);
  const tokenFor = (method: string): string => {
    const access = ACCESS_TABLE[method];
    const audience = SERVED_BY[method.split(".")[1] ?? ""];
    if (audience && access && "services" in access && access.services?.length && !access.role)
      return stackTokenFor(services, access.services[0]!, audience);
    return owner;
  };
  return {
    services,
    owner,
    settingsFor: (service, extra = {}) => ({
      ...serviceAuthSettings(services, service),
      ...(PEOPLE_SERVE.has(service) ? { ownerTokenSha256 } : {}),
      ...extra,
    }),
    envFor: (service) => ({
      ...serviceIdentityEnv(services, service),
      ...(PEOPLE_SERVE.has(service) ? { OZ0_OWNER_TOKEN_SHA256: ownerTokenSha256 } : {}),
    }),
    caller: (next) => async (request) => {
      if (!request.header.has("authorization"))
        request.header.set("authorization", `Bearer ${tokenFor(`${request.service.typeName}/${request.method.name}`)}`);
      return next(request);
    },
  };
}

/** One set per test process: services and clients of one test agree without passing it around. */
export const testCredentials: TestCredentials = createTestCredentials();

export interface TestOidcIssuer {
  /** The issuer (`iss`), serving `/.well-known/openid-configuration` and `/jwks`. */
  readonly url: string;
  /** A token signed by the issuer's key (or, with `key: "stranger"`, by a key it does not publish). Audience `oz0` by default. */
  sign(
    claims: Record<string, unknown>,
    options?: { expiresIn?: string; audience?: string; issuer?: string; key?: "own" | "stranger" },
  ): Promise<string>;
  close(): Promise<void>;
}

/** A small, real OIDC issuer on loopback: discovery and a JWKS over HTTP, ES256 tokens signed with jose. */
export async function startTestOidcIssuer(): Promise<TestOidcIssuer> {
  const own = await generateKeyPair("ES256");
  const stranger = await generateKeyPair("ES256");
  const jwk: JWK = { ...(await exportJWK(own.publicKey)), kid: "k1", alg: "ES256", use: "sig" };
  let url = "";
  const server: Server = createServer((req, res) => {
    res.setHeader("content-type", "application/json");
    if (req.url === "/.well-known/openid-configuration")
      res.end(JSON.stringify({ issuer: url, jwks_uri: `${url}/jwks` }));
    else if (req.url === "/jwks") res.end(JSON.stringify({ keys: [jwk] }));
    else res.writeHead(404).end("{}");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    sign: (claims, options = {}) =>
      new SignJWT(claims)
        .setProtectedHeader({ alg: "ES256", kid: "k1" })
        .setIssuer(options.issuer ?? url)
        .setAudience(options.audience ?? "oz0")
        .setIssuedAt()
        .setExpirationTime(options.expiresIn ?? "5m")
        .sign(options.key === "stranger" ? stranger.privateKey : own.privateKey),
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** A log line as a test reads it back. */
export type CapturedLogLine = Record<string, unknown> & { code?: string; msg?: string };

/** A logger whose lines (warn and above) a test reads back, parsed, in `lines`. */
export function capturingLogger(): { lines: CapturedLogLine[]; logger: Logger } {
  const lines: CapturedLogLine[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const text of chunk.toString().split("\n").filter(Boolean)) lines.push(JSON.parse(text) as CapturedLogLine);
      done();
    },
  });
  return { lines, logger: pino({ level: "warn" }, stream) };
}
