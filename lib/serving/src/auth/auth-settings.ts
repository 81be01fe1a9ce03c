// Reading a service's identity settings from its environment, once, with
// errors that name the variable and the expected form.
import { readPeopleConfig } from "./people-config.js";
import { credentialDigest, type AuthSettings } from "./authenticator.js";
import { SERVICE_NAMES, type ServiceName } from "./principal.js";

const HEX_DIGEST = /^[0-9a-f]{64}$/;

const variablePart = (name: ServiceName): string => name.toUpperCase().replace(/-/g, "_");

/** `llm-proxy` → `OZ0_PEER_LLM_PROXY_SHA256`. */
export function peerVariable(name: ServiceName): string {
  return `OZ0_PEER_${variablePart(name)}_SHA256`;
}

/** `sandbox` → `OZ0_SERVICE_TOKEN_FOR_SANDBOX`: the credential a service sends to that audience instead of OZ0_SERVICE_TOKEN. */
export function audienceTokenVariable(audience: ServiceName): string {
  return `OZ0_SERVICE_TOKEN_FOR_${variablePart(audience)}`;
}

function tokenVariable(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name]?.trim();
  if (!value) return undefined;
  if (value.length < 16)
    throw new Error(
      `${name} has ${value.length} characters; use at least 16 (for example \`openssl rand -base64 32\`)`,
    );
  return value;
}

function digestVariable(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name]?.trim();
  if (!value) return undefined;
  if (!HEX_DIGEST.test(value))
    throw new Error(
      `${name} must be the lowercase hex SHA-256 of the credential (64 characters; \`printf %s TOKEN | sha256sum\`), got ${value.length} characters`,
    );
  return value;
}

/**
 * OZ0_SERVICE_TOKEN, OZ0_SERVICE_TOKEN_FOR_<AUDIENCE>, OZ0_PEER_<NAME>_SHA256,
 * OZ0_OWNER_TOKEN_SHA256 and OZ0_AUTH_CONFIG; where the service accepts
 * sandbox nodes (`acceptNodes`), OZ0_NODE_TOKEN_SHA256 or OZ0_NODE_TOKEN.
 */
export function authSettingsFromEnv(env: NodeJS.ProcessEnv, options: { acceptNodes?: boolean } = {}): AuthSettings {
  const settings: AuthSettings = {};
  const own = tokenVariable(env, "OZ0_SERVICE_TOKEN");
  if (own) settings.serviceToken = own;
  const audienceTokens: Partial<Record<ServiceName, string>> = {};
  for (const audience of SERVICE_NAMES) {
    const name = audienceTokenVariable(audience);
    const token = tokenVariable(env, name);
    if (!token) continue;
    // The same value would undo what the variable is for: the audience could then call wherever this service can.
    if (token === own)
      throw new Error(
        `${name} is the same as OZ0_SERVICE_TOKEN; it must be a credential of its own, which only the ${audience} service accepts (its OZ0_PEER_… digest)`,
      );
    audienceTokens[audience] = token;
  }
  if (Object.keys(audienceTokens).length > 0) settings.audienceTokens = audienceTokens;
  const peers: Partial<Record<ServiceName, string>> = {};
  for (const name of SERVICE_NAMES) {
    const digest = digestVariable(env, peerVariable(name));
    if (digest) peers[name] = digest;
  }
  if (Object.keys(peers).length > 0) settings.peers = peers;
  const owner = digestVariable(env, "OZ0_OWNER_TOKEN_SHA256");
  if (owner) settings.ownerTokenSha256 = owner;
  if (env.OZ0_AUTH_CONFIG?.trim()) settings.people = readPeopleConfig(env.OZ0_AUTH_CONFIG.trim());
  if (options.acceptNodes) {
    // The digest where agent code might read the service's environment (a sandbox container), else the token itself.
    const node =
      digestVariable(env, "OZ0_NODE_TOKEN_SHA256") ??
      (env.OZ0_NODE_TOKEN ? credentialDigest(env.OZ0_NODE_TOKEN) : undefined);
    if (node) settings.nodeTokenSha256 = node;
  }
  return settings;
}
