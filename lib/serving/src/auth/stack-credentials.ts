// Credentials for a whole stack on one machine (the embedded stack, tests):
// a token per service, and each service's environment holding only its own
// token and the digests of the callers it accepts.
import { randomBytes } from "node:crypto";
import { credentialDigest, type AuthSettings } from "./authenticator.js";
import { authSettingsFromEnv, peerVariable } from "./auth-settings.js";
import { SERVICE_NAMES, type ServiceName } from "./principal.js";

export type StackCredentials = Readonly<Record<ServiceName, string>>;

/** Which services each service accepts as callers. */
export const ACCEPTED_PEERS: Readonly<Record<ServiceName, readonly ServiceName[]>> = {
  events: ["orchestrator", "sandbox", "llm-proxy"],
  sandbox: ["orchestrator"],
  "llm-proxy": ["orchestrator"],
  orchestrator: [],
};

export function newCredential(): string {
  return `oz0_${randomBytes(32).toString("base64url")}`;
}

export function generateStackCredentials(): StackCredentials {
  return Object.fromEntries(SERVICE_NAMES.map((name) => [name, newCredential()])) as StackCredentials;
}

/** The environment a service needs for its identity: OZ0_SERVICE_TOKEN and the digests of its accepted peers. */
export function serviceIdentityEnv(credentials: StackCredentials, service: ServiceName): Record<string, string> {
  const env: Record<string, string> = { OZ0_SERVICE_TOKEN: credentials[service] };
  for (const peer of ACCEPTED_PEERS[service]) env[peerVariable(peer)] = credentialDigest(credentials[peer]);
  return env;
}

/** The same as settings, for a service started in-process (tests): read back from that very environment. */
export function serviceAuthSettings(
  credentials: StackCredentials,
  service: ServiceName,
  extra: AuthSettings = {},
): AuthSettings {
  return { ...authSettingsFromEnv(serviceIdentityEnv(credentials, service)), ...extra };
}
