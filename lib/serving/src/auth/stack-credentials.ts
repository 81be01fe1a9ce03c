// Credentials for a whole stack on one machine (the embedded stack, tests):
// a token per service, one more where a caller holds a credential of its own
// for one audience, and each service's environment holding only the tokens it
// sends and the digests of the callers it accepts.
import { randomBytes } from "node:crypto";
import { credentialDigest, type AuthSettings } from "./authenticator.js";
import { audienceTokenVariable, authSettingsFromEnv, peerVariable } from "./auth-settings.js";
import { SERVICE_NAMES, type ServiceName } from "./principal.js";

/** Which services each service accepts as callers. */
export const ACCEPTED_PEERS: Readonly<Record<ServiceName, readonly ServiceName[]>> = {
  // Not the sandbox: every sandbox node holds its credential beside agent code, and the orchestrator publishes what
  // a node reports of its sessions (session.started, session.ended) for the jobs it placed there.
  events: ["orchestrator", "llm-proxy"],
  sandbox: ["orchestrator"],
  "llm-proxy": ["orchestrator"],
  orchestrator: [],
};

/**
 * The audiences a caller sends a credential of their own, instead of its OZ0_SERVICE_TOKEN. A sandbox's memory
 * sits beside agent code, and every RunSession carries the orchestrator's credential into it: a session that read it
 * there had the orchestrator's rights everywhere (set the proxy's provider keys, publish approvals). With a
 * credential for sandboxes alone, what it could read opens other sandboxes' RunSession and nothing else.
 */
export const OWN_AUDIENCE_CREDENTIALS: Readonly<Partial<Record<ServiceName, readonly ServiceName[]>>> = {
  orchestrator: ["sandbox"],
};

/** `orchestrator` + `sandbox` → `orchestrator-for-sandbox`: a credential the caller sends to that audience alone. */
export type AudienceCredentialName = `${ServiceName}-for-${ServiceName}`;

/**
 * The name of the credential a caller sends to an audience: the caller's own (its service name), or one for that
 * audience alone. Names the Secrets and the digests ConfigMap's keys in deploy/k8s as well.
 */
export function credentialName(caller: ServiceName, audience: ServiceName): ServiceName | AudienceCredentialName {
  return OWN_AUDIENCE_CREDENTIALS[caller]?.includes(audience) ? `${caller}-for-${audience}` : caller;
}

/** Every credential of a stack, by credentialName. */
export type StackCredentials = Readonly<Record<ServiceName, string> & Partial<Record<AudienceCredentialName, string>>>;

export function newCredential(): string {
  return `oz0_${randomBytes(32).toString("base64url")}`;
}

/** The names of every credential a stack has: a service's own, and one for each audience in OWN_AUDIENCE_CREDENTIALS. */
export function stackCredentialNames(): (ServiceName | AudienceCredentialName)[] {
  return SERVICE_NAMES.flatMap((caller) => [
    caller,
    ...(OWN_AUDIENCE_CREDENTIALS[caller] ?? []).map((audience) => credentialName(caller, audience)),
  ]);
}

export function generateStackCredentials(): StackCredentials {
  return Object.fromEntries(stackCredentialNames().map((name) => [name, newCredential()])) as StackCredentials;
}

/**
 * The token a stack's caller sends to an audience. Credentials an older oz0 dev recorded lack the ones split off
 * since (oz0 dev then makes new ones for the whole stack); there the caller's own stands in.
 */
export function stackTokenFor(credentials: StackCredentials, caller: ServiceName, audience: ServiceName): string {
  return credentials[credentialName(caller, audience)] ?? credentials[caller];
}

/**
 * The environment a service needs for its identity: OZ0_SERVICE_TOKEN, an OZ0_SERVICE_TOKEN_FOR_<AUDIENCE> for each
 * audience with a credential of its own, and the digests of its accepted peers (of what each sends it).
 */
export function serviceIdentityEnv(credentials: StackCredentials, service: ServiceName): Record<string, string> {
  const env: Record<string, string> = { OZ0_SERVICE_TOKEN: credentials[service] };
  for (const audience of OWN_AUDIENCE_CREDENTIALS[service] ?? []) {
    const own = credentials[credentialName(service, audience)];
    if (own) env[audienceTokenVariable(audience)] = own;
  }
  for (const peer of ACCEPTED_PEERS[service])
    env[peerVariable(peer)] = credentialDigest(stackTokenFor(credentials, peer, service));
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
