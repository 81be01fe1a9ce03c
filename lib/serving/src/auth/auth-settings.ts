// Reading a service's identity settings from its environment, once, with
// errors that name the variable and the expected form.
import { readPeopleConfig } from "./people-config.js";
import { credentialDigest, type AuthSettings } from "./authenticator.js";
import { SERVICE_NAMES, type ServiceName } from "./principal.js";

const HEX_DIGEST = /^[0-9a-f]{64}$/;

/** `llm-proxy` → `OZ0_PEER_LLM_PROXY_SHA256`. */
export function peerVariable(name: ServiceName): string {
  return `OZ0_PEER_${name.toUpperCase().replace(/-/g, "_")}_SHA256`;
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
 * OZ0_SERVICE_TOKEN, OZ0_PEER_<NAME>_SHA256, OZ0_OWNER_TOKEN_SHA256 and
 * OZ0_AUTH_CONFIG; where the service accepts sandbox nodes (`acceptNodes`),
 * OZ0_NODE_TOKEN_SHA256 or OZ0_NODE_TOKEN.
 */
export function authSettingsFromEnv(env: NodeJS.ProcessEnv, options: { acceptNodes?: boolean } = {}): AuthSettings {
  const settings: AuthSettings = {};
  const own = env.OZ0_SERVICE_TOKEN?.trim();
  if (own) {
    if (own.length < 16)
      throw new Error(
        `OZ0_SERVICE_TOKEN has ${own.length} characters; use at least 16 (for example \`openssl rand -base64 32\`)`,
      );
    settings.serviceToken = own;
  }
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
