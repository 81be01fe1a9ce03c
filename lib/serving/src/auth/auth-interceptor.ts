// The one gate in front of every RPC of every service: who is calling
// (Unauthenticated when nobody can be told), and whether the access table
// lets them (PermissionDenied naming what is needed). The principal is put on
// the call's context for handlers (principalOf).
import { Code, ConnectError, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import { ACCESS_TABLE, shortMethodName, type Access } from "./access-table.js";
import type { Authenticator } from "./authenticator.js";
import { describePrincipal, principalKey, type Principal } from "./principal.js";
import type { RefusalLog } from "./refusal-log.js";

/** Where a caller finds its credential, for the Unauthenticated messages of the services. */
export const DEFAULT_CREDENTIAL_HINT =
  "people: the oz0 CLI sends yours (`oz0 login`, OZ0_TOKEN, or the owner credential of oz0 dev); services: OZ0_SERVICE_TOKEN";

/** How the gate words and logs its refusals. */
export interface GateOptions {
  credentialHint?: string;
  /** What an authenticator's own failure (not a refusal) becomes for the caller. */
  unexpected?: (error: unknown, procedure: string) => unknown;
  /** Where refusals are logged (refused calls end before tracing, so they have no span). */
  refusals?: RefusalLog;
}

/**
 * The gate serve() gives connect (`requestGate`): it runs once a call's
 * headers are in and before a byte of its body is read, on every protocol, so
 * a caller the access table refuses makes a service read nothing of what it
 * sends (an interceptor runs only after a unary call's body was read whole).
 */
export function accessGate(
  authenticator: Authenticator,
  options: GateOptions = {},
): (context: HandlerContext) => Promise<void> {
  const check = accessCheck(authenticator, options);
  return async (context) => {
    let principal: Principal | undefined;
    try {
      principal = await check(
        `${context.service.typeName}/${context.method.name}`,
        context.requestHeader.get("authorization"),
      );
    } catch (error) {
      // An authenticator that fails (an OIDC issuer out of reach) is not the caller's business.
      throw options.unexpected && !(error instanceof ConnectError)
        ? options.unexpected(error, context.method.name)
        : error;
    }
    if (principal) context.values.set(principalKey, principal);
  };
}

/**
 * The gate again, before each message a streaming call sends: the gate checks
 * a call's credential once, when it opens, and a stream outlived it (WatchJobs
 * never ends by itself, so a console logged out, a token expired or a person
 * taken out of the configuration went on being sent every job's changes). The
 * call ends with the gate's refusal instead of the message; a stream with
 * nothing to send holds nothing back. Only credentials that can end are asked
 * again ({@link credentialCanEnd}); open methods have no caller to ask about.
 */
export function streamsEndWithTheirCredential(authenticator: Authenticator, options: GateOptions = {}): Interceptor {
  const check = accessCheck(authenticator, options);
  return (next) => async (request) => {
    const response = await next(request);
    if (!response.stream || !credentialCanEnd(request.contextValues.get(principalKey))) return response;
    const method = `${request.service.typeName}/${request.method.name}`;
    const authorization = request.header.get("authorization");
    const stillAdmitted = async (): Promise<void> => {
      try {
        await check(method, authorization);
      } catch (error) {
        throw options.unexpected && !(error instanceof ConnectError)
          ? options.unexpected(error, request.method.name)
          : error;
      }
    };
    return { ...response, message: checkedBeforeEach(response.message, stillAdmitted) };
  };
}

/**
 * Whether a caller's credential can stop admitting them while a stream is open: an OIDC token (it expires) or a
 * console session (logged out, expired). A service's, a node's, a configured token and the owner's credential
 * admit for as long as the process runs (the configuration is read once), so asking again before each message
 * (every RunSession and WatchJob message of the stack) would only repeat the answer.
 */
function credentialCanEnd(principal: Principal | undefined): boolean {
  return principal?.kind === "person" && (principal.via === "oidc" || principal.via === "console");
}

/** `messages`, each sent only once `check` passes; when it throws, the source is closed and the stream fails. */
async function* checkedBeforeEach<T>(messages: AsyncIterable<T>, check: () => Promise<void>): AsyncIterable<T> {
  for await (const message of messages) {
    await check();
    yield message;
  }
}

/**
 * The gate's decision on its own: the caller of `method` (`service/Method`),
 * undefined for an open method; throws Unauthenticated or PermissionDenied.
 */
export function accessCheck(
  authenticator: Authenticator,
  options: { credentialHint?: string; refusals?: RefusalLog } = {},
): (method: string, authorization: string | null) => Promise<Principal | undefined> {
  const hint = options.credentialHint ?? DEFAULT_CREDENTIAL_HINT;
  const refusals = options.refusals;
  return async (method, authorization) => {
    const access = ACCESS_TABLE[method];
    if (!access) {
      const message = `${method} is in no access rule, so it is refused`;
      refusals?.unauthenticated({ method, message });
      throw new ConnectError(message, Code.PermissionDenied);
    }
    if ("open" in access) return undefined;
    let principal: Principal;
    try {
      principal = await authenticated(authenticator, authorization, method, hint);
    } catch (error) {
      if (error instanceof ConnectError && error.code === Code.Unauthenticated)
        refusals?.unauthenticated({ method, message: error.rawMessage });
      throw error;
    }
    const denial = deniedBecause(access, principal, method);
    if (denial) {
      refusals?.denied({ method, principal, message: denial });
      throw new ConnectError(denial, Code.PermissionDenied);
    }
    return principal;
  };
}

async function authenticated(
  authenticator: Authenticator,
  header: string | null,
  method: string,
  hint: string,
): Promise<Principal> {
  const name = shortMethodName(method);
  if (!header)
    throw new ConnectError(
      `${name} needs a credential: send \`authorization: Bearer <token>\` (${hint})`,
      Code.Unauthenticated,
    );
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match)
    throw new ConnectError(
      `${name}: the authorization header must be \`Bearer <token>\` (${hint})`,
      Code.Unauthenticated,
    );
  const result = await authenticator.authenticate(match[1]!);
  if ("refused" in result) throw new ConnectError(`${name}: ${result.refused} (${hint})`, Code.Unauthenticated);
  return result.principal;
}

/** Why `principal` may not call `method`, or undefined when it may. */
export function deniedBecause(access: Access, principal: Principal, method: string): string | undefined {
  if ("open" in access || "anyPrincipal" in access) return undefined;
  const name = shortMethodName(method);
  if (principal.kind === "person" && access.role && principal.roles.has(access.role)) return undefined;
  if (principal.kind === "service" && access.services?.includes(principal.id)) return undefined;
  if (principal.kind === "node" && access.node) return undefined;
  const allowed = [
    ...(access.role ? [`people with the ${access.role} role`] : []),
    ...(access.services ?? []).map((s) => `the ${s} service`),
    ...(access.node ? ["sandbox nodes"] : []),
  ];
  const held =
    principal.kind === "person"
      ? ` (${principal.id} has ${principal.roles.size ? [...principal.roles].join(", ") : "no role"}; roles are granted in OZ0_AUTH_CONFIG)`
      : "";
  return `${name} is open only to ${allowed.join(" and ")}; ${describePrincipal(principal)} may not call it${held}`;
}
