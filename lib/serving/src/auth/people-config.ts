// How people are known and what they may do: the file OZ0_AUTH_CONFIG names
// (YAML), validated with a JSON Schema so a mistake is refused at start,
// naming the field.
import { readFileSync } from "node:fs";
import { Ajv, type ErrorObject } from "ajv";
import { parse } from "yaml";
import { ROLES, type Role } from "./principal.js";

export interface OidcConfig {
  /** The issuer (`iss`) tokens must carry. */
  issuer: string;
  /** The audience (`aud`) tokens must carry. */
  audience: string;
  /** Where the issuer's signing keys are; default: `jwks_uri` from `<issuer>/.well-known/openid-configuration`. */
  jwksUri?: string;
  /** The claim that names the person. Default `sub`. */
  usernameClaim?: string;
  /** The claim that lists the person's groups. Default `groups`. */
  groupsClaim?: string;
  /**
   * The client id the web console logs in as (a public client: authorization
   * code with PKCE, no secret), registered at the issuer with the redirect URI
   * `<console origin>/login/callback`. When set, the console offers "Log in
   * with <issuer>", and ID tokens issued to this client (`aud` = this id) are
   * accepted beside tokens for `audience`.
   */
  consoleClientId?: string;
  /** The scopes the console asks for. Default `[openid]`; add `groups` (Dex, Keycloak) for the groups claim, `offline_access` for a refresh token. */
  consoleScopes?: string[];
}

export interface RoleGrant {
  users?: string[];
  groups?: string[];
}

/** A credential for a person or a robot, given by its SHA-256 (hex) so the file holds no secret. */
export interface StaticToken {
  user: string;
  sha256: string;
  groups?: string[];
}

export interface PeopleConfig {
  oidc?: OidcConfig;
  roles?: Partial<Record<Role, RoleGrant>>;
  tokens?: StaticToken[];
}

const grant = {
  type: "object",
  additionalProperties: false,
  properties: {
    users: { type: "array", items: { type: "string", minLength: 1 } },
    groups: { type: "array", items: { type: "string", minLength: 1 } },
  },
};

const schema = {
  type: "object",
  additionalProperties: false,
  properties: {
    oidc: {
      type: "object",
      additionalProperties: false,
      required: ["issuer", "audience"],
      properties: {
        issuer: { type: "string", pattern: "^https?://" },
        audience: { type: "string", minLength: 1 },
        jwksUri: { type: "string", pattern: "^https?://" },
        usernameClaim: { type: "string", minLength: 1 },
        groupsClaim: { type: "string", minLength: 1 },
        consoleClientId: { type: "string", minLength: 1 },
        consoleScopes: {
          type: "array",
          items: { type: "string", pattern: "^[\\x21\\x23-\\x5B\\x5D-\\x7E]+$" },
          contains: { const: "openid" },
        },
      },
    },
    roles: {
      type: "object",
      additionalProperties: false,
      properties: Object.fromEntries(ROLES.map((r) => [r, grant])),
    },
    tokens: {
      type: "array",
      items: {
        type: "object",
        additionalProperties: false,
        required: ["user", "sha256"],
        properties: {
          user: { type: "string", minLength: 1 },
          sha256: { type: "string", pattern: "^[0-9a-f]{64}$" },
          groups: { type: "array", items: { type: "string", minLength: 1 } },
        },
      },
    },
  },
};

const validate = new Ajv({ allErrors: false, strict: false }).compile<PeopleConfig>(schema);

function describe(error: ErrorObject): string {
  const at = error.instancePath || "/";
  const p = error.params as Record<string, unknown>;
  const child = (name: unknown): string => `${error.instancePath}/${String(name)}`;
  if (error.keyword === "additionalProperties")
    return `${child(p.additionalProperty)}: unknown field (fields: oidc, roles {admin, operator, approver, viewer}, tokens)`;
  if (error.keyword === "required") return `${child(p.missingProperty)}: required`;
  if (error.keyword === "contains" && at.endsWith("/consoleScopes")) return `${at}: must include openid`;
  if (error.keyword === "pattern" && /\/consoleScopes\/\d+$/.test(at))
    return `${at}: a scope is one word (no spaces or quotes)`;
  if (error.keyword === "pattern" && at.endsWith("/sha256"))
    return `${at}: must be the lowercase hex SHA-256 of the token (\`printf %s TOKEN | sha256sum\`)`;
  return `${at}: ${error.message ?? "invalid"}`;
}

/** Parse and validate the text of an auth config; `source` names it in errors. */
export function parsePeopleConfig(text: string, source: string): PeopleConfig {
  let value: unknown;
  try {
    value = parse(text) ?? {};
  } catch (error) {
    throw new Error(`${source} is not valid YAML: ${(error as Error).message}`);
  }
  if (!validate(value))
    throw new Error(`${source} is not a valid auth config: ${validate.errors?.map(describe).join("; ")}`);
  return value;
}

export function readPeopleConfig(file: string): PeopleConfig {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new Error(
      `OZ0_AUTH_CONFIG names ${file}, which cannot be read: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
    );
  }
  return parsePeopleConfig(text, `OZ0_AUTH_CONFIG (${file})`);
}

/** The roles a person holds by name and groups, under the config's grants (before implied roles). */
export function grantedRoles(config: PeopleConfig, user: string, groups: readonly string[]): Role[] {
  const out: Role[] = [];
  for (const role of ROLES) {
    const g = config.roles?.[role];
    if (!g) continue;
    if (g.users?.includes(user) || g.groups?.some((group) => groups.includes(group))) out.push(role);
  }
  return out;
}
